"""The cursor a context or a delta hands back: where in the branch's history it was read.

``tc1.<commit>.<check>``: a format tag, the commit id, and the first 12 hex of a sha256 over
both. It is opaque to a harness (store it, pass it back) and refused, with a message that says
why, when it is garbage, damaged, names a commit this store does not have (a cursor from
another store), or names one outside the branch's history (a rewritten branch, a forged id).
The check catches damage, not a determined forger: what stops a forged cursor is that the
commit it names must be an ancestor of the branch tip, whose history the read gate audits.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Final

import pygit2

from ..errors import BadCursor

if TYPE_CHECKING:
    from ..git.gitstore import GitStore

__all__ = ["TAG", "decode", "encode", "resolve"]

TAG: Final = "tc1"
_SHAPE = re.compile(r"^tc1\.([0-9a-f]{40}|[0-9a-f]{64})\.([0-9a-f]{12})$")
_HELP = (
    "pass the cursor a `context` or `delta` printed for this store, or start over with `context`"
)


def _check(commit: str) -> str:
    return hashlib.sha256(f"{TAG}:{commit}".encode()).hexdigest()[:12]


def encode(commit: str) -> str:
    return f"{TAG}.{commit}.{_check(commit)}"


def decode(cursor: str) -> str:
    """The commit a well-formed, undamaged cursor names."""
    text = cursor.strip() if isinstance(cursor, str) else ""
    shown = text[:80] + ("..." if len(text) > 80 else "")
    found = _SHAPE.match(text)
    if found is None:
        raise BadCursor(f"{shown!r} is not a truss-files cursor; {_HELP}")
    commit, check = found.groups()
    if check != _check(commit):
        raise BadCursor(f"cursor {shown!r} is damaged (its check does not match); {_HELP}")
    return commit


def resolve(git: GitStore, cursor: str) -> str:
    """The commit of ``cursor``, checked against this store: it exists and is in the history of
    the branch tip."""
    commit = decode(cursor)
    repo = git.repo
    try:
        obj = repo[commit]
    except (KeyError, ValueError):
        raise BadCursor(
            f"cursor names commit {commit[:12]}, which this store does not have (a cursor from "
            f"another store?); {_HELP}"
        ) from None
    if not isinstance(obj, pygit2.Commit):
        raise BadCursor(f"cursor names {commit[:12]}, which is not a commit; {_HELP}")
    tip = git.tip()
    if tip is None or (str(tip.id) != commit and not repo.descendant_of(tip.id, obj.id)):
        raise BadCursor(
            f"cursor names commit {commit[:12]}, which is not in the history of "
            f"{git.branch} (was the branch rewritten?); {_HELP}"
        )
    return commit
