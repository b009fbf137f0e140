"""A belief's history as a reviewer reads it: the timeline of every commit that changed one
entry (trust before → after, signer, verdict) and its provenance chain (what produced it,
its sources, the verdict behind it, the entries it replaced and the one that replaced it).

The timeline is the store's own ``log`` (the engine of ``truss-files log``) with the trust
each commit started from beside the one it left, so a picture can draw the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..model import Entry

if TYPE_CHECKING:
    from ..git.gitstore import Snapshot
    from ..store.store import Store

__all__ = ["SupersedeLink", "TimelineStep", "ProvenanceChain", "provenance", "timeline"]

# How far the supersede chain is followed each way: a loop a hand edit made stops here.
_CHAIN_LIMIT = 32
# Which outcome a verdict recorded by each op carries.
_OUTCOME = {"promote": "PASS", "reject": "FAIL", "demote": "FAIL"}


@dataclass(frozen=True)
class TimelineStep:
    """One commit that changed the entry file."""

    commit: str
    time: str
    op: str
    before: str | None  # trust before the commit (None: the file did not exist)
    after: str | None  # trust after it (None: the file was removed)
    signer: str
    verdict: str | None  # the verdict id the commit recorded
    outcome: str | None  # that verdict's outcome
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SupersedeLink:
    """An entry in the supersede chain, as far as this read may show it."""

    id: str
    kind: str
    key: str
    trust: str
    body: str | None  # None: above unverified on a history the read gate withholds


@dataclass(frozen=True)
class ProvenanceChain:
    entry: Entry
    produced_by: str | None
    sources: tuple[str, ...]
    verified_by: dict[str, Any] | None  # id, outcome, signer, time, quorum of the verdict
    replaced: tuple[SupersedeLink, ...]  # what this entry superseded, newest first
    replaced_by: tuple[SupersedeLink, ...]  # what superseded it, oldest first
    withheld: str | None


def timeline(store: Store, ref: str) -> list[TimelineStep]:
    """Every commit on the branch that changed the entry, oldest first."""
    marks: list[TimelineStep] = []
    before: str | None = None
    for item in store.log(ref):
        outcome = _OUTCOME.get(item.op) if item.verdict else None
        marks.append(
            TimelineStep(
                commit=item.commit,
                time=item.time,
                op=item.op,
                before=before,
                after=item.trust,
                signer=item.signer,
                verdict=item.verdict,
                outcome=outcome,
                reason=item.reason,
            )
        )
        before = item.trust
    return marks


def provenance(store: Store, entry: Entry, snap: Snapshot, withheld: str | None) -> ProvenanceChain:
    """The chain behind ``entry`` in ``snap`` (opened through the read gate; ``withheld``
    is its answer: bodies above unverified stay out when it holds them back)."""
    verified = entry.provenance.verified_by
    summary = None
    if verified:
        summary = {
            "verdict_id": verified.get("verdict_id"),
            "outcome": verified.get("outcome"),
            "signer": verified.get("signer"),
            "time": verified.get("time"),
            "quorum": verified.get("quorum"),
            "policy": verified.get("policy"),
        }
    return ProvenanceChain(
        entry=entry,
        produced_by=entry.provenance.produced_by,
        sources=tuple(entry.provenance.sources),
        verified_by=summary,
        replaced=tuple(_follow(store, entry, snap, withheld, "supersedes")),
        replaced_by=tuple(_follow(store, entry, snap, withheld, "superseded_by")),
        withheld=withheld,
    )


def _follow(
    store: Store, entry: Entry, snap: Snapshot, withheld: str | None, field: str
) -> list[SupersedeLink]:
    links: list[SupersedeLink] = []
    seen = {entry.id}
    ref = getattr(entry, field)
    while ref and len(links) < _CHAIN_LIMIT and ref not in seen:
        try:
            found = store.get(ref, snap)
        except UsageError:  # NotFound too: a link to an entry this branch does not hold
            break
        seen.add(found.id)
        shown = withheld is None or found.trust.rank <= 0
        links.append(
            SupersedeLink(
                found.id,
                found.kind.value,
                found.key,
                found.trust.value,
                found.body if shown else None,
            )
        )
        ref = getattr(found, field)
    return links
