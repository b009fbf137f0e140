"""Fusion of the lexical and the semantic rankings for ``hybrid`` mode.

``hybrid_fusion`` (what hybrid mode uses) is ``score_fusion`` over the lexical ranking's top
``LEXICAL_DEPTH`` (20) and the semantic ranking's top ``FUSION_DEPTH`` (100): each ranking's
scores are min-max normalised to [0, 1] over that ranking's own list, and a document's fused
score is the weighted sum over the rankings (a document missing from one counts 0 there, like
that list's last); lexical 0.6, semantic 0.4 (``HYBRID_WEIGHTS``). Unlike rank fusion it keeps
*how much* better the first hit is: a BM25 top hit far ahead of the rest, or a cosine far
above the pack, still wins, while a near-tie in one ranking lets the other decide.

Why the lexical side is cut at 20: its min-max floor is then its 20th score, not its 100th
(about 0), so what separates BM25's few best hits keeps its full weight and a note BM25 ranks
21st or lower is left to the dense ranking alone -- where the encoder is the weaker signal
(real conversations) a weak cosine can no longer lift a far-down lexical hit over a strong
one, and where it is the stronger (the project's sets) it still reorders the lexical best.
With a limit above 20 the cut is the limit, so every asked-for place can be filled.

``reciprocal_rank_fusion`` (Cormack, Clarke & Büttcher, SIGIR 2009) is kept for comparison:
each ranking gives ``1 / (k + rank)``, ``k = 60``.

Chosen on LoCoMo's conversations 0-3 (581 questions) and the project's four sets, measured
through a real store (exact mode's and semantic mode's own top 100 with their scores, then
each fusion over them; recall@5; ``docs/recall-quality.md`` has every variant tried and
``python -m benchmarks locomo`` regenerates the chosen one's figures)::

    fusion                              LoCoMo 0-3  min over sets of (fusion - exact)
    exact alone                         0.551       0
    min-max 0.6, both top 100 (before)  0.576       -0.003 (LoCoMo 1)
    min-max 0.7, both top 100           0.578       +0.015
    z-score 0.6, both top 100           0.577       +0.003
    RRF k=60 equal / k=5 lexical 0.6    0.493 / 0.556  -0.094 / -0.004
    per-query confidence weight         0.578       +0.018 (base 0.6, +1.0 x lead gap)
    lexical-first (its top 2 kept)      0.576       +0.008
    min-max 0.6, lexical top 20  <-     0.592       +0.003
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .lexical import Match

__all__ = [
    "FUSION_DEPTH",
    "HYBRID_WEIGHTS",
    "LEXICAL_DEPTH",
    "RRF_K",
    "fuse_ids",
    "fuse_scored_ids",
    "hybrid_fusion",
    "reciprocal_rank_fusion",
    "score_fusion",
]

RRF_K: Final = 60
# (lexical, semantic): never below exact on LoCoMo or the project's sets (module docstring).
LEXICAL_WEIGHT: Final = 0.6
HYBRID_WEIGHTS: Final = (LEXICAL_WEIGHT, 1.0 - LEXICAL_WEIGHT)
FUSION_DEPTH: Final = 100  # the semantic ranking's top 100 goes into a hybrid fusion
LEXICAL_DEPTH: Final = 20  # the lexical ranking's top 20 (module docstring)


def hybrid_fusion(lexical: Sequence[Match], semantic: Sequence[Match], limit: int) -> list[Match]:
    """Hybrid mode's top ``limit``: ``score_fusion`` of the lexical ranking's top
    ``max(limit, LEXICAL_DEPTH)`` and the semantic ranking as given (its top
    ``FUSION_DEPTH``), at ``HYBRID_WEIGHTS``."""
    return score_fusion([lexical[: max(limit, LEXICAL_DEPTH)], semantic], limit, HYBRID_WEIGHTS)


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
