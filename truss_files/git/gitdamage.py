"""Which of git's own files is damaged, when pygit2 fails without saying so by type.

pygit2 reports a truncated ``.git/index``, a cut pack or a garbled ref as a bare
``GitError`` (or a ``KeyError`` for an object it cannot find). ``damage(git_dir, workdir)``
looks at the files themselves -- ``HEAD`` and the branch's ref, ``packed-refs``, the index's
header and checksum, each pack against the checksum its ``.idx`` records -- and returns a
``RepositoryDamaged`` naming the file and what to run, or None when they all look whole.
Only the ends of packs are read: a check costs a few small reads (and one hash of the index),
and it runs only once something has already failed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

from ..errors import RepositoryDamaged

__all__ = ["damage", "damage_at", "missing_object"]

_OID: Final = re.compile(rb"^(?:[0-9a-f]{40}|[0-9a-f]{64})\n?$")
_SYMBOLIC: Final = re.compile(rb"^ref: refs/[^\0\n]+\n?$")
_FSCK: Final = "run `git fsck` to see what else is damaged"


def damage(
    git_dir: str | os.PathLike[str], workdir: str | os.PathLike[str] | None = None
) -> RepositoryDamaged | None:
    """A ``RepositoryDamaged`` for the first damaged file found, else None."""
    root = Path(git_dir)
    return _refs(root) or _index(root, workdir) or _packs(root)


def missing_object(git_dir: str | os.PathLike[str], oid: str) -> RepositoryDamaged:
    """An object the history names that no pack or loose file holds."""
    return damage(git_dir) or RepositoryDamaged(
        f"object {oid} is missing from {git_dir} (a pack or an object file is damaged or was "
        f"removed); {_FSCK}, restore the objects from a clone or a backup (`git fetch` from "
        "one), then run `truss-files repair`"
    )


def _read(path: Path, limit: int = 1 << 16) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except FileNotFoundError:
        return None
    except OSError:
        return b""  # a file we cannot read where git expects one: damaged for our purpose


def _refs(root: Path) -> RepositoryDamaged | None:
    head = _read(root / "HEAD")
    if head is None or not (_SYMBOLIC.match(head) or _OID.match(head)):
        return _bad_ref(root / "HEAD", "is not a ref or a commit id")
    names = []
    if head.startswith(b"ref: "):
        names.append(head[5:].strip().decode("utf-8", "replace"))
    for name in names:
        data = _read(root / name)
        if data is not None and not (_OID.match(data) or _SYMBOLIC.match(data)):
            return _bad_ref(root / name, "does not hold a commit id")
    packed = _read(root / "packed-refs", 1 << 24)
    if packed:
        for line in packed.splitlines():
            if not line or line.startswith((b"#", b"^")):
                continue
            oid, _, ref = line.partition(b" ")
            if not _OID.match(oid) or not ref.startswith(b"refs/"):
                return _bad_ref(root / "packed-refs", "holds a line that is not `<id> <ref>`")
    return None


def _bad_ref(path: Path, what: str) -> RepositoryDamaged:
    return RepositoryDamaged(
        f"{path} {what} (a malformed ref); {_FSCK}, put the branch back where it belongs "
        "(`git update-ref <ref> <commit>`, the commit from `git reflog` or a clone), then run "
        "`truss-files repair`"
    )


def _index(root: Path, workdir: str | os.PathLike[str] | None) -> RepositoryDamaged | None:
    path = root / "index"
    data = _read(path, 1 << 30)
    if not data:  # no index (a bare repository, a fresh clone) is not damage
        return None
    import hashlib  # here: off the query path, whose pygit2-free reader uses this module

    # The trailer is the SHA-1 (SHA-256 in such a repository) of the rest, or zeros under
    # git's index.skipHash.
    whole = (
        data[:4] == b"DIRC"
        and len(data) >= 32
        and (
            hashlib.sha1(data[:-20]).digest() == data[-20:]
            or data[-20:] == bytes(20)
            or hashlib.sha256(data[:-32]).digest() == data[-32:]
        )
    )
    if whole:
        return None
    where = workdir or root.parent
    return RepositoryDamaged(
        f"{path} is damaged (truncated or overwritten: its checksum does not match); it only "
        f"caches the work tree, so remove it and run `git -C {where} reset` to rebuild it from "
        f"the branch, `git fsck` to check the rest, then `truss-files repair`"
    )


def _packs(root: Path) -> RepositoryDamaged | None:
    folder = root / "objects" / "pack"
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None
    for name in names:
        if not name.endswith(".idx"):
            continue
        idx_path = folder / name
        pack_path = idx_path.with_suffix(".pack")
        try:
            with open(idx_path, "rb") as idx, open(pack_path, "rb") as pack:
                idx_size = os.fstat(idx.fileno()).st_size
                pack_size = os.fstat(pack.fileno()).st_size
                head = pack.read(12)
                if idx_size < 48 or pack_size < 32:
                    raise ValueError("too short")
                idx.seek(idx_size - 40)
                want = idx.read(20)
                pack.seek(pack_size - 20)
                trailer = pack.read(20)
                if len(want) != 20:  # a SHA-256 repository: the checksums are 32 bytes
                    raise ValueError("unreadable index")
        except FileNotFoundError as exc:
            return _bad_pack(pack_path if exc.filename == str(pack_path) else idx_path)
        except (OSError, ValueError):
            return _bad_pack(pack_path)
        if head[:4] != b"PACK" or (trailer != want and not _sha256_pair(idx_path, pack_path)):
            return _bad_pack(pack_path)
    return None


def _sha256_pair(idx_path: Path, pack_path: Path) -> bool:
    """The pack's 32-byte trailer is the one its .idx records (a SHA-256 repository)."""
    try:
        idx = idx_path.read_bytes()
        with open(pack_path, "rb") as pack:
            pack.seek(-32, os.SEEK_END)
            return idx[-64:-32] == pack.read(32)
    except OSError:
        return False


def _bad_pack(path: Path) -> RepositoryDamaged:
    return RepositoryDamaged(
        f"{path} is damaged (truncated, or not the pack its .idx describes); {_FSCK}, restore "
        "the objects from a clone or a backup (`git fetch` from one), then run "
        "`truss-files repair`"
    )


def damage_at(path: str | os.PathLike[str] | None) -> RepositoryDamaged | None:
    """``damage`` of the repository at or around ``path`` (None: the current directory): the
    faces' last look before they call an error a bug."""
    try:
        import pygit2  # here: off the query path, whose pygit2-free reader uses this module

        found = pygit2.discover_repository(os.path.expanduser(os.fspath(path or ".")))
    except Exception:  # noqa: BLE001 - no repository to look at: nothing to say
        return None
    if not found:
        return None
    root = Path(found)
    return damage(root, root.parent if root.name == ".git" else None)
