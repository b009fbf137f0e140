"""Erasure, carried out: rewrite history without the erased entries, record it, forget it.

``erase.plan_erasure`` finds every place the text lives; this module removes it
(docs/forgetting.md is the design). Under the store's writer lock:

1. every commit reachable from a branch or tag (or any other ref but the run ledgers, the
   attestations and remote-tracking refs) whose tree holds an erased entry's file, and every
   descendant, is made again without those files: same message, same author, plus the
   trailers ``Truss-Rewritten-From`` and ``Truss-Original-Signer``, signed by the operator;
2. one operator-signed commit on the store's branch adds ``.truss/erasures/<id>.json`` --
   who, when, which ids and why, the last commit kept as it was, the old tip and the map of
   original to rewritten commits, never the text -- and the whole new history is audited from
   the trust root (``trust/erasures.py``'s rules) before any ref moves;
3. the run ledgers whose calls or memos hold an erased id or text are rewritten the same
   way, each such file replaced by ``{"erased": <erasure id>, "sha256": <the original's>}``;
4. the refs move, the attestations on replaced commits go, remote-tracking refs that hold
   the old history go (the next ``sync`` pushes the erasure; ``adoption.py`` is how the
   other clones take it), the caches under
   ``.git/truss/`` go (they rebuild), usage lines naming an erased id go, the work tree
   follows, and ``git reflog expire --expire=now --all`` and ``git gc --prune=now`` drop
   every object that held the text.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2

from ..errors import StoreError, TrussError, UsageError
from ..format.trailers import parse_trailers, stamp, trailers
from ..git.gitlocks import flock
from ..git.gitstore import Snapshot
from ..git.usage import USAGE_FILE
from ..trust.attest import NOTES_REF, read_notes
from ..trust.audit import audit
from ..trust.erasures import (
    ORIGINAL_SIGNER,
    REWRITTEN_FROM,
    UNSIGNED,
    Record,
    erased_tree,
    policy_of,
    record_path,
    signer_of,
)
from .erase import RUNS_PREFIX, needles_of, plan_erasure

if TYPE_CHECKING:
    from ..git.gitstore import GitStore
    from .store import Store

__all__ = ["Erased", "Rewrite", "build", "erase", "forget_objects"]

# Refs that are not history of the store: the ledgers are rewritten on their own (step 3),
# the attestations name commits rather than hold them, and remote-tracking refs are dropped.
_OWN_WAY = (RUNS_PREFIX, "refs/notes/", "refs/remotes/")
# Files under .git/truss/ that are no cache: held locks, crash journals, usage (filtered).
_KEEP = {"pending", USAGE_FILE}


@dataclass(frozen=True)
class Erased:
    """What one erasure did."""

    record: Record
    commit: str  # the record's commit, the store branch's new tip
    refs: Mapping[str, str]  # ref -> its new target
    dropped: tuple[str, ...]  # refs removed (remote-tracking refs holding the old history)
    attestations: int  # notes removed from replaced commits

    def to_dict(self) -> dict[str, Any]:
        return {
            "erasure": self.record.id,
            "commit": self.commit,
            "ids": list(self.record.ids),
            "rewritten": len(self.record.rewritten),
            "refs": dict(self.refs),
            "ledgers": dict(self.record.ledgers),
            "dropped": list(self.dropped),
            "attestations": self.attestations,
            "record": record_path(self.record.id),
        }

    def text(self) -> str:
        n = len(self.record.ids)
        lines = [
            f"erased {n} entr{'y' if n == 1 else 'ies'} as erasure {self.record.id} "
            f"({len(self.record.rewritten)} commit(s) rewritten; record "
            f"{record_path(self.record.id)} in {self.commit[:12]})",
        ]
        lines += [f"  moved   {ref} -> {new[:12]}" for ref, new in sorted(self.refs.items())]
        lines += [f"  dropped {ref}" for ref in self.dropped]
        lines += [f"  ledger  {ref} rewritten" for ref in sorted(self.record.ledgers)]
        if self.attestations:
            lines.append(f"  removed {self.attestations} attestation(s) of replaced commits")
        lines.append("run `truss-files sync` to take the erasure to the remote and its clones")
        return "\n".join(lines)


def erase(store: Store, refs: Sequence[str], reason: str, *, member: str | None = None) -> Erased:
    """Erase the entries ``refs`` (with ``member``, every entry by or about that member) from
    this repository for good; operators only (``Forbidden`` before anything is read)."""
    plan = plan_erasure(store, refs, reason, member=member)
    holders = sorted({p.name for p in plan.places if p.kind == "entry"})
    if holders:
        raise UsageError(
            "other entries hold the erased text: "
            + ", ".join(h[:12] for h in holders)
            + "; name them in the erasure too (an erasure says everything it erases). "
            "Nothing was changed"
        )
    git = store.git
    with flock(git.git_dir, "write.lock", wait=git.LOCK_WAIT):
        done = _erase_locked(store, plan.ids, plan.reason, plan.by)
    forget_objects(git, dict(store.environ))
    return done


@dataclass
class _Built:
    """An erasure's new commits, made but not yet landed (no ref has moved)."""

    record: Record
    top: pygit2.Oid
    branch: str
    old_tip: pygit2.Commit
    history: dict[str, pygit2.Commit]
    ledgers: dict[str, tuple[str, str]]


def _erase_locked(store: Store, ids: tuple[str, ...], reason: str, by: str) -> Erased:
    built = build(store, ids, reason, by)
    report = audit(store.git, str(built.top), environ=store.environ, attestations=False)
    if not report.ok:
        raise StoreError(
            "the rewritten history would fail the audit; nothing was changed:\n"
            + "\n".join(f"  {v}" for v in report.violations[:20])
        )
    return _land(store, built)


def build(
    store: Store,
    ids: Sequence[str],
    reason: str,
    by: str,
    *,
    recorded: Sequence[str] | None = None,
    rewrite: type[Rewrite] | None = None,
) -> _Built:
    """Make the rewritten commits, the ledgers' and the record's commit, signed by the
    store's key; move nothing. ``recorded`` (default ``ids``) and ``rewrite`` are what a test
    forges an erasure with: a record listing fewer ids than were removed, a rewrite that
    changes more than it should."""
    git = store.git
    repo = git.repo
    branch = git.branch
    old_tip = git.tip(branch)
    if old_tip is None:
        raise UsageError("the branch has no commits yet: nothing to erase")
    identity = store.identity(by)
    at = stamp(store.clock())
    listed = tuple(sorted(recorded if recorded is not None else ids))
    erasure_id = Record.make_id(by, at, listed, str(old_tip.id))
    history = history_refs(repo)
    rewriter = (rewrite or Rewrite)(repo, set(ids), store, identity)
    for commit in _walk(repo, [c.id for c in history.values()]):
        rewriter.commit(commit)
    if str(old_tip.id) not in rewriter.map:
        raise UsageError("no commit of the store's branch holds the entries: nothing to erase")
    ledgers = rewrite_ledgers(store, set(ids), erasure_id, identity)
    record = Record(
        id=erasure_id,
        by=by,
        at=at,
        ids=listed,
        reason=reason,
        base=_base(repo, old_tip, rewriter.map),
        old_tip=str(old_tip.id),
        rewritten=dict(rewriter.map),
        ledgers={ref: new for ref, (_, new) in ledgers.items()},
    )
    new_tip = repo[rewriter.map[str(old_tip.id)]]
    assert isinstance(new_tip, pygit2.Commit)
    n = len(listed)
    message = f"truss: erase {n} entr{'y' if n == 1 else 'ies'}\n\n" + trailers(
        op="erase", erasure=erasure_id
    )
    tree = git.write_tree(new_tip.tree, {record_path(erasure_id): record.render()})
    assert tree is not None
    top = git.make_commit(tree, [new_tip.id], message, store.signer, identity)
    return _Built(record, top, branch, old_tip, history, ledgers)


def _land(store: Store, built: _Built) -> Erased:
    git = store.git
    record = built.record
    moved = _move_refs(
        store, built.history, record.rewritten, built.branch, built.old_tip, built.top
    )
    for ref, (old, new) in built.ledgers.items():
        if not git.update_ref(ref, pygit2.Oid(hex=old), pygit2.Oid(hex=new), "truss-files: erase"):
            raise StoreError(f"{ref} moved while it was being rewritten; run the erasure again")
    rewritten = set(record.rewritten)
    dropped = drop_remote_refs(git.repo, rewritten)
    removed = drop_notes(git, dict(store.environ), rewritten)
    runs = [ref.removeprefix(RUNS_PREFIX) for ref in built.ledgers]
    clean_caches(git.git_dir, set(record.ids), runs)
    return Erased(record, str(built.top), moved, tuple(dropped), removed)


def forget_objects(git: GitStore, env: Mapping[str, str]) -> None:
    """Expire every reflog and prune every unreachable object now: nothing that held the
    erased text stays in ``.git`` (ORIG_HEAD and FETCH_HEAD name old commits, so they go)."""
    for name in ("ORIG_HEAD", "FETCH_HEAD"):
        (git.git_dir / name).unlink(missing_ok=True)
    cwd = git.workdir or git.git_dir
    for args in (
        ("reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all"),
        ("-c", "gc.cruftPacks=false", "gc", "--prune=now", "--quiet"),
    ):
        proc = subprocess.run(
            ["git", *args], cwd=cwd, env=dict(env), capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise StoreError(
                f"git {' '.join(args)} failed: {proc.stderr.strip()}; the erased text may "
                "still be in unreachable objects: run it by hand"
            )


# -- rewriting the history -------------------------------------------------------------------


def history_refs(repo: pygit2.Repository) -> dict[str, pygit2.Commit]:
    out: dict[str, pygit2.Commit] = {}
    for name in sorted(repo.references):
        if not name.startswith("refs/") or name.startswith(_OWN_WAY):
            continue
        try:
            out[name] = repo.references[name].peel(pygit2.Commit)
        except (pygit2.GitError, ValueError, KeyError):
            continue
    return out


def _walk(repo: pygit2.Repository, tips: Iterable[pygit2.Oid]) -> list[pygit2.Commit]:
    walker = repo.walk(None, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    for tip in tips:
        walker.push(tip)
    return list(walker)


class Rewrite:
    """Each commit made again without the erased files, parents first."""

    def __init__(self, repo: pygit2.Repository, ids: set[str], store: Store, identity: Any) -> None:
        self.repo, self.ids, self.store, self.identity = repo, ids, store, identity
        self.map: dict[str, str] = {}

    def tree(self, commit: pygit2.Commit) -> pygit2.Oid:
        return erased_tree(self.repo, commit.tree, self.ids)

    def commit(self, commit: pygit2.Commit) -> None:
        parents = [pygit2.Oid(hex=self.map.get(str(p), str(p))) for p in commit.parent_ids]
        tree = self.tree(commit)
        if tree == commit.tree.id and parents == list(commit.parent_ids):
            return  # before the first erased commit: kept as it was, signature and all
        fields = parse_trailers(commit.message)
        original = (fields.get(ORIGINAL_SIGNER) or [self.original_signer(commit)])[0]
        message = (
            _strip_rewrite_trailers(commit.message).rstrip("\n")
            + "\n"
            + trailers(rewritten_from=str(commit.id), original_signer=original)
        )
        git = self.store.git
        who = self.identity.signature()
        content: str = self.repo.create_commit_string(  # type: ignore[assignment]
            commit.author, who, message, tree, list[str | pygit2.Oid](parents)
        )
        armored = self.store.signer.sign(content.encode("utf-8"), "git")
        new = git.repo.create_commit_with_signature(content, armored, "gpgsig")
        self.map[str(commit.id)] = str(new)

    def original_signer(self, commit: pygit2.Commit) -> str:
        judge = commit.parents[0] if commit.parents else commit
        try:
            principals, _ = signer_of(policy_of(judge), commit)
        except TrussError:
            return UNSIGNED
        return principals[0] if principals else UNSIGNED


def _strip_rewrite_trailers(message: str) -> str:
    drop = (f"{REWRITTEN_FROM}: ", f"{ORIGINAL_SIGNER}: ")
    return "\n".join(line for line in message.split("\n") if not line.startswith(drop))


def _base(repo: pygit2.Repository, tip: pygit2.Commit, rewritten: Mapping[str, str]) -> str | None:
    """The last commit of the branch's first-parent line kept as it was."""
    commit: pygit2.Commit | None = tip
    while commit is not None and str(commit.id) in rewritten:
        commit = commit.parents[0] if commit.parents else None
    return str(commit.id) if commit is not None else None


def _move_refs(
    store: Store,
    history: Mapping[str, pygit2.Commit],
    rewritten: Mapping[str, str],
    branch: str,
    old_tip: pygit2.Commit,
    top: pygit2.Oid,
) -> dict[str, str]:
    git = store.git
    repo = git.repo
    moved: dict[str, str] = {}
    changes: dict[str, bytes | None] = {}
    for delta in old_tip.tree.diff_to_tree(repo[top].peel(pygit2.Tree)).deltas:
        if delta.status_char() == "D":
            changes[delta.old_file.path] = None
        else:
            blob = repo[delta.new_file.id]
            assert isinstance(blob, pygit2.Blob)
            changes[delta.new_file.path] = blob.data
    checked_out = git._checked_out(branch)
    if checked_out:
        git._check_worktree(Snapshot(repo, old_tip), changes)
    if not git.update_ref(branch, old_tip.id, top, "truss-files: erase"):
        raise StoreError(f"{branch} moved while the erasure was made; nothing was changed")
    moved[branch] = str(top)
    if checked_out:
        git._sync_worktree(changes)
    for name, target in history.items():
        new = rewritten.get(str(target.id))
        if name == branch or new is None:
            continue
        ref = repo.references[name]
        obj = repo[ref.target]
        if isinstance(obj, pygit2.Tag):  # an annotated tag: made again, unsigned
            tagger = obj.tagger
            ref.delete()
            oid = repo.create_tag(
                name.removeprefix("refs/tags/"),
                pygit2.Oid(hex=new),
                pygit2.enums.ObjectType.COMMIT,
                tagger,
                _strip_signature(obj.message),
            )
            moved[name] = str(oid)
        else:
            ref.set_target(pygit2.Oid(hex=new), "truss-files: erase")
            moved[name] = new
    return moved


def _strip_signature(message: str) -> str:
    cut = message.find("-----BEGIN ")
    return message[:cut] if cut >= 0 else message


def drop_remote_refs(repo: pygit2.Repository, rewritten: set[str]) -> list[str]:
    dropped = []
    for name in sorted(repo.references):
        if not name.startswith("refs/remotes/"):
            continue
        try:
            target = repo.references[name].peel(pygit2.Commit)
        except (pygit2.GitError, ValueError, KeyError):
            continue  # a symbolic ref (origin/HEAD) follows its target
        if str(target.id) in rewritten:
            repo.references.delete(name)
            dropped.append(name)
    return dropped


def drop_notes(git: GitStore, env: Mapping[str, str], rewritten: set[str]) -> int:
    if NOTES_REF not in git.repo.references:
        return 0
    gone = sorted(set(read_notes(git.repo)) & rewritten)
    if not gone:
        return 0
    proc = subprocess.run(
        ["git", "notes", f"--ref={NOTES_REF}", "remove", "--ignore-missing", *gone],
        cwd=git.workdir or git.git_dir,
        env=dict(env),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise StoreError(f"could not remove the attestations of replaced commits: {proc.stderr}")
    return len(gone)


# -- the run ledgers ---------------------------------------------------------------------------


def rewrite_ledgers(
    store: Store, ids: set[str], erasure_id: str, identity: Any, snap: Snapshot | None = None
) -> dict[str, tuple[str, str]]:
    """ref -> (old tip, new tip) for each run ledger a call or memo of which names an erased
    id or holds an erased text (the entries as ``snap`` holds them, default the tip); the new
    commits are made but no ref moves."""
    repo = store.git.repo
    snap = snap or store.snapshot()
    texts = [e.body for e in store.iter_entries(snap) if e.id in ids and len(e.body) >= 12]
    needles = needles_of(ids, texts)
    out: dict[str, tuple[str, str]] = {}
    for name in sorted(repo.references):
        if not name.startswith(RUNS_PREFIX):
            continue
        try:
            tip = repo.references[name].peel(pygit2.Commit)
        except (pygit2.GitError, ValueError, KeyError):
            continue
        mapped: dict[str, str] = {}
        for commit in _walk(repo, [tip.id]):
            parents = [pygit2.Oid(hex=mapped.get(str(p), str(p))) for p in commit.parent_ids]
            tree = _scrub(repo, commit.tree, needles, erasure_id)
            if tree == commit.tree.id and parents == list(commit.parent_ids):
                continue
            message = (
                _strip_rewrite_trailers(commit.message).rstrip("\n")
                + "\n"
                + trailers(rewritten_from=str(commit.id), erasure=erasure_id)
            )
            content: str = repo.create_commit_string(  # type: ignore[assignment]
                commit.author, identity.signature(), message, tree, list[str | pygit2.Oid](parents)
            )
            armored = store.signer.sign(content.encode("utf-8"), "git")
            mapped[str(commit.id)] = str(
                repo.create_commit_with_signature(content, armored, "gpgsig")
            )
        if str(tip.id) in mapped:
            out[name] = (str(tip.id), mapped[str(tip.id)])
    return out


def _scrub(
    repo: pygit2.Repository, tree: pygit2.Tree, needles: list[bytes], erasure_id: str
) -> pygit2.Oid:
    builder = repo.TreeBuilder(tree)
    for item in tree:
        obj, name = repo[item.id], item.name or ""
        if isinstance(obj, pygit2.Tree):
            sub = _scrub(repo, obj, needles, erasure_id)
            if sub != obj.id:
                builder.insert(name, sub, pygit2.enums.FileMode.TREE)
        elif isinstance(obj, pygit2.Blob) and any(n in obj.data for n in needles):
            stand_in = {"erased": erasure_id, "sha256": hashlib.sha256(obj.data).hexdigest()}
            data = json.dumps(stand_in, sort_keys=True).encode() + b"\n"
            builder.insert(name, repo.create_blob(data), pygit2.enums.FileMode.BLOB)
    return builder.write()


# -- what lives outside git ---------------------------------------------------------------------


def clean_caches(git_dir: Path, ids: set[str], runs: list[str]) -> None:
    folder = git_dir / "truss"
    if not folder.is_dir():
        return
    usage = folder / USAGE_FILE
    if usage.is_file():
        lines = usage.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        usage.write_text("".join(x for x in lines if not any(i in x for i in ids)), "utf-8")
    for run in runs:  # the newest call seen of a rewritten ledger names a replaced commit
        (folder / "runs" / run).unlink(missing_ok=True)
    for path in folder.iterdir():
        if path.name in _KEEP or path.name == "runs" or path.name.endswith(".lock"):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
