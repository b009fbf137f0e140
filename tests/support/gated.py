"""Recall's entry points behind the store's read gate, as the library's callers open them.

Recall is given its gate (``readgate.refusal``) by whoever opens a read; tests that query
directly open theirs here, so every test read passes the same gate a store's would.
"""

from __future__ import annotations

from functools import partial

from truss_files.recall import engine
from truss_files.trust.readgate import refusal

__all__ = [
    "Searcher",
    "refusal",
    "conflicts_snapshot",
    "run_deleted_snapshot",
    "search",
    "search_snapshot",
]

Searcher = partial(engine.Searcher, gate=refusal)
search = partial(engine.search, gate=refusal)
search_snapshot = partial(engine.search_snapshot, gate=refusal)
conflicts_snapshot = partial(engine.conflicts_snapshot, gate=refusal)
run_deleted_snapshot = partial(engine.run_deleted_snapshot, gate=refusal)
