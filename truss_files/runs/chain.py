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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ProvenanceError, TrussError
from ..format.trailers import parse_trailers

if TYPE_CHECKING:
    import pygit2

    from ..signing import PublicKey
    from ..signing.trustpolicy import TrustPolicy

MARK_FOLDER = "runs"


@dataclass(frozen=True)
class LedgerCommit:
    """What one ledger commit says: its parents, its trailers, the key that signed it.

    Read once per process and kept: a commit id names fixed content, so its signature is
    checked once and a run's later calls only walk ids. Roles and principals are
    judged against the current policy on every check, never kept.
    """

    id: str
    parents: tuple[str, ...]
    fields: dict[str, list[str]]
    key: PublicKey
    fingerprint: str  # the key's, computed once (it hashes the key blob)


# Commit id -> its LedgerCommit; bounded so a long-lived server cannot grow it without end.
_LINKS: dict[str, LedgerCommit] = {}
_LINKS_MAX = 200_000
# (repository, run) -> the newest chain verified in this process and the policy object it
# was judged by: a call's check then looks at its own new commits only, not the whole run.
_LATEST: dict[tuple[str, str], tuple[TrustPolicy, Chain]] = {}


@dataclass(frozen=True)
class Chain:
    """A run's ledger after ``check_chain``: newest call first, all by ``principal``."""

    run: str
    principal: str
    links: tuple[LedgerCommit, ...]
    repo: pygit2.Repository | None = field(default=None, compare=False, repr=False)

    @property
    def seq(self) -> int:
        return len(self.links)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(link.id for link in self.links)

    @property
    def commits(self) -> tuple[pygit2.Commit, ...]:
        return tuple(self.commit(link.id) for link in self.links)

    @property
    def tip(self) -> pygit2.Commit | None:
        return self.commit(self.links[0].id) if self.links else None

    def at(self, seq: int) -> pygit2.Commit:
        """The commit that recorded call ``seq`` (1-based)."""
        return self.commit(self.links[self.seq - seq].id)

    def commit(self, oid: str) -> pygit2.Commit:
        assert self.repo is not None
        found: pygit2.Commit = self.repo[oid]  # type: ignore[assignment]
        return found


@dataclass(frozen=True)
class Mark:
    """The newest ledger tip this repository recorded or verified for one run."""

    tip: str
    seq: int


def check_chain(
    repo: pygit2.Repository,
    policy: TrustPolicy,
    run_id: str,
    tip: pygit2.Commit | None,
    principal: str | None = None,
) -> Chain:
    """The verified ledger ending at ``tip``; raises ProvenanceError on the first broken rule.

    ``principal`` is the run's principal when the caller already knows it (a commit about to
    extend a verified chain); otherwise the first commit names it.
    """
    links: list[LedgerCommit] = []
    known = _LATEST.get((repo.path, run_id))
    below: Chain | None = None  # a verified chain the walk reached, judged by this policy
    oid = str(tip.id) if tip is not None else None
    while oid is not None:
        if known is not None and known[0] is policy and known[1].links[0].id == oid:
            below = known[1]
            break
        link = _LINKS.get(oid) or _read_link(repo, oid, run_id)
        links.append(link)
        if len(link.parents) > 1:
            raise ProvenanceError(
                f"ledger commit {oid[:12]} of run {run_id} has {len(link.parents)} "
                "parents; a run's ledger is a single line of calls"
            )
        oid = link.parents[0] if link.parents else None
    if below is not None:
        if principal is not None and principal != below.principal:
            raise ProvenanceError(
                f"run {run_id} was started by {below.principal}, not {principal}; only that "
                "principal's keys may extend it (give each agent its own run id)"
            )
        principal = below.principal
    if not links and below is None:
        return Chain(run_id, principal or "", (), repo)
    if principal is None:
        named = links[-1].fields.get("Truss-Principal", [])
        if len(named) != 1 or not named[0]:
            raise ProvenanceError(
                f"the first ledger commit {links[-1].id[:12]} of run {run_id} names no "
                "principal (Truss-Principal); it was not recorded by this version: start a "
                "new run id"
            )
        principal = named[0]
    if principal not in policy.config.roles()["agent"]:
        raise ProvenanceError(
            f"run {run_id} was started by {principal}, who does not hold the agent role in "
            "truss.toml [roles] now; its memos cannot be trusted"
        )
    speaks: dict[str, tuple[str, ...]] = {}  # key fingerprint -> its principals, asked once
    total = len(links) + (below.seq if below is not None else 0)
    for depth, link in enumerate(links):
        seq = total - depth
        names = speaks.get(link.fingerprint)
        if names is None:
            names = policy.signers.principals_for(link.key, "git")
            speaks[link.fingerprint] = names
        if principal not in names:
            raise ProvenanceError(
                f"ledger commit {link.id[:12]} (call #{seq}) of run {run_id} is signed by "
                f"{', '.join(names) or 'a key not allowed'} ({link.fingerprint}), but "
                f"{principal} started this run; only that principal's keys may extend it "
                "(give each agent its own run id)"
            )
        if link.fields.get("Truss-Run") != [run_id]:
            raise ProvenanceError(
                f"ledger commit {link.id[:12]} is not a call of run {run_id} "
                f"(Truss-Run: {', '.join(link.fields.get('Truss-Run', [])) or 'none'})"
            )
        if link.fields.get("Truss-Seq") != [str(seq)]:
            raise ProvenanceError(
                f"ledger commit {link.id[:12]} of run {run_id} should record call #{seq} (it "
                f"has Truss-Seq: {', '.join(link.fields.get('Truss-Seq', [])) or 'none'}); "
                "the calls must count up from 1 without a gap"
            )
    chain = Chain(run_id, principal, tuple(links) + (below.links if below else ()), repo)
    _LATEST[(repo.path, run_id)] = (policy, chain)
    return chain


def _read_link(repo: pygit2.Repository, oid: str, run_id: str) -> LedgerCommit:
    # pygit2 and the signing stack (cryptography) stay off the cold read path.
    import pygit2

    from ..signing import verify

    try:
        commit = repo[oid]
    except (KeyError, ValueError, pygit2.GitError) as exc:
        # libgit2 checks an object's hash as it reads it: an edited object lands here.
        raise ProvenanceError(
            f"ledger commit {oid[:12]} of run {run_id} cannot be read ({exc}); the object "
            "database was edited or is damaged: run git fsck"
        ) from exc
    if not isinstance(commit, pygit2.Commit):
        raise ProvenanceError(f"{oid[:12]} in the ledger of run {run_id} is not a commit")
    signature, payload = commit.gpg_signature
    if signature is None:
        raise ProvenanceError(f"ledger commit {oid[:12]} of run {run_id} is unsigned")
    try:
        key = verify(signature.decode("ascii", "replace"), payload, "git")
    except TrussError as exc:
        raise ProvenanceError(f"ledger commit {oid[:12]}: {exc.message}") from exc
    parents = tuple(str(p) for p in commit.parent_ids)
    link = LedgerCommit(oid, parents, parse_trailers(commit.message), key, key.fingerprint)
    if len(_LINKS) >= _LINKS_MAX:
        _LINKS.clear()
    _LINKS[oid] = link
    return link


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
    if chain.links[chain.seq - mark.seq].id != mark.tip:
        raise ProvenanceError(
            f"{ref} does not descend from {mark.tip[:12]} (call #{mark.seq}, which this "
            f"repository recorded or verified): the ledger was forked or rewritten; {undo}"
        )


def check_reflog(repo: pygit2.Repository, ref: str, chain: Chain) -> None:
    """Every commit the ref's reflog says it pointed at must be in today's chain."""
    # pygit2 stays off the cold read path this module is on.
    import pygit2

    reference = repo.references.get(ref)
    if reference is None:
        return
    try:
        entries = list(reference.log())
    except (pygit2.GitError, KeyError, ValueError):
        return  # no reflog for this ref: the mark alone witnesses
    ids = set(chain.ids)
    tip = chain.ids[0] if chain.links else None
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
    # The lock (gitlocks: random, a dataclass) is only for a durable run, not a cold read.
    from ..git.gitlocks import flock

    path = mark_path(git_dir, run_id)
    with flock(git_dir, "runs.lock"):
        try:
            current = read_mark(git_dir, run_id)
        except ProvenanceError:
            current = None  # unreadable: replaced below by what we just verified
        if current is not None and current.seq >= seq:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        data = json.dumps({"run": run_id, "tip": tip, "seq": seq}).encode() + b"\n"
        # Written whole and renamed into place, so a reader never sees half a mark. Not
        # fsynced: libgit2 does not fsync the ref either, and a mark that outlived its ref
        # through a power cut would refuse an honest run as rolled back.
        tmp.write_bytes(data)
        os.replace(tmp, path)


def ensure_reflog(git_dir: Path, ref: str) -> None:
    """Make git keep a reflog for ``ref``: git and libgit2 log a ref outside refs/heads only
    when its log file exists (or core.logAllRefUpdates=always)."""
    path = git_dir / "logs" / ref
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
