"""Recall: filter candidates first, then rank only them (never the reverse).

``search`` / ``Searcher`` (``engine``) query a store through the index cached under
``.git/truss/``: a tantivy index per trust floor (``floors``) that filters, ranks and holds
the entries' records. Each is given the read gate of whoever opens the read.
"""

from __future__ import annotations

from truss_files.recall.engine import RECALL_MODES, RecallResult, Searcher, search
from truss_files.recall.pipeline import Filter, Hit
from truss_files.recall.tokenize import TOKENIZER_VERSION, tokenize

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
