"""One immutable file of the recall index: documents, their filter fields and records.

Ranking lives in the floor indexes (``floors``, tantivy); a segment holds what the filter and
the answer need: per document its id, class byte, layer, length, record, (kind, key) group and
run, and its terms (the forward index: what a floor index is fed, and what a merge copies).
Loading a whole index as Python objects costs more than the query it serves (``marshal`` of
10k records ~45 ms), so a segment is laid out to be *read in place*: a query reads (``pread``)
and decodes only the records of the hits it returns. Not mapped: a file truncated in place
under a mapping kills the process that reads it (SIGBUS); a short read is a ``SegmentError``
(the index is rebuilt), and sections read whole are kept once checked. Opening a segment
costs its header plus two bytes per document (trust/kind class and layer), whatever its size.

Layout: ``MAGIC``, a little-endian u32 header length, the header (``marshal``: format and
tokenizer versions, counts, byte order, section offsets) and the sections:

=========  =================================================================================
ids        32 ASCII hex bytes per document, documents sorted by id (docno = rank of the id)
chash      16 bytes per document: sha256 of the text an embedder sees (``docs.embed_text``)
cls        one byte per document: trust (2 bits), superseded, marked, kind (4 bits)
layer      one byte per document
len        u32 per document: BM25 length (token count of key + body)
roff/rec   u64 offsets and the marshal record of each document (what rebuilds its ``Entry``)
foff       u32 per document + 1, then ``fterm``/``ftf``: the forward index (term ids, tfs)
vocab      marshal list of the terms, sorted (term id = rank)
kbuckets   u32 per bucket + 1, then ``kmap``: per bucket a marshal ``{"kind\\0key": docnos}``
runs       marshal ``{run id: tuple of docnos}`` for entries produced by a run
=========  =================================================================================

Buckets are ``zlib.crc32(utf-8) & (n_buckets - 1)``. A segment never changes once written
(``os.replace`` of a temporary file); deletions live in the index head (``index.py``).
"""

from __future__ import annotations

import marshal
import os
import struct
import sys
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Final

from ..errors import IndexUnavailable

if TYPE_CHECKING:
    from pathlib import Path

    StrPath = str | os.PathLike[str]

__all__ = [
    "FORMAT",
    "NOFOLLOW",
    "Doc",
    "Segment",
    "SegmentError",
    "dump_records",
    "finish_segment",
    "write_segment",
]

MAGIC: Final = b"TRUSSEG\x01"
FORMAT: Final = 3
# Sections checked piece by piece as they are read (a block of ids, a record, a bucket);
# every other section is checked whole, against the header's CRC, before its first use.
_PIECEWISE: Final = frozenset({"ids", "rec", "kmap"})
_U32: Final = struct.Struct("<I")
_PAIR: Final = struct.Struct("=II")
_SPAN: Final = struct.Struct("=QQ")
MAX_TF: Final = 0xFFFF
ID_BLOCK: Final = 64  # ids per CRC of the ids section: a lookup checks the blocks it reads
MEMO: Final = 8192  # things a reader keeps per open segment (``Segment.memo``)
NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


class SegmentError(IndexUnavailable):
    """A segment file that is missing, truncated or of another format: rebuild. An
    ``IndexUnavailable``, so one that escapes a rebuild reaches every face as that."""


class Doc:
    """One document as the index stores it (a plain class: cheap to define at import)."""

    __slots__ = ("id", "cls", "layer", "length", "tf", "record", "group", "run", "chash")

    def __init__(
        self,
        *,
        id: str,  # noqa: A002 - the entry id
        cls: int,
        layer: int,
        length: int,
        tf: dict[str, int],
        record: tuple[Any, ...],
        group: str,  # "kind\0key"
        run: str | None,  # the run id of a produced_by "run:<id>/<seq>"
        chash: bytes,  # 16 bytes: sha256 of the text an embedder sees (vector cache key)
    ) -> None:
        self.id = id
        self.cls = cls
        self.layer = layer
        self.length = length
        self.tf = tf
        self.record = record
        self.group = group
        self.run = run
        self.chash = chash


def _bucket_count(n: int) -> int:
    size = 1
    while size * 4 < n:
        size *= 2
    return size


def _hash_map(items: Mapping[str, Any]) -> tuple[bytes, bytes]:
    n_buckets = _bucket_count(len(items))
    buckets: list[dict[str, Any]] = [{} for _ in range(n_buckets)]
    mask = n_buckets - 1
    for name, value in items.items():
        buckets[zlib.crc32(name.encode()) & mask][name] = value
    offsets = array("I", [0])
    chunks = []
    total = 0
    for bucket in buckets:
        data = marshal.dumps(bucket)
        chunks.append(data)
        total += len(data)
        offsets.append(total)
    return offsets.tobytes(), b"".join(chunks)


def _dump_record(record: tuple[Any, ...]) -> bytes:
    try:
        return b"m" + marshal.dumps(record)
    except ValueError:
        # A verdict parsed by YAML may hold values marshal cannot write (a datetime).
        import pickle

        return b"p" + pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)


def _load_record(data: bytes) -> tuple[Any, ...]:
    """A record back; bytes that do not decode to a tuple are a damaged segment. Pickled
    records may name datetime's classes and nothing else: a segment is a file anyone who can
    write ``.git`` can replace, and a pickle naming any other callable would run it."""
    try:
        if data[:1] == b"m":
            found = marshal.loads(data[1:])
        elif data[:1] == b"p":
            found = _unpickle(data[1:])
        else:
            raise ValueError("unknown record encoding")
    except Exception as exc:  # noqa: BLE001 - any decoder failure on these bytes is damage
        raise SegmentError(f"a record does not decode ({exc}); the index is rebuilt") from exc
    if not isinstance(found, tuple):
        raise SegmentError("a record is not a tuple; the index is rebuilt")
    return found


def _unpickle(data: bytes) -> Any:
    import io
    import pickle

    class _DatetimeOnly(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if module == "datetime" and name in _PICKLED_TYPES:
                return super().find_class(module, name)
            raise pickle.UnpicklingError(f"{module}.{name} is not a record value")

    return _DatetimeOnly(io.BytesIO(data)).load()


_PICKLED_TYPES: Final = frozenset({"date", "datetime", "time", "timedelta", "timezone"})


def write_segment(path: StrPath, docs: Sequence[Doc]) -> None:
    """Write ``docs`` (sorted by id, unique) as a segment at ``path``, atomically. A
    document's term ids are looked up and sorted by ``map``/``sorted``, in C.
    ``tests/test_recall_build.py`` checks the bytes against a plain reference writer."""
    n = len(docs)
    ids = "".join([d.id for d in docs]).encode("ascii")
    if len(ids) != 32 * n:
        raise ValueError("every document id must be 32 hex characters")
    terms: set[str] = set()
    for doc in docs:
        terms.update(doc.tf)
    vocab = sorted(terms)
    del terms
    term_id = dict(zip(vocab, range(len(vocab)), strict=True))
    tid_of = term_id.__getitem__
    term_of = vocab.__getitem__
    fterm = array("I")
    ftf = array("H")
    foff = array("I", [0])
    groups: dict[str, list[int]] = {}
    runs: dict[str, list[int]] = {}
    for docno, doc in enumerate(docs):
        tf = doc.tf
        tids = sorted(map(tid_of, tf))  # term order is term id order
        tfs = list(map(tf.__getitem__, map(term_of, tids)))
        if tfs and max(tfs) > MAX_TF:
            tfs = [min(f, MAX_TF) for f in tfs]
        fterm.extend(tids)
        ftf.extend(tfs)
        foff.append(len(fterm))
        group = groups.get(doc.group)
        if group is None:
            groups[doc.group] = [docno]
        else:
            group.append(docno)
        if doc.run is not None:
            runs.setdefault(doc.run, []).append(docno)
    sections = {
        "ids": ids,
        "cls": bytes([d.cls for d in docs]),
        "chash": b"".join([d.chash for d in docs]),
        "layer": bytes([d.layer for d in docs]),
        "len": array("I", [d.length for d in docs]).tobytes(),
        "foff": foff.tobytes(),
        "fterm": fterm.tobytes(),
        "ftf": ftf.tobytes(),
    }
    records = dump_records([d.record for d in docs])
    finish_segment(path, n, vocab, records, groups, runs, sections)


def finish_segment(
    path: StrPath,
    n: int,
    vocab: list[str],
    records: Sequence[bytes],
    groups: Mapping[str, Sequence[int]],
    runs: Mapping[str, Sequence[int]],
    columns: Mapping[str, bytes],
) -> None:
    """Write a segment from its columns and the parts every writer encodes the same way:
    the dumped records (``dump_records``), the group map, the runs."""
    kbuckets, kmap = _hash_map({g: tuple(v) for g, v in groups.items()})
    ids = columns["ids"]
    rcrc = array(
        "I", (zlib.crc32(r, zlib.crc32(ids[32 * d : 32 * d + 32])) for d, r in enumerate(records))
    )
    sections: dict[str, bytes | Sequence[bytes]] = {
        "ids": columns["ids"],
        "icrc": array(
            "I",
            (zlib.crc32(ids[at : at + 32 * ID_BLOCK]) for at in range(0, len(ids), 32 * ID_BLOCK)),
        ).tobytes(),
        "cls": columns["cls"],
        "chash": columns["chash"],
        "layer": columns["layer"],
        "len": columns["len"],
        "rcrc": rcrc.tobytes(),
        "roff": array("Q", accumulate(map(len, records), initial=0)).tobytes(),
        "rec": records,  # written piece by piece: no copy of the largest section
        "foff": columns["foff"],
        "fterm": columns["fterm"],
        "ftf": columns["ftf"],
        "vocab": marshal.dumps(vocab),
        "kbuckets": kbuckets,
        "kmap": kmap,
        "kcrc": _chunk_crcs(kbuckets, kmap),
        "runs": marshal.dumps({r: tuple(v) for r, v in runs.items()}),
    }
    _write_sections(path, n, len(vocab), sections)


def _chunk_crcs(offsets: bytes, blob: bytes) -> bytes:
    """The CRC of each bucket of a hash map (``_hash_map``), checked as a lookup reads it."""
    bounds = array("I")
    bounds.frombytes(offsets)
    view = memoryview(blob)
    return array(
        "I", (zlib.crc32(view[a:b]) for a, b in zip(bounds, bounds[1:], strict=False))
    ).tobytes()


def dump_records(records: Sequence[tuple[Any, ...]]) -> list[bytes]:
    """Each record as a segment stores it (marshal; pickle for values marshal refuses)."""
    try:
        return [b"m" + marshal.dumps(record) for record in records]
    except ValueError:
        return [_dump_record(record) for record in records]


def _write_sections(
    path: StrPath, n: int, n_terms: int, sections: Mapping[str, bytes | Sequence[bytes]]
) -> None:
    spans: dict[str, tuple[int, int]] = {}
    crcs: dict[str, int] = {}
    offset = 0
    for name, data in sections.items():
        size = len(data) if isinstance(data, bytes) else sum(map(len, data))
        spans[name] = (offset, size)
        offset += size
        if name not in _PIECEWISE:
            crcs[name] = zlib.crc32(data) if isinstance(data, bytes) else 0
    header = marshal.dumps(
        {
            "format": FORMAT,
            "byteorder": sys.byteorder,
            "docs": n,
            "terms": n_terms,
            "data": offset,
            "sections": spans,
            "crc": crcs,
        }
    )
    folder, name = os.path.split(os.fspath(path))
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(MAGIC + _U32.pack(len(header)) + header)
        for data in sections.values():
            if isinstance(data, bytes):
                handle.write(data)
            else:  # pieces: joined a thousand at a time (one system call each, not one each)
                for at in range(0, len(data), 1024):
                    handle.write(b"".join(data[at : at + 1024]))
    os.replace(tmp, path)


class Segment:
    """A segment file opened for reading (memory-mapped; sections decoded on first use)."""

    def __init__(self, path: StrPath) -> None:
        self._path = os.fspath(path)
        name = os.path.basename(self._path)
        try:
            # A link planted in place of a segment is not followed (ELOOP): rebuilt instead.
            # The descriptor stays open: the file it reads survives its deletion.
            self._fd = os.open(self._path, os.O_RDONLY | NOFOLLOW)
        except OSError as exc:
            raise SegmentError(f"{name}: {exc}") from exc
        self._size = 0
        try:
            size = self._size = os.fstat(self._fd).st_size
            if self._read(0, 8) != MAGIC:
                raise SegmentError(f"{name}: not a segment of this format")
            (length,) = _U32.unpack(self._read(8, 4))
            header = marshal.loads(self._read(12, length))
            base = 12 + length
            if (
                header["format"] != FORMAT
                or header["byteorder"] != sys.byteorder
                or size != base + header["data"]
            ):
                raise SegmentError(f"{name}: truncated or of another format")
        except (OSError, EOFError, ValueError, TypeError, KeyError, struct.error) as exc:
            self.close()
            raise SegmentError(f"{name}: unreadable header ({exc})") from exc
        except SegmentError:
            self.close()
            raise
        self.n: int = header["docs"]
        self.n_terms: int = header["terms"]
        self._spans = {k: (base + a, n) for k, (a, n) in header["sections"].items()}
        self._crc: dict[str, int] = header["crc"]
        self._cache: dict[str, Any] = {}
        # What readers derived from this (immutable) file: ids found, groups, entries.
        self.memo: dict[Any, Any] = {}

    def _read(self, start: int, size: int) -> bytes:
        """``size`` bytes at ``start``; fewer (the file was cut short under us) is damage."""
        if start < 0 or size < 0 or start + size > self._size:
            raise self._damaged(f"bytes {start}-{start + size} (past the end)")
        try:
            data = os.pread(self._fd, size, start)
        except (OSError, ValueError) as exc:  # ValueError: closed, or a negative offset
            raise self._damaged(f"bytes {start}-{start + size}") from exc
        if len(data) != size:
            raise self._damaged(f"bytes {start}-{start + size} (the file is cut short)")
        return data

    @property
    def path(self) -> Path:
        from pathlib import Path

        return Path(self._path)

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:  # a view dropped without ``close``: its descriptor goes too
        if getattr(self, "_fd", -1) >= 0:
            self.close()

    def _raw(self, name: str) -> bytes:
        """A whole section, checked against the header's CRC: a byte changed in place (the
        length and header intact) is damage, never a different answer."""
        start, size = self._spans[name]
        data = self._read(start, size)
        if zlib.crc32(data) != self._crc.get(name):
            raise SegmentError(f"{os.path.basename(self._path)}: section {name} is damaged")
        return data

    def _checked(self, name: str) -> None:
        if name not in self._cache:
            self._cache[name] = self._raw(name)

    def _array(self, name: str, code: str) -> array[int]:
        found = self._cache.get(name)
        if found is None:
            found = array(code)
            found.frombytes(self._raw(name))
            self._cache[name] = found
        return found

    def _damaged(self, what: str) -> SegmentError:
        return SegmentError(f"{os.path.basename(self._path)}: {what} is damaged")

    # -- per-document columns ------------------------------------------------------------

    @property
    def cls(self) -> bytes:
        found = self._cache.get("cls")
        if found is None:
            found = self._cache["cls"] = self._raw("cls")
        return found

    @property
    def layer(self) -> bytes:
        found = self._cache.get("layer")
        if found is None:
            found = self._cache["layer"] = self._raw("layer")
        return found

    @property
    def lengths(self) -> array[int]:
        return self._array("len", "I")

    def doc_id(self, docno: int) -> str:
        block = self._cache.get("ids-blocks", {}).get(docno // ID_BLOCK)
        if block is not None:
            at = 32 * (docno % ID_BLOCK)
            return block[at : at + 32].decode("ascii")
        start = self._spans["ids"][0] + 32 * docno
        return self._read(start, 32).decode("ascii")

    def find(self, doc_id: str) -> int | None:
        """The docno of ``doc_id``, by binary search over the sorted ids; every block of ids
        the search reads is checked against its CRC first (a changed id could hide an entry
        a deletion must find)."""
        found = self.memo.get(doc_id)
        if found is not None or doc_id in self.memo:
            return found
        docno = self._find(doc_id)
        self.remember(doc_id, docno)
        return docno

    def remember(self, key: Any, value: Any) -> None:
        """Keep ``value`` in ``memo`` (bounded: emptied when it grows past ``MEMO``)."""
        if len(self.memo) >= MEMO:
            self.memo.clear()
        self.memo[key] = value

    def _find(self, doc_id: str) -> int | None:
        start = self._spans["ids"][0]
        key = doc_id.encode("ascii")
        if len(key) != 32:
            return None
        # Blocks of ids read and checked against their CRC, kept: a lookup reads each once.
        blocks: dict[int, bytes] = self._cache.setdefault("ids-blocks", {})

        def id_at(i: int) -> bytes:
            number, at = divmod(i, ID_BLOCK)
            block = blocks.get(number)
            if block is None:
                a = start + 32 * ID_BLOCK * number
                b = min(a + 32 * ID_BLOCK, start + 32 * self.n)
                (want,) = _U32.unpack(self._read(self._spans["icrc"][0] + 4 * number, 4))
                block = self._read(a, b - a)
                if zlib.crc32(block) != want:
                    raise self._damaged(f"block {number} of the ids")
                blocks[number] = block
            return block[32 * at : 32 * at + 32]

        docno = bisect_left(range(self.n), key, key=id_at)
        if docno < self.n and id_at(docno) == key:
            return docno
        return None

    def content_hash(self, docno: int) -> bytes:
        self._checked("chash")
        data: bytes = self._cache["chash"]
        return data[16 * docno : 16 * docno + 16]

    def record(self, docno: int) -> tuple[Any, ...]:
        data = self.record_bytes(docno)
        (want,) = _U32.unpack(self._read(self._spans["rcrc"][0] + 4 * docno, 4))
        ident = self.doc_id(docno).encode("ascii")
        if zlib.crc32(data, zlib.crc32(ident)) != want:
            raise self._damaged(f"the record of document {docno}")
        return _load_record(data)

    def record_bytes(self, docno: int) -> bytes:
        """The stored form of ``record(docno)``: a filter can test it for a value's bytes
        before paying for the whole record."""
        start = self._spans["roff"][0] + 8 * docno
        a, b = _SPAN.unpack(self._read(start, _SPAN.size))
        if not 0 <= a <= b <= self._spans["rec"][1]:
            raise self._damaged(f"the offsets of document {docno}")
        return self._read(self._spans["rec"][0] + a, b - a)

    # -- groups --------------------------------------------------------------------------

    def _lookup(self, buckets: str, table: str, crcs: str, name: str) -> Any:
        start, size = self._spans[buckets]
        n_buckets = size // 4 - 1
        if n_buckets <= 0:
            return None
        slot = zlib.crc32(name.encode()) & (n_buckets - 1)
        a, b = _PAIR.unpack(self._read(start + 4 * slot, _PAIR.size))
        if not 0 <= a <= b <= self._spans[table][1]:
            raise self._damaged(f"bucket {slot} of {table}")
        data = self._read(self._spans[table][0] + a, b - a)
        (want,) = _U32.unpack(self._read(self._spans[crcs][0] + 4 * slot, 4))
        if zlib.crc32(data) != want:
            raise self._damaged(f"bucket {slot} of {table}")
        try:
            return marshal.loads(data).get(name)
        except (ValueError, EOFError, TypeError, AttributeError) as exc:
            raise self._damaged(f"bucket {slot} of {table}") from exc

    def group(self, kind: str, key: str) -> tuple[int, ...]:
        """Docnos of every document with this kind and key (any trust)."""
        name = f"{kind}\0{key}"
        found = self.memo.get(name)
        if found is None:
            found = self._lookup("kbuckets", "kmap", "kcrc", name)
            found = found if found is not None else ()
            self.remember(name, found)
        return found

    def runs(self) -> dict[str, tuple[int, ...]]:
        found = self._cache.get("runs")
        if found is None:
            found = self._cache["runs"] = marshal.loads(self._raw("runs"))
        return found

    # -- whole-segment reads (merges) ---------------------------------------------------

    def vocab(self) -> list[str]:
        found = self._cache.get("vocab")
        if found is None:
            found = self._cache["vocab"] = marshal.loads(self._raw("vocab"))
        return found

    def forward_terms(self, docno: int) -> tuple[list[str], list[int]]:
        """The terms of one document and their frequencies (what a floor index is fed)."""
        foff = self._array("foff", "I")
        a, b = foff[docno], foff[docno + 1]
        terms = list(map(self.vocab().__getitem__, self._array("fterm", "I")[a:b]))
        return terms, self._array("ftf", "H")[a:b].tolist()

    def forward_arrays(self) -> tuple[Any, Any, Any]:
        """The forward index as numpy arrays: term ids, frequencies, per-document offsets
        (for a rebuild; numpy must be importable)."""
        import numpy as np

        return (
            np.frombuffer(self._raw("fterm"), dtype=np.uint32),
            np.frombuffer(self._raw("ftf"), dtype=np.uint16),
            np.frombuffer(self._raw("foff"), dtype=np.uint32).astype(np.int64),
        )

    def groups(self) -> dict[str, tuple[int, ...]]:
        """Every ``"kind\0key"`` group and its docnos, each bucket checked as it is read."""
        bounds = array("I")
        bounds.frombytes(self._raw("kbuckets"))
        base = self._spans["kmap"][0]
        crcs = self._spans["kcrc"][0]
        out: dict[str, tuple[int, ...]] = {}
        for slot in range(len(bounds) - 1):
            data = self._read(base + bounds[slot], bounds[slot + 1] - bounds[slot])
            (want,) = _U32.unpack(self._read(crcs + 4 * slot, 4))
            if zlib.crc32(data) != want:
                raise self._damaged(f"bucket {slot} of kmap")
            try:
                out.update(marshal.loads(data))
            except (ValueError, EOFError, TypeError) as exc:
                raise self._damaged(f"bucket {slot} of kmap") from exc
        return out

    def forward(self, docno: int) -> dict[str, int]:
        """The term frequencies of one document (what a merge copies)."""
        foff = self._array("foff", "I")
        fterm = self._array("fterm", "I")
        ftf = self._array("ftf", "H")
        vocab = self.vocab()
        a, b = foff[docno], foff[docno + 1]
        return {vocab[fterm[k]]: ftf[k] for k in range(a, b)}

    def iter_docs(self, docnos: Iterable[int]) -> Iterator[Doc]:
        """Whole documents back, for merging segments without re-reading git."""
        cls, layer, lengths = self.cls, self.layer, self.lengths
        run_of: dict[int, str] = {}
        for run, members in self.runs().items():
            for docno in members:
                run_of[docno] = run
        for docno in docnos:
            record = self.record(docno)
            yield Doc(
                id=self.doc_id(docno),
                cls=cls[docno],
                layer=layer[docno],
                length=lengths[docno],
                tf=self.forward(docno),
                record=record,
                group=f"{record[0]}\0{record[1]}",
                run=run_of.get(docno),
                chash=self.content_hash(docno),
            )
