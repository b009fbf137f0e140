"""The docs' environment table names every variable the package reads, and nothing else;
no message a user reads cites a design document."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy  # each test scans the whole package

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "truss_files"
PAGE = (ROOT / "docs" / "reference" / "environment.md").read_text()


def _is_environ(node: ast.expr) -> bool:
    """``os.environ``, ``environ``, ``env``, ``self.environ``, ``store.environ`` ..."""
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return isinstance(name, str) and (name == "env" or "environ" in name)


class _Reads(ast.NodeVisitor):
    """The names one module reads from an environment: ``<env>.get(NAME)``, ``<env>[NAME]``
    (not an assignment), ``os.getenv(NAME)`` and click's ``envvar=NAME``. NAME may be a
    literal, a module constant, a loop variable over a tuple of literals, or the values of a
    module-level dict iterated with ``.items()``."""

    def __init__(self, tree: ast.Module) -> None:
        self.found: set[str] = set()
        self.constants: dict[str, ast.expr] = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign):
                pairs = [(t, stmt.value) for t in stmt.targets]
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                pairs = [(stmt.target, stmt.value)]
            else:
                continue
            for target, value in pairs:
                if isinstance(target, ast.Name):
                    self.constants[target.id] = value
        self.loops: dict[str, list[str]] = {}
        for found in ast.walk(tree):
            if isinstance(found, ast.For):
                self._loop(found)
        self.visit(tree)

    def _loop(self, node: ast.For) -> None:
        it = node.iter
        if isinstance(it, ast.Tuple | ast.List) and isinstance(node.target, ast.Name):
            self.loops[node.target.id] = [
                e.value for e in it.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
        elif (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Attribute)
            and it.func.attr == "items"
            and isinstance(it.func.value, ast.Name)
            and isinstance(node.target, ast.Tuple)
            and isinstance(node.target.elts[1], ast.Name)
        ):
            table = self.constants.get(it.func.value.id)
            if isinstance(table, ast.Dict):
                self.loops[node.target.elts[1].id] = [
                    v.value
                    for v in table.values
                    if isinstance(v, ast.Constant) and isinstance(v.value, str)
                ]

    def _names(self, arg: ast.expr) -> list[str]:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return [arg.value]
        if isinstance(arg, ast.Name):
            if arg.id in self.loops:
                return self.loops[arg.id]
            value = self.constants.get(arg.id)
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return [value.value]
        return []

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        reads = isinstance(func, ast.Attribute) and (
            (func.attr == "get" and _is_environ(func.value)) or func.attr == "getenv"
        )
        if reads and node.args:
            self.found.update(self._names(node.args[0]))
        for keyword in node.keywords:
            if keyword.arg == "envvar":
                self.found.update(self._names(keyword.value))
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            self.found.update(self._names(node.slice))
        self.generic_visit(node)


def _read_by_code() -> set[str]:
    found: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        found |= _Reads(ast.parse(path.read_text(), str(path))).found
    return found


def _in_table() -> set[str]:
    rows = [line for line in PAGE.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", row.split("|")[1])}


def test_the_scan_finds_reads_of_every_shape() -> None:
    """Each way the package reads a variable is seen (else the comparison below proves little)."""
    found = _read_by_code()
    assert "TRUSS_STORE" in found  # click's envvar=
    assert "TRUSS_RUN_CONTEXT" in found  # env.get(ENV_VAR), a module constant
    assert "TRUSS_PRINCIPAL" in found and "EMAIL" in found  # a loop over literals
    assert "TRUSS_PANEL_KEY" in found  # store.environ.get(...)
    assert "PRE_COMMIT_TO_REF" in found  # environ[...]
    assert "OPENBLAS_NUM_THREADS" not in found  # set for a child process, never read
    assert "TRUSS_ENTRY_ID" not in found  # handed to reviewers, never read


def test_the_docs_table_names_every_variable_read_and_nothing_else() -> None:
    read, documented = _read_by_code(), _in_table()
    assert read - documented == set(), "read by the code but not in the docs' table"
    assert documented - read == set(), "in the docs' table but read by nothing"


def test_the_table_is_in_the_docs_reference() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    assert "reference/environment.md" in nav[nav.index("- Reference:") :]


# -- no citations of documents users do not have --------------------------------------------

CITATION = re.compile(r"§|DESIGN\.md|CONTRACTS\.md")


def _user_facing_strings(path: Path) -> Iterator[tuple[int, str]]:
    """Every string literal except a module docstring (and, outside the command-line faces,
    other docstrings: the faces' docstrings are --help)."""
    tree = ast.parse(path.read_text(), str(path))
    skip: set[int] = set()
    holders: list[ast.AST] = [tree]
    if path.parent.name not in ("faces", "cli", "http"):
        holders += [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        ]
    for holder in holders:
        body = getattr(holder, "body", [])
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.lineno, node.value


def test_no_message_cites_a_design_document() -> None:
    cited = [
        f"{path.relative_to(ROOT)}:{line}: {text[:80]!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, text in _user_facing_strings(path)
        if CITATION.search(text)
    ]
    assert cited == [], "say the rule in words instead:\n" + "\n".join(cited)


def test_the_citation_check_sees_help_text() -> None:
    """A command's docstring is its --help: a citation there would be caught."""
    from click.testing import CliRunner

    from truss_files.faces.cli.main import cli

    shown = CliRunner().invoke(cli, ["merge-driver", "--help"]).output
    assert "Example" in shown and not CITATION.search(shown)
    faces = PACKAGE / "faces" / "cli" / "review.py"
    assert any("merge" in text for _, text in _user_facing_strings(faces))
