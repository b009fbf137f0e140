"""Recall: filter candidates first, then rank only them (never the reverse).

``search`` / ``Searcher`` (``engine``) query a store through the index cached under
``.git/truss/``: segments for the filter, a tantivy index per trust floor for BM25
(``floors``). Everything but the tokenizer is imported on first use: the query path pays only
for what it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from truss_files.recall.tokenize import TOKENIZER_VERSION, tokenize

if TYPE_CHECKING:
    from truss_files.recall.engine import RECALL_MODES, RecallResult, Searcher, search
    from truss_files.recall.pipeline import Filter, Hit

_LAZY = {
    "RECALL_MODES": "engine",
    "RecallResult": "engine",
    "Searcher": "engine",
    "search": "engine",
    "Filter": "pipeline",
    "Hit": "pipeline",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'truss_files.recall' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"truss_files.recall.{module}"), name)


__all__ = [
    "RECALL_MODES",
    "TOKENIZER_VERSION",
    "Filter",
    "Hit",
    "RecallResult",
    "Searcher",
    "search",
    "tokenize",
]
