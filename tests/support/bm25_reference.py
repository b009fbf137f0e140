"""rank-bm25's BM25Okapi and the same with Lucene's idf: what recall is checked against."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rank_bm25 import BM25Okapi

__all__ = ["BM25Okapi", "LuceneOkapi", "okapi_top", "overlap"]


class LuceneOkapi(BM25Okapi):
    """BM25Okapi's arithmetic with the never-negative idf ``ln(1 + (N - n + 0.5) / (n + 0.5))``:
    an independent computation of BM25 to rank recall's answers against (with k1 1.2 and
    b 0.75, tantivy's)."""

    def _calc_idf(self, nd: dict[str, int]) -> None:
        for word, freq in nd.items():
            self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))


def okapi_top(
    okapi: BM25Okapi,
    ids: Sequence[str],
    docs: Sequence[Sequence[str]],
    query: Sequence[str],
    k: int,
) -> list[str]:
    """The reference's top ``k`` among documents holding a query term, ties by id."""
    terms = set(query)
    scores = okapi.get_scores(list(query))
    hits = [(-float(s), i) for i, d, s in zip(ids, docs, scores, strict=True) if terms & set(d)]
    return [i for _, i in sorted(hits)[:k]]


def overlap(ours: Sequence[str], theirs: Sequence[str]) -> float:
    """Share of the reference's top k that is in ours (1.0 when both are empty)."""
    if not theirs:
        return 1.0 if not ours else 0.0
    return len(set(ours) & set(theirs)) / len(theirs)
