"""Fusion of the lexical and the semantic rankings for ``hybrid`` mode.

``score_fusion`` (what hybrid mode uses): each ranking's scores are min-max normalised to
[0, 1] over that ranking's own list, and a document's fused score is the weighted sum over the
rankings (a document missing from one counts 0 there, like that list's last); hybrid weighs
lexical 0.25, semantic 0.75 (``HYBRID_WEIGHTS``). Unlike rank fusion it keeps *how much*
better the first hit is: a BM25 top hit far ahead of the rest, or a cosine far above the pack,
still wins, while a near-tie in one ranking lets the other decide.

``reciprocal_rank_fusion`` (Cormack, Clarke & Büttcher, SIGIR 2009) is kept for comparison:
each ranking gives ``1 / (k + rank)``, ``k = 60``.

Measured with the minilm embedder (exact = BM25 with acronyms and related words; each
ranking's top 100; recall@5 / MRR@10). Chosen on the hard set's dev questions alone -- best
recall there, then best MRR among the ties; every other column is held out, looked at after
the choice::

    fusion (lexical weight)     hard dev        tests/relevance hard held out   conversations
    exact alone                 0.906 / 0.839   0.871 / 0.836   0.837 / 0.694   0.728 / 0.650
    semantic alone              0.962 / 0.868   0.964 / 0.934   0.846 / 0.764   0.962 / 0.817
    min-max 0.5 (equal)         0.972 / 0.896   0.943 / 0.888   0.875 / 0.762   0.923 / 0.772
    min-max 0.3                 0.972 / 0.912   0.957 / 0.929   0.875 / 0.767   0.962 / 0.812
    min-max 0.25                0.972 / 0.917   0.957 / 0.937   0.875 / 0.764   0.962 / 0.823  <-
    min-max 0.1                 0.962 / 0.890   0.971 / 0.937   0.875 / 0.777   0.962 / 0.798
    max-normalised 0.1          0.972 / 0.916   0.964 / 0.940   0.875 / 0.775   0.962 / 0.826
    z-scores (top 20) 0.3       0.962 / 0.907   0.957 / 0.932   0.875 / 0.766   0.962 / 0.823
    RRF k=60, equal             0.953 / 0.908   0.914 / 0.882   0.856 / 0.737   0.910 / 0.779
    RRF, lexical 0.3            0.962 / 0.895   0.914 / 0.916   0.875 / 0.743   0.936 / 0.782
    lexical-first rerank of
      the dense top 5           0.962 / 0.869   0.964 / 0.898   0.846 / 0.711   0.962 / 0.722
    per-query weight by BM25
      top lead (0.3 + lead)     0.972 / 0.899   0.936 / 0.922   0.875 / 0.768   0.894 / 0.792

With a transformer encoder the semantic ranking is the stronger one, so an equal share lets
BM25's confident mistakes (a topic word matched in the wrong near-duplicate) through; a
quarter keeps BM25's exact-identifier wins (it still decides near-ties) without that. On every
set hybrid is at least exact + 0.03 recall@5.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .lexical import Match

__all__ = [
    "HYBRID_WEIGHTS",
    "RRF_K",
    "fuse_ids",
    "fuse_scored_ids",
    "reciprocal_rank_fusion",
    "score_fusion",
]

RRF_K: Final = 60
# (lexical, semantic): chosen on the hard set's dev questions alone (module docstring).
LEXICAL_WEIGHT: Final = 0.25
HYBRID_WEIGHTS: Final = (LEXICAL_WEIGHT, 1.0 - LEXICAL_WEIGHT)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Match]], limit: int, k: int = RRF_K
) -> list[Match]:
    """The fused top ``limit``: fused score desc, then entry id asc."""
    fused: dict[str, float] = {}
    first: dict[str, Match] = {}
    for ranking in rankings:
        for rank, match in enumerate(ranking, start=1):
            slot = match.id
            fused[slot] = fused.get(slot, 0.0) + 1.0 / (k + rank)
            first.setdefault(slot, match)
    ordered = sorted(fused.items(), key=lambda item: (-item[1], item[0]))
    return [first[slot]._replace(score=score) for slot, score in ordered[:limit]]


def fuse_ids(rankings: Sequence[Sequence[str]], limit: int, k: int = RRF_K) -> list[str]:
    """The same fusion over plain id rankings (the relevance evaluation's rank functions)."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (k + rank)
    return [d for d, _ in sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:limit]]


def _normalised(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high <= low:
        return [1.0] * len(scores)
    return [(s - low) / (high - low) for s in scores]


def _weights(weights: Sequence[float] | None, n: int) -> list[float]:
    if weights is None:
        return [1.0 / n] * n if n else []
    if len(weights) != n:
        raise ValueError(f"{len(weights)} fusion weights for {n} rankings")
    return list(weights)


def score_fusion(
    rankings: Sequence[Sequence[Match]], limit: int, weights: Sequence[float] | None = None
) -> list[Match]:
    """The fused top ``limit`` by the weighted sum of min-max-normalised scores (equal
    weights summing to 1 unless given: hybrid mode passes ``HYBRID_WEIGHTS``), then entry id
    asc."""
    fused: dict[str, float] = {}
    first: dict[str, Match] = {}
    for ranking, weight in zip(rankings, _weights(weights, len(rankings)), strict=True):
        for match, score in zip(ranking, _normalised([m.score for m in ranking]), strict=True):
            slot = match.id
            fused[slot] = fused.get(slot, 0.0) + score * weight
            first.setdefault(slot, match)
    ordered = sorted(fused.items(), key=lambda item: (-item[1], item[0]))
    return [first[slot]._replace(score=score) for slot, score in ordered[:limit]]


def fuse_scored_ids(
    rankings: Sequence[Sequence[tuple[str, float]]],
    limit: int,
    weights: Sequence[float] | None = None,
) -> list[str]:
    """``score_fusion`` over ``(id, score)`` rankings (the relevance evaluation's)."""
    fused: dict[str, float] = {}
    for ranking, weight in zip(rankings, _weights(weights, len(rankings)), strict=True):
        for (doc_id, _), score in zip(ranking, _normalised([s for _, s in ranking]), strict=True):
            fused[doc_id] = fused.get(doc_id, 0.0) + score * weight
    return [d for d, _ in sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:limit]]
