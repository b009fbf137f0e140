"""Reciprocal-rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009) of several rankings.

Each ranking gives a document ``1 / (k + rank)`` (rank from 1); the fused score is the sum.
Only ranks matter, so BM25 scores and cosine similarities -- on unrelated scales -- combine
without calibration. ``k = 60`` is the paper's constant: it keeps one ranking's first place
from outweighing agreement between rankings further down.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .lexical import Match

__all__ = ["RRF_K", "fuse_ids", "reciprocal_rank_fusion"]

RRF_K: Final = 60


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Match]], limit: int, k: int = RRF_K
) -> list[Match]:
    """The fused top ``limit``: fused score desc, then entry id asc."""
    fused: dict[tuple[int, int], float] = {}
    first: dict[tuple[int, int], Match] = {}
    for ranking in rankings:
        for rank, match in enumerate(ranking, start=1):
            slot = (match.seg, match.docno)
            fused[slot] = fused.get(slot, 0.0) + 1.0 / (k + rank)
            first.setdefault(slot, match)
    ordered = sorted(fused.items(), key=lambda item: (-item[1], first[item[0]].id))
    return [
        Match(first[slot].seg, first[slot].docno, first[slot].id, score)
        for slot, score in ordered[:limit]
    ]


def fuse_ids(rankings: Sequence[Sequence[str]], limit: int, k: int = RRF_K) -> list[str]:
    """The same fusion over plain id rankings (the relevance evaluation's rank functions)."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (k + rank)
    return [d for d, _ in sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:limit]]
