"""Recall: filter candidates first, then rank only them with BM25 (see ``bm25``)."""

from __future__ import annotations

from truss_files.recall.bm25 import BM25, Candidates, Postings, Scored, rank, score_subset
from truss_files.recall.tokenize import TOKENIZER_VERSION, tokenize

__all__ = [
    "BM25",
    "TOKENIZER_VERSION",
    "Candidates",
    "Postings",
    "Scored",
    "rank",
    "score_subset",
    "tokenize",
]
