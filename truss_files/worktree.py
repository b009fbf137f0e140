"""The work tree beside the store: files written without following links, and crash recovery.

Two promises live here.

- **Nothing outside the repository is written.** Every path is walked one component at a
  time from a descriptor of the work tree's root, with ``O_NOFOLLOW``: a folder such as
  ``memories/fact`` replaced by a symbolic link (to anywhere) is refused with a
  ``ConflictError`` naming the link and the fix, never followed. Reads do the same, so a
  check never hashes a file outside either.
- **A crash leaves nothing a user can commit by mistake.** A write journals the paths it is
  about to sync (``.git/truss/pending/<owner>.json``) *before* the branch moves and removes
  the record after the work tree and index follow. A record whose owner died (``kill -9``
  between the two) is replayed by the next write, or by ``truss-files repair``: each path is
  brought to the branch tip's content when everything the work tree and index hold there is
  a version the store itself wrote (the journal's before or after), so a user's own edit is
  never overwritten. Without the replay, ``git status`` shows the new entries as staged
  deletions and the user's next ``git commit`` deletes them from the branch.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pygit2

from .errors import ConflictError
from .gitlocks import owner_alive, owner_tag

PENDING = "pending"
_TMP = re.compile(r"^\.(?P<name>.+)\.(?P<owner>\d+-\d+)\.tmp$")


# POSIX flags (the walk needs dir_fd, which Windows lacks); getattr keeps the import working.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC


def _link_error(rel: str, where: str, target: str | None) -> ConflictError:
    to = f" to {target}" if target else ""
    return ConflictError(
        f"{where} is a symbolic link{to}, on the way to {rel}; truss-files never writes "
        f"through a link, so nothing outside the repository was touched. Replace it with a real "
        f"folder (`rm {where}`), then run `truss-files repair` to restore its files from the "
        "branch"
    )


class WorkTree:
    """A checked-out work tree, read and written one path component at a time."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @contextlib.contextmanager
    def _folder(self, rel: str, *, create: bool) -> Iterator[int | None]:
        """A descriptor of ``rel``'s parent folder, reached without following any link;
        None when a folder on the way is missing (and ``create`` is false)."""
        parts = rel.split("/")
        fd = os.open(self.root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
        try:
            for n, part in enumerate(parts[:-1]):
                where = "/".join(parts[: n + 1])
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        yield None
                        return
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                    nxt = self._open_dir(fd, part, rel, where)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise self._not_a_folder(fd, part, rel, where) from exc
                    raise
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def _open_dir(self, fd: int, part: str, rel: str, where: str) -> int:
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise self._not_a_folder(fd, part, rel, where) from exc
            raise

    def _not_a_folder(self, fd: int, part: str, rel: str, where: str) -> ConflictError:
        try:
            target: str | None = os.readlink(part, dir_fd=fd)
        except OSError:
            return ConflictError(
                f"{where} is a file where a folder belongs (on the way to {rel}); move it "
                "away, then run `truss-files repair`"
            )
        return _link_error(rel, where, target)

    def read(self, rel: str) -> bytes | None:
        """The file's bytes; None when it (or a folder on the way) does not exist."""
        with self._folder(rel, create=False) as fd:
            if fd is None:
                return None
            name = rel.rsplit("/", 1)[-1]
            try:
                handle = os.open(name, os.O_RDONLY | _NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise _link_error(rel, rel, os.readlink(name, dir_fd=fd)) from exc
                raise
            with os.fdopen(handle, "rb") as f:
                return f.read()

    def blob_id(self, rel: str) -> str | None:
        data = self.read(rel)
        return None if data is None else str(pygit2.hash(data))

    def write(self, rel: str, data: bytes) -> None:
        """Replace the file by a rename inside its own folder (never a half-written file)."""
        with self._folder(rel, create=True) as fd:
            assert fd is not None
            name = rel.rsplit("/", 1)[-1]
            tmp = f".{name}.{owner_tag()}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW
            handle = os.open(tmp, flags, 0o666, dir_fd=fd)
            with os.fdopen(handle, "wb") as f:
                f.write(data)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)

    def remove(self, rel: str, *, leftovers_of: str | None = None) -> None:
        """Delete the file (a link there is removed, never followed); with ``leftovers_of``,
        delete only that owner's temporary files beside it."""
        with self._folder(rel, create=False) as fd:
            if fd is None:
                return
            name = rel.rsplit("/", 1)[-1]
            if leftovers_of is not None:
                name = f".{name}.{leftovers_of}.tmp"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)


# -- the journal -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """One write's promise to sync ``paths`` after moving ``ref`` from ``base`` to ``new``."""

    owner: str
    ref: str
    base: str | None
    new: str
    paths: tuple[str, ...]


def journal(git_dir: Path, ref: str, base: str | None, new: str, paths: Iterable[str]) -> Path:
    """Record a sync to come; the caller removes the file once the work tree follows."""
    folder = git_dir / "truss" / PENDING
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{owner_tag()}.{secrets.token_hex(4)}.json"
    record = {"ref": ref, "base": base, "new": new, "paths": sorted(paths)}
    # No fsync: a killed process's page cache survives it; a power cut is not this file's care.
    path.write_text(json.dumps(record))
    return path


def abandon(record: Path) -> None:
    """Hand a record over to the next write or ``repair`` (this process gave up syncing)."""
    with contextlib.suppress(OSError):
        record.rename(record.with_name("0-0." + record.name.split(".", 1)[1]))


def orphans(git_dir: Path) -> list[tuple[Path, Pending | None]]:
    """Records whose owner is gone, oldest first; None for a record cut short by the kill
    (written before the ref moved, so nothing moved)."""
    folder = git_dir / "truss" / PENDING
    try:
        names = sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out: list[tuple[Path, Pending | None]] = []
    for path in names:
        owner = path.name.split(".", 1)[0]
        if owner_alive(owner):
            continue
        try:
            raw = json.loads(path.read_text())
            found: Pending | None = Pending(
                owner, raw["ref"], raw["base"], raw["new"], tuple(raw["paths"])
            )
        except (OSError, ValueError, KeyError, TypeError):
            found = None
        out.append((path, found))
    return out


def has_pending(git_dir: Path) -> bool:
    folder = git_dir / "truss" / PENDING
    return folder.is_dir() and any(folder.iterdir())


# -- putting paths back in step ----------------------------------------------------------------


@dataclass(frozen=True)
class Repaired:
    """What one recovery or repair did."""

    fixed: tuple[str, ...]
    kept: tuple[str, ...]  # paths left alone: they hold edits the store never wrote
    notes: tuple[str, ...]


def stage(repo: pygit2.Repository, paths: Mapping[str, bool]) -> None:
    """Bring index entries in step with the work tree (True: add, False: remove).

    Raises ``pygit2.GitError`` while another process holds ``index.lock``."""
    index = repo.index
    # Not force=True: libgit2 re-reads when the file's stamp (inode, size, mtime) moved, and
    # every index write is a rename, so another writer is always seen; a forced re-read cost
    # ~45% of a checkout write at 10k entries (benchmarks/).
    index.read(force=False)
    for path, present in paths.items():
        if present:
            index.add(path)
        elif path in index:
            index.remove(path)
    index.write()


def staged_id(repo: pygit2.Repository, path: str) -> str | None:
    index = repo.index
    return str(index[path].id) if path in index else None


def put_in_step(
    repo: pygit2.Repository,
    tree: WorkTree,
    want: Mapping[str, bytes | None],
    ours: Mapping[str, set[str | None]],
    *,
    force: bool = False,
) -> Repaired:
    """Give each path of ``want`` that content (None: absent) in the work tree and index.

    A path is changed only when its work tree file and its index entry each hold nothing or
    a version in ``ours[path]`` (versions the store wrote), unless ``force``: an edit the store
    never wrote is kept, and reported."""
    repo.index.read(force=False)
    fixed: list[str] = []
    kept: list[str] = []
    notes: list[str] = []
    to_stage: dict[str, bool] = {}
    for path, data in want.items():
        target = None if data is None else str(pygit2.hash(data))
        try:
            disk = tree.blob_id(path)
        except ConflictError as exc:
            kept.append(path)
            notes.append(str(exc))
            continue
        staged = staged_id(repo, path)
        if disk == target and staged == target:
            continue
        allowed = ours.get(path, set()) | {None, target}
        if not force and (disk not in allowed or staged not in allowed):
            kept.append(path)
            notes.append(
                f"{path}: the work tree or index holds an edit the store never wrote; kept. "
                "Commit it through truss-files, or discard it with `truss-files repair --force`"
            )
            continue
        if disk != target:
            if data is None:
                tree.remove(path)
            else:
                tree.write(path, data)
        to_stage[path] = data is not None
        fixed.append(path)
    if to_stage:
        _stage_retrying(repo, to_stage)
    return Repaired(tuple(fixed), tuple(kept), tuple(notes))


def _stage_retrying(repo: pygit2.Repository, paths: Mapping[str, bool]) -> None:
    for attempt in range(20):
        try:
            stage(repo, paths)
            return
        except pygit2.GitError:
            time.sleep(0.01 * (attempt + 1))
    raise ConflictError(
        f"{Path(repo.path) / 'index.lock'} stayed locked, so the index could not be brought in "
        "step; when no git command is running, run `truss-files repair` again"
    )


def tmp_leftover(name: str) -> str | None:
    """The owner tag of one of our temporary files' names (None: not one of ours)."""
    found = _TMP.match(name)
    return found.group("owner") if found else None


def blob_at(repo: pygit2.Repository, commit: str | None, path: str) -> pygit2.Blob | None:
    if commit is None:
        return None
    try:
        obj = repo[commit].peel(pygit2.Commit).tree[path]
    except (KeyError, ValueError, pygit2.GitError):
        return None
    blob = repo[obj.id]
    return blob if isinstance(blob, pygit2.Blob) else None


def recover(repo: pygit2.Repository, tree: WorkTree, branch: str) -> list[str]:
    """Replay the journal records of dead writers; one line per record says what happened.

    The caller holds ``worktree.lock`` (no live writer of ours syncs meanwhile)."""
    notes: list[str] = []
    git_dir = Path(repo.path)
    for record, pending in orphans(git_dir):
        if pending is None or pending.ref != branch:
            record.unlink(missing_ok=True)
            continue
        ref = repo.references.get(pending.ref)
        tip = str(ref.resolve().target) if ref is not None else None
        want: dict[str, bytes | None] = {}
        ours: dict[str, set[str | None]] = {}
        for path in pending.paths:
            blob = blob_at(repo, tip, path)
            want[path] = blob.data if blob is not None else None
            ours[path] = {
                str(b.id) for c in (pending.base, pending.new) if (b := blob_at(repo, c, path))
            }
        done = put_in_step(repo, tree, want, ours)
        for path in pending.paths:
            with contextlib.suppress(ConflictError):
                tree.remove(path, leftovers_of=pending.owner)
        record.unlink(missing_ok=True)
        landed = tip is not None and (tip == pending.new or repo.descendant_of(tip, pending.new))
        pid = pending.owner.split("-")[0]
        kept = f"; kept {len(done.kept)} with local edits" if done.kept else ""
        notes.append(
            f"truss-files: recovered from an interrupted write (process {pid}, commit "
            f"{pending.new[:12]} {'landed' if landed else 'never landed'}): "
            f"{len(done.fixed)} of {len(pending.paths)} store paths brought back in step with "
            f"the branch{kept}"
        )
        notes.extend(f"truss-files: {n}" for n in done.notes)
    return notes


def repair_all(
    repo: pygit2.Repository, tree: WorkTree, tip: pygit2.Commit | None, *, force: bool
) -> Repaired:
    """Every store path whose work tree or index differs from ``tip``, put back in step.

    Without ``force`` a path is changed only when what it holds is absent or a version of that
    path in the branch's recent history (so nothing unrecorded is lost); our own temporary
    files of dead writers are removed, and other untracked files are only reported."""
    from .audit import is_store_path

    want: dict[str, bytes | None] = {}
    notes: list[str] = []
    leftovers: list[str] = []
    for path, flags in repo.status().items():
        if not is_store_path(path) or flags & pygit2.enums.FileStatus.IGNORED:
            continue
        if flags == pygit2.enums.FileStatus.WT_NEW:
            owner = tmp_leftover(path.rpartition("/")[2])
            if owner is not None and not owner_alive(owner):
                with contextlib.suppress(OSError):
                    tree.remove(path)
                leftovers.append(path)
            else:
                notes.append(
                    f"{path}: untracked under the store; kept (write it with truss-files, or "
                    "remove it)"
                )
            continue
        blob = blob_at(repo, str(tip.id) if tip is not None else None, path)
        want[path] = blob.data if blob is not None else None
    ours = history_versions(repo, tip, set(want)) if want and not force else {}
    done = put_in_step(repo, tree, want, ours, force=force)
    return Repaired(done.fixed + tuple(leftovers), done.kept, tuple(notes) + done.notes)


def history_versions(
    repo: pygit2.Repository, tip: pygit2.Commit | None, paths: set[str], depth: int = 1000
) -> dict[str, set[str | None]]:
    """The blob ids each path had in the last ``depth`` first-parent commits."""
    out: dict[str, set[str | None]] = {p: set() for p in paths}
    commit = tip
    for _ in range(depth):
        if commit is None:
            break
        for path in paths:
            with contextlib.suppress(KeyError):
                out[path].add(str(commit.tree[path].id))
        commit = commit.parents[0] if commit.parents else None
    return out
