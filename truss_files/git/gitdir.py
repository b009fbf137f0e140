"""Just enough git, read by hand, for a query to find its cache without importing pygit2.

A warm query needs one fact from the repository: which tree ``memories/`` is at the branch
tip. pygit2 costs more to import than the whole query, so
this module reads the files git itself keeps: ``HEAD``, the ref (a loose file or
``packed-refs``), and -- only when the tip moved since the cache was written -- the commit and
tree objects, which libgit2 and git write loose (zlib-compressed) until a ``git gc`` packs them.
Anything unusual (packed objects, reftable refs, alternates) makes ``Objects`` fall back to
pygit2 for that read, so the result never depends on which path answered.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import StoreError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["TreeChange", "GitDir", "Objects", "TreeEntry", "diff_trees", "walk_tree"]

_TREE_MODE = b"40000"
# A gitlink (submodule entry) names another repository's commit: no object here to read, so
# the index sees no file there (the audit reports it).
_GITLINK_MODE = b"160000"
# One entry of a tree object: "<mode> <name>\0<20-byte id>", entry after entry (compiled
# on first use: a warm query never lists a tree).
_TREE_ENTRY = rb"([0-7]+) ([^\0]*)\0(.{20})"
# The store's mark of the branch tip its paths of the index and work tree follow.
_SYNCED = "synced"
_SYNCED_FORMAT = "truss-synced 1"
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0)
_CHUNK = 1 << 16


# NamedTuples rather than dataclasses here and on the rest of the query path: defining a
# dataclass costs time at import, and this module is imported by every CLI query.
class TreeEntry(NamedTuple):
    mode: bytes
    name: str
    sha: str

    @property
    def is_tree(self) -> bool:
        return self.mode == _TREE_MODE

    @property
    def is_file(self) -> bool:
        return self.mode not in (_TREE_MODE, _GITLINK_MODE)


class TreeChange(NamedTuple):
    """One file under a tree that differs between two trees (a blob id is None when absent)."""

    path: str
    old: str | None
    new: str | None


class GitDir:
    """A repository's git directory (``.git`` of a work tree, or a bare repository).

    Paths are kept as strings and handled with ``os.path``: ``pathlib`` costs time to import
    where nothing else on the query path needs it (``path``, ``common`` and ``cache_dir`` make
    ``Path`` objects when asked).
    """

    def __init__(
        self, path: str | os.PathLike[str], common: str | os.PathLike[str] | None = None
    ) -> None:
        self.path_str = os.fspath(path)
        # Linked work trees keep refs and objects in the common directory.
        self.common_str = self.path_str if common is None else os.fspath(common)
        self._objects = os.path.join(self.common_str, "objects", "")

    @classmethod
    def discover(cls, start: str | os.PathLike[str]) -> GitDir:
        """The git directory at or above ``start``, as ``pygit2.discover_repository`` finds it."""
        here = os.path.abspath(os.path.expanduser(os.fspath(start)))
        folder = here
        while True:
            dot = os.path.join(folder, ".git")
            if os.path.isdir(dot):
                return cls._at(dot)
            if os.path.isfile(dot):
                with open(dot, encoding="utf-8", errors="replace") as handle:
                    text = handle.read().strip()
                if text.startswith("gitdir:"):
                    where = os.path.join(folder, text[len("gitdir:") :].strip())
                    return cls._at(os.path.realpath(where))
            if os.path.isfile(os.path.join(folder, "HEAD")) and os.path.isdir(
                os.path.join(folder, "objects")
            ):
                return cls._at(folder)
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
        if not os.path.exists(here):
            raise StoreError(
                f"{start}: no such directory; run `truss-files init {start}` to make a store "
                "there, or pass --store PATH"
            )
        raise StoreError(
            f"{start} is not inside a git repository; run `truss-files init {start}` "
            "or pass --store PATH"
        )

    @classmethod
    def _at(cls, path: str) -> GitDir:
        common_file = os.path.join(path, "commondir")
        if os.path.isfile(common_file):
            with open(common_file, encoding="utf-8") as handle:
                common = os.path.realpath(os.path.join(path, handle.read().strip()))
            return cls(path, common)
        return cls(path)

    @property
    def path(self) -> Path:
        from pathlib import Path

        return Path(self.path_str)

    @property
    def common(self) -> Path:
        from pathlib import Path

        return Path(self.common_str)

    @property
    def cache_dir(self) -> Path:
        """Where truss-files keeps caches: ``.git/truss`` (never in the work tree)."""
        return self.common / "truss"

    @property
    def cache_str(self) -> str:
        """``cache_dir`` as a string."""
        return os.path.join(self.common_str, "truss")

    # -- refs ----------------------------------------------------------------------------

    def head(self) -> tuple[str | None, str | None]:
        """``(ref name or None when detached, commit id or None before the first commit)``.

        Raises ``LookupError`` when the refs are stored in a way this reader does not know
        (reftable), so the caller can ask pygit2.
        """
        text = _read_text(os.path.join(self.path_str, "HEAD"))
        if text is None:
            raise LookupError("no HEAD")
        if not text.startswith("ref: "):
            return None, _sha(text)
        ref = text[5:]
        if ref == "refs/heads/.invalid":
            raise LookupError("reftable refs")
        return ref, self.resolve(ref)

    def resolve(self, ref: str, depth: int = 0) -> str | None:
        if depth > 5:
            raise LookupError(f"symbolic ref loop at {ref}")
        base = self.path_str if ref == "HEAD" or ref.startswith("refs/bisect") else self.common_str
        text = _read_text(os.path.join(base, ref))
        if text is not None:
            if text.startswith("ref: "):
                return self.resolve(text[5:], depth + 1)
            return _sha(text)
        packed = _read_text(os.path.join(self.common_str, "packed-refs"))
        if packed is None:
            return None
        suffix = " " + ref
        for line in packed.splitlines():
            if line.endswith(suffix) and not line.startswith(("#", "^")):
                return _sha(line[:40])
        return None

    # -- the store's mark of what its paths follow ---------------------------------------
    #
    # ``<git dir>/truss/synced`` (per work tree, beside its index) names the branch tip the
    # store last brought its paths of the index and work tree in step with, and the index
    # file as it was then. A read compares it with the tip and the index now: equal, nobody
    # moved either, and the read goes on without pygit2; else the store's paths follow the
    # branch first (``GitStore.follow``, the rule in ``recovery.follow_branch``).

    def index_stamp(self) -> str | None:
        """The index file's inode, size and mtime: git and libgit2 write the index by a rename,
        so any write by anyone gives a new stamp. None without an index (a bare repository)."""
        try:
            st = os.stat(os.path.join(self.path_str, "index"))
        except OSError:
            return None
        return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"

    def synced(self) -> tuple[str, str] | None:
        """``(tip, index stamp)`` of the store's last follow of the branch, or None (also
        when the mark is unreadable or garbled: a cache, the next follow writes it again)."""
        try:
            text = _read_text(os.path.join(self.path_str, "truss", _SYNCED))
        except (LookupError, OSError):
            return None
        parts = text.split() if text else []
        if len(parts) != 4 or parts[:2] != _SYNCED_FORMAT.split():
            return None
        return parts[2], parts[3]

    def mark_synced(self, tip: str, stamp: str) -> None:
        """Record that the store's paths follow ``tip`` with the index at ``stamp``. A mark
        that cannot be written costs the next operation one index diff, never a wrong answer."""
        folder = os.path.join(self.path_str, "truss")
        tmp = os.path.join(folder, f".{_SYNCED}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            os.makedirs(folder, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(f"{_SYNCED_FORMAT} {tip} {stamp}\n")
            os.replace(tmp, os.path.join(folder, _SYNCED))
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def follows_branch(self) -> bool:
        """True when the store's paths need no look: no index (a bare repository), no branch
        checked out (detached or unborn), or the tip and the index are as the mark says."""
        stamp = self.index_stamp()
        if stamp is None:
            return True
        try:
            ref, tip = self.head()
        except (LookupError, StoreError):
            return False  # refs this reader cannot read: pygit2 decides
        if ref is None or tip is None:
            return True
        return self.synced() == (tip, stamp)

    # -- loose objects -------------------------------------------------------------------

    def loose(self, sha: str) -> tuple[bytes, bytes]:
        """``(type, content)`` of a loose object; ``KeyError`` when it is not stored loose."""
        raw = self.loose_raw(sha)
        if raw is None:
            raise KeyError(sha)
        header, _, content = raw.partition(b"\0")
        kind, _, _size = header.partition(b" ")
        return kind, content

    def loose_raw(self, sha: str) -> bytes | None:
        """The inflated loose object (header and content), or None when it is not loose.

        ``os.open``/``os.read`` on a string path: about half what ``open()`` on a
        ``Path`` takes (an index rebuild reads every entry file this way).
        """
        try:
            fd = os.open(f"{self._objects}{sha[:2]}/{sha[2:]}", _READ_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            data = os.read(fd, _CHUNK)
            if len(data) == _CHUNK:  # a short read of a regular file is its end
                parts = [data]
                while data:
                    data = os.read(fd, _CHUNK)
                    parts.append(data)
                data = b"".join(parts)
        finally:
            os.close(fd)
        try:
            return zlib.decompress(data)
        except zlib.error as exc:
            raise StoreError(f"object {sha} is corrupt ({exc}); run `git fsck`") from exc


class Objects:
    """Reads commits, trees and blobs: loose objects by hand, anything else through pygit2."""

    def __init__(self, git: GitDir, repo: Any = None) -> None:
        self.git = git
        self._repo = repo

    @property
    def repo(self) -> Any:
        if self._repo is None:
            import pygit2

            self._repo = pygit2.Repository(self.git.path_str)
        return self._repo

    @property
    def repo_if_open(self) -> Any:
        """The pygit2 repository when one is open already, else None (opening costs)."""
        return self._repo

    def _read(self, sha: str, want: bytes) -> bytes:
        if self._repo is None:
            try:
                kind, content = self.git.loose(sha)
            except KeyError:
                pass
            else:
                if kind != want:
                    raise StoreError(f"object {sha} is a {kind.decode()}, not a {want.decode()}")
                return content
        import pygit2

        obj = self.repo.get(pygit2.Oid(hex=sha))  # a str would be looked up as a prefix
        if obj is None:
            # Only a missing object needs the damage report (and the pathlib it loads).
            from .gitdamage import missing_object

            raise missing_object(self.git.common_str, sha)
        data: bytes = obj.read_raw()
        return data

    def blob(self, sha: str) -> bytes:
        return self._read(sha, b"blob")

    def tree(self, sha: str) -> list[TreeEntry]:
        return parse_tree(self._read(sha, b"tree"))

    def commit_tree(self, sha: str) -> str:
        """The root tree id of a commit."""
        data = self._read(sha, b"commit")
        if not data.startswith(b"tree "):
            raise StoreError(f"commit {sha} has no tree line")
        return data[5:45].decode()

    def subtree(self, tree: str, name: str) -> str | None:
        for entry in self.tree(tree):
            if entry.name == name:
                return entry.sha if entry.is_tree else None
        return None

    def entry(self, tree: str, name: str) -> TreeEntry | None:
        for entry in self.tree(tree):
            if entry.name == name:
                return entry
        return None


def parse_tree(data: bytes) -> list[TreeEntry]:
    out: list[TreeEntry] = []
    pos = 0
    size = len(data)
    while pos < size:
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        sha = data[nul + 1 : nul + 21].hex()
        out.append(
            TreeEntry(data[pos:space], data[space + 1 : nul].decode("utf-8", "replace"), sha)
        )
        pos = nul + 21
    return out


def walk_tree(objs: Objects, tree: str, prefix: str) -> Iterator[tuple[str, str]]:
    """Every blob below ``tree`` as ``(path, blob id)``, in tree order."""
    # The entries straight from the raw tree (no TreeEntry each): a rebuild lists every file
    # sooner, while its workers wait for the list.
    for mode, name, sha in re.findall(_TREE_ENTRY, objs._read(tree, b"tree"), re.S):
        path = f"{prefix}/{name.decode('utf-8', 'replace')}"
        if mode == _TREE_MODE:
            yield from walk_tree(objs, sha.hex(), path)
        elif mode != _GITLINK_MODE:
            yield path, sha.hex()


def diff_trees(objs: Objects, old: str | None, new: str | None, prefix: str) -> list[TreeChange]:
    """Files that differ between two trees, descending only into subtrees whose id differs."""
    if old == new:
        return []
    if old is None:
        return [TreeChange(p, None, b) for p, b in walk_tree(objs, new, prefix)] if new else []
    if new is None:
        return [TreeChange(p, b, None) for p, b in walk_tree(objs, old, prefix)]
    # Raw entries compared as bytes: only those that differ are decoded (a tree of thousands
    # of notes changes by one entry after a write).
    mine, theirs = (set(re.findall(_TREE_ENTRY, objs._read(t, b"tree"), re.S)) for t in (old, new))
    before = {name: (mode, sha) for mode, name, sha in mine - theirs}
    after = {name: (mode, sha) for mode, name, sha in theirs - mine}
    out: list[TreeChange] = []
    for name in sorted(before.keys() | after.keys()):
        a, b = before.get(name), after.get(name)
        path = f"{prefix}/{name.decode('utf-8', 'replace')}"
        a_tree = a[1].hex() if a is not None and a[0] == _TREE_MODE else None
        b_tree = b[1].hex() if b is not None and b[0] == _TREE_MODE else None
        if a_tree or b_tree:
            out.extend(diff_trees(objs, a_tree, b_tree, path))
        a_blob = a[1].hex() if a is not None and a[0] not in (_TREE_MODE, _GITLINK_MODE) else None
        b_blob = b[1].hex() if b is not None and b[0] not in (_TREE_MODE, _GITLINK_MODE) else None
        if a_blob != b_blob:
            out.append(TreeChange(path, a_blob, b_blob))
    return out


def _read_text(path: str) -> str | None:
    # os.open / os.read: a warm query reads HEAD and its ref each time, and a text-mode
    # ``open`` (codec lookup, buffered wrapper) costs four times as much as the read.
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    except IsADirectoryError:
        return None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        # Not what git writes: a ref read as damaged is left to pygit2 (``LookupError``), which
        # names the damage.
        raise LookupError(f"{path}: not UTF-8 text") from exc


def _sha(text: str) -> str:
    sha = text.strip()[:40]
    if len(sha) != 40 or sha.strip("0123456789abcdef"):
        raise LookupError(f"not an object id: {text[:60]!r}")
    return sha
