"""Two clones that added one entry: the versions join to one file by a fixed rule.

The same source event trained on two clones (a retried webhook) gives one id -- the id
covers every immutable field -- but each clone stamps its own ``created`` (and may differ in
salience or sources). Neither version is a change of belief: both are unverified adds that
each clone's own history already passed. So they join without a panel: the version with
the earlier ``created`` (then the smaller text, so every machine picks the same) gives
every other field, and ``sources`` is the union (sorted, when the versions differ). The rule is
commutative and associative, so clones converge whatever order they sync in.

Only adds join: every version unverified with no verdict, with the same supersede links and
checks, and no common ancestor holding the file (else it is an ordinary three-way merge of
changes, judged as one). The merge driver writes the join and the audit accepts exactly that
file under the agent role (``is_join``), as it accepts one side's version unchanged when that
side's panel had already reviewed it and the other side's is an unreviewed add (the trust
state machine's pick); anything else a merge does to the file -- trust, a verdict, a link --
is its own change and still needs the panel role.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..errors import EntryError
from ..model import Entry, Trust
from .entryfile import parse, serialize

__all__ = ["can_join", "is_join", "join"]


def can_join(versions: Sequence[Entry]) -> bool:
    """The versions are adds of one entry that differ only in mutable, non-trust fields."""
    if not versions:
        return False
    first = versions[0]
    for entry in versions:
        if entry.trust is not Trust.UNVERIFIED or entry.provenance.verified_by is not None:
            return False
        same = (
            entry.id == first.id
            and entry.supersedes == first.supersedes
            and entry.superseded_by == first.superseded_by
            and entry.checks == first.checks
        )
        if not same:
            return False
    return True


def join(versions: Sequence[Entry]) -> Entry:
    """The one entry the versions join to; call only when ``can_join(versions)``."""
    texts = {serialize(e): e for e in versions}
    if len(texts) == 1:
        return versions[0]
    keep = min(texts.values(), key=_rank)
    sources = {s for e in versions for s in e.provenance.sources}
    if any(e.provenance.sources != keep.provenance.sources for e in versions):
        prov = dataclasses.replace(keep.provenance, sources=tuple(sorted(sources)))
        keep = dataclasses.replace(keep, provenance=prov)
    return keep


def _rank(entry: Entry) -> tuple[str, str]:
    # Sources left out of the order: they are joined apart, and a joined version must rank
    # as its parts did, so that joining in any grouping gives the same file.
    bare = dataclasses.replace(entry, provenance=dataclasses.replace(entry.provenance, sources=()))
    return entry.created, serialize(bare)


def is_join(merged: bytes | None, versions: Sequence[bytes], path: str | None = None) -> bool:
    """``merged`` is what independent adds of one entry (``versions``, entry files) settle to
    without a panel: the join of them all when every one is an unreviewed add, or, when the
    panel of one side already moved its version (promoted, rejected) and every other is an
    unreviewed add, that reviewed version byte for byte -- no review is lost either way."""
    if merged is None or not versions:
        return False
    try:
        entries = {data: parse(data, path) for data in versions}
    except EntryError:
        return False
    if len({e.id for e in entries.values()}) != 1:
        return False
    fresh = [e for e in entries.values() if can_join([e])]
    reviewed = [data for data, e in entries.items() if not can_join([e])]
    if not reviewed:
        return can_join(fresh) and merged == serialize(join(fresh)).encode()
    return len(reviewed) == 1 and merged == reviewed[0]
