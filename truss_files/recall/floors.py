"""The floor indexes: one tantivy index per trust floor, so BM25's statistics are the floor's.

A floor index holds the entries at or above its floor and nothing else: ``verified`` the
verified entries, ``stale`` verified and stale, ``unverified`` verified, stale and unverified.
Rejected entries are in none. A query at a floor searches that floor's index alone, so ``N``,
document frequencies and the average length come from the floor's members: adding, changing
or removing an entry below the floor never touches the index a query at the floor reads, and
cannot move a score there by a bit.

Beside the floors, one more index of the same schema holds the rejected entries alone
(``HOLDERS``, ``holders_of``): no query ranks in it, so their words are in no floor's
statistics, but what lists the entries of a (kind, key) or of a run -- the trainer's
same-source check, a run's own notes and deletions -- finds a rejected entry as it finds
any other (a note stored once, whatever became of it, is not written again).

tantivy is the whole engine: it scores (BM25, k1 1.2, b 0.75, idf never negative), deletes
and merges; recall feeds it and reads it.

A document (``make_doc``) is:

``id``
    the entry id, a raw term: what deletions and id sets name.
``hi``/``lo``, ``tr``, ``c0``/``c1``, ``gk``, ``ts``
    fast fields: the id's 128 bits (read back per hit without a stored document), the trust
    code (``docs.TRUST_CODE``: which floor keeps the record), the content hash an embedder's
    vectors are cached under (``docs.content_hash``), and what a conflict report needs of a
    rival without decoding it: a code of its (kind, key) group (``group_code``) and its
    ``created`` as a number ordered as the text is (``created_code``).
``body``
    OUR tokens (``tokenize``: stemmed, identifiers split) joined by spaces under tantivy's
    ``whitespace`` tokenizer, with term frequencies and no positions.
``tag``
    raw terms for everything a filter says (``tags``): kind, trust, layer, the (kind, key)
    group, superseded, marked, the run that produced it, each scope pair and each scope
    name it has, and whether it defines an acronym.
``rec``, ``acr``
    stored: the entry's record (``docs.record``), kept only in the floor of its own trust
    (its *home*: stored once, not once per floor), and the acronyms it defines (``acronyms``).
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import shutil
import stat
import struct
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, Final

import tantivy

from ..errors import FloorError
from ..model import Entry, Trust
from ..trust.authority import run_of
from .docs import MARKER_PREFIX, TRUST_CODE, content_hash, embed_text

__all__ = [
    "FLOORS",
    "HOLDERS",
    "Floor",
    "FloorMoved",
    "FloorWriter",
    "body_query",
    "created_code",
    "floors_of",
    "group_code",
    "holders_of",
    "id_of",
    "doc_of",
    "doc_parts",
    "make_doc",
    "ranked",
    "schema",
    "signature",
    "tags",
]

FLOORS: Final = (Trust.VERIFIED, Trust.STALE, Trust.UNVERIFIED)
HOLDERS: Final = (*FLOORS, Trust.REJECTED)  # every index: the floors and the rejected entries'
UPDATE_HEAP: Final = 15_000_000  # tantivy's floor for one writer thread
BUILD_HEAP: Final = 200_000_000  # shared by a rebuild's three writers
TIE_SLACK: Final = 8  # hits asked for beyond ``limit``, so ties at the cut are seen
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_PARTS: Final = ("fast", "fieldnorm", "idx", "pos", "store", "term")
_TRUST_OF_CODE: Final = {code: trust for trust, code in TRUST_CODE.items()}


class FloorMoved(Exception):
    """A floor index an updater has moved on since the view was read: ask again."""


def floors_of(trust: Trust) -> tuple[Trust, ...]:
    """The floors whose index holds an entry of ``trust`` (none for rejected)."""
    return _FLOORS_OF[trust]


def holders_of(trust: Trust) -> tuple[Trust, ...]:
    """The indexes that hold an entry of ``trust``: its floors, or the rejected entries'."""
    return _HOLDERS_OF[trust]


# Asked for every entry a rebuild adds: worked out once per trust, not once per entry.
_FLOORS_OF: Final = {
    t: tuple(f for f in FLOORS if t.passes(f)) if t is not Trust.REJECTED else () for t in Trust
}
_HOLDERS_OF: Final = {t: _FLOORS_OF[t] or (Trust.REJECTED,) for t in Trust}


def _schema() -> Any:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", tokenizer_name="raw", index_option="basic")
    for name in ("hi", "lo", "tr", "c0", "c1", "gk", "ts"):
        builder.add_unsigned_field(name, fast=True)
    builder.add_text_field("body", tokenizer_name="whitespace", index_option="freq")
    builder.add_text_field("tag", tokenizer_name="raw", index_option="basic")
    builder.add_bytes_field("rec", stored=True, indexed=False)
    builder.add_bytes_field("acr", stored=True, indexed=False)
    return builder.build()


SCHEMA: Final = _schema()


def schema() -> Any:
    return SCHEMA


def tags(entry: Entry, defines: bool = False) -> list[str]:
    """The raw terms a filter clause can name, for ``entry`` (``lexical`` builds the
    clauses from the same functions)."""
    out = [
        f"k:{entry.kind.value}",
        f"t:{entry.trust.value}",
        f"l:{entry.layer.value}",
        group_tag(entry.kind.value, entry.key),
    ]
    out += [scope_tag(k, v) for k, v in entry.scope.items()]
    out += [f"h:{k}" for k in entry.scope]
    if entry.superseded_by is not None:
        out.append("s")
    if entry.body.startswith(MARKER_PREFIX):
        out.append("m")
    run = run_of(entry.provenance.produced_by)
    if run is not None:
        out.append(run_tag(run))
    if defines:
        out.append("a")
    return out


def group_tag(kind: str, key: str) -> str:
    return f"g:{kind}\0{key}"


def group_code(kind: str, key: str) -> int:
    """64 bits of the (kind, key) group: tells apart the groups one search asked for by
    their tags (two asked groups with one code are searched apart: ``Searcher.conflicts``)."""
    data = f"{kind}\0{key}".encode()
    return zlib.crc32(data) << 32 | zlib.adler32(data)


def created_code(created: str) -> int:
    """``created`` (``YYYY-MM-DDTHH:MM:SSZ``, as ``entryfile.parse`` admits it) as the number
    of its digits: ordered as the text is."""
    return int(created[:4] + created[5:7] + created[8:10] + created[11:13] + created[14:16]
               + created[17:19])  # fmt: skip


def run_tag(run: str) -> str:
    return f"r:{run}"


def scope_tag(name: str, value: str) -> str:
    return f"c:{name}\0{value}"


def make_doc(
    entry: Entry,
    body: str,
    record: bytes | None,
    acronyms: Sequence[Any] = (),
) -> Any:
    """A floor index document for ``entry``: ``body`` is its tokens joined by spaces,
    ``record`` its stored record (its home floor only)."""
    return doc_of(doc_parts(entry, body, acronyms), record)


# What a document is made of, computed from an entry once (in a rebuild's worker processes,
# ``bulk``) and turned into a document for each floor that holds it: (id, body, tags, trust
# code, content hash, group code, created code, acronyms as marshal bytes or None).
DocParts = tuple[str, str, list[str], int, bytes, int, int, "bytes | None"]


def doc_parts(entry: Entry, body: str, acronyms: Sequence[Any] = ()) -> DocParts:
    digest = content_hash(embed_text(entry.body))
    acr = marshal.dumps(list(acronyms)) if acronyms else None
    group = group_code(entry.kind.value, entry.key)
    created = created_code(entry.created)
    return (entry.id, body, tags(entry, bool(acronyms)), TRUST_CODE[entry.trust], digest,
            group, created, acr)  # fmt: skip


def doc_of(parts: DocParts, record: bytes | None) -> Any:
    entry_id, body, tag_list, code, digest, group, created, acr = parts
    number = int(entry_id, 16)
    doc = tantivy.Document(id=entry_id, body=body, tag=tag_list)
    # Added one by one: the keyword form reads an int above 2**63 as a float.
    doc.add_unsigned("hi", number >> 64)
    doc.add_unsigned("lo", number & 0xFFFFFFFFFFFFFFFF)
    doc.add_unsigned("tr", code)
    doc.add_unsigned("c0", int.from_bytes(digest[:8], "big"))
    doc.add_unsigned("c1", int.from_bytes(digest[8:], "big"))
    doc.add_unsigned("gk", group)
    doc.add_unsigned("ts", created)
    if record is not None:
        doc.add_bytes("rec", record)
    if acr is not None:
        doc.add_bytes("acr", acr)
    return doc


def id_of(hi: int, lo: int) -> str:
    return f"{hi:016x}{lo:016x}"


def body_query(
    terms: Iterable[str],
    added: Iterable[str] = (),
    weight: float = 1.0,
    beside: Sequence[tuple[Any, Any]] = (),
) -> Any:
    """Any of ``terms`` in the body, each scored once (BM25's OR), and any of ``added`` (a
    query's related words) scored at ``weight`` times its BM25; None for no term. ``beside``:
    clauses that only exclude (``MustNot``), in the same boolean -- tantivy searches one flat
    boolean of terms faster than the terms nested under a ``Must``, for the same hits."""
    own = dict.fromkeys(terms)
    term = tantivy.Query.term_query
    clauses = [(tantivy.Occur.Should, term(SCHEMA, "body", t)) for t in own]
    clauses += [
        (tantivy.Occur.Should, tantivy.Query.boost_query(term(SCHEMA, "body", t), weight))
        for t in dict.fromkeys(added)
        if t not in own
    ]
    return tantivy.Query.boolean_query([*clauses, *beside]) if clauses else None


def read_meta(path: str) -> dict[str, Any] | None:
    """A floor index's ``meta.json``; None when the folder or the file is missing, a link,
    or unreadable."""
    found = _meta(path)
    return found[0] if found is not None else None


def _meta(path: str) -> tuple[dict[str, Any], bytes] | None:
    """``read_meta``, and the bytes it was parsed from."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return None
        fd = os.open(os.path.join(path, "meta.json"), os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None
    try:
        with open(fd, "rb") as handle:
            data = handle.read()
        meta = json.loads(data)
    except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    return (meta, data) if isinstance(meta, dict) else None


def read_opstamp(path: str) -> int | None:
    meta = read_meta(path)
    found = meta.get("opstamp") if meta is not None else None
    return found if isinstance(found, int) else None


def _files(meta: dict[str, Any]) -> list[str]:
    """The files of the commit a ``meta.json`` names (each segment's parts and deletions)."""
    names: list[str] = []
    for segment in meta["segments"]:
        name = str(segment["segment_id"]).replace("-", "")
        names += [f"{name}.{part}" for part in _PARTS]
        deletes = segment.get("deletes")
        if deletes:
            names.append(f"{name}.{deletes['opstamp']}.del")
    if any(os.sep in name or name.startswith(".") for name in names):
        raise ValueError(f"a file name that is not a segment's: {names!r}")
    return names


def signature(path: str) -> int | None:
    """What the files of a floor index's last commit look like from outside: the checksum of
    its ``meta.json`` and per file its name, type, size, inode and change times (``lstat``: a
    link is seen as a link). tantivy checks a file's length and footer as it opens it, not
    its bytes; bytes changed in place change the times (or, within one tick of the clock,
    the checksums a private copy checks: ``_private_copy``), so a view whose signature
    differs from the one recorded at the commit is rebuilt rather than answered from. None
    when the index is unreadable."""
    found = _meta(path)
    if found is None:
        return None
    meta, data = found
    try:
        seen: list[tuple[Any, ...]] = []
        for name in _files(meta):
            try:
                info = os.lstat(os.path.join(path, name))
            except FileNotFoundError:
                seen.append((name,))
                continue
            seen.append(
                (name, info.st_mode, info.st_size, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
            )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return zlib.crc32(repr((meta.get("opstamp"), zlib.crc32(data), seen)).encode())


def _guarded(path: str, work: Callable[[], Any]) -> Any:
    """``work()``, with what tantivy raises on damaged files as ``FloorError``."""
    try:
        return work()
    except (ValueError, OSError) as exc:
        raise FloorError(f"{path}: {exc}") from exc
    except BaseException as exc:  # pyo3's PanicException is no Exception
        if type(exc).__name__ != "PanicException":
            raise
        raise FloorError(f"{path}: tantivy panicked ({exc})") from exc


class Floor:
    """One floor index opened for searching at the commit the index head names.

    tantivy maps its files: one truncated in place under a live searcher would kill this
    process (SIGBUS). The searcher maps a private copy instead, removed as soon as it is open
    (the mappings outlive the names), so nothing under .git/truss can reach what it reads.
    The copy is taken between two looks at the same files: it is the commit the head names,
    or it is not used. ``memo`` keeps what was decoded from it (the commit never changes)."""

    def __init__(self, path: str, trust: Trust, opstamp: int, sign: int) -> None:
        if signature(path) != sign:
            raise FloorError(f"{path}: not the commit the index head names, or changed since")
        copy = _private_copy(path)
        try:
            if signature(path) != sign or read_opstamp(path) != opstamp:
                raise FloorError(f"{path}: moved while opened")
            self.index = _guarded(path, lambda: tantivy.Index.open(copy))
            # No reload on commit: that policy starts a thread watching the folder, which
            # outlives this object and reads whatever lands there later.
            self.index.config_reader(reload_policy="Manual")
            self.searcher = _guarded(path, self.index.searcher)
        finally:
            shutil.rmtree(copy, ignore_errors=True)
        self.path = path
        self.trust = trust
        self.memo: dict[Any, Any] = {}

    def search(self, query: Any, limit: int, *, count: bool = False) -> tuple[list[Any], int]:
        """``([(score, id, trust code, address), ...], count)`` of the best ``limit``."""

        def run() -> tuple[list[Any], int]:
            result = self.searcher.search(query, limit, count=count)
            return self.hits(result.hits), result.count if count and result.count else 0

        found: tuple[list[Any], int] = _guarded(self.path, run)
        return found

    def best(self, query: Any, want: int) -> list[tuple[float, Any]]:
        """``[(score, address), ...]`` of the best ``want``, best first: no field read yet."""
        found: list[tuple[float, Any]] = _guarded(
            self.path, lambda: self.searcher.search(query, want, count=False).hits
        )
        return found

    def hits(self, scored: Sequence[tuple[float, Any]]) -> list[Any]:
        """``[(score, id, trust code, address), ...]`` of ``(score, address)`` pairs: the id
        and the trust code read from the fast fields, no stored document."""
        addresses = [address for _score, address in scored]
        values = self.searcher.fast_field_values
        his, los, codes = values("hi", addresses), values("lo", addresses), values("tr", addresses)
        return [
            (pair[0], f"{hi:016x}{lo:016x}", code, pair[1])
            for pair, hi, lo, code in zip(scored, his, los, codes, strict=True)
        ]

    def tie_keys(self, addresses: list[Any]) -> list[tuple[int, int]]:
        """The id of each document as its two numbers: ordered as the hex ids are."""
        values = self.searcher.fast_field_values
        return list(zip(values("hi", addresses), values("lo", addresses), strict=True))

    def stored(self, address: Any, field: str) -> bytes | None:
        doc = _guarded(self.path, lambda: self.searcher.doc(address))
        value = doc.get_first(field)
        return bytes(value) if value is not None else None

    def address_of(self, entry_id: str) -> Any:
        query = tantivy.Query.term_query(SCHEMA, "id", entry_id)
        hits = _guarded(self.path, lambda: self.searcher.search(query, 1).hits)
        return hits[0][1] if hits else None

    def fast(self, field: str, addresses: list[Any]) -> list[int]:
        found: list[int] = _guarded(
            self.path, lambda: self.searcher.fast_field_values(field, addresses)
        )
        return found

    @property
    def num_docs(self) -> int:
        found: int = self.searcher.num_docs
        return found


def trust_of_code(code: int) -> Trust:
    return _TRUST_OF_CODE[code]


def _private_copy(path: str) -> str:
    """A folder of the system's temporary directory only this user can read, holding a
    private copy of the files of the floor index at ``path`` (its ``meta.json`` and what that
    names). ``FloorError`` when a file is missing, a link or unreadable.

    Where the system can reopen a descriptor by ``/proc/self/fd``, the copies are kept open,
    nameless, and the next open of the same floor links to those of the files that are still
    the same (name, size, inode, modification and change times): tantivy never rewrites a
    file it wrote, so after a write only the new files are copied (a 100k-note floor is ~70 MB).
    """
    found_meta = _meta(path)
    if found_meta is None:
        raise FloorError(f"{path}: no readable meta.json")
    meta, data = found_meta
    copy = tempfile.mkdtemp(prefix="truss-floor-")
    with _KEPT_LOCK:
        kept = _KEPT.pop(path, {})
        now: dict[tuple[Any, ...], int] = {}
        try:
            # The meta.json the file list was read from, not a second read of it.
            with open(os.path.join(copy, "meta.json"), "xb") as out:
                out.write(data)
            for name in _files(meta):
                fd = os.open(os.path.join(path, name), os.O_RDONLY | _NOFOLLOW)
                with open(fd, "rb"):  # closes ``fd``
                    info = os.fstat(fd)
                    key = (name, info.st_size, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
                    target = os.path.join(copy, name)
                    found = kept.pop(key, None)  # a copy checked when it was made
                    if found is not None:
                        os.symlink(f"/proc/self/fd/{found}", target)
                        now[key] = found
                        continue
                    with open(target, "xb") as out:
                        _checked_copy(fd, info.st_size, out)
                    if _REOPEN:
                        now[key] = os.open(target, os.O_RDONLY)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            kept.update(now)
            _close_all(kept)
            shutil.rmtree(copy, ignore_errors=True)
            raise FloorError(f"{path}: cannot be copied ({exc})") from exc
        _close_all(kept)  # the copies of files this floor no longer names
        _KEPT[path] = now
        while len(_KEPT) > _KEPT_FLOORS:  # the oldest first: a floor a rebuild replaced
            _close_all(_KEPT.pop(next(iter(_KEPT))))
    return copy


# tantivy ends every file of a segment with a footer: JSON (its version and the CRC-32 of the
# bytes before the footer), the JSON's length and this magic number, both u32 little-endian.
_FOOTER_MAGIC: Final = 1337
_FOOTER_MAX: Final = 4096
_CHUNK: Final = 1 << 20


def _checked_copy(fd: int, size: int, out: Any) -> None:
    """The ``size`` bytes of the open file ``fd`` written to ``out``, checked against the
    CRC-32 tantivy's footer records for them: ``ValueError`` for a file cut short, grown,
    garbled or without a footer. tantivy checks a file's length and footer as it opens it,
    never its bytes, and bytes changed in place within one tick of the clock leave its times
    as they were: only this check sees them (a garbled file can make tantivy panic, or answer
    from the garbled bytes)."""
    if size < 8:
        raise ValueError(f"a file of {size} bytes has no footer")
    tail = os.pread(fd, 8, size - 8)
    length, magic = struct.unpack("<II", tail) if len(tail) == 8 else (0, 0)
    if magic != _FOOTER_MAGIC or not 0 < length <= min(_FOOTER_MAX, size - 8):
        raise ValueError("no tantivy footer")
    footer = os.pread(fd, length, size - 8 - length)
    want = json.loads(footer).get("crc") if len(footer) == length else None
    if not isinstance(want, int):
        raise ValueError("a footer without its checksum")
    body = size - 8 - length
    crc = 0
    done = 0
    while chunk := os.pread(fd, _CHUNK, done):
        if done < body:
            crc = zlib.crc32(chunk[: body - done], crc)
        done += len(chunk)
        out.write(chunk)
        if done > size:
            break
    if done != size:
        raise ValueError(f"{done} bytes read of {size}")
    if crc != want:
        raise ValueError("the bytes do not match their checksum (garbled)")


def _close_all(fds: dict[tuple[Any, ...], int]) -> None:
    for fd in fds.values():
        with contextlib.suppress(OSError):
            os.close(fd)


# The kept copies (``_private_copy``): floor path -> {file identity: descriptor}, for the
# floors opened last; each holds its copies' space in the temporary directory until closed.
_KEPT: dict[str, dict[tuple[Any, ...], int]] = {}
_KEPT_LOCK: Final = threading.Lock()
_KEPT_FLOORS: Final = 2 * len(HOLDERS)
_REOPEN: Final = os.path.isdir("/proc/self/fd")


def ranked(
    floor: Floor, query: Any, limit: int, admit: Callable[[Any], bool] | None = None
) -> list[Any]:
    """The best ``limit`` hits ``admit`` passes (all when None), best first, ties by id.
    tantivy orders equal scores arbitrarily, and a filter may pass few of its hits: hits are
    asked for in growing batches (four times as many each) until ``limit`` pass and the last
    hit scores below the ``limit``-th, or none are left."""
    want = limit + TIE_SLACK
    while True:
        if admit is None:
            # Only the hits that can be returned are read: the best ``limit`` and any that tie
            # with the ``limit``-th (tantivy gives them best first).
            scored = floor.best(query, want)
            if len(scored) < want or scored[-1][0] < scored[min(limit, len(scored)) - 1][0]:
                chosen = scored if len(scored) < limit else _cut(floor, scored, limit)
                out: list[Any] = _guarded(floor.path, partial(floor.hits, chosen))
                out.sort(key=_order)
                return out[:limit]
            want *= 4
            continue
        hits, _count = floor.search(query, want)
        kept = hits if admit is None else [hit for hit in hits if admit(hit)]
        done = len(hits) < want  # every match seen
        if not done and len(kept) >= limit:
            cut = sorted((hit[0] for hit in kept), reverse=True)[limit - 1]
            done = hits[-1][0] < cut
        if done:
            kept.sort(key=_order)
            return kept[:limit]
        want *= 4


def _cut(floor: Floor, scored: list[tuple[float, Any]], limit: int) -> list[tuple[float, Any]]:
    """The pairs that can be among the best ``limit`` by (score desc, id asc): those above
    the ``limit``-th score, and of those that tie with it the ones of the smallest ids --
    read as the id's two numbers alone (their order is the hex id's), however many tie."""
    cut = scored[limit - 1][0]
    above = [p for p in scored if p[0] > cut]
    tied = [p for p in scored if p[0] == cut]
    need = limit - len(above)
    keys_of = getattr(floor, "tie_keys", None)  # a stand-in floor may order ties its own way
    if len(tied) > need and keys_of is not None:
        keys = _guarded(floor.path, partial(keys_of, [address for _score, address in tied]))
        order = sorted(range(len(tied)), key=keys.__getitem__)
        tied = [tied[i] for i in order[:need]]
    return above + tied


def _order(hit: Sequence[Any]) -> tuple[float, str]:
    return -hit[0], hit[1]


class FloorWriter:
    """Changes to one floor index, committed together (callers hold the index lock).

    Whatever tantivy raises while the folder's files are damaged under it (cut, removed, the
    folder itself removed) is ``FloorError``: the caller rebuilds, or the query answers
    ``IndexUnavailable``."""

    def __init__(self, path: str, *, create: bool = False, heap: int = UPDATE_HEAP) -> None:
        if create:
            os.makedirs(path, exist_ok=False)
            self.index = _guarded(path, lambda: tantivy.Index(SCHEMA, path=path, reuse=False))
        else:
            if read_meta(path) is None:
                raise FloorError(f"{path} is missing, unreadable or a link")
            self.index = _guarded(path, lambda: tantivy.Index.open(path))
        threads = max(1, min(heap // UPDATE_HEAP, os.cpu_count() or 1, 4))
        self.writer = _guarded(path, lambda: self.index.writer(heap_size=heap, num_threads=threads))
        self.path = path

    def add(self, doc: Any) -> None:
        try:  # inline, not ``_guarded``: once per document of a rebuild
            self.writer.add_document(doc)
        except (ValueError, OSError) as exc:
            raise FloorError(f"{self.path}: {exc}") from exc

    def delete(self, entry_id: str) -> None:
        _guarded(self.path, lambda: self.writer.delete_documents_by_term("id", entry_id))

    def commit(self) -> tuple[int, int]:
        """Commit, finish the merges it starts (inside the caller's lock: the next reader
        finds the index as the updater left it) and return the commit's opstamp and the
        ``signature`` of its files."""
        opstamp: int = _guarded(self.path, self.writer.commit)
        # A merge that fails leaves the committed segments as they are.
        with contextlib.suppress(FloorError, RuntimeError):
            _guarded(self.path, self.writer.wait_merging_threads)
        sign = signature(self.path)
        if sign is None:
            raise FloorError(f"{self.path}: unreadable right after its commit")
        return opstamp, sign
