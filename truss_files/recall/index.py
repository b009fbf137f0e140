"""The recall index: a cache under ``.git/truss/recall/``, keyed by the tree id of ``memories/``.

Files::

    .git/truss/recall/head        which tree the index holds and how: segments, deletions,
                                  unreadable files, the branch tip it was read from, and that
                                  tip's [recall] settings (marshal, replaced atomically)
    .git/truss/recall/seg-*.seg   immutable segments (``segment.py``), sorted by entry id:
                                  records, class bytes, groups, runs -- what filters read
    .git/truss/recall/floor-*/    one tantivy index per trust floor (``floors.py``): what
                                  queries rank with; the head names each with its commit
                                  opstamp, its live documents and their total length
    .git/truss/recall/lock        taken by whoever updates the index (readers never lock)

Life cycle:

* **Warm query** -- read ``HEAD`` and the ref (two small files, ``gitdir``); when the tip is
  the one the head names, the index is current: no git object, no YAML, no pygit2. The read
  gate (``readgate``) then finds the tip in ``.git/truss/audited``: one more small file.
* **After a write** -- the tip moved: read the new tip's ``memories/`` tree id, diff it
  against the head's tree (only subtrees whose ids differ are read), re-read just the changed
  files, and write them as one new small segment; the files they replace are marked deleted
  in the head. Small segments merge in tiers of four (each entry is rewritten
  ~log4(N) times over its life), a segment more than half deleted is compacted. The same
  deletions and additions go to each floor index the entry belongs to (an unverified write
  touches the unverified floor's alone), committed before the head is replaced.
* **Rebuild** -- when the head is missing, unreadable, of another format or tokenizer version,
  a segment is missing or damaged, or a floor index is missing, damaged, a link, or at
  another commit than the head names (a crash between its commit and the head's
  replacement): read every entry file again (in parallel worker processes above 5k files)
  and build the floor indexes afresh in new folders.

Concurrency: every file is written to a temporary name and ``os.replace``d, so a reader sees a
whole old file or a whole new one. Segments are immutable and only deleted once unreferenced
and older than a minute, so a reader that read the head a moment ago can still open them (and
retries from the head if one vanished). Updaters serialise on ``lock`` (``flock``) and re-read
the head inside it; a process that loses a race to another updater simply recomputes.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import stat
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from ..errors import ConfigError, EntryError, StoreError
from ..gitdir import Change, GitDir, Objects, diff_trees
from ..model import Trust
from .floors import FLOORS, Floor, FloorError, FloorMoved
from .floorwrite import FloorChanges, FloorMeta
from .segment import FORMAT, NOFOLLOW, Doc, Segment, SegmentError, write_segment
from .tokenize import TOKENIZER_VERSION

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["HEAD_FORMAT", "Index", "IndexView", "TipInfo"]

HEAD_FORMAT: Final = 2
MERGE_TIER: Final = 4
PARALLEL_AT: Final = 5_000  # files; below this a rebuild stays in-process (spawn ~0.3 s)
REBUILD_AT: Final = 20_000  # changed files; above this a diff costs more than a rebuild
GC_AGE: Final = 60.0  # seconds an unreferenced segment is kept for readers in flight


class TipInfo(NamedTuple):
    """What the branch tip says, as far as recall cares."""

    ref: str | None
    tip: str | None
    tree: str | None  # memories/
    config_blob: str | None
    recall: dict[str, Any]  # truss.toml [recall] at the tip


class _Head:
    """The head file: the index's tree, tip, segments, deletions, unreadable files, floors."""

    __slots__ = ("tree", "tip", "segments", "deleted", "invalid", "floors", "state")

    def __init__(
        self,
        tree: str | None,
        tip: TipInfo | None,
        segments: list[str],
        deleted: dict[str, set[int]],
        invalid: dict[str, str],
        floors: dict[str, FloorMeta],
        state: str = "",
    ) -> None:
        self.tree = tree
        self.tip = tip
        self.segments = segments
        self.deleted = deleted
        self.invalid = invalid
        self.floors = floors
        self.state = state  # identifies the set of live documents (segments and deletions)

    def dump(self) -> bytes:
        tip = self.tip
        return marshal.dumps(
            {
                "format": HEAD_FORMAT,
                "segment_format": FORMAT,
                "tokenizer": TOKENIZER_VERSION,
                "tree": self.tree,
                "tip": None
                if tip is None
                else (tip.ref, tip.tip, tip.tree, tip.config_blob, tip.recall),
                "segments": self.segments,
                "deleted": {k: sorted(v) for k, v in self.deleted.items() if v},
                "invalid": self.invalid,
                "floors": self.floors,
            }
        )

    @classmethod
    def load(cls, data: bytes) -> _Head | None:
        try:
            raw = marshal.loads(data)
            if (
                raw["format"] != HEAD_FORMAT
                or raw["segment_format"] != FORMAT
                or raw["tokenizer"] != TOKENIZER_VERSION
            ):
                return None
            tip = raw["tip"]
            return cls(
                tree=raw["tree"],
                tip=None if tip is None else TipInfo(*tip),
                segments=list(raw["segments"]),
                deleted={k: set(v) for k, v in raw["deleted"].items()},
                invalid=dict(raw["invalid"]),
                floors={str(k): tuple(v) for k, v in raw["floors"].items()},
                state=repr((raw["segments"], raw["deleted"], raw["floors"])),
            )
        except (EOFError, ValueError, TypeError, KeyError):
            return None


class IndexView:
    """The index at one tree: segments and, per segment, the docnos no longer in the tree;
    the floor indexes, opened on first use (``floor``)."""

    __slots__ = (
        "tree",
        "segments",
        "deleted",
        "invalid",
        "tip",
        "state",
        "refused",
        "floor_meta",
        "_opener",
        "_by_size",
    )

    def __init__(
        self,
        tree: str | None,
        segments: list[Segment],
        deleted: list[set[int]],
        invalid: dict[str, str],
        tip: TipInfo | None,
        state: str = "",
        floor_meta: dict[str, FloorMeta] | None = None,
        opener: Any = None,
    ) -> None:
        self.tree = tree
        self.segments = segments
        self.deleted = deleted
        self.invalid = invalid
        self.tip = tip
        self.state = state  # equal states hold the same live documents
        self.floor_meta = floor_meta or {}
        self._opener = opener
        self._by_size: list[int] | None = None
        # Why the history of the commit read fails the audit (``readgate``), else None: then
        # nothing above unverified may leave this view.
        self.refused: str | None = None

    def __len__(self) -> int:
        return sum(s.n - len(d) for s, d in zip(self.segments, self.deleted, strict=True))

    def floor(self, trust: Trust) -> Floor:
        """The floor index of ``trust`` as the head names it (raises ``FloorError`` when it
        is not: damaged, or moved on by an updater since this view was read)."""
        meta = self.floor_meta.get(trust.value)
        if meta is None or self._opener is None:
            raise FloorError(f"no {trust.value} floor index")
        found: Floor = self._opener(meta)
        return found

    def locate(self, entry_id: str) -> tuple[int, int] | None:
        """``(segment number, docno)`` of a live document. An id is live in one segment at
        most, so the largest (most likely) are searched first."""
        if self._by_size is None:
            self._by_size = sorted(range(len(self.segments)), key=lambda i: -self.segments[i].n)
        for number in self._by_size:
            docno = self.segments[number].find(entry_id)
            if docno is not None and docno not in self.deleted[number]:
                return number, docno
        return None

    def live(self) -> Iterator[tuple[int, int]]:
        """Every (segment number, docno) in the tree."""
        for number, (seg, gone) in enumerate(zip(self.segments, self.deleted, strict=True)):
            for docno in range(seg.n):
                if docno not in gone:
                    yield number, docno


# Floor indexes open in this process, by cache folder and the head's record of them (its
# folder, opstamp and file signature): a searcher reads a private copy of the commit that
# record names (``Floor``), so one opened for an earlier ``Index`` of the same store (a server
# opens one per call) answers right for as long as a head names that record.
_OPEN_FLOORS: dict[tuple[str, FloorMeta], Floor] = {}


class Index:
    """The recall cache of one repository."""

    def __init__(self, git: GitDir, repo: Any = None) -> None:
        self.git = git
        self.dir_str = os.path.join(git.cache_str, "recall")  # a query needs no pathlib
        self.objects = Objects(git, repo)
        self.stats: dict[str, Any] = {}
        self._segments: dict[str, Segment] = {}
        self._floors: dict[FloorMeta, Floor] = {}
        self._head_cache: tuple[bytes, _Head] | None = None

    @property
    def dir(self) -> Path:
        from pathlib import Path

        return Path(self.dir_str)

    # -- the branch tip ------------------------------------------------------------------

    def tip_info(self, head: _Head | None = None) -> TipInfo:
        """The tip of HEAD's branch: free when it is the one the head recorded."""
        try:
            ref, tip = self.git.head()
        except LookupError:
            import pygit2

            repo = self.objects.repo
            try:
                ref = None if repo.head_is_detached else repo.references["HEAD"].target
                tip = None if repo.head_is_unborn else str(repo.head.target)
            except (pygit2.GitError, KeyError, ValueError) as exc:
                from ..gitdamage import damage

                found = damage(self.git.common_str)
                if found is None:
                    raise StoreError(f"cannot read HEAD or its branch ({exc})") from exc
                raise found from exc
        known = head.tip if head is not None else None
        if known is not None and known.tip == tip and known.ref == ref:
            return known
        return self._read_tip(ref, tip)

    def _read_tip(self, ref: str | None, tip: str | None) -> TipInfo:
        if tip is None:
            return TipInfo(ref, None, None, None, {})
        root = self.objects.commit_tree(tip)
        tree = self.objects.subtree(root, "memories")
        config = self.objects.entry(root, "truss.toml")
        blob = config.sha if config is not None and not config.is_tree else None
        recall = _recall_section(self.objects.blob(blob)) if blob else {}
        return TipInfo(ref, tip, tree, blob, recall)

    # -- opening -------------------------------------------------------------------------

    def view(
        self, tree: str | None = None, *, at_tip: bool = True, commit: str | None = None
    ) -> IndexView:
        """The index brought up to date with the branch tip's ``memories/`` tree, or -- with
        ``at_tip=False`` -- with ``tree`` (None: no ``memories/`` at all), for a caller that
        holds a snapshot of ``commit``.

        Every read through the index passes here once, so this is where the read gate runs:
        ``refused`` says whether the history of the commit read audits clean (warm: one small
        file; otherwise only the new commits are audited)."""
        from ..readgate import refusal

        opened = self._view(tree, at_tip)
        if at_tip:
            commit = opened.tip.tip if opened.tip is not None else None
        opened.refused = refusal(self.git, commit)
        return opened

    def _view(self, tree: str | None, at_tip: bool) -> IndexView:
        self._guard_dir()
        for _attempt in range(3):
            head = self._load_head()
            tip = self.tip_info(head) if at_tip else None
            target = tip.tree if tip is not None else tree
            if head is not None and head.tree == target:
                opened = self._open(head, tip)
                if opened is not None:
                    if tip is not None and head.tip != tip:
                        self._remember_tip(tip)
                    return opened
            with self._lock():
                current = self._load_head()
                opened = None
                if current is not None and current.tree == target:
                    opened = self._open(current, tip)
                    if opened is None:
                        # Under the lock no updater is at work: a segment or a floor index
                        # that disagrees with the head is damage (or a crash): rebuild.
                        current = None
                if opened is None:
                    opened = self._open(self._update(current, target, tip), tip)
                if opened is not None:
                    return opened
        raise StoreError(f"the recall index in {self.dir} keeps changing; try again")

    def _open(self, head: _Head, tip: TipInfo | None) -> IndexView | None:
        segments = []
        try:
            for name in head.segments:
                seg = self._segments.get(name)
                if seg is None:
                    # Names are never reused and files never change: an open segment stays good
                    # (its mapping survives the file's deletion), decoded columns and all.
                    seg = self._segments[name] = Segment(os.path.join(self.dir_str, name))
                segments.append(seg)
        except SegmentError:
            return None
        if len(self._segments) > len(segments):
            # Forget merged-away segments; views still using one keep it mapped until dropped.
            self._segments = {name: self._segments[name] for name in head.segments}
        if head.tree is not None and set(head.floors) != {t.value for t in FLOORS}:
            return None
        # A floor index is checked when a query first opens it (``Floor``: its opstamp and
        # files against the head's record), so a crash that left one ahead of the head, or
        # one damaged, removed or replaced by a link, is found there and rebuilt.
        deleted = [head.deleted.get(name, set()) for name in head.segments]
        return IndexView(
            head.tree,
            segments,
            deleted,
            head.invalid,
            tip or head.tip,
            head.state,
            head.floors,
            self._open_floor,
        )

    def _open_floor(self, meta: FloorMeta) -> Floor:
        found = self._floors.get(meta) or _OPEN_FLOORS.get((self.dir_str, meta))
        if found is None:
            name, opstamp, n_docs, total, sign = meta
            try:
                found = Floor(os.path.join(self.dir_str, name), opstamp, n_docs, total, sign)
            except FloorError:
                head = self._load_head()
                if head is None or meta not in head.floors.values():
                    # An updater committed since this view read the head: not damage.
                    raise FloorMoved(f"{name} moved on; ask again") from None
                raise
            if len(_OPEN_FLOORS) >= 12:
                _OPEN_FLOORS.clear()
            _OPEN_FLOORS[(self.dir_str, meta)] = found
        if meta not in self._floors:
            if len(self._floors) >= 6:
                self._floors.clear()
            self._floors[meta] = found
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
        self._head_cache = None
        self._segments = {}
        self._floors = {}

    def discard(self) -> None:
        """Forget the index (its head), so the next view rebuilds it: for a segment found
        damaged while read, whose header and length still checked out."""
        with self._lock(), contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.dir_str, "head"))
        for key in [k for k in _OPEN_FLOORS if k[0] == self.dir_str]:
            _OPEN_FLOORS.pop(key, None)
        self._head_cache = None
        self._segments = {}
        self._floors = {}

    def _load_head(self) -> _Head | None:
        try:
            fd = os.open(os.path.join(self.dir_str, "head"), os.O_RDONLY | NOFOLLOW)
        except OSError:
            return None  # missing, or a link planted in its place (never followed): rebuild
        try:
            with open(fd, "rb") as handle:
                data = handle.read()
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
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".head.{os.getpid()}.tmp"
        tmp.write_bytes(head.dump())
        os.replace(tmp, self.dir / "head")

    def _remember_tip(self, tip: TipInfo) -> None:
        """Record a new tip whose ``memories/`` did not change, so the next query reads no
        object. Under the lock: written outside it, an older head could replace a racing
        updater's newer one after that updater collected the older head's segments."""
        with self._lock():
            head = self._load_head()
            if head is not None and head.tree == tip.tree:
                head.tip = tip
                with contextlib.suppress(OSError):
                    self._save_head(head)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self._guard_dir()
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: racing updaters just recompute
            yield
            return
        with open(self.dir / "lock", "a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    # -- updating ------------------------------------------------------------------------

    def _update(self, head: _Head | None, target: str | None, tip: TipInfo | None) -> _Head:
        started = time.perf_counter()
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
                try:
                    new = self._apply(head, changes, target, tip)
                except (SegmentError, FloorError):
                    new = None  # a segment or floor index an update needs is damaged: rebuild
                if new is not None:
                    self.stats = {"op": "update", "changed": len(changes)}
                    self.stats["seconds"] = time.perf_counter() - started
                    return new
        new = self._rebuild(target, tip)
        self.stats = {"op": "rebuild", "seconds": time.perf_counter() - started}
        return new

    def _apply(
        self, head: _Head, changes: Sequence[Change], target: str | None, tip: TipInfo | None
    ) -> _Head | None:
        try:
            segments = [Segment(self.dir / name) for name in head.segments]
        except SegmentError:
            return None
        try:
            return self._apply_to(head, segments, changes, target, tip)
        finally:
            for seg in segments:
                seg.close()

    def _apply_to(
        self,
        head: _Head,
        segments: list[Segment],
        changes: Sequence[Change],
        target: str | None,
        tip: TipInfo | None,
    ) -> _Head:
        if head.tree is not None and set(head.floors) != {t.value for t in FLOORS}:
            raise FloorError("the head names no floor indexes")
        deleted = {name: set(head.deleted.get(name, ())) for name in head.segments}
        invalid = dict(head.invalid)
        added: list[tuple[str, str]] = []
        floors = FloorChanges(self.dir_str, head.floors)
        for change in changes:
            if change.old is not None:
                invalid.pop(change.path, None)
                entry_id = change.path.rsplit("/", 1)[-1][:-3]
                for name, seg in zip(reversed(head.segments), reversed(segments), strict=True):
                    docno = seg.find(entry_id)
                    if docno is not None and docno not in deleted[name]:
                        deleted[name].add(docno)
                        floors.delete(entry_id, seg.cls[docno], seg.lengths[docno])
                        break
            if change.new is not None:
                added.append((change.path, change.new))
        names = list(head.segments)
        if len(added) >= PARALLEL_AT:
            # A bulk import: the changed files are read like a rebuild's, by worker processes.
            from .build import build_segments

            made, bad = build_segments(self, added)
            invalid.update(bad)
        else:
            docs = [d for d in (self._read_doc(p, b, invalid) for p, b in added) if d is not None]
            docs.sort(key=lambda d: d.id)
            made = [self._write(docs)] if docs else []
        for name in made:
            names.append(name)
            deleted[name] = set()
            seg = Segment(self.dir / name)
            try:
                floors.add_segment(seg, range(seg.n))
            finally:
                seg.close()
        # Committed before the head names them: a crash in between leaves a floor index
        # ahead of the head, which the next reader finds and rebuilds.
        committed = floors.commit()
        names, deleted = self._merge(names, deleted)
        new = _Head(target, tip, names, deleted, invalid, committed)
        self._save_head(new)
        self._collect(set(names))
        return new

    def _read_doc(self, path: str, blob: str, invalid: dict[str, str]) -> Doc | None:
        from .docs import to_doc
        from .scan import scan

        try:
            entry = scan(self.objects.blob(blob), path)
        except EntryError as exc:
            invalid[path] = exc.message
            return None
        return to_doc(entry, path.rsplit("/", 1)[-1][:-3])

    def _write(self, docs: Sequence[Doc]) -> str:
        name = f"seg-{os.getpid()}-{time.time_ns():x}.seg"
        self.dir.mkdir(parents=True, exist_ok=True)
        write_segment(self.dir / name, docs)
        return name

    def _merge(
        self, names: list[str], deleted: dict[str, set[int]]
    ) -> tuple[list[str], dict[str, set[int]]]:
        """Merge the newest segments while the last ``MERGE_TIER`` share a size tier."""
        sizes = {name: _live(self.dir / name, deleted[name]) for name in names}
        while True:
            tail = names[-MERGE_TIER:]
            if len(tail) == MERGE_TIER and len({_tier(sizes[n]) for n in tail}) == 1:
                chosen = tail
            else:
                # A segment that is mostly deleted entries is compacted on its own.
                chosen = [n for n in names if sizes[n] * 2 < _size(self.dir / n) and deleted[n]]
                chosen = chosen[:1]
            if not chosen:
                return names, deleted
            merged = self._merge_segments(chosen, deleted)
            at = names.index(chosen[0])
            names = [n for n in names if n not in chosen]
            if merged is not None:
                names.insert(at, merged)
                deleted[merged] = set()
                sizes[merged] = _live(self.dir / merged, set())

    def _merge_segments(self, chosen: list[str], deleted: dict[str, set[int]]) -> str | None:
        docs: list[Doc] = []
        for name in chosen:
            seg = Segment(self.dir / name)
            gone = deleted.pop(name, set())
            docs.extend(seg.iter_docs(d for d in range(seg.n) if d not in gone))
            seg.close()
        if not docs:
            return None
        docs.sort(key=lambda d: d.id)
        return self._write(docs)

    def _rebuild(self, target: str | None, tip: TipInfo | None) -> _Head:
        from .build import build_tree

        names: list[str] = []
        invalid: dict[str, str] = {}
        if target is not None:
            names, invalid = build_tree(self, target)
        floors = FloorChanges(self.dir_str, None)
        for name in names:
            seg = Segment(self.dir / name)
            try:
                floors.add_segment(seg, range(seg.n))
            finally:
                seg.close()
        head = _Head(target, tip, names, {n: set() for n in names}, invalid, floors.commit())
        self._save_head(head)
        self._collect(set(names))
        return head

    def _collect(self, keep: set[str]) -> None:
        """Delete unreferenced segments, floor indexes and temporary files older than
        ``GC_AGE``."""
        now = time.time()
        head = self._load_head()
        floors = {meta[0] for meta in head.floors.values()} if head is not None else set()
        for path in self.dir.iterdir():
            name = path.name
            if name.startswith("floor-"):
                if name not in floors:
                    _remove_old(path, now)
                continue
            if name.endswith(".vec"):  # a segment's vectors (embed.py) live as long as it does
                name = name.split(".", 1)[0] + ".seg"
            elif not (name.endswith(".seg") or name.endswith(".tmp")):
                continue
            if name in keep:
                continue
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > GC_AGE:
                    path.unlink()


def _remove_old(path: Path, now: float) -> None:
    """Remove a floor folder no head names, once older than ``GC_AGE`` (a link: just it)."""
    import shutil

    with contextlib.suppress(OSError):
        info = os.lstat(path)
        if now - info.st_mtime <= GC_AGE:
            return
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def _recall_section(data: bytes) -> dict[str, Any]:
    import tomllib

    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"truss.toml: not valid TOML ({exc}); fix the file") from exc
    section = raw.get("recall", {})
    if not isinstance(section, dict):
        raise ConfigError('truss.toml: [recall] must be a table, e.g. [recall] mode = "exact"')
    out = {k: v for k, v in section.items() if isinstance(v, str | int | float | bool)}
    # The salience policy (recall/salience.py) and [memory] scope (scope.py) shape a query
    # too: kept with [recall] so a query reads them from the same cached head.
    policy = raw.get("policy", {})
    if isinstance(policy, dict) and isinstance(policy.get("salience"), str):
        out["policy.salience"] = policy["salience"]
    memory = raw.get("memory", {})
    if isinstance(memory, dict) and isinstance(memory.get("scope"), str):
        out["memory.scope"] = memory["scope"]
    return out


def _tier(size: int) -> int:
    tier = 0
    while size >= MERGE_TIER:
        size //= MERGE_TIER
        tier += 1
    return tier


def _size(path: Path) -> int:
    seg = Segment(path)
    try:
        return seg.n
    finally:
        seg.close()


def _live(path: Path, gone: set[int]) -> int:
    return _size(path) - len(gone)
