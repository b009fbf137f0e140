"""The package's shape: imports point down, and the read gate has one caller.

Read from the source, every import that runs counted -- at module top or inside a function
-- so a circle cannot hide behind an import written late. (Imports under ``TYPE_CHECKING``
never run; a package is loaded before its modules anyway, so ``from . import x`` ties the
importer to ``x`` alone.)
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy  # each test reads the whole package's source

PACKAGE = Path(__file__).resolve().parent.parent / "truss_files"


@functools.cache  # unit_of() asks per import edge; the tree does not change within a run
def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The dotted names ``node`` imports (``pkg.mod`` or ``pkg.mod.attr``)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        here = here[: len(here) - (node.level - 1)]
        base = ".".join([*here, base] if base else here)
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def _runs(tree: ast.Module, typing: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports of ``tree`` that run: all but those under ``if TYPE_CHECKING:`` (with
    ``typing``, those too)."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if not typing and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        todo.extend(ast.iter_child_nodes(node))


@functools.cache
def _parsed(path: Path) -> ast.Module:
    """One parse per module per run (every test here reads the whole package)."""
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def graph(typing: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (with ``typing``, for type hints too)."""
    known = modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for node in _runs(_parsed(path), typing):
            for target in _imported(name, path, node):
                if target in known and target != name and not name.startswith(target + "."):
                    edges[name].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def test_no_import_circle() -> None:
    edges = graph()
    loops = circles(edges)
    detail = [
        " / ".join(f"{a} -> {', '.join(sorted(edges[a] & set(loop)))}" for a in loop)
        for loop in loops
    ]
    assert not loops, "import circles:\n" + "\n".join(detail)


def test_no_import_circle_even_for_type_hints() -> None:
    """A circle through ``TYPE_CHECKING`` imports runs nowhere, but it still ties two
    modules into one idea: the house has none."""
    assert not circles(graph(typing=True))


def test_the_circle_finder_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_reads_imports_inside_functions() -> None:
    edges = graph()
    # store.Store.open_read imports nothing late, but the graph must see late imports at
    # all: the CLI's lazy command table is one (faces.cli_app loads command modules).
    assert "truss_files.store.store" in edges["truss_files.facade"]
    assert edges["truss_files.trust.readgate"] >= {
        "truss_files.trust.audit"
    }  # imported inside a function


def _importers(name: str) -> list[str]:
    """The modules that import ``name`` from the read gate."""
    found = []
    for module, path in modules().items():
        for node in ast.walk(_parsed(path)):
            if (
                isinstance(node, ast.ImportFrom)
                and "readgate" in (node.module or "")
                and any(alias.name == name for alias in node.names)
            ):
                found.append(module)
    return sorted(found)


def test_only_the_store_opens_a_read_through_the_gate() -> None:
    """``readgate.gate`` is called from one place, ``Store.open_read``: every read path
    (the facade, tools, context, panel, faces) starts there, so none can forget it. Recall
    is given the gate's verdict (``Store.gate``); only the one query assembly, whose cold
    path never opens a store, hands it ``readgate.refusal`` itself."""
    assert _importers("gate") == ["truss_files.store.store"]
    assert _importers("refusal") == ["truss_files.recall.query", "truss_files.store.store"]


def _late_imports() -> Iterator[tuple[str, int, list[str]]]:
    """Each import of our own modules written inside a function: module, line, source lines."""
    for name, path in modules().items():
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and (
                    node.level or (node.module or "").startswith("truss_files")
                ):
                    yield name, node.lineno, lines


def _explained(lines: list[str], lineno: int) -> bool:
    """A comment on the import's line, or among the few lines just above it (past other
    imports and blank lines), says why it is late."""
    if "#" in lines[lineno - 1]:
        return True
    seen = 0
    for line in reversed(lines[: lineno - 1]):
        text = line.strip()
        if "#" in text:
            return True
        if not text or text.startswith(("from ", "import ")):
            continue
        seen += 1
        if seen > 1:
            return False
    return False


def test_a_late_import_says_why() -> None:
    """An import of our own modules inside a function is there for a reason a comment gives:
    an optional extra, or a heavy module kept off a path that must stay fast."""
    silent = [
        f"{name}:{lineno}"
        for name, lineno, lines in _late_imports()
        if not _explained(lines, lineno)
    ]
    assert not silent, "imports inside functions with no comment saying why:\n" + "\n".join(silent)


# -- floors ------------------------------------------------------------------------------------
# The floors are the folders: a module is on the floor of the first folder under truss_files/
# that holds it (faces/cli/app.py is on faces/), and a module at the top of the package
# (errors.py, facade.py) is drawn by its file name. FLOORS gives the order, top down -- the one
# thing the tree cannot say; these tests check that it draws every folder and top-level module
# of the tree, one folder per floor, and that every import points down. docs/gen.py draws the
# Architecture page of the docs from the same functions.

DOORS = ("__init__", "__main__")  # the package's own door and ``python -m``: above every floor
TOP_LEVEL_MAX = 6  # modules at the top of the package, besides the two doors

# Top down: each floor's name and what it holds (its one folder, or modules at the top).
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("faces", ("faces/", "anthropic_adapter.py", "http.py")),
    ("facade", ("facade.py", "memory.py")),
    ("context", ("context/",)),
    ("tools", ("tools/",)),
    ("identity", ("identity/",)),
    ("runs", ("runs/",)),
    ("panel", ("panel/",)),
    ("recall", ("recall/",)),
    ("store", ("store/",)),
    ("review", ("review/",)),
    ("config", ("config/",)),
    ("trust", ("trust/",)),
    ("git", ("git/",)),
    ("signing", ("signing/",)),
    ("format", ("format/",)),
    ("values", ("errors.py", "model.py")),
)


def unit_of(module: str) -> str:
    """Where ``module`` stands: its first folder (``store/``), or its own file (``model.py``)."""
    first = modules()[module].relative_to(PACKAGE).parts[0]
    return first + "/" if (PACKAGE / first).is_dir() else first


def tree() -> dict[str, list[str]]:
    """The floors the tree holds: each folder and top-level module -> its modules."""
    found: dict[str, list[str]] = {}
    for name, path in modules().items():
        if path.parent == PACKAGE and path.stem in DOORS:
            continue
        found.setdefault(unit_of(name), []).append(name)
    return found


def picture() -> list[tuple[str, list[str]]]:
    """The floors top down: each floor's name and the folders and files on it."""
    return [(name, list(units)) for name, units in FLOORS]


def floors() -> list[tuple[str, list[str], list[str]]]:
    """The floors lowest first: name, what FLOORS puts on it, the modules the tree holds there."""
    found = tree()
    return [
        (name, units, sorted(m for unit in units for m in found.get(unit, [])))
        for name, units in reversed(picture())
    ]


def describe() -> str:
    return "\n".join(
        f"{level:2} {name:9} {' '.join(units):32} {len(held)} modules"
        for level, (name, units, held) in enumerate(floors())
    )


def test_the_floors_are_the_folders() -> None:
    """Every folder and top-level module of the tree is drawn once, on a floor named after its
    one folder: the tree is the picture. (Printed: ``pytest -s`` or ``python`` this file.)"""
    print("\nfloors, lowest first:\n" + describe())
    drawn = [unit for _, units in picture() for unit in units]
    twice = sorted({unit for unit in drawn if drawn.count(unit) > 1})
    assert not twice, f"drawn twice: {twice}"
    missing = sorted(set(tree()) - set(drawn))
    assert not missing, f"on no floor: {missing}; put each on a floor of FLOORS"
    stale = sorted(set(drawn) - set(tree()))
    assert not stale, f"FLOORS names what the tree does not hold: {stale}"
    for name, units in picture():
        folders = [unit for unit in units if unit.endswith("/")]
        assert folders in ([], [name + "/"]), (
            f"floor {name} must be its one folder {name}/: {units}"
        )


def test_imports_point_down() -> None:
    level = {unit: n for n, (_, units, _) in enumerate(floors()) for unit in units}
    edges = graph()
    up = [
        f"{a} ({unit_of(a)}) -> {b} ({unit_of(b)})"
        for a in sorted(edges)
        if a.rpartition(".")[2] not in DOORS and a != "truss_files"
        for b in sorted(edges[a])
        if level[unit_of(b)] > level[unit_of(a)]
    ]
    assert not up, "imports that point up:\n" + "\n".join(up)


def test_few_modules_at_the_top() -> None:
    top = sorted(u for u in tree() if u.endswith(".py"))
    assert len(top) <= TOP_LEVEL_MAX, f"{len(top)} modules at the top of the package: {top}"


# -- the front door ----------------------------------------------------------------------------
# A face (faces/, and the two public shims drawn on its floor) parses, calls the facade and
# prints. It may import the facade, the values (errors, model), its own floor, and what is named
# below, each with its reason. FACE_DOORS are meant to stay: presentation, or a door the
# facade cannot be on a path that must not load the store. FACE_DEBT is what faces still reach
# past the door for; an entry leaves when its last importer calls the facade instead, and the
# test fails on an entry no face imports any more, so the list only shrinks.

FACES = ("truss_files.faces", "truss_files.http", "truss_files.anthropic_adapter")
FACE_MAY = ("truss_files", "truss_files.facade", "truss_files.errors", "truss_files.model")

FACE_DOORS = {
    "truss_files.recall.query": "the hook-time query: the facade imports the store (pygit2)",
    "truss_files.format.views": "presentation: an entry as text and as its JSON view",
    "truss_files.tools.registry": "the one tool registry every face serves (MCP, HTTP, CLI)",
    "truss_files.tools.dispatch": "the tool call a serving face hands each request to",
    "truss_files.tools.schema": "presentation: the tools' JSON schemas, checked and exported",
    "truss_files.signing.keys": "which signing key a face loads, before any store is opened",
    "truss_files.config.storeprobe": "is there a store here: said before opening it, cheaply",
}

FACE_DEBT = {
    "truss_files.context.assemble": "context repin; MCP builds a run prompt from a session",
    "truss_files.format.quorum": "queue: PASS/FAIL vote words",
    "truss_files.git.gitdamage": "the error handler names repository damage",
    "truss_files.git.gitlocks": "the sync loop's lock",
    "truss_files.git.gitstore": "hooks: the commit being checked, read from the repository",
    "truss_files.git.recovery": "hooks: history versions and orphans",
    "truss_files.review.history": "review page: provenance and timeline",
    "truss_files.review.merge": "the merge driver",
    "truss_files.review.page": "review page HTML",
    "truss_files.review.queue": "the pending queue (CLI and review page)",
    "truss_files.review.render": "presentation: a change set as text",
    "truss_files.review.textconv": "the textconv driver",
    "truss_files.review.whytext": "presentation: why as text and markdown",
    "truss_files.runs.runcontext": "run context files (CLI, the adapter, server tasks)",
    "truss_files.signing": "the server checks its own public key",
    "truss_files.signing.trustpolicy": "hooks: which paths are the signers file",
    "truss_files.tools.ask": "HTTP memory.ask",
    "truss_files.tools.blocks": "tools call: tool_use blocks",
    "truss_files.tools.train": "HTTP memory.train",
    "truss_files.trust.attest": "hooks: attestation notes on pushed commits",
    "truss_files.trust.audit": "hooks: the audit of each commit",
    "truss_files.trust.trustroot": "hooks find the trust root",
    # The host faces (setup, host hooks, learn, doctor) and the transfer commands came in
    # beside the facade's rework: what they reach for is the next step of the door.
    "truss_files.config.judgespec": "doctor and learn: the [learn] model's provider spec",
    "truss_files.config.settings": "host setup, hooks and doctor: the layered settings",
    "truss_files.context.resume": "session-start: what changed since the agent's last session",
    "truss_files.git.gitdir": "host hooks: the log beside the store, before opening it",
    "truss_files.panel.modeljudge": "learn: the model call the judges make",
    "truss_files.runs.links": "host hooks: each session a run of the project's agent",
    "truss_files.format.imports": "import --from: the parsers of other tools' exports",
    "truss_files.tools.memory_paths": "import: a memory tool path, checked as the tool checks it",
    "truss_files.store.export": "export: the writers of each format",
}


def face_reach() -> dict[str, list[str]]:
    """Each module outside the faces' floor that a face imports (at run time) -> its faces."""
    reach: dict[str, list[str]] = {}
    for face, targets in graph().items():
        if not face.startswith(FACES):
            continue
        for target in sorted(targets):
            if not target.startswith(FACES) and target not in FACE_MAY:
                reach.setdefault(target, []).append(face)
    return reach


def test_faces_come_in_through_the_facade() -> None:
    """A face imports the facade, the values, its own floor and the modules named above."""
    reach = face_reach()
    print(f"\nfaces reach {len(reach)} modules past the facade:")
    for target, faces in sorted(reach.items()):
        print(f"  {target}: {', '.join(faces)}")
    allowed = {**FACE_DOORS, **FACE_DEBT}
    past = [f"{t} <- {', '.join(reach[t])}" for t in sorted(set(reach) - set(allowed))]
    assert not past, (
        "faces import past the facade (call MemoryStore or a facade function instead):\n"
        + "\n".join(past)
    )
    stale = sorted(set(allowed) - set(reach))
    assert not stale, f"no face imports these any more: drop them from the list: {stale}"
    assert len(FACE_DOORS) <= 8


if __name__ == "__main__":
    print(describe())
