"""The curated public surface: `truss_files.__all__` is exactly this, and every name resolves
to the object of the module that defines it (httpx's tests/test_exported_members.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import truss_files

EXPECTED = [
    "ConfigError",
    "ConflictError",
    "Entry",
    "EntryError",
    "Hit",
    "Kind",
    "Layer",
    "Memory",
    "MemoryStore",
    "NotFound",
    "Provenance",
    "RecallResult",
    "SignatureError",
    "StoreError",
    "TransitionError",
    "Trust",
    "TrussError",
    "UsageError",
    "Verdict",
    "VerdictError",
    "__version__",
]


def test_all_is_exactly_the_curated_list() -> None:
    assert truss_files.__all__ == EXPECTED


def test_every_exported_name_resolves() -> None:
    from truss_files import errors, model
    from truss_files.facade import MemoryStore
    from truss_files.memory import Memory
    from truss_files.trust.verdict import Verdict

    for name in EXPECTED:
        assert getattr(truss_files, name) is not None, name
    assert truss_files.MemoryStore is MemoryStore
    assert truss_files.Memory is Memory and issubclass(MemoryStore, truss_files.Memory)
    assert truss_files.Verdict is Verdict
    assert truss_files.Entry is model.Entry and truss_files.Trust is model.Trust
    for name in EXPECTED:
        if name.endswith("Error") or name == "NotFound":
            exc = getattr(truss_files, name)
            assert exc is getattr(errors, name) and issubclass(exc, truss_files.TrussError)
    assert isinstance(truss_files.__version__, str) and truss_files.__version__.count(".") == 2


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from truss_files import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(EXPECTED)


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        truss_files.NoSuchThing  # noqa: B018


def test_importing_the_package_does_not_load_pygit2() -> None:
    # The query path must not pay pygit2's import; only MemoryStore pulls it in.
    code = (
        "import sys, truss_files; from truss_files import Entry, Trust; "
        "print('pygit2' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
