"""How much one query may ask: a bound on its text and on its distinct terms.

Ranking costs one pass over the postings of each query term, and a common word's postings
cover most of the store. Without a bound a query's cost grows with its length, because every
repeat of a word is scored again, and a long enough query never finishes. So a query holds at
most ``MAX_QUERY_CHARS`` characters and ``MAX_QUERY_TERMS`` distinct terms, and a repeated
term is scored once. The worst query accepted (that many of the store's most common words,
over every note) is measured beside an ordinary one in ``benchmarks/bench_recall.py``.

Over a bound the query is refused (``UsageError``, code ``invalid_input``) with the limit and
what to do, never silently cut: the CLI's ``query``, the read tools and the Python API
(``recall.engine.search``, ``Searcher.query``) all come through ``query_terms``. A semantic
query with more than ``EMBED_IN_QUERY`` notes still to embed is refused too
(``VectorsMissing``, naming ``truss-files index``).
"""

from __future__ import annotations

from typing import Final

from ..errors import UsageError
from .tokenize import tokenize

__all__ = [
    "EMBED_IN_QUERY",
    "MAX_QUERY_CHARS",
    "MAX_QUERY_TERMS",
    "check_query_text",
    "query_terms",
]

MAX_QUERY_CHARS: Final = 1_000
MAX_QUERY_TERMS: Final = 32
# The most notes a semantic or hybrid query embeds itself (about a second in numpy); more, and
# it raises ``VectorsMissing`` naming ``truss-files index`` instead of freezing for minutes.
EMBED_IN_QUERY: Final = 64


def check_query_text(text: str) -> str:
    """``text`` if it is within ``MAX_QUERY_CHARS``; else a UsageError saying what to do."""
    if not isinstance(text, str):
        raise UsageError(f"the query must be text, got {type(text).__name__}")
    if len(text) > MAX_QUERY_CHARS:
        raise UsageError(
            f"the query is {len(text):,} characters; the limit is {MAX_QUERY_CHARS:,}. "
            "Ask with the few words that matter (names, errors, topics), not a whole text"
        )
    return text


def query_terms(text: str) -> list[str]:
    """The distinct terms of a query, in the order they first occur, within the bounds."""
    terms = list(dict.fromkeys(tokenize(check_query_text(text))))
    if len(terms) > MAX_QUERY_TERMS:
        raise UsageError(
            f"the query has {len(terms)} distinct words; the limit is {MAX_QUERY_TERMS}. "
            "Keep the words that matter most, or ask several shorter queries"
        )
    return terms
