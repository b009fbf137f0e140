"""Delta rehydration: what changed in verified L2 since a cursor, from git history.

On resume a harness injects this, not the store. A change is reported for an entry that is
verified now and was not at the cursor (newly verified, or new and verified), or was verified
at the cursor and is not now (stale, superseded, rejected, or back to unverified by a revert),
or stayed verified but was superseded. Goals (L3, re-pinned by ``context``) and scratch
(L4) are not L2 and are left out; so is whatever the reader may not see under
``memory.scope``.

The history read must pass the read gate: a branch that fails the audit gets no delta at all,
since every ``to: verified`` in it would be a claim nobody checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import pygit2

from ..format import entryfile
from ..model import Entry, Kind, Trust
from .cursor import encode, resolve

if TYPE_CHECKING:
    from ..format.scope import Reader
    from ..store.store import Store

__all__ = ["TrustChange", "Delta", "delta_since"]

NOT_L2: Final = frozenset({Kind.GOAL, Kind.SCRATCH})


@dataclass(frozen=True)
class TrustChange:
    """An entry that became or stopped being verified, or was superseded, since the cursor:
    its trust before and after (None on the side where it did not exist)."""

    id: str
    kind: str
    key: str
    from_: str | None
    to: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "key": self.key,
            "from": self.from_,
            "to": self.to,
        }


@dataclass(frozen=True)
class Delta:
    cursor: str
    since: str
    changes: tuple[TrustChange, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"cursor": self.cursor, "changes": [c.to_dict() for c in self.changes]}


def _changed(old: Entry | None, new: Entry | None) -> bool:
    was = old is not None and old.trust is Trust.VERIFIED
    now = new is not None and new.trust is Trust.VERIFIED
    if was != now:
        return True
    return was and old is not None and new is not None and old.superseded_by != new.superseded_by


def delta_since(store: Store, cursor: str, *, reader: Reader | None = None) -> Delta:
    since = resolve(store.git, cursor)
    snap = store.open_read(Trust.VERIFIED).snap  # UntrustedHistory on a bad history
    assert snap.oid is not None  # resolve() found the cursor in the tip's history
    repo = store.git.repo
    old_tree = store.git.snapshot(since).tree_id("memories")
    new_tree = snap.tree_id("memories")
    changes: list[TrustChange] = []
    if old_tree != new_tree:
        empty = repo.TreeBuilder().write()
        old_obj = repo[old_tree or empty].peel(pygit2.Tree)
        new_obj = repo[new_tree or empty].peel(pygit2.Tree)
        diff = old_obj.diff_to_tree(new_obj)
        for item in diff.deltas:
            path = item.new_file.path or item.old_file.path
            if not path.endswith(".md"):
                continue
            old = _parse(repo, item.old_file, path)
            new = _parse(repo, item.new_file, path)
            entry = new or old
            if entry is None or entry.kind in NOT_L2 or not _changed(old, new):
                continue
            if reader is not None and not reader.sees(entry.scope):
                continue
            changes.append(
                TrustChange(
                    entry.id,
                    entry.kind.value,
                    entry.key,
                    old.trust.value if old else None,
                    new.trust.value if new else None,
                )
            )
    changes.sort(key=lambda c: (c.kind, c.key, c.id))
    return Delta(encode(snap.oid), since, tuple(changes))


def _parse(repo: Any, side: Any, path: str) -> Entry | None:
    if side.mode == 0 or not any(side.id.raw):  # this side of the diff has no file
        return None
    entry: Entry = entryfile.parse(repo[side.id].data, f"memories/{path}")
    return entry
