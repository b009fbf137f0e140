"""The work tree beside the store, read and written without ever following a link.

Every path is walked one component at a time from a descriptor of the work tree's root, with
``O_NOFOLLOW``: a folder such as ``memories/fact`` replaced by a symbolic link (to anywhere)
is refused with a ``ConflictError`` naming the link and the fix, never followed. Reads do the
same, so a check never hashes a file outside either. ``stage`` brings index entries in step.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pygit2

from ..errors import ConflictError
from .gitlocks import owner_tag

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

    def names(self, folder: str) -> set[str] | None:
        """The names in ``folder`` (reached without following a link); None when it, or a
        folder on the way, does not exist. One listing answers for every path in it."""
        with self._folder(f"{folder}/-", create=False) as fd:
            return None if fd is None else set(os.listdir(fd))

    def write_all(
        self,
        files: Mapping[str, bytes | pygit2.Oid],
        read: Callable[[pygit2.Oid], bytes],
    ) -> None:
        """``write`` for many files, each folder reached once (a bulk import writes a
        hundred thousand files into a thousand folders); a blob id is ``read`` just before
        its file is written, so the bodies are never all in memory."""
        by_folder: dict[str, list[tuple[str, bytes | pygit2.Oid]]] = {}
        for rel, data in files.items():
            folder, _, name = rel.rpartition("/")
            by_folder.setdefault(folder, []).append((name, data))
        tag = owner_tag()
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW
        for folder, items in by_folder.items():
            with self._folder(f"{folder}/-" if folder else "-", create=True) as fd:
                assert fd is not None
                for name, data in items:
                    tmp = f".{name}.{tag}.tmp"
                    handle = os.open(tmp, flags, 0o666, dir_fd=fd)
                    with os.fdopen(handle, "wb") as f:
                        f.write(read(data) if isinstance(data, pygit2.Oid) else data)
                    os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)

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


def stage(repo: pygit2.Repository, paths: Mapping[str, bool]) -> None:
    """Bring index entries in step with the work tree (True: add, False: remove).

    Raises ``pygit2.GitError`` while another process holds ``index.lock``."""
    index = repo.index
    # Not force=True: libgit2 re-reads when the file's stamp (inode, size, mtime) moved, and
    # every index write is a rename, so another writer is always seen; a forced re-read is a
    # large share of a checkout write (benchmarks/).
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


def tmp_leftover(name: str) -> str | None:
    """The owner tag of one of our temporary files' names (None: not one of ours)."""
    found = _TMP.match(name)
    return found.group("owner") if found else None
