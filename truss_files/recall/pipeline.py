"""The recall pipeline of DESIGN.md §5: filter, then rank only the candidates, then cut.

BM25 statistics come from the filtered candidates alone, so text below the trust floor can
never move a returned entry's score or rank.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..model import Entry, Kind, Layer, Trust
from .bm25 import rank
from .tokenize import tokenize


@dataclass(frozen=True)
class Filter:
    min_trust: Trust = Trust.VERIFIED
    kind: Kind | None = None
    key: str | None = None
    layers: frozenset[Layer] | None = None
    scope: Mapping[str, str] = field(default_factory=dict)
    include_superseded: bool | None = None  # None: only below the verified floor
    visible_ids: frozenset[str] = frozenset()  # e.g. a run's own unverified writes

    def admits(self, entry: Entry) -> bool:
        if entry.trust is Trust.REJECTED:
            return False
        if not entry.trust.passes(self.min_trust) and entry.id not in self.visible_ids:
            return False
        if self.kind is not None and entry.kind is not self.kind:
            return False
        if self.key is not None and entry.key != self.key:
            return False
        if self.layers is not None and entry.layer not in self.layers:
            return False
        if any(entry.scope.get(k) != v for k, v in self.scope.items()):
            return False
        superseded_ok = (
            self.min_trust is not Trust.VERIFIED
            if self.include_superseded is None
            else self.include_superseded
        )
        return superseded_ok or entry.superseded_by is None


@dataclass(frozen=True)
class Hit:
    entry: Entry
    score: float


def document_tokens(entry: Entry) -> list[str]:
    """What BM25 sees of an entry: its key and its body."""
    return tokenize(entry.key) + tokenize(entry.body)


def recall(entries: Iterable[Entry], query: str, flt: Filter, limit: int = 32) -> list[Hit]:
    candidates = {e.id: e for e in entries if flt.admits(e)}
    query_tokens = tokenize(query)
    if not query_tokens:
        return []
    docs = {eid: document_tokens(e) for eid, e in candidates.items()}
    return [Hit(candidates[s.doc_id], s.score) for s in rank(docs, query_tokens, limit)]
