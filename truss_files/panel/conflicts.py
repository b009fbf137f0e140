"""Conflicts a read must report: two or more live verified entries with one kind and key.

Under ``keep-both-flagged`` a promotion leaves an older verified entry standing beside the
new one; ``panel-arbitrated`` can leave the same state when a rival turns verified while an
arbitration runs. Reads never pick a winner silently: ``find_conflicts`` names, for each
returned entry, every live verified entry that shares its kind and key — also those the
query itself did not return, because a reader shown one side must learn the other exists.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..model import Conflict, Entry, Trust

__all__ = ["Conflict", "find_conflicts"]


def _live(entry: Entry) -> bool:
    return entry.trust is Trust.VERIFIED and entry.superseded_by is None


def find_conflicts(
    returned: Iterable[Entry], universe: Iterable[Entry] | None = None
) -> list[Conflict]:
    """Conflicts touching ``returned``, looked up in ``universe`` (default: ``returned``)."""
    returned = list(returned)
    wanted = {(e.kind.value, e.key) for e in returned if _live(e)}
    if not wanted:
        return []
    groups: dict[tuple[str, str], dict[str, Entry]] = {}
    for entry in [*returned, *(universe or ())]:
        slot = (entry.kind.value, entry.key)
        if slot in wanted and _live(entry):
            groups.setdefault(slot, {})[entry.id] = entry
    out = []
    for (kind, key), members in sorted(groups.items()):
        if len(members) > 1:
            ordered = sorted(members.values(), key=lambda e: (e.created, e.id))
            out.append(Conflict(kind, key, tuple(e.id for e in ordered)))
    return out
