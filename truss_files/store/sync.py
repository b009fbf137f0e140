"""``truss-files sync``: fetch, audit what came in, integrate, push by compare-and-swap.

Git is the distributed engine. A sync fetches the remote branch, audits every
incoming commit before anything local moves, then integrates: nothing to do, a fast-forward,
or a signed merge commit whose tree is the two sides merged with the merge driver's rules
(entry files changed on both sides are settled by ``merge.merge_entry``, never by a text
merge; the same event trained on both sides joins to one note, see ``join``). The merge
commit is checked like every commit the library makes before the branch moves. The push is
a compare-and-swap (``--force-with-lease=<ref>:<what we fetched>``): if another writer got
there first, we fetch again and retry; if the remote refuses for any other reason (its
pre-receive hook), we stop and say why.

An operator's erasure (``erasing.py``, ``adoption.py``) crosses by force, and only when its
record says so: a branch whose erasure replaced every commit the remote holds beyond it is
pushed with a lease on the remote's old tip; a remote tip holding an erasure record this
branch lacks is audited (the record's operator signature, each rewritten commit against its
original, still at hand here) and adopted, with the local commits made on the old history
since replayed on top. Incoming history that an erasure here replaced is refused.
"""

from __future__ import annotations

import dataclasses
import random
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pygit2

from ..errors import ConflictError, StoreError, TrussError, UsageError
from ..format.trailers import trailers
from ..git.gitstore import GitStore, Snapshot
from ..review.merge import merge_entry
from ..trust.attest import NOTES_REF, notes_of, read_notes
from ..trust.audit import audit, check_commit, check_note
from . import adoption, erasing
from .store import Store

MAX_ATTEMPTS = 8


@dataclass(frozen=True)
class SyncResult:
    remote: str
    branch: str
    integrated: str  # none, fast-forward, merge or erasure (pushed or adopted: erasing.py)
    pushed: bool
    before: str | None
    head: str | None
    incoming: int  # remote commits audited before integrating
    attempts: int
    merged_paths: tuple[str, ...]
    notes: tuple[str, ...]

    def summary(self) -> str:
        what = {
            "none": "nothing to integrate",
            "fast-forward": "fast-forwarded",
            "merge": f"merged ({len(self.merged_paths)} entry file(s) settled by the driver)",
            "erasure": "took an erasure across (the old history is gone here)",
        }[self.integrated]
        pushed = "pushed" if self.pushed else "nothing to push"
        head = (self.head or "-")[:12]
        tries = f" after {self.attempts} attempts" if self.attempts > 1 else ""
        return f"{self.remote} {self.branch}: {what}; {pushed}{tries}; now at {head}"


def sync(
    store: Store,
    remote: str = "origin",
    *,
    max_attempts: int = MAX_ATTEMPTS,
    root: str | None = None,
    before_push: Callable[[int], None] | None = None,
) -> SyncResult:
    """Bring the store's branch and ``remote``'s in line; see the module docstring.

    ``before_push(attempt)`` runs just before each push: a seam for tests that make another
    writer win the race. The sigstore attestations (``refs/notes/truss-sigstore``) travel
    too: fetched, checked, merged (ours wins where both sides attest one commit) and pushed.
    """
    result = _sync_branch(store, remote, max_attempts, root, before_push)
    moved = _sync_notes(store, _Git(store.git, dict(store.environ)), remote)
    if moved:
        result = dataclasses.replace(result, notes=(*result.notes, moved))
    return result


def _sync_branch(
    store: Store,
    remote: str,
    max_attempts: int,
    root: str | None,
    before_push: Callable[[int], None] | None,
) -> SyncResult:
    git = store.git
    env = dict(store.environ)
    ref = git.branch
    remote_ref = _upstream(git, ref, remote)
    short = remote_ref.removeprefix("refs/heads/")
    tracking = f"refs/remotes/{remote}/{short}"
    runner = _Git(git, env)
    notes: list[str] = []
    incoming = 0
    before = git.tip(ref)
    integrated = "none"
    merged_paths: tuple[str, ...] = ()
    for attempt in range(1, max_attempts + 1):
        runner.run(
            "fetch", "--quiet", "--no-tags", "--prune", remote,
            f"+refs/heads/*:refs/remotes/{remote}/*",
        )  # fmt: skip
        theirs = git.tip(tracking)
        local = git.tip(ref)
        new = local
        adopted = False
        if theirs is not None and local is not None and not _contains(git.repo, local, theirs):
            # An erasure made here overwrites the history the remote still holds (push with
            # a lease on it); one made there is adopted after its record checks out.
            if adoption.pushed_erasure(git.repo, local, theirs) is not None:
                ok, output = runner.push(remote, str(local.id), remote_ref, str(theirs.id))
                if not ok:
                    raise StoreError(f"{remote} refused the erasure of {ref}:\n{output.strip()}")
                erasing.forget_objects(git, env)  # the fetch brought the old history back
                notes.append(f"pushed the erasure to {remote}; the old history is gone here")
                return _result(
                    remote, ref, "erasure", True, before, local, incoming, attempt, (), notes
                )
            replayed = adoption.replayed_by(git.repo, local, theirs)
            if replayed:
                raise StoreError(f"refusing to integrate {remote}: {replayed}")
            record = adoption.adopted_erasure(git.repo, local, theirs)
            if record is not None:
                incoming += _audit_incoming(git, local, theirs, remote, root, env, notes)
                new = adoption.replay_local(store, record, local, theirs)
                if not _move(git, ref, local, new):
                    continue
                notes.extend(adoption.adopt(store, record))
                notes.append(
                    f"adopted erasure {record.id} ({record.by}, {record.at}: "
                    f"{len(record.ids)} entr{'y' if len(record.ids) == 1 else 'ies'})"
                )
                integrated, adopted = "erasure", True  # then push what was replayed, if any
        if not adopted and theirs is not None and not _contains(git.repo, local, theirs):
            incoming += _audit_incoming(git, local, theirs, remote, root, env, notes)
            if local is None or git.repo.descendant_of(theirs.id, local.id):
                new, step = theirs, "fast-forward"
            else:
                new, merged_paths = _merge(store, local, theirs, f"{remote}/{short}")
                step = "merge"
            if not _move(git, ref, local, new):
                continue  # a local writer moved the branch meanwhile: start over
            integrated = "merge" if "merge" in (step, integrated) else step
        if new is None or (theirs is not None and new.id == theirs.id):
            return _result(
                remote, ref, integrated, False, before, new, incoming, attempt, merged_paths, notes
            )
        if before_push is not None:
            before_push(attempt)
        expected = str(theirs.id) if theirs is not None else ""
        ok, output = runner.push(remote, str(new.id), remote_ref, expected)
        if ok:
            return _result(
                remote, ref, integrated, True, before, new, incoming, attempt, merged_paths, notes
            )
        if runner.remote_tip(remote, remote_ref) == (expected or None):
            raise StoreError(f"{remote} refused the push of {ref}:\n{output.strip()}")
        # Lost the race to another writer: back off with jitter, fetch and integrate again.
        time.sleep(min(0.5, 0.01 * 2**attempt) * (0.5 + random.random()))
    raise ConflictError(
        f"{remote} kept moving under {max_attempts} attempts to sync; run `truss-files sync` again"
    )


def _sync_notes(store: Store, runner: _Git, remote: str) -> str | None:
    """Fetch, check and merge the remote's attestations, then push ours; a note that does
    not verify stops the sync before it reaches the local notes ref."""
    repo = store.git.repo
    tracking = f"refs/notes/remotes/{remote}/truss-sigstore"
    # A pattern, so a remote without attestations is no error: one fetch, no ls-remote.
    runner.run("fetch", "--quiet", "--no-tags", remote, f"+{NOTES_REF}*:{tracking}*")
    found_ref = repo.references.get(tracking)
    theirs = str(found_ref.target) if found_ref is not None else None
    ours = read_notes(repo)
    if theirs is not None:
        found = []
        for cid, blob in notes_of(repo, theirs).items():
            if ours.get(cid) == blob:
                continue
            try:
                commit = repo[cid].peel(pygit2.Commit)
            except (KeyError, ValueError, pygit2.GitError):
                continue  # a commit we do not hold is not ours to judge
            found.extend(check_note(repo, commit, blob))
        if found:
            raise StoreError(
                f"{remote}'s {NOTES_REF} holds attestations that do not verify; nothing of it "
                "was merged:\n" + "\n".join(str(v) for v in found)
            )
        local = repo.references.get(NOTES_REF)
        if local is None:
            repo.references.create(NOTES_REF, theirs)
        elif str(local.target) != theirs and not repo.descendant_of(local.target, theirs):
            runner.run("notes", f"--ref={NOTES_REF}", "merge", "--quiet", "-s", "ours", tracking)
    local = repo.references.get(NOTES_REF)
    if local is None or str(local.target) == theirs:
        return None
    proc = runner._call("push", "--porcelain", remote, f"{NOTES_REF}:{NOTES_REF}")
    if proc.returncode != 0:
        raise StoreError(
            f"{remote} refused the push of {NOTES_REF}:\n{(proc.stdout + proc.stderr).strip()}"
        )
    return f"pushed the sigstore attestations ({NOTES_REF})"


def _result(
    remote: str,
    ref: str,
    integrated: str,
    pushed: bool,
    before: pygit2.Commit | None,
    head: pygit2.Commit | None,
    incoming: int,
    attempts: int,
    merged_paths: tuple[str, ...],
    notes: list[str],
) -> SyncResult:
    return SyncResult(
        remote=remote,
        branch=ref,
        integrated=integrated,
        pushed=pushed,
        before=str(before.id) if before is not None else None,
        head=str(head.id) if head is not None else None,
        incoming=incoming,
        attempts=attempts,
        merged_paths=merged_paths,
        notes=tuple(dict.fromkeys(notes)),
    )


class _Git:
    """The git CLI for the network half: it knows the user's remotes, credentials and ssh."""

    def __init__(self, git: GitStore, env: Mapping[str, str]) -> None:
        self.cwd = git.workdir or git.git_dir
        self.env = dict(env)

    def _call(self, *args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                ["git", *args],
                cwd=self.cwd,
                env=self.env,
                capture_output=True,
                text=True,
                check=False,
                timeout=600,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StoreError(f"could not run git {args[0]}: {exc}") from exc

    def run(self, *args: str) -> str:
        proc = self._call(*args)
        if proc.returncode != 0:
            raise StoreError(
                f"git {' '.join(args[:4])} failed: {proc.stderr.strip()}; check the remote "
                "with `git remote -v`"
            )
        return proc.stdout

    def push(self, remote: str, new: str, remote_ref: str, expected: str) -> tuple[bool, str]:
        proc = self._call(
            "push",
            "--porcelain",
            f"--force-with-lease={remote_ref}:{expected}",
            remote,
            f"{new}:{remote_ref}",
        )
        return proc.returncode == 0, proc.stdout + proc.stderr

    def remote_tip(self, remote: str, remote_ref: str) -> str | None:
        for line in self.run("ls-remote", remote, remote_ref).splitlines():
            sha, _, name = line.partition("\t")
            if name == remote_ref:
                return sha
        return None


def _upstream(git: GitStore, ref: str, remote: str) -> str:
    """The remote branch this one tracks (branch.<name>.merge), else the same name."""
    short = ref.removeprefix("refs/heads/")
    cfg = git.repo.config
    try:
        if str(cfg[f"branch.{short}.remote"]) == remote:
            return str(cfg[f"branch.{short}.merge"])
    except KeyError:
        pass
    return ref


def _contains(repo: pygit2.Repository, local: pygit2.Commit | None, other: pygit2.Commit) -> bool:
    if local is None:
        return False
    return local.id == other.id or repo.descendant_of(local.id, other.id)


def _audit_incoming(
    git: GitStore,
    local: pygit2.Commit | None,
    theirs: pygit2.Commit,
    remote: str,
    root: str | None,
    env: Mapping[str, str],
    notes: list[str],
) -> int:
    spec = f"{local.id}..{theirs.id}" if local is not None else str(theirs.id)
    report = audit(git, spec, root=root, environ=env)
    notes.extend(report.notes)
    if not report.ok:
        lines = "\n".join(f"  {v}" for v in report.violations[:20])
        more = len(report.violations) - 20
        raise StoreError(
            f"refusing to integrate {remote}: {len(report.violations)} audit violation(s) in "
            f"the incoming commits; nothing changed locally:\n{lines}"
            + (f"\n  ... and {more} more (`truss-files audit {spec}`)" if more > 0 else "")
        )
    return report.checked


def _changed(a: pygit2.Tree, b: pygit2.Tree) -> set[str]:
    deltas = a.diff_to_tree(b).deltas
    return {d.old_file.path if d.status_char() == "D" else d.new_file.path for d in deltas}


def _merge(
    store: Store, ours: pygit2.Commit, theirs: pygit2.Commit, label: str
) -> tuple[pygit2.Commit, tuple[str, ...]]:
    """A signed merge commit of the two sides; entry files changed on both are settled by the
    driver's rules, anything else that conflicts stops the sync."""
    git = store.git
    repo = git.repo
    base_id = repo.merge_base(ours.id, theirs.id)
    base_tree = repo[base_id].peel(pygit2.Tree) if base_id else repo[repo.TreeBuilder().write()]
    assert isinstance(base_tree, pygit2.Tree)
    # No rename detection: an entry's path is its identity, and two similar entries are not
    # one file moved.
    index = repo.merge_trees(base_tree, ours.tree, theirs.tree, flags=pygit2.enums.MergeFlag(0))
    both = _changed(base_tree, ours.tree) & _changed(base_tree, theirs.tree)
    base_snap, ours_snap, theirs_snap = (
        _TreeView(repo, base_tree),
        Snapshot(repo, ours),
        Snapshot(repo, theirs),
    )
    settled: list[str] = []
    problems: list[str] = []
    conflicted = {(a or o or t).path for o, a, t in index.conflicts} if index.conflicts else set()
    for path in sorted(both):
        if not (path.startswith("memories/") and path.endswith(".md")):
            continue
        a, b = ours_snap.read(path), theirs_snap.read(path)
        if a == b:
            continue
        if a is None or b is None:
            problems.append(f"{path}: deleted on one side")
            continue
        result = merge_entry(base_snap.read(path), a, b, path, store.policy(ours_snap))
        if not result.clean:
            problems.append(f"{path}: {result.reason}")
            continue
        if path in conflicted:
            del index.conflicts[path]
            conflicted.discard(path)
        index.add(
            pygit2.IndexEntry(path, repo.create_blob(result.text), pygit2.enums.FileMode.BLOB)
        )
        settled.append(path)
    problems.extend(f"{path}: changed on both sides" for path in sorted(conflicted))
    if problems:
        raise ConflictError(
            f"cannot merge {label} automatically; nothing changed locally:\n"
            + "\n".join(f"  {p}" for p in problems)
            + "\nMerge by hand: `truss-files install-drivers`, then `git merge "
            f"{label}`, resolve, commit (signed) and run `truss-files sync` again"
        )
    tree = index.write_tree(repo)
    try:
        principal = store.principal()
    except TrussError as exc:
        raise UsageError(f"cannot sign the merge commit: {exc.message}") from exc
    ids = [Path(p).stem for p in settled]
    message = f"truss: sync merge {label}\n\n" + trailers(
        op="merge", merged=str(theirs.id), entry=ids
    )
    oid = git.make_commit(
        tree, [ours.id, theirs.id], message, store.signer, store.identity(principal)
    )
    commit = repo[oid]
    assert isinstance(commit, pygit2.Commit)
    # libgit2 runs no hooks: judge the merge as the audit will before the branch moves.
    found = check_commit(repo, commit, False)
    if found:
        raise StoreError(
            "refusing to move the branch: the merge commit would fail the audit:\n"
            + "\n".join(f"  {v}" for v in found)
        )
    return commit, tuple(settled)


class _TreeView(Snapshot):
    """A snapshot of a bare tree (a merge base may be the empty tree)."""

    def __init__(self, repo: pygit2.Repository, tree: pygit2.Tree) -> None:
        super().__init__(repo, None)
        self.tree = tree


def _move(git: GitStore, ref: str, old: pygit2.Commit | None, new: pygit2.Commit | None) -> bool:
    """Compare-and-swap the local branch, keeping the work tree and index in step."""
    if new is None or (old is not None and old.id == new.id):
        return True
    repo = git.repo
    changes: dict[str, bytes | None] = {}
    if old is not None:
        for delta in old.tree.diff_to_tree(new.tree).deltas:
            if delta.status_char() == "D":
                changes[delta.old_file.path] = None
            else:
                blob = repo[delta.new_file.id]
                assert isinstance(blob, pygit2.Blob)
                changes[delta.new_file.path] = blob.data
    else:
        changes = {path: blob.data for path, blob in Snapshot(repo, new).walk("")}
    sync_tree = git._checked_out(ref)
    if sync_tree:
        git.follow()  # what a ref moved by hand left behind is put back, not refused as edits
        git._check_worktree(Snapshot(repo, old), changes)
    if not git.update_ref(ref, old.id if old is not None else None, new.id, "truss-files: sync"):
        return False
    if sync_tree:
        git._sync_worktree(changes)
    return True
