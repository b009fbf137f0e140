"""The recall index: a cache under ``.git/truss/recall/``, keyed by the tree id of ``memories/``.

Files::

    .git/truss/recall/head      which tree the index holds and how: the floor indexes (folder,
                                commit opstamp, file signature), unreadable files, the branch
                                tip it was read from and that tip's [recall] settings
                                (marshal, replaced atomically)
    .git/truss/recall/floor-*/  one tantivy index per trust floor (``floors``): what queries
                                filter, rank and read entries from; and one of the rejected
                                entries, which no query ranks in (``floors.HOLDERS``)
    .git/truss/recall/lock      taken by whoever updates the index (readers never lock)

Life cycle:

* **Warm query** -- read ``HEAD`` and the ref (two small files, ``gitdir``); when the tip is
  the one the head names, the index is current: no git object, no YAML, no pygit2. The read
  gate the caller gives (``view(gate=...)``) then says whether the history may be served.
* **After a write** -- the tip moved: diff the new tip's ``memories/`` tree against the
  head's (only subtrees whose ids differ are read), re-read just the changed files, and hand
  tantivy the deletions and additions: each floor index the entry belongs to, and only those
  (an unverified write touches the unverified floor's alone), committed before the head is
  replaced. tantivy merges its own segments.
* **Rebuild** -- when the head is missing, unreadable, of another format or tokenizer version,
  or a floor index is missing, damaged, a link, or at another commit than the head names (a
  crash between its commit and the head's replacement): read every entry file again and build
  the floor indexes afresh in new folders.

Concurrency: the head is written to a temporary name and ``os.replace``d, so a reader sees a
whole old head or a whole new one; a floor folder no head names is deleted only once older
than a minute, and a reader opens a floor at the commit its head names or not at all
(``Floor``). Updaters serialise on ``lock`` (``flock``) and re-read the head inside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import marshal
import os
import shutil
import stat
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, NamedTuple

from ..errors import ConfigError, EntryError, FloorError, StoreError
from ..format.entryfile import parse
from ..git.gitdamage import damage
from ..git.gitdir import GitDir, Objects, TreeChange, diff_trees, walk_tree
from ..model import Entry, Trust
from .bulk import Prepared, prepare, prepared
from .docs import entry_of
from .floors import (
    BUILD_HEAP,
    HOLDERS,
    Floor,
    FloorMoved,
    FloorWriter,
    doc_of,
    holders_of,
    read_opstamp,
    signature,
    trust_of_code,
)
from .tokenize import TOKENIZER_VERSION

__all__ = ["HEAD_FORMAT", "Gate", "Index", "IndexView", "TipInfo"]

HEAD_FORMAT: Final = 7  # 7: content hashes of the body alone (docs.embed_text)
# What decoding a record whose bytes changed in place raises: marshal's errors, a tuple of
# another shape, a code no table holds.
_UNDECODABLE: Final = (EOFError, ValueError, TypeError, KeyError, IndexError)
REBUILD_AT: Final = 20_000  # changed files; above this a diff costs more than a rebuild
GC_AGE: Final = 60.0  # seconds an unreferenced floor folder is kept for readers in flight
SLOW_INDEX: Final = 2.0  # seconds an index pass runs before the query says what it waits for
SAY_EVERY: Final = 10.0  # seconds between its progress lines after that
# The read gate a caller gives every view: (git directory, commit read) -> why the history
# up to that commit may not be served above unverified, or None when it audits clean.
Gate = Callable[[GitDir, "str | None"], "str | None"]
FloorMeta = tuple[str, int, int]  # folder, commit opstamp, file signature


class TipInfo(NamedTuple):
    """What the branch tip says, as far as recall cares."""

    ref: str | None
    tip: str | None
    tree: str | None  # memories/
    config_blob: str | None
    recall: dict[str, Any]  # truss.toml [recall] at the tip


class _Head(NamedTuple):
    tree: str | None
    tip: TipInfo | None
    floors: dict[str, FloorMeta]
    invalid: dict[str, str]

    def dump(self) -> bytes:
        """marshal's bytes, then their CRC-32 (4 bytes, big-endian): marshal ignores bytes
        after its value, and the checksum tells a head garbled in place from a whole one."""
        tip = None if self.tip is None else tuple(self.tip)
        data = marshal.dumps(
            {
                "format": HEAD_FORMAT,
                "tokenizer": TOKENIZER_VERSION,
                "tree": self.tree,
                "tip": tip,
                "floors": self.floors,
                "invalid": self.invalid,
            }
        )
        return data + zlib.crc32(data).to_bytes(4, "big")

    @classmethod
    def load(cls, data: bytes) -> _Head | None:
        """The head ``data`` holds; None when it is cut short, garbled (its checksum), of
        another format, or not of the shape ``dump`` writes: the index is rebuilt."""
        body, crc = data[:-4], data[-4:]
        if len(data) < 5 or zlib.crc32(body).to_bytes(4, "big") != crc:
            return None
        try:
            raw = marshal.loads(body)
            if raw["format"] != HEAD_FORMAT or raw["tokenizer"] != TOKENIZER_VERSION:
                return None
            tree, tip, floors, invalid = raw["tree"], raw["tip"], raw["floors"], raw["invalid"]
            floors = {str(k): tuple(v) for k, v in floors.items()}
            if set(floors) != {t.value for t in HOLDERS} or not all(
                map(_floor_meta, floors.values())
            ):
                return None
            info = None if tip is None else TipInfo(*tip)
            if not (_text(tree) and (info is None or _tip_info(info))):
                return None
            return cls(tree, info, floors, {str(k): str(v) for k, v in invalid.items()})
        except (EOFError, ValueError, TypeError, KeyError, AttributeError, IndexError):
            return None


def _text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _floor_meta(meta: tuple[Any, ...]) -> bool:
    """A head's record of one floor: (a folder name of ``recall/``, opstamp, signature)."""
    if len(meta) != 3 or not isinstance(meta[0], str) or not meta[0].startswith("floor-"):
        return False
    return os.sep not in meta[0] and all(type(n) is int for n in meta[1:])


def _tip_info(info: TipInfo) -> bool:
    return all(map(_text, info[:4])) and isinstance(info.recall, dict)


class IndexView:
    """The index at one tree: its floor indexes, opened on first use (``floor``), and the
    entries they hold, decoded once per opened floor (``entry``)."""

    __slots__ = ("tree", "tip", "invalid", "state", "refused", "_floors", "_opener")

    def __init__(
        self,
        head: _Head,
        tip: TipInfo | None,
        opener: Callable[[Trust, FloorMeta], Floor],
    ) -> None:
        self.tree = head.tree
        self.tip = tip or head.tip
        self.invalid = head.invalid
        # Equal states hold the same entries: a floor folder name is never reused.
        self.state = tuple(head.floors.values())
        self._floors = head.floors
        self._opener = opener
        # Why the history of the commit read fails the read gate, else None: then nothing
        # above unverified may leave this view.
        self.refused: str | None = None

    def floor(self, trust: Trust) -> Floor:
        """The floor index of ``trust`` as the head names it (``FloorError`` when it is not:
        damaged; ``FloorMoved`` when an updater moved it on since this view was read)."""
        return self._opener(trust, self._floors[trust.value])

    def entry(self, floor: Floor, hit: Sequence[Any]) -> Entry:
        """The ``Entry`` of a hit ``(score, id, trust code, address)`` of ``floor``: its record
        is stored in the floor of its own trust."""
        entry_id, code, address = hit[1], hit[2], hit[3]
        memo = floor.memo
        found: Entry | None = memo.get(entry_id)
        if found is not None:
            return found
        try:
            trust = trust_of_code(code)
        except KeyError:
            raise FloorError(f"{floor.path}: {entry_id} has trust code {code}") from None
        home = floor if trust is floor.trust else self.floor(trust)
        if home is not floor:
            address = home.address_of(entry_id)
            if address is None:
                raise FloorError(f"{entry_id} is in {floor.path} but not in {home.path}")
        raw = home.stored(address, "rec")
        if raw is None:
            raise FloorError(f"{home.path}: {entry_id} has no record")
        try:
            found = entry_of(marshal.loads(raw), entry_id)
        except _UNDECODABLE as exc:  # bytes changed in place: not a record any more
            raise FloorError(f"{home.path}: {entry_id}'s record is damaged ({exc!r})") from exc
        # The filter read the trust tags, the caller gets the record: they must agree, or
        # damaged files could pass an unverified entry off at the verified floor.
        if found.trust is not trust or floor.trust not in holders_of(trust):
            raise FloorError(f"{home.path}: {entry_id} contradicts its record")
        if len(memo) > 8192:
            memo.clear()
        memo[entry_id] = found
        return found


# Floor indexes open in this process, by cache folder and the head's record of them: a
# searcher reads a private copy of the commit that record names (``Floor``), so one opened
# for an earlier ``Index`` of the same store (a server opens one per call) answers right for
# as long as a head names that record.
_OPEN_FLOORS: dict[tuple[str, FloorMeta], Floor] = {}
# A searcher's native threads do not survive a fork: a forked child opens its own.
os.register_at_fork(after_in_child=_OPEN_FLOORS.clear)


class Index:
    """The recall cache of one repository."""

    def __init__(self, git: GitDir, repo: Any = None) -> None:
        self.git = git
        self.dir_str = os.path.join(git.cache_str, "recall")  # a query needs no pathlib
        self.objects = Objects(git, repo)
        self.stats: dict[str, Any] = {}
        self._head_cache: tuple[bytes, _Head] | None = None
        self._checked: _Head | None = None
        self._commits: dict[str, TipInfo] = {}  # commit_info's, by commit id
        # Where a long rebuild says what the query waits for (``_Said``); stderr by default.
        self.note: Callable[[str], None] = _to_stderr

    # -- the branch tip ------------------------------------------------------------------

    def tip_info(self, head: _Head | None = None) -> TipInfo:
        """The tip of HEAD's branch: free when it is the one the head recorded."""
        try:
            ref, tip = self.git.head()
        except LookupError:
            # A HEAD the hand reader cannot follow (a packed ref, a worktree): pygit2, whose
            # import a warm query must not pay for, reads it.
            import pygit2

            repo = self.objects.repo
            try:
                ref = None if repo.head_is_detached else repo.references["HEAD"].target
                tip = None if repo.head_is_unborn else str(repo.head.target)
            except (pygit2.GitError, KeyError, ValueError) as exc:
                found = damage(self.git.common_str)
                if found is None:
                    raise StoreError(f"cannot read HEAD or its branch ({exc})") from exc
                raise found from exc
        known = head.tip if head is not None else None
        if known is not None and known.tip == tip and known.ref == ref:
            return known
        return self._info(ref, tip, known)

    def commit_info(self, commit: str, known: TipInfo | None) -> TipInfo:
        """What ``commit`` says (its truss.toml's ``[recall]``...), for a view of a snapshot:
        a query at a commit follows that commit's settings, whatever the index head last
        recorded. Kept by commit id (a commit never changes)."""
        found = self._commits.get(commit)
        if found is None:
            found = self._info(None, commit, known)
            if len(self._commits) >= 64:
                self._commits.clear()
            self._commits[commit] = found
        return found

    def _info(self, ref: str | None, tip: str | None, known: TipInfo | None) -> TipInfo:
        if tip is None:
            return TipInfo(ref, None, None, None, {})
        root = self.objects.commit_tree(tip)
        tree = self.objects.subtree(root, "memories")
        config = self.objects.entry(root, "truss.toml")
        blob = config.sha if config is not None and not config.is_tree else None
        if known is not None and blob == known.config_blob:
            recall = known.recall  # a write rarely touches truss.toml: not parsed again
        else:
            recall = _recall_section(self.objects.blob(blob)) if blob else {}
        return TipInfo(ref, tip, tree, blob, recall)

    # -- opening -------------------------------------------------------------------------

    def view(
        self,
        tree: str | None = None,
        *,
        gate: Gate,
        at_tip: bool = True,
        commit: str | None = None,
    ) -> IndexView:
        """The index brought up to date with the branch tip's ``memories/`` tree, or -- with
        ``at_tip=False`` -- with ``tree`` (None: no ``memories/`` at all), for a caller that
        holds a snapshot of ``commit``. ``gate`` is the read gate of whoever opens the read:
        ``refused`` is what it says of the commit read (there is no view without one)."""
        opened = self._view(tree, at_tip)
        if at_tip:
            commit = opened.tip.tip if opened.tip is not None else None
        elif commit is not None and (opened.tip is None or opened.tip.tip != commit):
            opened.tip = self.commit_info(commit, opened.tip)
        opened.refused = gate(self.git, commit)
        return opened

    def _view(self, tree: str | None, at_tip: bool) -> IndexView:
        self._guard_dir()
        for _attempt in range(3):
            head = self._load_head()
            tip = self.tip_info(head) if at_tip else None
            target = tip.tree if tip is not None else tree
            if head is not None and head.tree == target and self._intact(head):
                if tip is not None and head.tip != tip:
                    self._remember_tip(tip)
                return IndexView(head, tip, self._open_floor)
            with self._lock():
                current = self._load_head()
                if current is None or current.tree != target or not self._intact(current):
                    # Under the lock no updater is at work: a floor index that disagrees
                    # with the head is damage (or a crash) and is rebuilt.
                    intact = current if current is not None and self._intact(current) else None
                    current = self._update(intact, target, tip)
                if current.tree == target:
                    return IndexView(current, tip, self._open_floor)
        raise StoreError(f"the recall index in {self.dir_str} keeps changing; try again")

    def _intact(self, head: _Head) -> bool:
        """Whether every floor folder the head names is at the commit it records: checked
        once per head (the open itself checks again, ``Floor``, and a damaged floor found
        later drops the head: ``discard``)."""
        if head is self._checked:
            return True
        found = all(
            (self.dir_str, meta) in _OPEN_FLOORS
            or signature(os.path.join(self.dir_str, meta[0])) == meta[2]
            for meta in head.floors.values()
        )
        self._checked = head if found else None
        return found

    def _open_floor(self, trust: Trust, meta: FloorMeta) -> Floor:
        found = _OPEN_FLOORS.get((self.dir_str, meta))
        if found is None:
            name, opstamp, sign = meta
            try:
                found = Floor(os.path.join(self.dir_str, name), trust, opstamp, sign)
            except FloorError:
                head = self._load_head()
                if head is None or meta not in head.floors.values():
                    # An updater committed since this view read the head: not damage.
                    raise FloorMoved(f"{name} moved on; ask again") from None
                raise
            if len(_OPEN_FLOORS) >= 16:
                _OPEN_FLOORS.clear()
            _OPEN_FLOORS[(self.dir_str, meta)] = found
        return found

    def _guard_dir(self) -> None:
        """The cache must be a plain folder of this git directory. A symbolic link (or a file)
        planted at ``.git/truss/recall`` is never followed -- the index it points to could name
        this tree and hold anything -- but removed (the link, not its target), so the index is
        rebuilt in a real folder. ``.git/truss`` itself is shared with the read gate: a link
        there is an error to resolve by hand."""
        try:
            parent = os.lstat(self.git.cache_str)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(parent.st_mode):
            raise StoreError(
                f"{self.git.cache_str} is not a plain folder (a symbolic link?); remove it and "
                "run the command again: the caches it holds are rebuilt"
            )
        try:
            mode = os.lstat(self.dir_str).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISDIR(mode):
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.dir_str)
        self._forget()

    def _forget(self) -> None:
        self._head_cache = None
        self._checked = None
        # ``list`` copies the keys at once: another thread may open a floor meanwhile.
        for key in [k for k in list(_OPEN_FLOORS) if k[0] == self.dir_str]:
            _OPEN_FLOORS.pop(key, None)

    def discard(self) -> None:
        """Forget the index (its head), so the next view rebuilds it: for a floor found
        damaged while read, whose files still looked like its commit."""
        head = os.path.join(self.dir_str, "head")
        with self._lock(), contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.lstat(head).st_mode):
                shutil.rmtree(head)  # a folder put in its place: never a head
            else:
                os.unlink(head)
        self._forget()

    def _load_head(self) -> _Head | None:
        try:
            fd = os.open(os.path.join(self.dir_str, "head"), os.O_RDONLY | _NOFOLLOW)
        except OSError:
            return None  # missing, or a link planted in its place (never followed): rebuild
        try:
            data = _read_all(fd)
        except OSError:
            return None
        cached = self._head_cache
        if cached is not None and cached[0] == data:
            return cached[1]
        head = _Head.load(data)
        if head is not None:
            self._head_cache = (data, head)
        return head

    def _save_head(self, head: _Head) -> None:
        """Write ``head``, whose floors were just committed or checked (under the lock): it is
        kept as read and as checked, so the next update does not look at its floors again."""
        os.makedirs(self.dir_str, exist_ok=True)
        tmp = os.path.join(self.dir_str, f".head.{os.getpid()}.tmp")
        data = head.dump()
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, os.path.join(self.dir_str, "head"))
        self._head_cache = (data, head)
        self._checked = head

    def _remember_tip(self, tip: TipInfo) -> None:
        """Record a new tip whose ``memories/`` did not change, so the next query reads no
        object (under the lock, so an older head never replaces a racing updater's)."""
        with self._lock():
            head = self._load_head()
            if head is not None and head.tree == tip.tree:
                with contextlib.suppress(OSError):
                    self._save_head(head._replace(tip=tip))

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self._guard_dir()
        os.makedirs(self.dir_str, exist_ok=True)
        with open(os.path.join(self.dir_str, "lock"), "a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    # -- updating ------------------------------------------------------------------------

    def _update(self, head: _Head | None, target: str | None, tip: TipInfo | None) -> _Head:
        started = time.perf_counter()
        new = None
        if head is not None:
            try:
                changes = [
                    c
                    for c in diff_trees(self.objects, head.tree, target, "memories")
                    if c.path.endswith(".md")
                ]
            except (KeyError, ValueError, StoreError):
                changes = None  # e.g. the old tree is gone (history rewritten): rebuild
            if changes is not None and len(changes) <= REBUILD_AT:
                with contextlib.suppress(FloorError):
                    said = _Said(self.note, len(changes), "changed entry files", started)
                    new = self._apply(head, changes, target, tip, said)
                    self.stats = {"op": "update", "changed": len(changes)}
        if new is None:
            new = self._rebuild(target, tip, started)
            self.stats = {"op": "rebuild"}
        self.stats["seconds"] = time.perf_counter() - started
        return new

    def _apply(
        self,
        head: _Head,
        changes: Sequence[TreeChange],
        target: str | None,
        tip: TipInfo | None,
        said: _Said,
    ) -> _Head:
        floors = _Writers(self.dir_str, head.floors)
        invalid = dict(head.invalid)
        for change in changes:
            said.tick()
            if change.old is not None and invalid.pop(change.path, None) is None:
                old = self._read(change.path, change.old, {})
                if old is not None:
                    floors.delete(old)
            if change.new is not None:
                entry = self._read(change.path, change.new, invalid)
                if entry is not None:
                    floors.add(entry)
        new = _Head(target, tip, floors.commit(), invalid)
        self._save_head(new)
        self._collect(new)
        said.done()
        return new

    def _read(self, path: str, blob: str, invalid: dict[str, str]) -> Entry | None:
        try:
            return parse(self.objects.blob(blob), path)
        except EntryError as exc:
            invalid[path] = exc.message
            return None

    def _rebuild(self, target: str | None, tip: TipInfo | None, started: float) -> _Head:
        floors = _Writers(self.dir_str, None)
        invalid: dict[str, str] = {}
        said = _Said(self.note, 0, "entry files", started)
        if target is not None:
            files = [f for f in walk_tree(self.objects, target, "memories") if f[0].endswith(".md")]
            said.total = len(files)
            for status, path, found in prepared(self.git, self.objects, files):
                said.tick()
                if status == "ok":
                    floors.add_prepared(found)
                else:
                    invalid[path] = found
        head = _Head(target, tip, floors.commit(), invalid)
        self._save_head(head)
        self._collect(head)
        said.done()
        return head

    def _collect(self, head: _Head) -> None:
        """Delete floor folders and temporary files no head names, older than ``GC_AGE``."""
        now = time.time()
        keep = {meta[0] for meta in head.floors.values()}
        try:
            names = os.listdir(self.dir_str)
        except OSError:
            return  # the folder went away under us: nothing left to collect
        for name in names:
            if name in keep or not (name.startswith("floor-") or name.endswith(".tmp")):
                continue
            path = os.path.join(self.dir_str, name)
            with contextlib.suppress(OSError):
                info = os.lstat(path)
                if now - info.st_mtime <= GC_AGE:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)


class _Said:
    """What a query waiting on a long index pass is told: nothing for a pass shorter than
    ``SLOW_INDEX`` seconds; after that a line saying what it does, how far it is and about
    how long is left, again every ``SAY_EVERY`` seconds, and one when it is done. A rebuild
    after a bulk import of a million entries takes minutes: a query must not look frozen."""

    def __init__(self, note: Callable[[str], None], total: int, what: str, started: float):
        self.note, self.total, self.what, self.started = note, total, what, started
        self.count = 0
        self.said = False
        self.next = started + SLOW_INDEX
        self.mark = (started, 0)  # the rate is taken from the first line on (not the walk)

    def tick(self) -> None:
        self.count += 1
        if self.count & 255:
            return  # the clock once in 256 files: a rebuild reads a million
        now = time.perf_counter()
        if now < self.next:
            return
        self.next = now + SAY_EVERY
        left = ""
        since, done = self.mark
        if self.said and self.total and self.count > done:
            rest = (now - since) / (self.count - done) * (self.total - self.count)
            left = f", about {rest:.0f} s left"
        else:
            self.mark = (now, self.count)
        head = (
            ""
            if self.said
            else (
                f"truss-files: indexing {self.total} {self.what} for this query (once, after a "
                "big change: the next query is warm): "
            )
        )
        self.note(f"{head or 'truss-files: indexing: '}{self.count}/{self.total}{left}")
        self.said = True

    def done(self) -> None:
        if self.said:
            took = time.perf_counter() - self.started
            self.note(f"truss-files: indexed {self.total} {self.what} in {took:.0f} s")


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_TRUSTS: Final = {t.value: t for t in Trust}


def _read_all(fd: int) -> bytes:
    """The bytes of the open file ``fd``, which is closed (``os.read``: no buffered wrapper
    on a warm query's path)."""
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class _Writers:
    """Deletions and additions for the floor indexes, committed together: a writer is opened
    only for a floor that changes. ``floors`` None: build every floor afresh, in new
    folders, with writers sized for a bulk build."""

    def __init__(self, folder: str, floors: dict[str, FloorMeta] | None) -> None:
        self.folder = folder
        self.fresh = floors is None
        self.meta: dict[str, FloorMeta] = dict(floors or {})
        self.writers: dict[str, FloorWriter] = {}
        if self.fresh:
            stamp = f"{os.getpid()}-{time.time_ns():x}"
            for trust in HOLDERS:
                self.meta[trust.value] = (f"floor-{trust.value}-{stamp}", 0, 0)

    def _writer(self, floor: str) -> FloorWriter:
        found = self.writers.get(floor)
        if found is None:
            name, opstamp, sign = self.meta[floor]
            path = os.path.join(self.folder, name)
            if self.fresh:
                found = FloorWriter(path, create=True, heap=BUILD_HEAP // len(HOLDERS))
            else:
                # Changes go only onto the commit the head names: a floor index a crash left
                # ahead of it already holds some of them (or is damaged): rebuild instead.
                if signature(path) != sign or read_opstamp(path) != opstamp:
                    raise FloorError(f"{path} is not at the commit the index head names")
                found = FloorWriter(path)
            self.writers[floor] = found
        return found

    def delete(self, entry: Entry) -> None:
        for trust in holders_of(entry.trust):
            self._writer(trust.value).delete(entry.id)

    def add(self, entry: Entry) -> None:
        self.add_prepared(prepare(entry))

    def add_prepared(self, found: Prepared) -> None:
        trust_value, parts, record = found
        own = _TRUSTS[trust_value]
        bare = None  # the document without its record, made once for the floors below home
        for trust in holders_of(own):  # rejected: the rejected entries' index alone
            if trust is own:
                doc = doc_of(parts, record)
            else:
                doc = bare = bare or doc_of(parts, None)
            self._writer(trust.value).add(doc)

    def commit(self) -> dict[str, FloorMeta]:
        if self.fresh:
            for trust in HOLDERS:
                self._writer(trust.value)  # every index exists, empty or not
        for floor, writer in self.writers.items():
            opstamp, sign = writer.commit()
            self.meta[floor] = (self.meta[floor][0], opstamp, sign)
        return self.meta


def _recall_section(data: bytes) -> dict[str, Any]:
    import tomllib  # only when the tip moved: a warm query reads the head's copy (cold path)

    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"truss.toml: not valid TOML ({exc}); fix the file") from exc
    section = raw.get("recall", {})
    if not isinstance(section, dict):
        raise ConfigError('truss.toml: [recall] must be a table, e.g. [recall] mode = "exact"')
    out = {k: v for k, v in section.items() if isinstance(v, str | int | float | bool)}
    # The salience policy (recall/salience.py) and [memory] scope (format/scope.py) shape a query
    # too: kept with [recall] so a query reads them from the same cached head.
    policy = raw.get("policy", {})
    if isinstance(policy, dict) and isinstance(policy.get("salience"), str):
        out["policy.salience"] = policy["salience"]
    memory = raw.get("memory", {})
    if isinstance(memory, dict) and isinstance(memory.get("scope"), str):
        out["memory.scope"] = memory["scope"]
    return out
