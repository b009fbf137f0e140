"""The floor indexes: one tantivy index per trust floor, so BM25's statistics are the floor's.

A floor index holds the entries at or above its floor and nothing else: ``verified`` the
verified entries, ``stale`` verified and stale, ``unverified`` verified, stale and unverified.
Rejected entries are in none. A query at a floor searches that floor's index alone, so ``N``,
document frequencies and the average length come from the floor's members: adding, changing
or removing an entry below the floor never touches the index a query at the floor reads, and
cannot move a score there by a bit.

A document is the entry id (``id``, raw, for deletions and id sets; ``hi``/``lo``, its 128 bits
as two u64 fast fields: read back for 100 hits of 50k documents, 45 us against 85 us for a
stored id, and 7 against 9 us for 10), the body as OUR tokens (``tokenize``:
stemmed, identifiers split) joined by spaces under tantivy's ``whitespace`` tokenizer with term
frequencies and no positions, and ``tag``: raw terms for what a filter clause can say -- kind,
trust, superseded, marked, layer, and the (kind, key) group.

tantivy scores with BM25 (k1 1.2, b 0.75, idf ``ln(1 + (N - n + 0.5) / (n + 0.5))``, never
negative) in f32, over document lengths quantised to a byte (``fieldnorm``: exact up to 40
tokens, then within 1/8 below) and with ``N`` and ``n`` counting deleted documents until a merge
drops them. ``bm25`` repeats that arithmetic for documents that are not in a floor's index but
that a filter lets through it (a run's own unverified notes): the same f32 steps and the same
quantised length, over statistics the caller gives (``lexical``: the floor's -- ``Floor``'s
live documents and their total length, document frequencies from tantivy -- joined by those
documents). They agree with tantivy to f32 rounding when the index holds no deleted document;
deleted documents still counted by tantivy move its side by what they weigh in ``N`` and ``n``.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from ..errors import IndexUnavailable
from ..model import Trust

__all__ = [
    "B",
    "FLOORS",
    "K1",
    "Floor",
    "FloorError",
    "FloorMoved",
    "MemoryIndex",
    "bm25",
    "body_query",
    "fieldnorm",
    "floors_of",
    "id_of",
    "make_doc",
    "ranked",
    "read_meta",
    "read_opstamp",
    "signature",
    "schema",
]

K1: Final = 1.2
B: Final = 0.75
FLOORS: Final = (Trust.VERIFIED, Trust.STALE, Trust.UNVERIFIED)
# Trust code of a class byte (docs.TRUST_CODE) -> the floors whose index holds the document.
_FLOORS_OF_CODE: Final = {
    2: (Trust.VERIFIED, Trust.STALE, Trust.UNVERIFIED),
    1: (Trust.STALE, Trust.UNVERIFIED),
    0: (Trust.UNVERIFIED,),
    3: (),
}
UPDATE_HEAP: Final = 15_000_000  # tantivy's floor for one writer thread
BUILD_HEAP: Final = 200_000_000
_F32: Final = struct.Struct("f")
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


class FloorError(IndexUnavailable):
    """A floor index that is missing, damaged, planted (a link) or at another commit than
    the index head says: rebuild (``IndexUnavailable`` if it escapes the rebuild)."""


class FloorMoved(Exception):
    """A floor index an updater has moved on since the view was read: ask again."""


def _fieldnorms() -> list[int]:
    # tantivy's table of the 256 lengths a byte stands for: 0-40 exact, then 8 steps per
    # power of two (42..56 by 2, 60..88 by 4, ...); a length is stored as the largest one not
    # above it. tests/test_recall_floors.py checks it against tantivy's own explanation.
    table = list(range(41))
    value, step = 40, 2
    while len(table) < 256:
        for _ in range(8):
            if len(table) < 256:
                value += step
                table.append(value)
        step *= 2
    return table


_FIELDNORMS: Final = _fieldnorms()


def fieldnorm(length: int) -> int:
    """The length tantivy scores a document of ``length`` tokens with."""
    return _FIELDNORMS[bisect_right(_FIELDNORMS, length) - 1]


def _f32(x: float) -> float:
    result: float = _F32.unpack(_F32.pack(x))[0]
    return result


def bm25(
    tfs: Sequence[int],
    dfs: Sequence[int],
    length: int,
    n_docs: int,
    total: int,
    boosts: Sequence[float] | None = None,
) -> float:
    """A document's BM25 score over a floor's statistics, as tantivy computes it (f32 steps,
    the quantised length): ``tfs[i]`` occurrences of a query term held by ``dfs[i]`` of the
    floor's ``n_docs`` documents, whose lengths add up to ``total``; ``boosts[i]`` multiplies
    term ``i``'s part (``body_query``'s related words), 1 when None."""
    if not n_docs or not total:
        return 0.0
    avgdl = _f32(_f32(float(total)) / _f32(float(n_docs)))
    norm = _f32(K1 * _f32(1.0 - B + _f32(B * _f32(fieldnorm(length) / avgdl))))
    score = 0.0
    for number, (tf, df) in enumerate(zip(tfs, dfs, strict=True)):
        if not tf:
            continue
        ratio = _f32(_f32(float(n_docs - df) + 0.5) / _f32(float(df) + 0.5))
        idf = _f32(_log(_f32(1.0 + ratio)))
        weight = _f32(idf * _f32(1.0 + K1))
        part = _f32(weight * _f32(tf / _f32(tf + norm)))
        if boosts is not None and boosts[number] != 1.0:
            part = _f32(part * _f32(boosts[number]))
        score = _f32(score + part)
    return score


def _log(x: float) -> float:
    import math

    return math.log(x)


def floors_of(cls: int) -> tuple[Trust, ...]:
    """The floors whose index holds a document of class byte ``cls``."""
    return _FLOORS_OF_CODE[cls & 3]


_SCHEMA: list[Any] = []


def schema() -> Any:
    """The floor indexes' schema (every floor and the in-memory index of ``evaluate``)."""
    if not _SCHEMA:
        import tantivy

        builder = tantivy.SchemaBuilder()
        builder.add_text_field("id", tokenizer_name="raw", index_option="basic")
        builder.add_unsigned_field("hi", fast=True)
        builder.add_unsigned_field("lo", fast=True)
        builder.add_text_field("body", tokenizer_name="whitespace", index_option="freq")
        builder.add_text_field("tag", tokenizer_name="raw", index_option="basic")
        _SCHEMA.append(builder.build())
    return _SCHEMA[0]


def make_doc(entry_id: str, body: str, tags: Iterable[str], number: int | None = None) -> Any:
    """A floor index document: ``body`` is the entry's tokens joined by spaces; ``number``
    (by default the id's 128 bits) is what a search reads back for it."""
    import tantivy

    if number is None:
        number = int(entry_id, 16)
    doc = tantivy.Document(id=entry_id, body=body, tag=list(tags))
    # Added one by one: the keyword form reads an int above 2**63 as a float.
    doc.add_unsigned("hi", number >> 64)
    doc.add_unsigned("lo", number & 0xFFFFFFFFFFFFFFFF)
    return doc


def id_of(hi: int, lo: int) -> str:
    return f"{hi:016x}{lo:016x}"


def body_query(terms: Iterable[str], added: Iterable[str] = (), weight: float = 1.0) -> Any:
    """Any of ``terms`` in the body, each scored once (BM25's OR), and any of ``added`` (a
    query's related words) scored at ``weight`` times its BM25; None for no term."""
    import tantivy

    sch = schema()
    own = dict.fromkeys(terms)
    clauses = [(tantivy.Occur.Should, tantivy.Query.term_query(sch, "body", t)) for t in own]
    clauses += [
        (
            tantivy.Occur.Should,
            tantivy.Query.boost_query(tantivy.Query.term_query(sch, "body", t), weight),
        )
        for t in dict.fromkeys(added)
        if t not in own
    ]
    if not clauses:
        return None
    return tantivy.Query.boolean_query(clauses)


def read_meta(path: str) -> dict[str, Any] | None:
    """A floor index's ``meta.json``; None when the folder or the file is missing, a link,
    or unreadable."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return None
        fd = os.open(os.path.join(path, "meta.json"), os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None
    try:
        with open(fd, "rb") as handle:
            meta = json.loads(handle.read())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def read_opstamp(path: str) -> int | None:
    """The commit opstamp in a floor index's ``meta.json`` (None: see ``_meta``)."""
    meta = read_meta(path)
    found = meta.get("opstamp") if meta is not None else None
    return found if isinstance(found, int) else None


_PARTS: Final = ("fast", "fieldnorm", "idx", "pos", "store", "term")


def _files(meta: dict[str, Any]) -> list[str]:
    """The files of a floor index's commit its ``meta.json`` names (each segment's parts and
    deletions)."""
    names: list[str] = []
    for segment in meta["segments"]:
        name = str(segment["segment_id"]).replace("-", "")
        names += [f"{name}.{part}" for part in _PARTS]
        deletes = segment.get("deletes")
        if deletes:
            names.append(f"{name}.{deletes['opstamp']}.del")
    return names


def signature(path: str) -> int | None:
    """What the files of a floor index's last commit look like from outside: per file its
    name, type, size, inode and change times (``lstat``: a link is seen as a link). tantivy
    checks a file's length and footer as it opens it, not its bytes; bytes changed in place
    change the times, so a view whose signature differs from the one recorded at the commit
    is rebuilt rather than answered from. None when the index is unreadable."""
    meta = read_meta(path)
    if meta is None:
        return None
    try:
        names = _files(meta)
        seen: list[tuple[Any, ...]] = []
        for name in names:
            try:
                info = os.lstat(os.path.join(path, name))
            except FileNotFoundError:
                seen.append((name,))
                continue
            seen.append(
                (name, info.st_mode, info.st_size, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
            )
    except (OSError, KeyError, TypeError, AttributeError):
        return None
    import zlib

    return zlib.crc32(repr((meta.get("opstamp"), seen)).encode())


class _Searchable:
    """A tantivy searcher over this schema: hits back as ``(score, key)``."""

    path: str
    searcher: Any

    def _key(self, hi: int, lo: int) -> str:
        return id_of(hi, lo)

    def search(self, query: Any, limit: int, *, count: bool = False) -> tuple[list[Any], int]:
        """``([(score, id), ...], count)`` of the best ``limit`` documents."""
        try:
            result = self.searcher.search(query, limit, count=count)
            hits = result.hits
            addresses = [address for _score, address in hits]
            his = self.searcher.fast_field_values("hi", addresses)
            los = self.searcher.fast_field_values("lo", addresses)
        except (ValueError, OSError) as exc:
            raise FloorError(f"{self.path}: {exc}") from exc
        except BaseException as exc:  # pyo3's PanicException is no Exception
            if type(exc).__name__ != "PanicException":
                raise
            raise FloorError(f"{self.path}: tantivy panicked ({exc})") from exc
        key = self._key
        found = [(score, key(hi, lo)) for (score, _), hi, lo in zip(hits, his, los, strict=True)]
        return found, result.count if count and result.count is not None else 0

    def doc_freq(self, term: str) -> int:
        try:
            found: int = self.searcher.doc_freq("body", term)
        except (ValueError, OSError) as exc:
            raise FloorError(f"{self.path}: {exc}") from exc
        except BaseException as exc:  # pyo3's PanicException is no Exception
            if type(exc).__name__ != "PanicException":
                raise
            raise FloorError(f"{self.path}: tantivy panicked ({exc})") from exc
        return found


TIE_SLACK: Final = 8  # hits asked for beyond ``limit``, so ties at the cut are seen


def ranked(
    index: _Searchable, query: Any, limit: int, admit: Callable[[str], bool] | None = None
) -> list[tuple[float, str]]:
    """The best ``limit`` hits ``admit`` passes (all when None), best first, ties by id.
    tantivy orders equal scores arbitrarily, and a filter may pass few of its hits: hits are
    asked for in growing batches (four times as many each) until ``limit`` pass and the last
    hit scores below the ``limit``-th, or none are left."""
    want = limit + TIE_SLACK
    while True:
        hits, _count = index.search(query, want)
        kept = hits if admit is None else [hit for hit in hits if admit(hit[1])]
        done = len(hits) < want  # every match seen
        if not done and len(kept) >= limit:
            cut = sorted((score for score, _ in kept), reverse=True)[limit - 1]
            done = hits[-1][0] < cut
        if done:
            kept.sort(key=lambda hit: (-hit[0], hit[1]))
            return kept[:limit]
        want *= 4


class MemoryIndex(_Searchable):
    """A floor index in memory over ``(id, tokens)`` pairs, built as the store's are and
    searched the same way (``body_query``, ``ranked``): what ``evaluate`` ranks with."""

    def __init__(self, docs: Iterable[tuple[str, Sequence[str]]]) -> None:
        import tantivy

        self.path = "(memory)"
        self.index = tantivy.Index(schema())
        writer = self.index.writer(heap_size=UPDATE_HEAP * 2, num_threads=1)
        self.names: list[str] = []
        for number, (name, tokens) in enumerate(docs):
            writer.add_document(make_doc(name, " ".join(tokens), (), number))
            self.names.append(name)
        writer.commit()
        writer.wait_merging_threads()
        self.index.config_reader(reload_policy="Manual")
        self.searcher = self.index.searcher()

    def _key(self, hi: int, lo: int) -> str:
        return self.names[lo]

    def top(
        self, terms: Sequence[str], limit: int, added: Sequence[str] = (), weight: float = 1.0
    ) -> list[tuple[str, float]]:
        """The best ``limit`` documents holding one of ``terms`` (each scored once) or of
        ``added`` (at ``weight``)."""
        query = body_query(terms, added, weight)
        if query is None or limit <= 0:
            return []
        return [(key, score) for score, key in ranked(self, query, limit)]


class Floor(_Searchable):
    """One floor index opened for searching, with the statistics ``bm25`` needs."""

    __slots__ = ("path", "index", "searcher", "n_docs", "total")

    def __init__(self, path: str, opstamp: int, n_docs: int, total: int, sign: int) -> None:
        import shutil

        import tantivy

        if signature(path) != sign:
            raise FloorError(f"{path}: not the commit the index head names, or changed since")
        # tantivy maps its files: one truncated in place under a live searcher would kill
        # this process (SIGBUS). The searcher maps a private copy instead, removed as soon as
        # it is open (the mappings outlive the names), so nothing under .git/truss can reach
        # what it reads. The copy is taken between two looks at the same files: it is the
        # commit the head names, or it is not used.
        copy = _private_copy(path)
        try:
            if signature(path) != sign or read_opstamp(path) != opstamp:
                raise FloorError(f"{path}: moved while opened")
            self.index = tantivy.Index.open(copy)
            # No reload on commit: that policy starts a thread watching the folder, which
            # outlives this object and reads whatever lands there later.
            self.index.config_reader(reload_policy="Manual")
            self.searcher = self.index.searcher()
        except (ValueError, OSError) as exc:
            raise FloorError(f"{path}: {exc}") from exc
        finally:
            shutil.rmtree(copy, ignore_errors=True)
        self.path = path
        self.n_docs = n_docs
        self.total = total


def _private_copy(path: str) -> str:
    """A copy of the files of the floor index at ``path`` (its ``meta.json`` and what that
    names), in a new folder of the system's temporary directory only this user can read.
    ``FloorError`` when a file is missing, a link or unreadable."""
    import shutil
    import tempfile

    meta = read_meta(path)
    if meta is None:
        raise FloorError(f"{path}: no readable meta.json")
    copy = tempfile.mkdtemp(prefix="truss-floor-")
    try:
        for name in ("meta.json", *_files(meta)):
            fd = os.open(os.path.join(path, name), os.O_RDONLY | _NOFOLLOW)
            with open(fd, "rb") as source, open(os.path.join(copy, name), "xb") as target:
                shutil.copyfileobj(source, target, 1 << 20)
    except (OSError, KeyError, TypeError, AttributeError) as exc:
        shutil.rmtree(copy, ignore_errors=True)
        raise FloorError(f"{path}: cannot be copied ({exc})") from exc
    return copy


# Tags: the raw terms of a document's ``tag`` field, one per thing a filter clause can say.
SUPERSEDED_TAG: Final = "s"
MARKED_TAG: Final = "m"


def kind_tag(kind: str) -> str:
    return f"k:{kind}"


def trust_tag(trust: str) -> str:
    return f"t:{trust}"


def layer_tag(layer: str) -> str:
    return f"l:{layer}"


def group_tag(kind: str, key: str) -> str:
    return f"g:{kind}\0{key}"


def doc_tags(cls: int, layer: int, group: str) -> list[str]:
    """The tags of a document of class byte ``cls``, layer code ``layer`` and ``kind\\0key``
    group (``docs`` defines the codes)."""
    from .docs import KIND_OF_CODE, LAYER_OF_CODE, MARKED, SUPERSEDED, TRUST_OF_CODE

    tags = [
        kind_tag(KIND_OF_CODE[cls >> 4]),
        trust_tag(TRUST_OF_CODE[cls & 3]),
        layer_tag(LAYER_OF_CODE[layer]),
        f"g:{group}",
    ]
    if cls & SUPERSEDED:
        tags.append(SUPERSEDED_TAG)
    if cls & MARKED:
        tags.append(MARKED_TAG)
    return tags
