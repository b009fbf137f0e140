"""The seam itself: ``Memory`` names the design's nine operations, the git store satisfies
it at run time and for mypy, and importing it costs only the values layer."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from truss_files import MemoryStore
from truss_files.memory import Memory

ROOT = Path(__file__).resolve().parents[2]

# The memory store's operations as the design's code layout lists them (write, promote,
# reject, demote, supersede, query, view, delta_since, context), in that order.
DESIGN_OPERATIONS = [
    "write",
    "promote",
    "reject",
    "demote",
    "supersede",
    "query",
    "view",
    "delta_since",
    "context",
]


def _members(proto: type) -> list[str]:
    """The Protocol's public members in the order it declares them (methods, and any
    attribute or property declared by annotation)."""
    names = [n for n in vars(proto) if not n.startswith("_")]
    names += [n for n in vars(proto).get("__annotations__", {}) if n not in names]
    return names


def test_the_protocol_names_exactly_the_designs_operations() -> None:
    assert _members(Memory) == DESIGN_OPERATIONS
    assert all(inspect.isfunction(vars(Memory)[name]) for name in DESIGN_OPERATIONS)


def test_the_git_store_satisfies_the_protocol(memory: Memory) -> None:
    assert isinstance(memory, Memory)
    assert issubclass(MemoryStore, Memory)


def test_an_object_missing_an_operation_is_not_a_memory() -> None:
    """The runtime check can fail: drop any one operation and it does."""
    for missing in DESIGN_OPERATIONS:
        body = {name: (lambda self, *a, **k: None) for name in DESIGN_OPERATIONS}
        del body[missing]
        partial = type(f"Without_{missing}", (), body)
        assert not isinstance(partial(), Memory), missing
    whole = type("Whole", (), {n: (lambda self, *a, **k: None) for n in DESIGN_OPERATIONS})
    assert isinstance(whole(), Memory)


@pytest.mark.parametrize("name", DESIGN_OPERATIONS)
def test_each_operation_is_typed_as_the_git_store_implements_it(name: str) -> None:
    """Same parameters, kinds, defaults and annotations: the seam is the store's own shape,
    so switching an annotation from MemoryStore to Memory changes no call."""
    seam = inspect.signature(getattr(Memory, name))
    real = inspect.signature(getattr(MemoryStore, name))
    assert seam.return_annotation == real.return_annotation
    assert [(p.name, p.kind, p.default, p.annotation) for p in seam.parameters.values()] == [
        (p.name, p.kind, p.default, p.annotation) for p in real.parameters.values()
    ]


HALF = """
from __future__ import annotations

from truss_files.memory import Memory


class Half:
    def write(self, kind: str, key: str, body: str) -> None: ...


def half() -> Memory:
    m: Memory = Half()
    return m
"""


@pytest.mark.heavy  # runs mypy over the package
def test_mypy_accepts_the_git_store_as_a_memory_and_refuses_a_half_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``typed_seam.py`` assigns ``MemoryStore(...)`` to ``Memory`` and uses the answer's
    fields; mypy must pass it, and must fail a class that lacks operations (so the first
    verdict cannot come from mypy failing to find the package)."""
    api = pytest.importorskip("mypy.api")
    half = tmp_path / "half_memory.py"
    half.write_text(HALF)
    typed = ROOT / "tests" / "conformance" / "typed_seam.py"
    monkeypatch.setenv("MYPYPATH", str(ROOT))  # the editable install's finder is opaque to mypy
    out, err, _ = api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "--no-error-summary",
            str(typed),
            str(half),
        ]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert not [line for line in errors if "typed_seam.py" in line], out + err
    assert any(
        "half_memory.py:12" in line and '"Half"' in line and '"Memory"' in line for line in errors
    ), out + err


def test_importing_the_seam_loads_only_the_values_layer() -> None:
    code = (
        "import json, sys, truss_files.memory; "
        "mods = [m for m in sys.modules if m.startswith(('truss_files', 'pygit2'))]; "
        "print(json.dumps(sorted(mods)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert json.loads(done.stdout) == [
        "truss_files",
        "truss_files.errors",
        "truss_files.memory",
        "truss_files.model",
    ]
