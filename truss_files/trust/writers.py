"""Who wrote each entry: the principal whose verified signature is on the commit that added it.

"This run's own note" is proven by that signature (``authority``, the last section), not by
the ``produced_by`` text anyone can write. Working it out means walking the history and
checking a signature per commit, so the answer is kept in ``.git/truss/writers`` (never in the
work tree), built incrementally::

    truss-writers 1 <tip> <n principals> <n records> <crc32>\n
    <principal>\n ...                      (one per line)
    <16 bytes of entry id><u16 principal>   (n records, sorted by id)

* **Warm** -- the commit read is the file's tip (or an ancestor of it): one small file read,
  no pygit2; a process keeps what it read while the file stays the same.
* **New commits** -- the file's tip is an ancestor of the commit read: only ``tip..commit`` is
  walked (each commit's signer for the entry files it adds, checked against the policy of
  its first parent, as the audit judges it).
* **Rewritten history** (the file's tip is no ancestor) or a file that is missing, cut short,
  garbled or of another format -- walked again from the start and replaced.

Only verified signatures count: an unsigned commit, or one whose key the policy does not
list, adds entries nobody owns. An entry added twice (two branches joined by a merge) keeps
the first writer the walk met. The file is replaced atomically, so a reader sees a whole old
file or a whole new one; a file that cannot be written costs the next read a walk, never a
wrong answer.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import zlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

from ..errors import TrussError

if TYPE_CHECKING:
    from ..git.gitdir import GitDir

__all__ = ["CACHE_NAME", "FORMAT", "Writers", "writers"]

CACHE_NAME: Final = "writers"
FORMAT: Final = b"truss-writers 1"
_RECORD: Final = 18  # 16 bytes of id, a u16 index into the principals
_U16: Final = struct.Struct(">H")

# path -> ((inode, size, mtime_ns), Writers): a long-lived process reads the file once.
_MEMO: dict[str, tuple[tuple[int, int, int], Writers]] = {}
_MEMO_LOCK = threading.Lock()


class _Damaged(Exception):
    pass


class Writers:
    """The writer of each entry in the history of ``tip``."""

    __slots__ = ("tip", "principals", "records", "n")

    def __init__(self, tip: str | None, principals: list[str], records: bytes) -> None:
        self.tip = tip
        self.principals = principals
        self.records = records
        self.n = len(records) // _RECORD

    def of(self, entry_id: str) -> str | None:
        """The principal whose verified signature added ``entry_id``, else None."""
        try:
            want = bytes.fromhex(entry_id)
        except ValueError:
            return None
        if len(want) != 16:
            return None
        lo, hi, recs = 0, self.n, self.records
        while lo < hi:
            mid = (lo + hi) // 2
            at = mid * _RECORD
            found = recs[at : at + 16]
            if found < want:
                lo = mid + 1
            elif found > want:
                hi = mid
            else:
                (index,) = _U16.unpack_from(recs, at + 16)
                return self.principals[index] if index < len(self.principals) else None
        return None

    def items(self) -> Iterator[tuple[bytes, str]]:
        recs = self.records
        for at in range(0, len(recs), _RECORD):
            (index,) = _U16.unpack_from(recs, at + 16)
            if index < len(self.principals):
                yield recs[at : at + 16], self.principals[index]

    def dump(self) -> bytes:
        names = "".join(f"{p}\n" for p in self.principals).encode()
        body = names + self.records
        head = b"%s %s %d %d %d\n" % (
            FORMAT,
            (self.tip or "-").encode(),
            len(self.principals),
            self.n,
            zlib.crc32(body),
        )
        return head + body

    @classmethod
    def load(cls, data: bytes) -> Writers:
        line, sep, body = data.partition(b"\n")
        parts = line.split(b" ")
        if not sep or len(parts) != 6 or b" ".join(parts[:2]) != FORMAT:
            raise _Damaged("header")
        try:
            tip = parts[2].decode("ascii")
            n_names, n_records, crc = int(parts[3]), int(parts[4]), int(parts[5])
        except (UnicodeDecodeError, ValueError) as exc:
            raise _Damaged("header") from exc
        if zlib.crc32(body) != crc:
            raise _Damaged("checksum")
        names = body.split(b"\n", n_names)
        if len(names) != n_names + 1:
            raise _Damaged("principals")
        records = names.pop()
        if len(records) != n_records * _RECORD:
            raise _Damaged("records")
        try:
            principals = [n.decode("utf-8") for n in names]
        except UnicodeDecodeError as exc:
            raise _Damaged("principals") from exc
        # An index past the principals is checked where it is read (``of``): the checksum
        # catches damage, and a check of every record here would cost a warm read more than
        # the read itself at 100k entries.
        return cls(None if tip == "-" else tip, principals, records)


def _path(git: GitDir) -> str:
    return os.path.join(git.cache_str, CACHE_NAME)


def _read(git: GitDir) -> Writers | None:
    path = _path(git)
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    with _MEMO_LOCK:
        kept = _MEMO.get(path)
    if kept is not None and kept[0] == stamp:
        return kept[1]
    try:
        # Read, never mapped: a file truncated under us is a short read, not a signal.
        with open(path, "rb") as handle:
            data = handle.read()
        found = Writers.load(data)
    except (OSError, _Damaged):
        return None
    with _MEMO_LOCK:
        _MEMO[path] = (stamp, found)
    return found


def _save(git: GitDir, found: Writers) -> None:
    folder = git.cache_str
    tmp = os.path.join(folder, f".{CACHE_NAME}.{os.getpid()}.{threading.get_ident()}.tmp")
    with contextlib.suppress(OSError):
        os.makedirs(folder, exist_ok=True)
        with open(tmp, "wb") as handle:
            handle.write(found.dump())
        os.replace(tmp, _path(git))


def writers(git: GitDir, commit: str | None, repo: Any = None) -> Writers:
    """The writers of every entry in the history of ``commit`` (or more: a cache built at a
    descendant of it answers for its ancestors too). ``repo``: an open pygit2 repository,
    else one is opened only when the cache must grow."""
    if commit is None:
        return Writers(None, [], b"")
    cached = _read(git)
    if cached is not None and cached.tip == commit:
        return cached
    if repo is None:
        import pygit2

        repo = pygit2.Repository(git.path_str)
    import pygit2

    try:
        target = repo[commit].peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        return cached if cached is not None else Writers(None, [], b"")
    walk = None
    base = cached
    if cached is not None and cached.tip is not None:
        walk, reached = _range(repo, target.id, cached.tip)
        if not walk:
            return cached  # an ancestor of the cached tip: already answered for
        if not reached:
            base, walk = None, None  # a rewritten history: walk it all again
    if walk is None:
        walker = repo.walk(target.id, pygit2.GIT_SORT_TOPOLOGICAL | pygit2.GIT_SORT_REVERSE)
        walk = list(walker)
    found = _grow(repo, base, walk, str(target.id))
    _save(git, found)
    return found


def _range(repo: Any, tip: Any, ancestor: str) -> tuple[list[Any], bool]:
    """The commits of ``ancestor..tip``, oldest first, and whether ``ancestor`` is in the
    history of ``tip`` (a commit of the range has it as a parent)."""
    import pygit2

    try:
        hidden = pygit2.Oid(hex=ancestor)
        walker = repo.walk(tip, pygit2.GIT_SORT_TOPOLOGICAL | pygit2.GIT_SORT_REVERSE)
        walker.hide(hidden)
    except (KeyError, ValueError, pygit2.GitError):
        return [repo[tip]], False
    out = list(walker)
    return out, any(hidden in c.parent_ids for c in out)


def _grow(repo: Any, base: Writers | None, commits: Iterable[Any], tip: str) -> Writers:
    known: dict[bytes, str] = dict(base.items()) if base is not None else {}
    policies: dict[tuple[Any, ...], Any] = {}
    for commit in commits:
        added = _added(repo, commit)
        if not added:
            continue
        fresh = [i for i in added if i not in known]
        if not fresh:
            continue
        who = _signer(repo, commit, policies)
        if who is None:
            continue
        for entry in fresh:
            known[entry] = who
    names = sorted(set(known.values()))
    index = {name: n for n, name in enumerate(names)}
    records = b"".join(k + _U16.pack(index[known[k]]) for k in sorted(known))
    return Writers(tip, names, records)


def _memories(tree: Any) -> Any:
    import pygit2

    try:
        found = tree["memories"]
    except KeyError:
        return None
    return found if isinstance(found, pygit2.Tree) else None


def _added(repo: Any, commit: Any) -> list[bytes]:
    """Ids (16 bytes) of the entry files ``commit`` adds: in its tree, in no parent's."""
    import pygit2

    tree = _memories(commit.tree)
    if tree is None:
        return []
    parents = [_memories(p.tree) for p in commit.parents]
    base = parents[0] if parents else None
    paths: list[str] = []
    if base is None:
        paths = list(_files(tree, ""))
    else:
        diff = base.diff_to_tree(tree)
        paths = [d.new_file.path for d in diff.deltas if d.status == pygit2.GIT_DELTA_ADDED]
    out = []
    for path in paths:
        if any(p is not None and _has(p, path) for p in parents[1:]):
            continue  # a merge took it from another parent, whose commit added it
        name = path.rsplit("/", 1)[-1]
        if not name.endswith(".md"):
            continue
        try:
            raw = bytes.fromhex(name[:-3])
        except ValueError:
            continue
        if len(raw) == 16:
            out.append(raw)
    return out


def _files(tree: Any, prefix: str) -> Iterator[str]:
    import pygit2

    for item in tree:
        if isinstance(item, pygit2.Tree):
            yield from _files(item, f"{prefix}{item.name}/")
        else:
            yield f"{prefix}{item.name}"


def _has(tree: Any, path: str) -> bool:
    try:
        tree[path]
    except KeyError:
        return False
    return True


def _signer(repo: Any, commit: Any, policies: dict[tuple[Any, ...], Any]) -> str | None:
    """The principal of the key whose verified signature is on ``commit``, by the policy of
    its first parent (its own for a root commit, as the audit judges it); else None."""
    # The policy and the signature check load tomllib, pygit2 and cryptography: only a
    # commit not yet in the cache pays for them, never a warm query.
    from ..git.gitstore import Snapshot
    from ..signing import verify
    from ..signing.trustpolicy import CONFIG_PATH, GIT_NAMESPACE, SIGNERS_PATH, TrustPolicy

    signature, payload = commit.gpg_signature
    if signature is None:
        return None
    snap = Snapshot(repo, commit.parents[0] if commit.parents else commit)
    key = (snap.blob_id(SIGNERS_PATH), snap.blob_id(CONFIG_PATH))
    try:
        policy = policies.get(key)
        if policy is None:
            policy = TrustPolicy.from_files(snap.read(SIGNERS_PATH), snap.read(CONFIG_PATH))
            policies[key] = policy
        signed_by = verify(signature.decode("ascii", "replace"), payload, GIT_NAMESPACE)
        principal, _ = policy.roles_of(signed_by, GIT_NAMESPACE)
    except (TrussError, ValueError):
        return None
    return principal
