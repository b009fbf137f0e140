"""Fusion of the lexical and the semantic rankings for ``hybrid`` mode.

``score_fusion`` (what hybrid mode uses): each ranking's scores are min-max normalised to
[0, 1] over that ranking's own list, and a document's fused score is the weighted sum over the
rankings (a document missing from one counts 0 there, like that list's last); hybrid weighs
lexical 0.6, semantic 0.4 (``HYBRID_WEIGHTS``). Unlike rank fusion it keeps *how much*
better the first hit is: a BM25 top hit far ahead of the rest, or a cosine far above the pack,
still wins, while a near-tie in one ranking lets the other decide.

``reciprocal_rank_fusion`` (Cormack, Clarke & Büttcher, SIGIR 2009) is kept for comparison:
each ranking gives ``1 / (k + rank)``, ``k = 60``.

Chosen to never fall below exact on any set: on the project's sets the dense ranking is the
stronger one, on real conversations (LoCoMo, every dialog turn a note) the weaker -- there a
semantic-heavy fusion let a weak dense ranking override a strong lexical one (0.25 lexical:
hybrid 0.49 against exact 0.53 recall@5). Measured with the minilm embedder (exact = BM25 with
acronyms and related words; each ranking's top 100; recall@5, LoCoMo conversations 0 and 1 =
149 and 81 questions of categories 1-4; ``docs/recall-quality.md`` regenerates them)::

    fusion (lexical weight)  LoCoMo 0  LoCoMo 1  relevance  hard dev  hard test  conversations
    exact alone              0.530     0.595     0.871      0.906     0.837      0.728
    semantic alone           0.400     0.399     0.964      0.962     0.846      0.962
    min-max 0.25 (before)    0.490     0.482     0.957      0.972     0.875      0.962
    min-max 0.5              0.549     0.594     0.943      0.972     0.875      0.923
    min-max 0.6              0.582     0.617     0.929      0.953     0.913      0.942  <-
    min-max 0.7              0.583     0.617     0.921      0.925     0.894      0.904
    max-normalised 0.6       0.549     0.600     0.929      0.953     0.894      0.942
    RRF k=60, equal          0.482     0.522     0.914      0.953     0.856      0.910
    RRF k=60, lexical 0.8    0.523     0.598     0.900      0.943     0.904      0.833
    RRF k=10, lexical 0.6    0.559     0.617     0.914      0.972     0.894      0.910

Min-max at 0.6 is the one fusion at least exact + 0.02 recall@5 on every set (LoCoMo
conversations 2 and 3 too: 0.631 and 0.504 against exact's 0.571 and 0.483); rank fusion
with the usual k = 60 falls below exact on LoCoMo, since it forgets how far BM25's first hit
leads.
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
# (lexical, semantic): never below exact on LoCoMo or the project's sets (module docstring).
LEXICAL_WEIGHT: Final = 0.6
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
