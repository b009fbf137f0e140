"""Which tests are ``fast``: the rule behind ``pytest -m fast`` (docs/testing.md).

A test is fast unless it is marked ``slow``, ``spawns`` or ``heavy``, it is driven by
hypothesis (hundreds of generated examples), or it starts a process: its own
body, a function or constant of its module it names, a helper it imports from ``tests/``,
or a fixture it uses (however deep) names a way to start one (``subprocess``, ``pexpect``,
``os.fork``, ``multiprocessing``, ``sys.executable``, ...). That is read from the source at
collection, so a new test needs no marker; a process started where the source does not
show it (the package's own code, a git hook) is caught while the test runs by ``Guard``,
which fails a fast test that starts any process but ``git``, saying to mark it ``spawns``.

Why processes: a fresh interpreter that imports the package costs a quarter to half a
second of CPU before it does anything, and the tests that start them are most of the
suite's time; an in-process test, even one that builds a signed store, costs milliseconds.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., Any])

TESTS = Path(__file__).resolve().parent.parent

# Names that start a process, as a test's source spells them (a module, a function, an
# attribute): ``subprocess.run``, ``pexpect.spawn``, ``Path(sys.executable)``, ...
SPAWN_WORDS = frozenset(
    {
        "subprocess",
        "Popen",
        "pexpect",
        "fork",
        "forkpty",
        "posix_spawn",
        "multiprocessing",
        "ProcessPoolExecutor",
        "executable",
        "create_subprocess_exec",
        "create_subprocess_shell",
        # The package's reviewers that run a command through ``sh -c`` (checks, judges).
        "CheckReviewer",
        "JudgeReviewer",
        # A declaration, for what the source cannot show (a check command in a TOML string).
        "starts_processes",
    }
)

# The programs a fast test may start: git, a C binary that is done in milliseconds (the
# ``git`` fixture runs it to check what pygit2 wrote), and ``uname``, which Python's
# ``platform`` module runs once for the model SDKs' user-agent strings.
ALLOWED_PROGRAMS = frozenset({"git", "uname"})

# Markers that take a test out of the fast loop by declaration.
NOT_FAST = ("slow", "spawns", "heavy")


T = TypeVar("T")


def starts_processes(value: T) -> T:
    """Declare that a helper, fixture or constant leads to a process the source does not
    show (``PASSING = starts_processes('[{type = "check", command = "true"}]')``): a test
    that names it is not fast. Returns ``value`` unchanged."""
    return value


def runs_only_git(func: F) -> F:
    """Declare that ``func`` (a fixture or helper) starts no process but git, so the source
    reading does not count its ``subprocess`` as a process; the guard still checks it."""
    return func


def _git_only(node: ast.AST) -> bool:
    decorators = getattr(node, "decorator_list", [])
    return any(
        (isinstance(d, ast.Name) and d.id == "runs_only_git")
        or (isinstance(d, ast.Attribute) and d.attr == "runs_only_git")
        for d in decorators
    )


@dataclass
class _Module:
    """One source file of tests/: what each top-level name (function, class, constant)
    refers to, and where its imported names come from."""

    refs: dict[str, set[str]] = field(default_factory=dict)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)


def _names(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
            if isinstance(sub.value, ast.Name):
                out.add(f"{sub.value.id}.{sub.attr}")
    return out


@functools.cache
def _module(path: Path) -> _Module:
    info = _Module()
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return info
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            info.refs[node.name] = set() if _git_only(node) else _names(node)
            if isinstance(node, ast.ClassDef):  # methods, as Class.method
                for sub in node.body:
                    if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                        info.refs[f"{node.name}.{sub.name}"] = _names(sub)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    info.refs[target.id] = _names(node.value)
    for node in ast.walk(tree):  # imports inside functions too
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                info.imports[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    info.imports[alias.asname] = (alias.name, None)
    return info


def _source_of(module: str) -> Path | None:
    """The file of a ``tests.*`` module (a package's __init__ or a plain module)."""
    if module != "tests" and not module.startswith("tests."):
        return None
    base = TESTS.parent.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _spawns(path: Path, name: str, seen: set[tuple[Path, str]]) -> bool:
    """Whether ``name`` in ``path`` names a way to start a process, itself or through the
    names it uses (functions and constants of its module, helpers imported from tests/)."""
    if (path, name) in seen:
        return False
    seen.add((path, name))
    info = _module(path)
    refs = info.refs.get(name)
    if refs is None:
        return False
    if refs & SPAWN_WORDS:
        return True
    for ref in refs:
        head, _, attr = ref.partition(".")
        if ref in info.refs and ref != name and _spawns(path, ref, seen):
            return True
        if head in info.imports:
            module, imported = info.imports[head]
            if imported is None:  # ``import tests.support.x as x``: x.attr
                target, what = _source_of(module), attr
            else:
                # ``from tests.support import script`` (a module) or ``from m import f``
                target = _source_of(f"{module}.{imported}")
                what = attr
                if target is None:
                    target, what = _source_of(module), imported
            if target is not None and what and _spawns(target, what, seen):
                return True
    return False


@functools.cache
def spawns(path: Path, qualname: str) -> bool:
    """Whether the test or fixture function ``qualname`` (``f`` or ``Class.f``) of the file
    ``path`` starts a process, by reading the source."""
    return _spawns(path, qualname, set())


def _function_spawns(func: Any) -> bool:
    func = inspect.unwrap(func)
    code = getattr(func, "__code__", None)
    if code is None:
        return False
    path = Path(code.co_filename)
    if not path.is_relative_to(TESTS):
        return False  # pytest's own fixtures (tmp_path, monkeypatch) start nothing
    qualname = getattr(func, "__qualname__", func.__name__).replace(".<locals>", "")
    return spawns(path, qualname) or spawns(path, func.__name__)


def is_fast(item: Any) -> bool:
    """The rule, for one collected test (a ``pytest.Function``)."""
    if any(item.get_closest_marker(name) for name in NOT_FAST):
        return False
    if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        return False  # hundreds of generated examples: the full run's job
    if _function_spawns(getattr(item, "function", None)):
        return False
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(info, "names_closure", ()):
        for fixturedef in info.name2fixturedefs.get(name, ()):
            if _function_spawns(fixturedef.func):
                return False
    return True


def program(argv: Any) -> str:
    """The program name of a subprocess.Popen argument list (or a shell command line)."""
    first = argv[0] if isinstance(argv, list | tuple) and argv else argv
    if isinstance(first, bytes):
        first = first.decode(errors="replace")
    return Path(str(first).split()[0] if str(first).strip() else str(first)).name


@contextlib.contextmanager
def guarding(item: pytest.Item) -> Iterator[None]:
    """While a fast test's setup or body runs, refuse processes but git; fail the test if it
    started one, even if it caught the refusal."""
    if item.get_closest_marker("fast") is None:
        yield
        return
    guard = the_guard()
    guard.test = item.nodeid
    try:
        yield
    finally:
        guard.test = None
        caught = guard.take()  # taken even when the test failed, or the next one would fail
    if caught:
        pytest.fail(caught[0], pytrace=False)


class Guard:
    """An audit hook that refuses, while a fast test runs, to start a process other than
    git: the rule's runtime half (the package and git hooks start processes the test's
    source does not show)."""

    def __init__(self) -> None:
        self.test: str | None = None  # the node id of the fast test running, if any
        self.caught: list[str] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.test is None:
            return
        if event == "subprocess.Popen":
            name = program(args[1])
            if name in ALLOWED_PROGRAMS:
                return
            what = f"started {name!r}"
        elif event in ("os.fork", "os.forkpty", "os.system"):
            what = f"called {event}"
        else:
            return
        message = (
            f"{self.test} is marked fast but {what}: a fast test starts no process but git. "
            "Mark it @pytest.mark.spawns (or its module: pytestmark = pytest.mark.spawns); "
            "see docs/testing.md"
        )
        self.caught.append(message)
        raise RuntimeError(message)

    def take(self) -> list[str]:
        caught, self.caught = self.caught, []
        return caught


def uncovered(items: Iterable[Any], folders: Iterable[str]) -> list[str]:
    """The test folders (``tests/<name>``) among ``folders`` none of whose collected tests
    is fast."""
    covered = {
        Path(item.path).relative_to(TESTS).parts[0]
        for item in items
        if item.get_closest_marker("fast") and Path(item.path).is_relative_to(TESTS)
    }
    return sorted(set(folders) - covered)


@functools.cache
def the_guard() -> Guard:
    """The process's one guard (an audit hook cannot be removed, so it is made once)."""
    return Guard()
