"""A bounded sample of a parametrized matrix: every value of every dimension at least once.

The exhaustive matrices (every damage × every cache part × every mode through a real server)
are long variants: by default only the cases that bring a value not yet tried run, the rest
are marked ``slow`` and run with ``TRUSS_SLOW=1`` (tests/conftest.py skips ``slow``
otherwise)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pytest


def covering(cases: Iterable[Sequence[Any]]) -> list[Any]:
    """``cases`` (tuples of parameters) as pytest params: those that bring a value unseen in
    its position run by default, the others are ``slow``."""
    seen: set[tuple[int, Any]] = set()
    out: list[Any] = []
    for case in cases:
        new = {(n, value) for n, value in enumerate(case)} - seen
        seen |= new
        out.append(pytest.param(*case, marks=() if new else (pytest.mark.slow,)))
    return out
