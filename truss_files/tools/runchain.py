"""What makes a run's ledger trustworthy: one principal, one unbroken signed line, never rewound.

A replayed memo is only as good as the ledger that holds it, and a ledger ref is easy to move
(``git update-ref``, a fetch, a hand edit). So before a memo is served or a call appended,
``check_chain`` walks ``refs/truss/runs/<run-id>`` from its tip to its first commit and
requires:

- the first commit names the run's principal (``Truss-Principal``) and has no parent;
- every commit has exactly one parent (the previous call), carries ``Truss-Run: <run-id>``
  and ``Truss-Seq`` counting 1, 2, 3 ... without a gap, and is signed by a key that the
  store's policy lists for that same principal, who must hold the ``agent`` role.

Binding to the principal rather than to one key: the policy (``.truss/allowed_signers`` and
``[roles]``) is what says who may speak for whom, so an operator's key rotation keeps a
run resumable, while a key that is revoked stops verifying at once. Another agent's key,
however valid, names another principal and is refused.

A chain can be wholly valid and still be an old one. So the repository keeps a high-water
mark outside the ref, ``.git/truss/runs/<run-id>`` (the newest tip this repository recorded
or verified, and its sequence number), written atomically and only ever raised, and the
ref's reflog, where one exists, is a second witness: a tip below the mark, a tip that does
not descend from the marked commit, or a reflog naming a commit the tip does not descend
from is a rollback or a fork. A ref first seen in a fresh clone has no mark: there the chain
rules alone apply.

Every refusal is a ``ProvenanceError`` whose message is exactly
``memory memo missing matching signed provenance``; ``detail`` says which rule failed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import SignatureError, TrussError

if TYPE_CHECKING:
    import pygit2

    from ..config import TrustPolicy
    from ..signing import PublicKey

PROVENANCE_MESSAGE = "memory memo missing matching signed provenance"
MARK_FOLDER = "runs"

# Commit id -> the key its SSHSIG signature verifies with. A commit is immutable, so this
# is a pure function; caching it keeps a long run from re-verifying its whole ledger on
# every call (~0.2 ms a commit, measured on a 50-call run). Roles and principals are judged
# against the current policy every time, never cached.
_KEYS: dict[str, PublicKey] = {}
_KEYS_MAX = 200_000


class ProvenanceError(SignatureError):
    """A memo without a matching signed ledger entry; ``detail`` says which check failed."""

    code = "memo_provenance"

    def __init__(self, detail: str) -> None:
        super().__init__(PROVENANCE_MESSAGE)
        self.detail = detail


@dataclass(frozen=True)
class Chain:
    """A run's ledger after ``check_chain``: newest commit first, all by ``principal``."""

    run: str
    principal: str
    commits: tuple[pygit2.Commit, ...]

    @property
    def seq(self) -> int:
        return len(self.commits)

    @property
    def tip(self) -> pygit2.Commit | None:
        return self.commits[0] if self.commits else None

    def at(self, seq: int) -> pygit2.Commit:
        """The commit that recorded call ``seq`` (1-based)."""
        return self.commits[self.seq - seq]


@dataclass(frozen=True)
class Mark:
    """The newest ledger tip this repository recorded or verified for one run."""

    tip: str
    seq: int


def check_chain(
    policy: TrustPolicy, run_id: str, tip: pygit2.Commit | None, principal: str | None = None
) -> Chain:
    """The verified ledger ending at ``tip``; raises ProvenanceError on the first broken rule.

    ``principal`` is the run's principal when the caller already knows it (a commit about to
    extend a verified chain); otherwise the first commit names it.
    """
    import pygit2

    commits: list[pygit2.Commit] = []
    commit = tip
    while commit is not None:
        commits.append(commit)
        try:
            parents = commit.parents
        except pygit2.GitError as exc:
            raise ProvenanceError(
                f"the parent of ledger commit {_short(commit)} of run {run_id} cannot be read "
                f"({exc}); the object database was edited or is damaged: run git fsck"
            ) from exc
        if len(parents) > 1:
            raise ProvenanceError(
                f"ledger commit {_short(commit)} of run {run_id} has {len(parents)} "
                "parents; a run's ledger is a single line of calls"
            )
        commit = parents[0] if parents else None
    if not commits:
        return Chain(run_id, principal or "", ())
    root = commits[-1]
    if principal is None:
        named = _trailers(root).get("Truss-Principal", [])
        if len(named) != 1 or not named[0]:
            raise ProvenanceError(
                f"the first ledger commit {_short(root)} of run {run_id} names no principal "
                "(Truss-Principal); it was not recorded by this version: start a new run id"
            )
        principal = named[0]
    if principal not in policy.config.roles()["agent"]:
        raise ProvenanceError(
            f"run {run_id} was started by {principal}, who does not hold the agent role in "
            "truss.toml [roles] now; its memos cannot be trusted"
        )
    total = len(commits)
    for depth, commit in enumerate(commits):
        seq = total - depth
        key = _signing_key(commit, run_id)
        if principal not in policy.signers.principals_for(key, "git"):
            who = ", ".join(policy.signers.principals_for(key, "git")) or "a key not allowed"
            raise ProvenanceError(
                f"ledger commit {_short(commit)} (call #{seq}) of run {run_id} is signed by "
                f"{who} ({key.fingerprint}), but {principal} started this run; only that "
                "principal's keys may extend it (give each agent its own run id)"
            )
        fields = _trailers(commit)
        if fields.get("Truss-Run") != [run_id]:
            raise ProvenanceError(
                f"ledger commit {_short(commit)} is not a call of run {run_id} "
                f"(Truss-Run: {', '.join(fields.get('Truss-Run', [])) or 'none'})"
            )
        if fields.get("Truss-Seq") != [str(seq)]:
            raise ProvenanceError(
                f"ledger commit {_short(commit)} of run {run_id} should record call #{seq} "
                f"(it has Truss-Seq: {', '.join(fields.get('Truss-Seq', [])) or 'none'}); the "
                "calls must count up from 1 without a gap"
            )
    return Chain(run_id, principal, tuple(commits))


def _signing_key(commit: pygit2.Commit, run_id: str) -> PublicKey:
    from ..signing import verify

    found = _KEYS.get(str(commit.id))
    if found is not None:
        return found
    signature, payload = commit.gpg_signature
    if signature is None:
        raise ProvenanceError(f"ledger commit {_short(commit)} of run {run_id} is unsigned")
    try:
        key = verify(signature.decode("ascii", "replace"), payload, "git")
    except TrussError as exc:
        raise ProvenanceError(f"ledger commit {_short(commit)}: {exc.message}") from exc
    if len(_KEYS) >= _KEYS_MAX:
        _KEYS.clear()
    _KEYS[str(commit.id)] = key
    return key


# -- rollback and fork ---------------------------------------------------------------------


def mark_path(git_dir: Path, run_id: str) -> Path:
    return git_dir / "truss" / MARK_FOLDER / run_id


def read_mark(git_dir: Path, run_id: str) -> Mark | None:
    path = mark_path(git_dir, run_id)
    try:
        raw = json.loads(path.read_bytes())
        return Mark(tip=str(raw["tip"]), seq=int(raw["seq"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ProvenanceError(
            f"{path} (the newest call this repository saw in run {run_id}) is unreadable; "
            "remove it only if you trust the ledger ref as it is now"
        ) from exc


def check_mark(git_dir: Path, ref: str, chain: Chain, mark: Mark | None) -> None:
    """Refuse a ledger that moved backwards from, or sideways off, the marked tip."""
    if mark is None:
        return
    undo = f"if you reset it on purpose, remove {mark_path(git_dir, chain.run)} or use a new run id"
    if chain.seq < mark.seq:
        where = f"is at call #{chain.seq}" if chain.seq else "is gone"
        raise ProvenanceError(
            f"{ref} {where}, but this repository recorded or verified call #{mark.seq} "
            f"({mark.tip[:12]}): the ledger was rolled back; {undo}"
        )
    if str(chain.at(mark.seq).id) != mark.tip:
        raise ProvenanceError(
            f"{ref} does not descend from {mark.tip[:12]} (call #{mark.seq}, which this "
            f"repository recorded or verified): the ledger was forked or rewritten; {undo}"
        )


def check_reflog(repo: pygit2.Repository, ref: str, chain: Chain) -> None:
    """Every commit the ref's reflog says it pointed at must be in today's chain."""
    import pygit2

    reference = repo.references.get(ref)
    if reference is None:
        return
    try:
        entries = list(reference.log())
    except (pygit2.GitError, KeyError, ValueError):
        return  # no reflog for this ref: the mark alone witnesses
    ids = {str(c.id) for c in chain.commits}
    tip = str(chain.tip.id) if chain.tip is not None else None
    for number, entry in enumerate(entries):
        new = str(entry.oid_new)
        if new in ids or set(new) == {"0"}:
            continue
        # git and libgit2 append to the reflog just before the ref itself moves: the newest
        # entry may name a call being recorded right now, from the tip we read.
        if number == 0 and str(entry.oid_old) == tip:
            continue
        raise ProvenanceError(
            f"the reflog of {ref} shows it at {new[:12]}, which its tip "
            f"{(tip or 'none')[:12]} does not descend from: the ledger was rolled back or forked"
        )


def raise_mark(git_dir: Path, run_id: str, tip: str, seq: int) -> None:
    """Record ``tip`` as the newest call seen, unless a newer one is recorded already."""
    from ..gitstore import _lock

    path = mark_path(git_dir, run_id)
    with _lock(git_dir, "runs.lock"):
        try:
            current = read_mark(git_dir, run_id)
        except ProvenanceError:
            current = None  # unreadable: replaced below by what we just verified
        if current is not None and current.seq >= seq:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        data = json.dumps({"run": run_id, "tip": tip, "seq": seq}).encode() + b"\n"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)


def ensure_reflog(git_dir: Path, ref: str) -> None:
    """Make git keep a reflog for ``ref``: git and libgit2 log a ref outside refs/heads only
    when its log file exists (or core.logAllRefUpdates=always)."""
    path = git_dir / "logs" / ref
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def _trailers(commit: pygit2.Commit) -> dict[str, list[str]]:
    from ..store import parse_trailers

    return parse_trailers(commit.message)


def _short(commit: pygit2.Commit) -> str:
    return str(commit.id)[:12]
