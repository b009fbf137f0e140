"""The errors: one module holds them all, each with its own code, drawn in its docstring."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from truss_files import errors
from truss_files.errors import Forbidden, ScopeError, TrussError

PACKAGE = Path(errors.__file__).parent


def _error_classes() -> dict[str, type[TrussError]]:
    return {
        name: value
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, TrussError)
    }


def test_no_public_error_class_lives_outside_errors_py() -> None:
    """A class deriving from any error of the tree is defined in errors.py, unless private."""
    tree_names = set(_error_classes())
    strays = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue
            bases = {
                base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
                for base in node.bases
            }
            if bases & tree_names:
                strays.append(f"{path.relative_to(PACKAGE.parent)}: {node.name}")
    assert not strays, f"move these into truss_files/errors.py: {strays}"


def test_each_error_declares_a_code_no_other_error_has() -> None:
    owners: dict[str, list[str]] = {}
    for name, cls in _error_classes().items():
        if "code" in vars(cls):
            owners.setdefault(vars(cls)["code"], []).append(name)
    shared = {code: names for code, names in owners.items() if len(names) > 1}
    assert not shared, f"codes shared by several errors: {shared}"
    assert Forbidden.code != ScopeError.code


def test_the_docstring_tree_draws_every_error() -> None:
    drawn = errors.__doc__ or ""
    missing = [name for name in _error_classes() if name not in drawn]
    assert not missing, f"draw these in errors.py's tree: {missing}"
