"""The SaliencePolicy seam: whether an entry's ``salience`` (0..1, default 0.5) moves its rank.

``[policy] salience`` in truss.toml (or a settings layer) picks one:

``off`` (default)
    ranking is recall's alone; salience is stored and shown, never used.
``prior``
    salience is a prior on the ranking score: ``score * (0.5 + salience)`` (a negative
    score is divided instead, so a higher weight always ranks higher). An entry at the
    default 0.5 keeps its score, so the policy changes nothing until someone sets salience;
    between two entries of equal score the more salient comes first, and a strongly salient
    entry can pass a slightly better match.

The filter still runs first (a policy only reorders candidates the trust floor admitted), and
a policy re-ranks a deeper list than it returns (``DEPTH``) so that the cut happens after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

from ..errors import ConfigError
from .pipeline import Hit

__all__ = ["DEPTH", "POLICIES", "OffSalience", "PriorSalience", "SaliencePolicy", "salience_policy"]

POLICIES: Final = ("off", "prior")
DEPTH: Final = 100  # a policy that reorders sees this many ranked hits before the cut


class SaliencePolicy(Protocol):
    name: str

    def order(self, hits: Sequence[Hit], limit: int) -> list[Hit]: ...


class OffSalience:
    name = "off"

    def order(self, hits: Sequence[Hit], limit: int) -> list[Hit]:
        return list(hits[:limit])


class PriorSalience:
    name = "prior"

    def order(self, hits: Sequence[Hit], limit: int) -> list[Hit]:
        weighted = [Hit(h.entry, _weigh(h.score, 0.5 + h.entry.salience)) for h in hits]
        # Stable: equal weighted scores keep recall's order (itself deterministic by id).
        weighted.sort(key=lambda h: -h.score)
        return weighted[:limit]


def _weigh(score: float, weight: float) -> float:
    # A score below zero (BM25 over a corpus where every term is common) moves toward zero as
    # the weight grows, as a positive one moves up: more salient always ranks higher.
    return score * weight if score >= 0 else score / weight


def salience_policy(name: object, source: str = "truss.toml: policy.salience") -> SaliencePolicy:
    if name in (None, "off"):
        return OffSalience()
    if name == "prior":
        return PriorSalience()
    raise ConfigError(f"{source} is {name!r}; use one of: {', '.join(POLICIES)}")
