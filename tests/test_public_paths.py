"""The public import paths that outlived the move to one folder per floor: each is its face's."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    ("public", "home", "names"),
    [
        ("truss_files.http", "truss_files.faces.http.factory", ["create_app"]),
        (
            "truss_files.anthropic_adapter",
            "truss_files.faces.anthropic_adapter",
            ["TrussMemoryTool", "TrussAsyncMemoryTool", "read_tools"],
        ),
    ],
)
def test_a_public_path_re_exports_its_face(public: str, home: str, names: list[str]) -> None:
    if public.endswith("anthropic_adapter"):
        pytest.importorskip("anthropic")
    shim, real = importlib.import_module(public), importlib.import_module(home)
    assert sorted(shim.__all__) == sorted(names)
    for name in names:
        assert getattr(shim, name) is getattr(real, name)
