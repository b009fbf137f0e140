"""Writing the floor indexes (``floors``): what an index update or rebuild does to them.

An update (``index.py``, inside its lock) hands ``FloorChanges`` the documents it deletes and
the segments it adds; each goes to the floor indexes its trust belongs to (an unverified write
touches the unverified floor's alone), a writer is opened only for a floor that changes, and
every change lands only on the commit the index head names (a floor a crash left ahead of
the head is rebuilt instead). ``commit`` commits each floor, waits for the merges it starts,
and returns what the head records: folder, opstamp, documents, total length, file signature.
A rebuild writes every floor afresh, in new folders, fed whole segments at a time.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

from .floors import (
    BUILD_HEAP,
    FLOORS,
    UPDATE_HEAP,
    FloorError,
    doc_tags,
    floors_of,
    make_doc,
    read_meta,
    read_opstamp,
    schema,
    signature,
)

if TYPE_CHECKING:
    from .segment import Segment

__all__ = ["BULK_BODIES", "FloorChanges", "FloorMeta", "FloorWriter", "segment_docs"]

# Per floor (a Trust value): its folder, the opstamp of its last commit, how many documents
# it holds and their total length (the statistics ``floors.bm25`` scores bypass documents
# with), and the signature of its files at that commit (``floors.signature``).
FloorMeta = tuple[str, int, int, int, int]


class FloorWriter:
    """Changes to one floor index, committed together (callers hold the index lock)."""

    def __init__(self, path: str, *, create: bool = False, heap: int = UPDATE_HEAP) -> None:
        import tantivy

        if create:
            os.makedirs(path, exist_ok=False)
            self.index = tantivy.Index(schema(), path=path, reuse=False)
        else:
            if read_meta(path) is None:
                raise FloorError(f"{path} is missing, unreadable or a link")
            try:
                self.index = tantivy.Index.open(path)
            except (ValueError, OSError) as exc:
                raise FloorError(f"{path}: {exc}") from exc
        threads = max(1, min(heap // UPDATE_HEAP, os.cpu_count() or 1, 4))
        self.writer = self.index.writer(heap_size=heap, num_threads=threads)
        self.path = path

    def add(self, doc: Any) -> None:
        self.writer.add_document(doc)

    def delete(self, entry_id: str) -> None:
        self.writer.delete_documents_by_term("id", entry_id)

    def commit(self) -> tuple[int, int]:
        """Commit, finish the merges it starts (inside the caller's lock: the next reader
        finds the index as the updater left it) and return the commit's opstamp and the
        ``signature`` of its files."""
        opstamp: int = self.writer.commit()
        with contextlib.suppress(ValueError, RuntimeError):
            self.writer.wait_merging_threads()
        sign = signature(self.path)
        if sign is None:
            raise FloorError(f"{self.path}: unreadable right after its commit")
        return opstamp, sign


class FloorChanges:
    """Deletions and additions for the floor indexes, committed together (``commit``): a
    writer is opened only for a floor that changes. ``floors`` None: build every floor
    afresh, in new folders, with a writer sized for a bulk build."""

    def __init__(self, folder: str, floors: dict[str, FloorMeta] | None) -> None:
        self.folder = folder
        self.fresh = floors is None
        self.meta: dict[str, FloorMeta] = dict(floors or {})
        self.writers: dict[str, FloorWriter] = {}
        self.counts: dict[str, list[int]] = {}  # floor -> [documents, total length]
        if self.fresh:
            stamp = f"{os.getpid()}-{time.time_ns():x}"
            for trust in FLOORS:
                self.meta[trust.value] = (f"floor-{trust.value}-{stamp}", 0, 0, 0, 0)

    def _writer(self, floor: str) -> FloorWriter:
        found = self.writers.get(floor)
        if found is None:
            name, opstamp, n_docs, total, sign = self.meta[floor]
            path = os.path.join(self.folder, name)
            if self.fresh:
                found = FloorWriter(path, create=True, heap=BUILD_HEAP // len(FLOORS))
            else:
                # Changes go only onto the commit the head names: a floor index a crash left
                # ahead of it already holds some of them (or is damaged): rebuild instead.
                if signature(path) != sign or read_opstamp(path) != opstamp:
                    raise FloorError(f"{path} is not at the commit the index head names")
                found = FloorWriter(path)
            self.writers[floor] = found
            self.counts[floor] = [n_docs, total]
        return found

    def delete(self, entry_id: str, cls: int, length: int) -> None:
        for trust in floors_of(cls):
            self._writer(trust.value).delete(entry_id)
            counts = self.counts[trust.value]
            counts[0] -= 1
            counts[1] -= length

    def add_segment(self, seg: Segment, docnos: Iterable[int]) -> None:
        for cls, length, doc in segment_docs(seg, docnos):
            for trust in floors_of(cls):
                self._writer(trust.value).add(doc)
                counts = self.counts[trust.value]
                counts[0] += 1
                counts[1] += length

    def commit(self) -> dict[str, FloorMeta]:
        if self.fresh:
            for trust in FLOORS:
                self._writer(trust.value)  # every floor exists, empty or not
        for floor, writer in self.writers.items():
            opstamp, sign = writer.commit()
            n_docs, total = self.counts[floor]
            self.meta[floor] = (self.meta[floor][0], opstamp, n_docs, total, sign)
        return self.meta


def segment_docs(seg: Segment, docnos: Iterable[int]) -> Iterator[tuple[int, int, Any]]:
    """``(class byte, length, floor index document)`` of the segment's documents ``docnos``:
    the body rebuilt from the segment's forward index (terms repeated by their frequency:
    without positions, BM25 sees the same document)."""
    cls, layers, lengths = seg.cls, seg.layer, seg.lengths
    group_of: dict[int, str] = {}
    for group, members in seg.groups().items():
        for docno in members:
            group_of[docno] = group
    docnos = list(docnos)
    bodies = _bulk_bodies(seg) if len(docnos) >= BULK_BODIES else None
    for docno in docnos:
        code = cls[docno]
        if not floors_of(code):
            continue  # rejected: in no floor index
        if bodies is not None:
            body = bodies(docno)
        else:
            terms, tfs = seg.forward_terms(docno)
            body = " ".join(terms)
            if tfs and max(tfs) > 1:
                # Most terms occur once: only the others are repeated (order is not indexed).
                more = [t for t, f in zip(terms, tfs, strict=True) if f > 1 for _ in range(f - 1)]
                body = f"{body} {' '.join(more)}"
        doc = make_doc(
            seg.doc_id(docno), body, doc_tags(code, layers[docno], group_of.get(docno, ""))
        )
        yield code, lengths[docno], doc


BULK_BODIES: Final = 2_000  # documents; below this importing numpy (~0.1 s) costs more


def _bulk_bodies(seg: Segment) -> Callable[[int], str] | None:
    """``docno -> body`` for a whole segment, every token laid out by numpy at once (a
    rebuild's floor indexes are fed ~2x faster); None without numpy."""
    try:
        import numpy as np
    except ImportError:
        return None
    fterm, ftf, foff = seg.forward_arrays()
    tokens = np.array(seg.vocab(), dtype=object)[np.repeat(fterm, ftf)]
    before = np.zeros(len(ftf) + 1, dtype=np.int64)  # tokens before each posting
    np.cumsum(ftf, out=before[1:])
    bounds = before[foff].tolist()  # tokens before each document

    def body(docno: int) -> str:
        return " ".join(tokens[bounds[docno] : bounds[docno + 1]].tolist())

    return body
