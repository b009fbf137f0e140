"""The store as it was: which commit a read ``at`` a date or a commit reads.

``at`` is a commit (an id, a unique prefix, or any name git resolves: ``main~3``) or a date
(``2026-11-01``, the end of that day in UTC; or an ISO 8601 time, ``2026-11-01T09:30:00Z``,
UTC when it names no offset). A date reads the last commit of the branch's first-parent line
committed at or before it -- the branch as it stood then.

Only the branch's own history can be read back: a commit that is not the tip or one of its
ancestors (another branch, a dangling object someone fetched or forged) is refused, and so is
one from before a pinned trust root. The read gate then judges the *tip*'s history
(``Store.open_read``): a past commit is trusted exactly as far as the history that holds it,
so a read ``at`` never admits a label the read gate would refuse at the tip, and it never
moves the gate's record (which follows the tip) back in time.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    import pygit2

    from ..git.gitdir import GitDir
    from ..git.gitstore import GitStore

__all__ = ["Judged", "parse_date", "resolve_at"]

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")


def parse_date(text: str) -> datetime.datetime | None:
    """``text`` as an instant (aware, UTC when unsaid), or None when it is no date. A bare
    date is the last instant of that day in UTC."""
    text = text.strip()
    try:
        if _DATE.match(text):
            day = datetime.date.fromisoformat(text)
            return datetime.datetime.combine(day, datetime.time.max, datetime.UTC)
        if _DATETIME.match(text):
            when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
            return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)
    except ValueError as exc:
        raise UsageError(f"--at {text}: not a date ({exc}); write it as 2026-11-01") from exc
    return None


def resolve_at(
    git: GitStore, at: str, environ: Mapping[str, str], tip: pygit2.Commit | None = None
) -> pygit2.Commit:
    """The commit a read ``at`` reads in the history of ``tip`` (default: the branch tip; see
    the module's docstring); ``UsageError`` when there is none, naming what to give instead."""
    # Late: the read tools import ``Judged`` from here on their cold path, which loads no
    # pygit2; only a read into the past needs the trust root.
    from ..trust.trustroot import pinned_root

    if not isinstance(at, str) or not at.strip():
        raise UsageError("at: give a date (2026-11-01) or a commit id")
    tip = tip or git.tip()
    if tip is None:
        raise UsageError(f"at {at}: the store has no commits yet")
    when = parse_date(at)
    if when is not None:
        found = _last_at_or_before(tip, when)
        if found is None:
            first = _first(tip)
            raise UsageError(
                f"at {at}: the store's history starts later, on "
                f"{_stamp(first.commit_time)}; give that date or a later one"
            )
        commit = found
    else:
        commit = git.commit(at.strip())
    if commit.id != tip.id and not git.repo.descendant_of(tip.id, commit.id):
        raise UsageError(
            f"at {at}: commit {str(commit.id)[:12]} is not in the history of {git.branch}; "
            "only the branch's own past can be read (see `git log`)"
        )
    root = pinned_root(git.repo, environ)
    if root is not None and str(commit.id) != root:
        try:
            after_root = git.repo.descendant_of(commit.id, git.commit(root).id)
        except UsageError:
            after_root = False
        if not after_root:
            raise UsageError(
                f"at {at}: commit {str(commit.id)[:12]} is from before the pinned trust root "
                f"{root[:12]}; nothing before the root can be trusted"
            )
    return commit


def _last_at_or_before(tip: pygit2.Commit, when: datetime.datetime) -> pygit2.Commit | None:
    limit = when.timestamp()
    commit: pygit2.Commit | None = tip
    while commit is not None:
        if commit.commit_time <= limit:
            return commit
        commit = commit.parents[0] if commit.parents else None
    return None


def _first(tip: pygit2.Commit) -> pygit2.Commit:
    commit = tip
    while commit.parents:
        commit = commit.parents[0]
    return commit


def _stamp(seconds: int) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Judged:
    """A read gate that has already answered (``Store.open_read(at=...)`` judged the tip):
    what recall is given for a past commit, so its check of that commit says the same and
    the gate's record, which follows the tip, is not moved back. Compared by value, so
    recall keeps one searcher for every read of the same verdict."""

    withheld: str | None

    def __call__(self, git: GitDir, commit: str | None) -> str | None:
        return self.withheld
