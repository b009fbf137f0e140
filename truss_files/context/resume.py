"""Resume with the delta: what changed in verified memory since a run last read its context.

Each ``context --run R`` (and ``context repin``) leaves R's cursor behind, in
``.git/truss/context/runs/<run>.cursor`` (a cache beside the start record: losing it costs a
longer delta, from the run's start commit, never a wrong one). The next call reads what changed
in verified L2 between that cursor and the tip (``delta.delta_since``, through the read gate),
hands it back as one message block after the goal ledger, and moves the cursor on. So a resumed
run is told only what moved while it was away, and each change once: a harness need not stitch
``delta --since`` in by hand.

A change carries the entry's body when it is verified now, since that is the text the run may
rely on from here; a change away from verified (stale, superseded, rejected) names the entry
and its move, never its body. Tools and system are not touched: they are the run's start
commit's, whatever memory did since.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..errors import BadCursor, NotFound
from ..format.secrets import shown
from ..git.gitdir import GitDir
from ..model import Trust
from ..runs.ledger import check_run_id
from .cursor import encode
from .delta import TrustChange, delta_since

if TYPE_CHECKING:
    from ..format.scope import Reader
    from ..store.store import Store

__all__ = ["DELTA_HEAD", "Changed", "delta_text", "last_cursor", "resume_delta", "save_cursor"]

DELTA_HEAD: Final = (
    "Changed in verified memory since this run last read its context (bodies of entries "
    "verified now; nothing else moved):"
)
BODY_CHARS: Final = 2000  # one changed entry's body in the block; the entry holds all of it


@dataclass(frozen=True)
class Changed(TrustChange):
    """One change of a resume's delta: as ``delta`` names it, plus the body when verified."""

    body: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "body": self.body}


def _path(store: Store, run: str) -> str:
    folder = os.path.join(GitDir.discover(store.git.git_dir).cache_str, "context", "runs")
    return os.path.join(folder, f"{check_run_id(run)}.cursor")


def last_cursor(store: Store, run: str) -> str | None:
    """The cursor run ``run`` was last handed, None when none is kept (a lost cache)."""
    try:
        with open(_path(store, run), encoding="utf-8") as handle:
            return handle.read().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def save_cursor(store: Store, run: str, cursor: str) -> None:
    """Keep ``cursor`` as the run's last, whole (a rename over the old one)."""
    path = _path(store, run)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(cursor + "\n")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def resume_delta(
    store: Store, run: str, start_commit: str, reader: Reader | None
) -> tuple[tuple[Changed, ...], str]:
    """What changed since the run's last cursor (its start commit when none is kept, or when
    the kept one no longer resolves), with the new cursor; the caller saves it."""
    since = last_cursor(store, run) or encode(start_commit)
    try:
        delta = delta_since(store, since, reader=reader)
    except BadCursor:
        # A damaged cache file, or a cursor of a branch since rewritten: from the start commit,
        # which must still be in the history (``build_context`` checked it).
        delta = delta_since(store, encode(start_commit), reader=reader)
    if not delta.changes:
        return (), delta.cursor
    snap = store.snapshot()
    out = []
    for change in delta.changes:
        body = None
        if change.to == Trust.VERIFIED.value:
            with contextlib.suppress(NotFound):  # gone from the tip since the diff: no body
                body = shown(store.get(change.id, snap)).body
        out.append(Changed(change.id, change.kind, change.key, change.from_, change.to, body))
    return tuple(out), delta.cursor


def delta_text(changes: tuple[Changed, ...]) -> str:
    """The block a model reads: one line per change, the body indented below it."""
    if not changes:
        return ""
    lines = [DELTA_HEAD]
    for c in changes:
        move = f"{c.from_ or 'new'} -> {c.to or 'gone'}"
        lines.append(f"- {c.kind}/{c.key} ({c.id[:12]}): {move}")
        if c.body is not None:
            body = c.body if len(c.body) <= BODY_CHARS else c.body[:BODY_CHARS] + " [...]"
            lines.append("  " + body.replace("\n", "\n  "))
    return "\n".join(lines)
