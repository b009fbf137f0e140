"""A run's L4: its own notes, newest last and bounded, a compaction's summary first.

An unverified note is the run's own only when the calling key's principal signed the commit
that added it (``authority.is_own``); scratch notes and summaries past unverified belong to
the run that produced them. A child keeps its own L4: nothing here is shared between runs
(the parent's listing of its children is ``assemble``'s, built from each child's tail).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from ..git.gitdir import GitDir
from ..model import Entry, Kind, Trust
from ..recall.engine import Searcher
from ..tools.dispatch import seq_of
from ..trust.authority import RunView, is_own
from ..trust.writers import writers

if TYPE_CHECKING:
    from ..git.gitstore import Snapshot
    from ..store.store import Store

__all__ = ["NOTE_CHARS", "TAIL_CHARS", "compacted", "own_notes", "run_entries", "scratch_tail"]

TAIL_CHARS: Final = 8000  # the L4 tail's text budget, whatever scratch_tail allows
NOTE_CHARS: Final = 1200  # one note's share of it
L4_KINDS: Final = frozenset({Kind.SCRATCH, Kind.CONTEXT_SUMMARY})


def run_entries(store: Store, snap: Snapshot, run: str) -> list[Entry]:
    """Every entry the run produced (``run:<run>/...``), from the recall index's run map:
    far less than a scan of every file."""
    searcher = Searcher(
        gate=store.gate, git=GitDir.discover(store.git.git_dir), repo=store.git.repo
    )
    view = searcher.view(snap.tree_id("memories"), at_tip=False, commit=snap.oid)
    return searcher.run_entries(view, run)


def own_notes(store: Store, snap: Snapshot, run: str, principal: str | None) -> list[Entry]:
    """Every L4 candidate of the run, oldest first: its own unverified writes (an unverified
    note is the run's own only when ``principal``, the calling key's, signed the commit that
    added it: ``authority.is_own``) and its scratch notes and summaries past unverified (never
    a goal). A child keeps its own L4 (no shared runs here)."""
    view = RunView(run, principal)
    found = run_entries(store, snap, run)
    by = writers(GitDir.discover(store.git.git_dir), snap.oid, store.git.repo) if found else None
    notes = [
        e
        for e in found
        if e.kind is not Kind.GOAL
        and e.trust is not Trust.REJECTED
        and (
            (e.trust is Trust.UNVERIFIED and by is not None and is_own(view, e, by.of(e.id)))
            or (e.kind in L4_KINDS and e.trust is not Trust.UNVERIFIED)
        )
    ]
    notes.sort(key=lambda e: (seq_of(e, run), e.created, e.id))
    return notes


def compacted(notes: Sequence[Entry], run: str) -> list[Entry]:
    """``notes`` (a run's L4 candidates, in order) with the newest summary first and the notes
    it covers, and older summaries, left out."""
    summaries = [n for n in notes if n.kind is Kind.CONTEXT_SUMMARY]
    if not summaries:
        return list(notes)
    newest = max(summaries, key=lambda n: (seq_of(n, run), n.created, n.id))
    covered = set(newest.provenance.sources)
    rest = [
        n
        for n in notes
        if n.kind is not Kind.CONTEXT_SUMMARY and n.provenance.produced_by not in covered
    ]
    return [newest, *rest]


def scratch_tail(
    store: Store, snap: Snapshot, run: str, limit: int, principal: str | None = None
) -> list[Entry]:
    """The run's L4 tail (``own_notes``), newest last and bounded; a compaction's summary
    first in place of the notes it covers (``compacted``)."""
    notes = compacted(own_notes(store, snap, run, principal), run)
    head = notes[:1] if notes and notes[0].kind is Kind.CONTEXT_SUMMARY else []
    rest = notes[len(head) :]
    kept: list[Entry] = []
    used = sum(min(len(n.body), NOTE_CHARS) for n in head)
    for note in reversed(rest[-limit:] if limit > 0 else []):
        used += min(len(note.body), NOTE_CHARS)
        if used > TAIL_CHARS and (kept or head):
            break
        kept.append(note)
    return head + kept[::-1]
