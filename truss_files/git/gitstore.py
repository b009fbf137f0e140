"""The git backend: snapshots, path-level tree writes, signed compare-and-swap commits.

Reads look at a commit's tree, never at the working directory. A write rebuilds only the
trees on the changed paths, signs the commit in git's own ``gpgsig`` format,
and moves the branch inside a ref transaction only if it still points where the write began;
a writer that lost the race re-plans on the new tip and tries again. When the branch is
checked out, the touched paths of the work tree and index follow, so ``git status`` stays
clean — and a touched path with local edits, or reached through a symbolic link, stops the
write before anything moves. What a killed writer leaves behind (a git lock file, a work tree
behind the branch) is cleared by the next write: see ``gitlocks`` and ``recovery``. Whatever
moved the branch (``git update-ref``, ``git reset --soft``, a crash, another tool), the store
paths of the index and work tree follow it at the store's next operation, read or write
(``GitStore.follow``), so a plain ``git commit`` made next keeps every entry.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from ..errors import ConflictError, RepositoryDamaged, StoreError, TrussError, UsageError
from .gitdamage import damage, missing_object
from .gitdir import GitDir
from .gitlocks import LockState, clear_stale
from .gitlocks import flock as _lock
from .recovery import (
    Repaired,
    abandon,
    follow_branch,
    has_pending,
    journal,
    recover,
    repair_all,
)
from .worktree import WorkTree, stage

if TYPE_CHECKING:
    from ..signing.sshsig import Signer

Changes = Mapping[str, bytes | pygit2.Oid | None]
"""Paths to write (bytes, or the id of a blob already stored: a bulk write's pack) or delete
(None), relative to the repository root."""

_BLOB = pygit2.enums.FileMode.BLOB
_TREE = pygit2.enums.FileMode.TREE
# A gitlink (a submodule entry) names a commit of another repository: there is no object
# here to read, so every read treats it as absent and walks skip it.
_GITLINK = pygit2.enums.FileMode.COMMIT


@dataclass(frozen=True)
class Identity:
    name: str
    email: str

    def signature(self, when: float | None = None) -> pygit2.Signature:
        return pygit2.Signature(self.name, self.email, int(when if when else time.time()), 0)


class Snapshot:
    """A read-only view of one commit's tree (or of nothing, before the first commit)."""

    def __init__(self, repo: pygit2.Repository, commit: pygit2.Commit | None) -> None:
        self.repo = repo
        self.commit = commit
        self.tree: pygit2.Tree | None = commit.tree if commit is not None else None

    @property
    def oid(self) -> str | None:
        return str(self.commit.id) if self.commit is not None else None

    def _obj(self, path: str) -> pygit2.Object | None:
        if self.tree is None:
            return None
        try:
            entry = self.tree[path]
        except KeyError:
            return None
        if entry.filemode == _GITLINK:
            return None
        try:
            return self.repo[entry.id]
        except KeyError as exc:  # the tree names it, no pack or file holds it
            raise missing_object(self.repo.path, str(entry.id)) from exc

    def read(self, path: str) -> bytes | None:
        obj = self._obj(path)
        if isinstance(obj, pygit2.Blob):
            return obj.data
        return None

    def blob_id(self, path: str) -> str | None:
        obj = self._obj(path)
        return str(obj.id) if isinstance(obj, pygit2.Blob) else None

    def tree_id(self, path: str) -> str | None:
        obj = self._obj(path)
        return str(obj.id) if isinstance(obj, pygit2.Tree) else None

    def listdir(self, path: str) -> list[str]:
        obj = self._obj(path) if path else self.tree
        if not isinstance(obj, pygit2.Tree):
            return []
        return [e.name for e in obj if e.name is not None]

    def walk(
        self, path: str, skipped: list[str] | None = None
    ) -> Iterator[tuple[str, pygit2.Blob]]:
        """Every blob below ``path``, depth first, as (full path, blob); the path of each
        gitlink met on the way goes to ``skipped``."""
        obj = self._obj(path) if path else self.tree
        if not isinstance(obj, pygit2.Tree):
            return
        stack: list[tuple[str, pygit2.Tree]] = [(path, obj)]
        while stack:
            prefix, tree = stack.pop()
            for entry in tree:
                child = f"{prefix}/{entry.name}" if prefix else str(entry.name)
                if entry.filemode == _TREE:
                    stack.append((child, self.repo[entry.id]))  # type: ignore[arg-type]
                elif entry.filemode == _GITLINK:
                    if skipped is not None:
                        skipped.append(child)
                else:
                    blob = self.repo[entry.id]
                    if isinstance(blob, pygit2.Blob):
                        yield child, blob


@dataclass(frozen=True)
class Plan:
    """What one write does: the paths it changes and the commit message that says why."""

    changes: Changes
    message: str
    # The tree ``changes`` make on the snapshot this plan was made on, when the planner built
    # it already (a bulk import: git fast-import built it as the files came).
    tree: pygit2.Oid | None = None


# git maps a pack whole by default (1 GiB windows) and reads a checkout's files in path
# order, not pack order: a million-entry import's pack (about 500 MB) would all be resident
# in the checkout. Small windows under a small limit keep it bounded at no measurable cost
# (100k entries: peak RSS 140 -> 108 MB, CPU the same).
_BOUNDED_PACK_MAPS = ("-c", "core.packedGitWindowSize=16m", "-c", "core.packedGitLimit=64m")


class GitStore:
    """One git repository (bare or with a work tree) and the branch the store lives on."""

    MAX_ATTEMPTS = 12
    LOCK_WAIT = 30.0  # seconds a writer waits for another local writer before racing it
    # From this many changed paths on, the work tree and index follow a write through git's
    # own checkout (``_git_checkout``): one process start (a few ms) against a per-file write
    # and hash here, which costs more from a few hundred files on.
    BULK_SYNC = 512

    def __init__(self, path: str | os.PathLike[str]) -> None:
        # `~` too: `.mcp.json` args and Python callers get no shell to expand it.
        path = os.path.expanduser(os.fspath(path))
        if not os.path.exists(path):
            raise StoreError(
                f"{path} does not exist; run `truss-files init {path}` to make a store there, "
                "or pass --store with the path of an existing one"
            )
        try:
            found = pygit2.discover_repository(path)
        except pygit2.GitError as exc:
            raise StoreError(f"{path}: cannot read a git repository here ({exc})") from exc
        if found is None:
            raise StoreError(
                f"{path} is not inside a git repository; run `truss-files init {path}` "
                "or pass --store PATH"
            )
        try:
            self.repo = pygit2.Repository(found)
        except pygit2.GitError as exc:
            raise _damaged(found, None, f"{found}: cannot open the git repository ({exc})") from exc
        self.bare = self.repo.is_bare
        self.workdir = None if self.bare else Path(self.repo.workdir)
        # Where recovery says what it did (a stale lock removed, a crashed write replayed).
        self.note: Callable[[str], None] = _to_stderr

    @property
    def git_dir(self) -> Path:
        return Path(self.repo.path)

    @property
    def branch(self) -> str:
        """The ref the store writes: whatever HEAD names (refs/heads/main on a new repo)."""
        try:
            head = self.repo.references.get("HEAD")
        except pygit2.GitError as exc:
            raise self._damaged(f"cannot read HEAD ({exc})") from exc
        if head is None:
            return "refs/heads/main"
        target = head.target
        if isinstance(target, str):
            return target
        raise StoreError(
            "HEAD is detached; check out the store's branch (git switch main) before writing"
        )

    def tip(self, ref: str | None = None) -> pygit2.Commit | None:
        ref = ref or self.branch
        try:
            reference = self.repo.references.get(ref)
            if reference is None:
                return None
            target = reference.resolve().target
        except (pygit2.GitError, ValueError) as exc:
            raise self._damaged(f"cannot read {ref} ({exc})") from exc
        try:
            obj = self.repo[target]
        except KeyError as exc:
            raise missing_object(self.git_dir, str(target)) from exc
        return obj if isinstance(obj, pygit2.Commit) else None

    def snapshot(self, rev: str | None = None) -> Snapshot:
        if rev is None:
            return Snapshot(self.repo, self.tip())
        return Snapshot(self.repo, self.commit(rev))

    def commit(self, rev: str) -> pygit2.Commit:
        try:
            obj = self.repo.revparse_single(rev)
            commit = obj.peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError) as exc:
            # A name that does not resolve because git's own files are damaged is no typo.
            found = damage(self.git_dir, self.workdir)
            if found is not None:
                raise found from exc
            raise UsageError(f"no commit named '{rev}' in {self.git_dir}") from exc
        return commit

    def _damaged(self, message: str) -> StoreError:
        """What to raise from a pygit2 error that gives no type: the damaged file, when one
        is (``gitdamage``), else a ``StoreError`` with ``message``."""
        return _damaged(self.git_dir, self.workdir, message)

    # -- writing -------------------------------------------------------------------------

    def write_tree(self, tree: pygit2.Tree | None, changes: Changes) -> pygit2.Oid | None:
        """Rebuild only the trees on the changed paths; an emptied tree disappears.

        The paths are grouped by folder once, holding only references to the paths
        ``changes`` already holds (a million-entry import made no copy of each path's tail
        at each level of the tree)."""
        files: dict[str, list[str]] = {}
        for path in changes:
            files.setdefault(path.rpartition("/")[0], []).append(path)
        folders: dict[str, set[str]] = {}  # folder -> the names of its changed subfolders
        for folder in files:
            while folder:
                parent, _, name = folder.rpartition("/")
                held = folders.setdefault(parent, set())
                if name in held:
                    break  # its ancestors are in already
                held.add(name)
                folder = parent
        return self._write_folder(tree, "", files, folders, changes)

    def _write_folder(
        self,
        tree: pygit2.Tree | None,
        folder: str,
        files: Mapping[str, list[str]],
        folders: Mapping[str, set[str]],
        changes: Changes,
    ) -> pygit2.Oid | None:
        builder = self.repo.TreeBuilder(tree) if tree is not None else self.repo.TreeBuilder()
        cut = len(folder) + 1 if folder else 0
        for path in files.get(folder, ()):
            head = path[cut:]
            data = changes[path]
            if data is None:
                if builder.get(head) is not None:
                    builder.remove(head)
            elif isinstance(data, pygit2.Oid):
                builder.insert(head, data, _BLOB)
            else:
                builder.insert(head, self.repo.create_blob(data), _BLOB)
        for head in folders.get(folder, ()):
            existing = builder.get(head)
            subtree = existing if isinstance(existing, pygit2.Tree) else None
            below = f"{folder}/{head}" if folder else head
            oid = self._write_folder(subtree, below, files, folders, changes)
            if oid is None:
                if existing is not None:
                    builder.remove(head)
            else:
                builder.insert(head, oid, _TREE)
        if len(builder) == 0:
            return None
        return builder.write()

    def make_commit(
        self,
        tree: pygit2.Oid,
        parents: list[pygit2.Oid],
        message: str,
        signer: Signer,
        identity: Identity,
    ) -> pygit2.Oid:
        who = identity.signature()
        # pygit2's stubs say Oid; at run time this is the raw commit text.
        content: str = self.repo.create_commit_string(  # type: ignore[assignment]
            who, who, message, tree, list[str | pygit2.Oid](parents)
        )
        armored = signer.sign(content.encode("utf-8"), "git")
        return self.repo.create_commit_with_signature(content, armored, "gpgsig")

    def apply(
        self,
        plan: Callable[[Snapshot], Plan],
        signer: Signer,
        identity: Identity,
        *,
        ref: str | None = None,
        check: Callable[[pygit2.Commit, Snapshot], None] | None = None,
    ) -> tuple[pygit2.Commit, Plan] | None:
        """Plan, sign and commit under this repository's writer lock (see ``_apply_cas``)."""
        # Writers on one machine queue here rather than race: under compare-and-swap alone,
        # eight writers starve one another (a loser's backoff grows while the others keep
        # winning). The wait is bounded, so a writer stuck on its signer (a hardware key
        # waiting for a touch) only delays the others; CAS still guards every ref move.
        with _lock(self.git_dir, "write.lock", wait=self.LOCK_WAIT):
            ref = ref or self.branch
            # What a killed writer left: a git lock file, or a work tree behind the branch.
            self._clear_git_lock(self._ref_lock(ref))
            if self._checked_out(ref):
                index_lock = self.git_dir / "index.lock"
                if index_lock.exists():
                    with _lock(self.git_dir, "worktree.lock"):
                        self._clear_git_lock(index_lock)
                self.recover()
                self.follow()
            return self._apply_cas(plan, signer, identity, ref=ref, check=check)

    def _apply_cas(
        self,
        plan: Callable[[Snapshot], Plan],
        signer: Signer,
        identity: Identity,
        *,
        ref: str | None = None,
        check: Callable[[pygit2.Commit, Snapshot], None] | None = None,
    ) -> tuple[pygit2.Commit, Plan] | None:
        """Plan on the current tip, commit, and move ``ref`` by compare-and-swap.

        ``plan`` runs again on the new tip whenever another writer won the race, so it must
        decide from the snapshot alone. ``check`` verifies the signed commit (against the
        parent's policy) before any ref moves: libgit2 runs no hooks, so we check ourselves.
        When the branch is checked out, a journal record of the paths to sync is written
        before the ref moves and removed once the work tree and index follow (``recover``).
        """
        ref = ref or self.branch
        sync_worktree = self._checked_out(ref)
        for attempt in range(self.MAX_ATTEMPTS):
            base = self.tip(ref)
            snap = Snapshot(self.repo, base)
            step = plan(snap)
            if not step.changes:
                return None
            if sync_worktree:
                self._check_worktree(snap, step.changes)
            tree = step.tree or self.write_tree(snap.tree, step.changes)
            if tree is None:
                tree = self.repo.TreeBuilder().write()
            parents = [base.id] if base is not None else []
            oid = self.make_commit(tree, parents, step.message, signer, identity)
            commit = self.repo[oid]
            assert isinstance(commit, pygit2.Commit)
            if check is not None:
                check(commit, snap)
            record = None
            if sync_worktree:
                old = str(base.id) if base is not None else None
                record = journal(self.git_dir, ref, old, str(oid), step.changes)
            try:
                moved = self._swap(ref, base.id if base is not None else None, oid, step.message)
            except BaseException:
                if record is not None:
                    abandon(record)  # whether the ref moved is unknown: let recovery judge
                raise
            if moved:
                if sync_worktree:
                    old = str(base.id) if base is not None else None
                    self._sync_worktree(step.changes, record, landed=str(oid), base=old)
                return commit, step
            if record is not None:
                record.unlink(missing_ok=True)
            # Another writer moved the branch: back off with jitter, then re-plan on its tip.
            time.sleep(min(0.2, 0.002 * (2**attempt)) * (0.5 + random.random()))
        state = self._clear_git_lock(self._ref_lock(ref))
        if state is not None and not state.removed:
            raise ConflictError(
                f"{ref} could not move: {state.detail}; wait for it to finish, then try again"
            )
        raise ConflictError(
            f"{ref} kept moving under {self.MAX_ATTEMPTS} attempts to write; try again"
        )

    def _swap(self, ref: str, old: pygit2.Oid | None, new: pygit2.Oid, message: str) -> bool:
        try:
            with self.repo.transaction() as txn:
                txn.lock_ref(ref)
                current = self.repo.references.get(ref)
                current_id = current.target if current is not None else None
                if current_id != old:
                    raise _LostRace
                first_line = message.splitlines()[0] if message else "truss-files"
                txn.set_target(ref, new, message=f"truss-files: {first_line}")
        except _LostRace:
            return False
        except pygit2.GitError as exc:
            if "lock" in type(exc).__name__.lower() or "lock" in str(exc).lower():
                return False
            raise StoreError(f"could not update {ref}: {exc}") from exc
        return True

    def update_ref(self, ref: str, old: pygit2.Oid | None, new: pygit2.Oid, msg: str) -> bool:
        """Compare-and-swap on any ref (run ledgers live outside the branch). A lock file a
        killed process left on ``ref`` is cleared first (``gitlocks.clear_stale``: these
        callers hold none of our locks, so only the age and process rules protect a live
        holder, which keeps a ref lock for well under a millisecond)."""
        self._clear_git_lock(self._ref_lock(ref))
        return self._swap(ref, old, new, msg)

    # -- the work tree -------------------------------------------------------------------

    def _checked_out(self, ref: str) -> bool:
        if self.bare:
            return False
        head = self.repo.references.get("HEAD")
        return head is not None and head.target == ref

    @property
    def worktree(self) -> WorkTree:
        if self.workdir is None:
            raise UsageError(f"{self.git_dir} is a bare repository: it has no work tree")
        return WorkTree(self.workdir)

    def _check_worktree(self, snap: Snapshot, changes: Changes) -> None:
        tree = self.worktree
        try:
            index = self.repo.index
            index.read(force=False)
        except pygit2.GitError as exc:
            raise self._damaged(f"cannot read {self.git_dir / 'index'} ({exc})") from exc
        listed: dict[str, set[str] | None] = {}
        stored: dict[str, set[str]] = {}
        bulk = len(changes) >= self.BULK_SYNC
        for path in changes:
            # Never through a link: a folder replaced by one stops the write here, before
            # anything moves (the error names it and the fix). Each folder is listed once,
            # in the work tree and in the base tree: a path neither holds needs no look of
            # its own (a bulk import's new files).
            folder, _, name = path.rpartition("/")
            if folder not in listed:
                listed[folder] = tree.names(folder) if folder else None
                if bulk and folder:
                    stored[folder] = set(snap.listdir(folder))
            held = listed[folder]
            known = stored.get(folder)
            base_id = snap.blob_id(path) if known is None or name in known else None
            absent = folder != "" and (held is None or name not in held)
            disk_id = None if absent else tree.blob_id(path)
            disk = tree.root / path if disk_id is not None or base_id is not None else None
            if disk_id is not None:
                if disk_id != base_id:
                    raise ConflictError(
                        f"{disk} has local edits (or is untracked); commit, stash or remove "
                        "them before truss-files writes this path"
                    )
            elif base_id is not None:
                # Deleted by hand in the work tree: the store would silently restore it.
                raise ConflictError(f"{disk} was deleted in the work tree; restore it first")
            staged = index[path].id if path in index else None
            if staged is not None and str(staged) != base_id:
                raise ConflictError(
                    f"{path} has staged changes; commit or unstage them before truss-files "
                    "writes this path"
                )

    def _sync_worktree(
        self,
        changes: Changes,
        record: Path | None = None,
        *,
        landed: str | None = None,
        base: str | None = None,
    ) -> None:
        # Writers in other processes sync the same index: without one lock around read, add
        # and write, the last one's index drops the others' paths (`git status` then shows
        # them deleted). Under the lock each path takes the branch tip's content, so a sync
        # that runs late cannot put an older version back.
        with _lock(self.git_dir, "worktree.lock"):
            git = GitDir(self.git_dir)
            # The paths followed ``base`` with the index as it is now (nobody touched it since),
            # and ``landed`` is the tip: after this sync they follow ``landed``, and the next
            # operation needs no diff. Otherwise the mark stays behind and the next one looks.
            followed = base is not None and git.synced() == (base, git.index_stamp())
            try:
                tip = Snapshot(self.repo, self.tip())
                bulk = len(changes) >= self.BULK_SYNC and landed is not None and tip.oid == landed
                if not (bulk and base is not None and self._git_checkout(base, landed or "")):
                    self._sync_paths(self._contents(tip, changes, landed))
            except (TrussError, OSError) as exc:
                if record is not None:
                    abandon(record)  # the next write or `truss-files repair` replays it
                what = f"commit {landed[:12]} landed, but " if landed else ""
                raise ConflictError(
                    f"{what}the work tree and index were not brought in step: {exc}"
                ) from exc
            if record is not None:
                record.unlink(missing_ok=True)
            stamp = git.index_stamp()
            if followed and landed is not None and tip.oid == landed and stamp is not None:
                git.mark_synced(landed, stamp)

    def _contents(self, tip: Snapshot, changes: Changes, landed: str | None) -> Changes:
        """What each changed path holds at the tip. When the tip is the commit just made,
        that is what is in hand; else each path's blob is looked up in the tip's tree, so a
        sync that runs late cannot put an older version back. A blob id is read when its
        file is written, one at a time (a bulk import's bodies are never all in memory)."""
        if landed is not None and tip.oid == landed:
            return changes
        out: dict[str, bytes | pygit2.Oid | None] = {}
        for path in changes:
            found = tip.blob_id(path)
            out[path] = pygit2.Oid(hex=found) if found is not None else None
        return out

    def _git_checkout(self, base: str, landed: str) -> bool:
        """Bring the work tree and index from ``base`` to ``landed`` with git's own checkout
        (``git read-tree -m -u``: a two-tree merge, which writes and stats only the paths
        the two trees differ in, keeps every other index entry and work tree file as it is,
        and refuses to overwrite a local edit). For a bulk write: a hundred thousand new
        files written and staged by git in C cost about what ``git reset --hard`` does,
        where a file at a time from here (and ``index.add``, which hashes each again) cost
        several times that. False when git could not do it (no git, an index with
        conflicts, a lock held): the caller then syncs path by path, as every small write."""
        if self.workdir is None:
            return False
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        argv = ["git", "--git-dir", str(self.git_dir), "--work-tree", str(self.workdir)]
        try:
            done = subprocess.run(
                [*argv, *_BOUNDED_PACK_MAPS, "read-tree", "-m", "-u", base, landed],
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=False,
            )
        except OSError:
            return False
        # Whatever git did, the index file changed under libgit2's cached copy: every use of
        # it here reads it again first (``read(force=False)`` sees the new file's stamp), so
        # it is not loaded now (a million-entry index is a few hundred MB this process
        # may never need).
        return done.returncode == 0

    def _sync_paths(self, changes: Changes) -> None:
        tree = self.worktree
        for path, data in changes.items():
            if data is None:
                tree.remove(path)
        tree.write_all(
            {path: data for path, data in changes.items() if data is not None}, self._blob
        )
        self._stage({path: data is not None for path, data in changes.items()})

    def _blob(self, oid: pygit2.Oid) -> bytes:
        blob = self.repo[oid]
        if not isinstance(blob, pygit2.Blob):
            raise StoreError(f"{oid} is not a blob; run `git fsck` on {self.git_dir}")
        return blob.data

    def _stage(self, paths: Mapping[str, bool]) -> None:
        """Index entries follow the work tree; the caller holds ``worktree.lock``."""
        lock = self.git_dir / "index.lock"
        for attempt in range(20):
            try:
                stage(self.repo, paths)
                return
            except pygit2.GitError:
                # Another process holds index.lock; the commit already landed, so wait. A
                # lock that outlived its process would be waited on for ever: clear it.
                if attempt == 4:
                    self._clear_git_lock(lock)
                time.sleep(0.01 * (attempt + 1))
        state = self._clear_git_lock(lock)
        detail = state.detail if state is not None else f"{lock} stayed locked"
        raise ConflictError(
            f"{detail}; the next write (or `truss-files repair`) brings the index in step"
        )

    # -- recovery ------------------------------------------------------------------------

    def _ref_lock(self, ref: str) -> Path:
        return self.git_dir / f"{ref}.lock"

    def _clear_git_lock(self, lock: Path) -> LockState | None:
        """``gitlocks.clear_stale`` at one of git's lock files, saying what it removed."""
        if not lock.exists():
            return None
        state = clear_stale(lock, (self.git_dir, *((self.workdir,) if self.workdir else ())))
        if state is not None and state.removed:
            self.note(f"truss-files: {state.detail}")
        return state

    def recover(self) -> list[str]:
        """Replay the sync of writers killed between moving the branch and updating the work
        tree (see ``recovery``); each line it returns also goes to ``note``."""
        if self.workdir is None or not has_pending(self.git_dir):
            return []
        with _lock(self.git_dir, "worktree.lock"):
            self._clear_git_lock(self.git_dir / "index.lock")
            notes = recover(self.repo, self.worktree, self.branch)
        for line in notes:
            self.note(line)
        return notes

    def repair(self, *, force: bool = False) -> Repaired:
        """Clear stale git locks, replay interrupted writes, let the store paths follow the
        branch (``follow``), and bring every other store path of the work tree and index back
        in step with the branch (``recovery.repair_all``)."""
        if self.workdir is None:
            raise UsageError(f"{self.git_dir} is a bare repository: there is nothing to repair")
        with _lock(self.git_dir, "write.lock", wait=self.LOCK_WAIT):
            ref_state = self._clear_git_lock(self._ref_lock(self.branch))
            cleared = [ref_state.detail] if ref_state is not None else []
            replayed = self.recover()
            with _lock(self.git_dir, "worktree.lock"):
                state = self._clear_git_lock(self.git_dir / "index.lock")
                if state is not None:
                    cleared.append(state.detail)
                followed = self._follow(always=True)
                done = repair_all(self.repo, self.worktree, self.tip(), force=force)
        # What follow kept, repair_all looked at again: its verdict is the one reported.
        fixed = (*(followed.fixed if followed is not None else ()), *done.fixed)
        return Repaired(fixed, done.kept, (*cleared, *replayed, *done.notes))

    # -- store paths follow the branch -------------------------------------------------

    def follow(self) -> Repaired | None:
        """Store paths follow the branch: when the tip or the index moved since the store
        last looked (the mark ``GitDir.synced``), every store path the index or work tree holds
        deleted or behind the branch is put back to the branch's tree, whoever moved the ref
        (the rule: ``recovery.follow_branch``). Every operation comes through here first: each
        write (``apply``), ``repair``, ``sync``, and every read (the read gate,
        ``readgate.refusal``), so a user's plain ``git commit`` without hooks keeps every
        entry. None when nothing was looked at; never raises (what stopped it goes to
        ``note``, and the mark stays behind so the next operation tries again)."""
        if self.workdir is None:
            return None
        with _lock(self.git_dir, "worktree.lock"):
            done = self._follow()
        if done is not None and done.fixed:
            tip = self.tip()
            where = f" (now {str(tip.id)[:12]})" if tip is not None else ""
            self.note(
                f"truss-files: the branch moved behind the store{where}: {len(done.fixed)} "
                "store path(s) of the index and work tree put back in step with it"
            )
        return done

    def _follow(self, *, always: bool = False) -> Repaired | None:
        """``follow`` for a caller holding ``worktree.lock``; ``always`` looks even when the
        mark says nothing moved. Left for a later operation (the mark not moved): no branch
        checked out, a merge, rebase or other git operation under way, an ``index.lock`` a
        running git process holds, conflicts in the index."""
        git = GitDir(self.git_dir)
        stamp = git.index_stamp()
        head = self.repo.references.get("HEAD") if not self.bare else None
        ref = head.target if head is not None else None
        if stamp is None or not isinstance(ref, str):
            return None
        try:
            tip = self.tip(ref)
            mark = git.synced()
            if tip is None or (not always and mark == (str(tip.id), stamp)):
                return None
            if self.repo.state() != pygit2.enums.RepositoryState.NONE:
                return None  # `git merge` (or rebase...) is placing paths itself: not ours
            if (self.git_dir / "index.lock").exists():
                return None  # a git process is writing the index: the next operation looks
            done = follow_branch(self.repo, self.worktree, tip, mark[0] if mark else None)
        except (TrussError, OSError, pygit2.GitError, KeyError, ValueError) as exc:
            self.note(
                f"truss-files: the store paths of the work tree and index could not follow the "
                f"branch ({exc}); run `truss-files repair`"
            )
            return None
        if done is not None:
            # The stamp read before looking: if this changed the index, the next operation
            # looks once more (and finds nothing) rather than trust a stamp of another write.
            git.mark_synced(str(tip.id), stamp)
        return done


class _LostRace(Exception):
    pass


def _damaged(
    git_dir: str | os.PathLike[str], workdir: str | os.PathLike[str] | None, message: str
) -> StoreError:
    found: RepositoryDamaged | None = damage(git_dir, workdir)
    return found if found is not None else StoreError(message)


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
