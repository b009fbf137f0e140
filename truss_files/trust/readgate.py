"""The read gate: no read serves a trust label from a history the audit rejects.

A trust label is only as good as the commits that set it: a hand-made commit (``git commit
--no-verify`` with a file edited to ``trust: verified``) never passed a hook, so before a read
admits anything above unverified, the history up to the commit it reads must audit clean.

Auditing the whole history on every read would cost more than the read, so the result is
cached in ``.git/truss/audited`` (never in the work tree), keyed by commit id::

    truss-audited 1            format (a new rule in the audit means a new number)
    root <commit>              the trust root the history was audited from
    clean <commit>             the newest commit whose history audited clean
    bad <commit> <message>     the last commit refused, and why (so a refused branch is not
                               audited again on every read)

* **Warm** -- the commit read is the cached clean one: one small file read, no pygit2.
* **New commits** -- the cached clean commit is an ancestor: only ``clean..commit`` is audited
  (``audit.audit`` over the range; a clean prefix carries no held policy, so the range gives
  the same verdicts as the whole history). An ancestor of the clean commit is clean already.
* **Rewritten history** (a reset, a force-push, another pinned root) -- audited from the root.
  ``TRUSS_ROOT`` is compared on every read; a root pinned in git config (``truss.root``) is
  read when the commit moves (the warm path reads no git config).

The file is replaced atomically (``os.replace`` of a temporary file), so concurrent readers
see a whole old record or a whole new one, and an unreadable or foreign record is ignored
and rebuilt. The gate guards against commits that bypassed the hooks; whoever can rewrite
``.git`` itself can rewrite this record too (as they could the index), which is out of reach
of any check that runs in the same repository.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, NamedTuple

from ..errors import TrussError, UntrustedHistory
from ..git.gitdir import GitDir
from ..model import Trust

if TYPE_CHECKING:
    import pygit2

    from ..git.gitstore import GitStore
    from .audit import Violation, Vouched

__all__ = [
    "CACHE_NAME",
    "FORMAT",
    "advance",
    "check_write",
    "gate",
    "refusal",
]

CACHE_NAME: Final = "audited"
FORMAT: Final = "truss-audited 3"


class _Record(NamedTuple):
    root: str
    clean: str | None
    bad: str | None
    why: str


def gate(
    git: GitDir,
    commit: str | None,
    floor: Trust,
    *,
    store: GitStore | None = None,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """Check a read at ``floor`` from ``commit``. None: the history audits clean. Otherwise a
    read above unverified raises ``UntrustedHistory``; a read at unverified gets the message
    back and must serve nothing above unverified (and say so)."""
    why = refusal(git, commit, store=store, environ=environ)
    if why is not None and floor is not Trust.UNVERIFIED:
        raise UntrustedHistory(why)
    return why


def check_write(
    store: GitStore, commit: str | None, environ: Mapping[str, str] | None = None
) -> None:
    """Raise ``UntrustedHistory`` when the history up to ``commit`` (the parent of a write)
    fails the audit: no write lands on it. The read gate's record answers, so a write on the
    last audited commit costs one small file read."""
    why = refusal(GitDir.discover(store.git_dir), commit, store=store, environ=environ)
    if why is None:
        return
    for read_only in (_READ_PREFIX, _READ_SUFFIX):
        why = why.replace(read_only, "")
    why = why.strip()
    raise UntrustedHistory(
        "refusing to write: nothing is written on a history the audit rejects. "
        f"{why[:1].upper()}{why[1:]} Nothing was written."
    )


_READ_PREFIX: Final = "refusing to serve entries above unverified: "
_READ_SUFFIX: Final = " Reads at min_trust unverified still return unverified entries."


def refusal(
    git: GitDir,
    commit: str | None,
    *,
    store: GitStore | None = None,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """Why the history up to ``commit`` cannot be trusted, or None when it audits clean.

    Every read begins here, so here too the store's paths follow the branch first when the
    tip or the index moved since the store last looked (``_follow``)."""
    if not git.follows_branch():
        _follow(git, store)
    if commit is None:
        return None  # an unborn branch holds no entry
    env = os.environ if environ is None else environ
    record = _load(git)
    pinned = env.get("TRUSS_ROOT")
    if record is not None and (not pinned or pinned == record.root):
        if record.clean == commit:
            return None
        if record.bad == commit:
            return record.why
    return _audit(git, commit, record, store, env)


def _follow(git: GitDir, store: GitStore | None) -> None:
    """The start of a read that finds the branch (or the index) moved behind the store: its
    paths of the index and work tree follow the branch (``GitStore.follow``), so a plain
    ``git commit`` made next keeps every entry. A read is never refused for it: what stops
    it is said on stderr, and the next operation tries again."""
    # gitstore loads pygit2: only a read that finds the tip or the index moved pays for it.
    from ..git.gitstore import GitStore

    with contextlib.suppress(TrussError):
        (store or GitStore(git.path_str)).follow()


def _audit(
    git: GitDir,
    commit: str,
    record: _Record | None,
    store: GitStore | None,
    env: Mapping[str, str],
) -> str | None:
    # The audit, gitstore and the trust root load pygit2: only a read that must audit pays.
    from ..git.gitstore import GitStore
    from .audit import audit
    from .trustroot import pinned_root

    store = store or GitStore(git.path_str)
    repo = store.repo
    root = pinned_root(repo, env)
    start = None
    if record is not None and root in (None, record.root) and record.clean is not None:
        root = record.root
        with contextlib.suppress(KeyError, ValueError, TrussError):
            tip = store.commit(commit)
            last = store.commit(record.clean)
            if _reaches(repo, tip.id, last.id):
                start = record.clean
            elif _reaches(repo, last.id, tip.id, root):
                # A prefix of a clean history is clean: each commit is judged by its parent.
                _save(git, _Record(root, commit, record.bad, record.why))
                return None
    rev = f"{start}..{commit}" if start else commit
    # A read that must first audit a big change (a bulk import of a million entries: minutes)
    # says so once it has taken a while, rather than look frozen.
    said = threading.Timer(SLOW_AUDIT, store.note, [_slow_note(commit, start)])
    said.daemon = True
    said.start()
    try:
        # The record's clean commit was audited from this root: only the range is walked.
        # Attestations label no entry's trust, so a bad note is for the audit and the gate
        # to refuse; it withholds no verified entry here.
        report = audit(
            store,
            rev,
            root=root,
            environ=env,
            start_audited=start is not None,
            attestations=False,
        )
    except TrussError as exc:
        # No trust root to audit from (no .truss/allowed_signers), or an unreadable commit:
        # nothing in this history can back a label above unverified. Not recorded: fixing it
        # (init, a pinned root) must take effect on the next read.
        return (
            f"refusing to serve entries above unverified: the history of {commit[:12]} cannot "
            f"be audited ({exc.message}). Run `truss-files audit` to see why."
        )
    finally:
        said.cancel()
    if report.ok:
        _save(git, _Record(report.root, commit, None, ""))
        return None
    why = _message(commit, report.violations, record.clean if start and record else None)
    clean = record.clean if record is not None and record.root == report.root else None
    _save(git, _Record(report.root, clean, commit, why))
    return why


SLOW_AUDIT = 2.0  # seconds an audit before a read runs before the read says why it waits


def _slow_note(commit: str, start: str | None) -> str:
    since = f"the commits since {start[:12]}" if start else "its history"
    return (
        f"truss-files: auditing {since} up to {commit[:12]} before this read can serve "
        "verified entries (once: the next read reuses the verdict; a big import takes a while)"
    )


def advance(
    store: GitStore,
    commit: pygit2.Commit,
    environ: Mapping[str, str],
    vouched: Vouched | None = None,
) -> bool:
    """After the library's own write of ``commit``: when its only parent is the record's
    clean commit and it passes the audit's check of one commit, it becomes the clean one,
    so the next read needs no audit (and no pygit2). True when the record moved.

    The parent's history audited clean, so it holds no policy a failed commit smuggled in,
    and the one-commit check gives the verdict a range audit of ``parent..commit`` would. A
    merge is left to the next read: its other parents' histories are not in the record.
    ``vouched``: the entry files the writer made itself (``audit.Vouched``: a bulk import)."""
    # Only after a write (pygit2 is loaded then): a warm read never reaches here.
    from .audit import check_commit
    from .trustroot import pinned_root

    if len(commit.parent_ids) != 1:
        return False
    git = GitDir.discover(store.git_dir)
    record = _load(git)
    if record is None or record.clean != str(commit.parent_ids[0]):
        return False
    if pinned_root(store.repo, environ) not in (None, record.root):
        return False  # another root is pinned now: the next read audits from it
    try:
        if check_commit(store.repo, commit, str(commit.id) == record.root, vouched=vouched):
            return False  # the next read audits the range and records the refusal
    except TrussError:
        return False
    # A concurrent reader may have saved a newer record; this one is sound all the same
    # (the commit is clean), and at worst costs the next read an audit of what follows it.
    _save(git, _Record(record.root, str(commit.id), record.bad, record.why))
    return True


def _reaches(
    repo: pygit2.Repository, tip: pygit2.Oid, ancestor: pygit2.Oid, root: str | None = None
) -> bool:
    """``ancestor`` is in the history of ``tip``: some commit of ``ancestor..tip`` has it as
    a parent. Walks only that range, where ``descendant_of`` walks the whole history
    to the merge base. With ``root``: and the root is not in
    that range, so ``ancestor`` is no commit from before the trust root (which the audit
    refuses as a read's tip: it does not descend from the root)."""
    walker = repo.walk(tip)
    walker.hide(ancestor)
    found = False
    for commit in walker:
        if root is not None and str(commit.id) == root:
            return False
        found = found or ancestor in commit.parent_ids
    return found


def _message(commit: str, violations: tuple[Violation, ...], last_clean: str | None) -> str:
    bad_commit = violations[0].commit
    # The first offending commit's violations (up to three), then how many more there are.
    own = [v for v in violations if v.commit == bad_commit][:3]
    more = len(violations) - len(own)
    said = "; ".join(f"[{v.rule}] {v.path + ': ' if v.path else ''}{v.message}" for v in own)
    text = (
        f"refusing to serve entries above unverified: the history of {commit[:12]} fails the "
        f"audit -- commit {bad_commit[:12]}: {said}"
    )
    if more:
        text += f" (and {more} more violation{'s' if more > 1 else ''})"
    back = last_clean[:12] if last_clean else f"{bad_commit[:12]}^"
    text += (
        ". Run `truss-files audit` for the full report, then take the commit off the branch "
        f"(e.g. `git reset --keep {back}`; a revert leaves it in the history). "
        "Reads at min_trust unverified still return unverified entries."
    )
    return " ".join(text.split())  # one line: the record keeps it on one


def _path(git: GitDir) -> str:
    return os.path.join(git.cache_str, CACHE_NAME)


# The record last parsed in this process, by its bytes: every warm query reads the record
# (a few µs with os.read) but parses it only when it changed.
_PARSED: dict[str, tuple[bytes, _Record | None]] = {}


def _load(git: GitDir) -> _Record | None:
    path = _path(git)
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.read(fd, 1 << 16)
        finally:
            os.close(fd)
    except OSError:
        return None
    known = _PARSED.get(path)
    if known is not None and known[0] == data:
        return known[1]
    found = _parse(data)
    if len(_PARSED) > 64:
        _PARSED.clear()
    _PARSED[path] = (data, found)
    return found


def _parse(data: bytes) -> _Record | None:
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        return None
    if len(lines) < 4 or lines[0] != FORMAT or lines[-1] != "":
        return None  # unknown format, or cut short: audit again and rewrite it
    fields: dict[str, str] = {}
    for line in lines[1:-1]:
        name, _, value = line.partition(" ")
        fields[name] = value
    root = fields.get("root", "")
    clean = fields.get("clean") or None
    bad, _, why = (fields.get("bad") or "").partition(" ")
    if not _is_id(root) or (clean is not None and not _is_id(clean)) or (bad and not _is_id(bad)):
        return None
    return _Record(root, clean, bad or None, why)


def _is_id(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def _save(git: GitDir, record: _Record) -> None:
    text = f"{FORMAT}\nroot {record.root}\nclean {record.clean or ''}\n"
    if record.bad:
        text += f"bad {record.bad} {record.why}\n"
    folder = git.cache_str
    import threading

    tmp = os.path.join(folder, f".{CACHE_NAME}.{os.getpid()}.{threading.get_ident()}.tmp")
    # A cache that cannot be written costs the next read an audit, never a wrong answer.
    with contextlib.suppress(OSError):
        os.makedirs(folder, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, _path(git))
