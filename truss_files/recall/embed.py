"""Embeddings for the semantic and hybrid modes: the vector cache and the ranking over it.

The encoders that turn text into vectors live in ``truss_files/recall/encoders/``
(``load_embedder``); exact mode never imports this module.

Vectors are cached per (model fingerprint, content hash) under ``.git/truss/vectors/<fp>/``
(packs of float16 rows, sha256 of the embedded text as the key), so an entry is embedded once
whatever floor or trust it moves to. A pack is ``PACK_MAGIC``, its row count and width, the
CRC-32 of what follows, the hashes and the rows: one cut short, garbled, of another width or
a link (never followed) is skipped, and its rows are embedded again. A query reads the
content hashes of the admitted documents from the floor indexes (fast fields ``c0``/``c1``)
-- after the trust filter, never before -- and scores their cached rows.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..errors import VectorsMissing
from .bounds import EMBED_IN_QUERY
from .docs import embed_text
from .encoders.modelfiles import _unit

if TYPE_CHECKING:
    from ..git.gitdir import GitDir
    from .encoders.base import Embedder
    from .index import IndexView
    from .lexical import Match

__all__ = ["VectorCache", "embed_missing", "query_vector", "semantic_rank"]

# A pack of the first format (b"TRUSSVEC") had no checksum: it is skipped, its rows embedded
# again into a pack of this one.
PACK_MAGIC: Final = b"TRUSSVC2"
_HEADER: Final = struct.Struct("<III")  # rows, width, CRC-32 of the hashes and rows
_START: Final = len(PACK_MAGIC) + _HEADER.size
MAX_PACKS: Final = 16
# Notes per pack while indexing: an interrupted ``index`` keeps what it embedded.
INDEX_BATCH: Final = 256
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


class VectorCache:
    """Vectors by content hash for one embedder: immutable packs of float16 rows."""

    def __init__(self, git: GitDir, embedder: Embedder) -> None:
        self.tag = _tag(embedder.fingerprint)
        self.dir = git.cache_dir / "vectors" / self.tag
        self.embedder = embedder

    def _packs(self) -> list[Path]:
        return sorted(self.dir.glob("v-*.vec")) if self.dir.is_dir() else []

    def load(self) -> tuple[dict[bytes, tuple[int, int]], list[Any]]:
        """``({hash: (pack number, row)}, [matrix per pack])``; a long-lived process reads
        the packs again only when their list changes (packs are immutable: a new vector is a
        new pack)."""
        packs = self._packs()
        key = (str(self.dir), tuple(p.name for p in packs))
        found = _LOADED.get(key)
        if found is not None:
            return found
        made = self._read(packs)
        _LOADED.clear()  # one store's packs at a time: bounded memory
        _LOADED[key] = made
        return made

    def _read(self, packs: list[Path]) -> tuple[dict[bytes, tuple[int, int]], list[Any]]:
        import numpy as np

        width = _width(self.embedder)
        where: dict[bytes, tuple[int, int]] = {}
        matrices: list[Any] = []
        for path in packs:
            data = _read_pack(path)
            if data is None:
                continue  # a damaged pack only costs re-embedding its rows
            n, dim, _crc = _HEADER.unpack_from(data, len(PACK_MAGIC))
            if width is not None and dim != width:
                continue
            hashes = data[_START : _START + 16 * n]
            matrix = np.frombuffer(data, dtype=np.float16, offset=_START + 16 * n, count=n * dim)
            number = len(matrices)
            matrices.append(matrix.reshape(n, dim))
            for row in range(n):
                where[hashes[16 * row : 16 * row + 16]] = (number, row)
        return where, matrices

    def add(self, hashes: Sequence[bytes], vectors: Any) -> None:
        import numpy as np

        rows = np.ascontiguousarray(vectors, dtype=np.float16)
        n, dim = rows.shape
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"v-{time.time_ns():x}-{os.getpid()}.vec"
        body = b"".join(hashes) + rows.tobytes()
        _atomic_write(path, PACK_MAGIC + _HEADER.pack(n, dim, zlib.crc32(body)) + body)

    def compact(self) -> None:
        """Fold many small packs into one, so loading stays one read per few packs."""
        packs = self._packs()
        if len(packs) <= MAX_PACKS:
            return
        import numpy as np

        where, matrices = self.load()
        if not where:
            return
        hashes = list(where)
        rows = np.stack([matrices[p][r] for p, r in (where[h] for h in hashes)])
        self.add(hashes, rows)
        for path in packs:
            with contextlib.suppress(OSError):
                path.unlink()


_LOADED: dict[tuple[str, tuple[str, ...]], tuple[dict[bytes, tuple[int, int]], list[Any]]] = {}


def _read_pack(path: Path) -> bytes | None:
    """A pack's bytes when they are whole (``add``'s layout, their checksum right); None
    for a pack that is missing, a link, cut short, grown or garbled."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
        with open(fd, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    if len(data) < _START or data[: len(PACK_MAGIC)] != PACK_MAGIC:
        return None
    n, dim, crc = _HEADER.unpack_from(data, len(PACK_MAGIC))
    if len(data) != _START + 16 * n + 2 * n * dim or zlib.crc32(memoryview(data)[_START:]) != crc:
        return None
    return data


def _width(embedder: Embedder) -> int | None:
    """The embedder's vector width, when it says: a pack of another width is not its own."""
    try:
        found = embedder.dim
    except Exception:  # noqa: BLE001 - a width we cannot learn checks nothing
        return None
    return found if isinstance(found, int) and found > 0 else None


def _tag(fingerprint: str) -> str:
    """The fingerprint made safe for a file name: no hashing (nor hashlib's import) on
    the query path; a long one is hashed, so two fingerprints never share a tag."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "-", fingerprint)
    if len(safe) <= 96:
        return safe
    import hashlib

    return f"{safe[:60]}-{hashlib.sha256(fingerprint.encode()).hexdigest()[:24]}"


def query_vector(embedder: Embedder, text: str) -> list[float]:
    """The unit query vector as floats: numpy-free where the embedder allows it."""
    fast = getattr(embedder, "query_vector", None)
    if fast is not None:
        found: list[float] = fast(text)
        return found
    vector = [float(x) for x in embedder.embed_query(text)]
    return _unit(vector) if any(vector) else []


def semantic_rank(
    view: IndexView,
    git: GitDir,
    embedder: Embedder,
    cands: Sequence[Match],
    text: str,
    limit: int,
    memo: dict[str, Any] | None = None,
    embed_limit: int | None = EMBED_IN_QUERY,
) -> list[Match]:
    """The ``limit`` admitted entries closest to ``text`` (cosine > 0), ties by entry id.

    Only admitted documents (``cands``, the filter already run) are scored: an entry's score
    and rank never depend on entries the filter left out. Each one's vector comes from the
    content-hash cache (``VectorCache``), embedded once when missing. ``memo`` belongs to
    ``cands`` (``Searcher.admitted``): their rows in the vector matrix are kept there while
    the vector packs are the same. More than ``embed_limit`` vectors missing (None: no
    bound) raises ``VectorsMissing`` before any is embedded."""
    import numpy as np  # the semantic extra: exact mode never imports it

    query = query_vector(embedder, text)
    if not query or not cands:
        return []
    cache = VectorCache(git, embedder)
    packs = cache.load()
    kept = memo.get("rows") if memo is not None else None
    if kept is not None and kept[0] is packs[0]:
        rows = kept[1]  # the same admitted list over the same vector packs: rows known
    else:
        packs, rows = _rows(view, embedder, cache, packs, cands, embed_limit)
        if memo is not None:
            memo["rows"] = (packs[0], rows)
    # One matrix-vector product over every cached vector (contiguous float32, kept while the
    # packs are), then the admitted documents' rows of it.
    every = _stacked(*packs)[1] @ np.asarray(query, dtype=np.float32)
    scores = every[rows]
    keep = np.flatnonzero(scores > 0)
    if len(keep) > limit:
        # ties at the cut are kept whole, so the first ``limit`` by the order below are exact
        cut = np.partition(scores[keep], len(keep) - limit)[len(keep) - limit]
        keep = keep[scores[keep] >= cut]
    order = sorted((-float(scores[i]), cands[i].id, i) for i in keep.tolist())
    return [cands[i]._replace(score=-neg) for neg, _, i in order[:limit]]


def _hashes(cands: Sequence[Match]) -> list[bytes]:
    """Each match's content hash (the floor's fast fields ``c0``/``c1``), read once per
    document: a floor never changes."""
    for floor in {id(m.floor): m.floor for m in cands}.values():
        mine = [m for m in cands if m.floor is floor and ("chash", m.id) not in floor.memo]
        if mine:
            addresses = [m.hit[3] for m in mine]
            pairs = zip(floor.fast("c0", addresses), floor.fast("c1", addresses), strict=True)
            digests = [hi.to_bytes(8, "big") + lo.to_bytes(8, "big") for hi, lo in pairs]
            floor.memo.update({("chash", m.id): d for m, d in zip(mine, digests, strict=True)})
    return [m.floor.memo[("chash", m.id)] for m in cands]


def embed_missing(
    view: IndexView,
    git: GitDir,
    embedder: Embedder,
    cands: Sequence[Match],
    progress: Callable[[int, int], None] | None = None,
    most: int | None = None,
) -> int:
    """Embed and cache the vectors ``cands`` lack (at most ``most`` of them; None: all),
    ``INDEX_BATCH`` notes per pack (an interruption keeps the packs written);
    ``progress(done, missing)`` hears each pack. Returns how many notes were embedded."""
    cache = VectorCache(git, embedder)
    where = cache.load()[0]
    missing = list(
        {h: m for h, m in zip(_hashes(cands), cands, strict=True) if h not in where}.items()
    )[:most]
    if progress is not None:
        progress(0, len(missing))
    for start in range(0, len(missing), INDEX_BATCH):
        chunk = missing[start : start + INDEX_BATCH]
        entries = [view.entry(m.floor, m.hit) for _, m in chunk]
        cache.add(
            [h for h, _ in chunk], embedder.embed_documents([embed_text(e.body) for e in entries])
        )
        if progress is not None:
            progress(start + len(chunk), len(missing))
    if missing:
        cache.compact()
    return len(missing)


def _rows(
    view: IndexView,
    embedder: Embedder,
    cache: VectorCache,
    packs: tuple[dict[bytes, tuple[int, int]], list[Any]],
    cands: Sequence[Match],
    embed_limit: int | None = EMBED_IN_QUERY,
) -> tuple[tuple[dict[bytes, tuple[int, int]], list[Any]], Any]:
    """The packs loaded, and the row of each of ``cands`` in their stacked matrix as an index
    array; the vectors missing from the cache are embedded and added first (at most
    ``embed_limit`` of them, else ``VectorsMissing``)."""
    import numpy as np

    hashes = _hashes(cands)
    where, matrices = packs
    missing = {h: m for h, m in zip(hashes, cands, strict=True) if h not in where}
    if embed_limit is not None and len(missing) > embed_limit:
        raise VectorsMissing(
            f"{len(missing)} of the {len(cands)} notes this query ranks have no vector yet "
            f"(a query embeds at most {embed_limit}); run `truss-files index` once to embed "
            "them (a progress bar shows how far it is), or query with --mode exact"
        )
    if missing:
        entries = [view.entry(m.floor, m.hit) for m in missing.values()]
        vectors = embedder.embed_documents([embed_text(e.body) for e in entries])
        # A cache that cannot be written (a full disk, its folder removed) costs the next
        # query this embedding again, never this answer.
        with contextlib.suppress(OSError):
            cache.add(list(missing), vectors)
            cache.compact()
        where, matrices = cache.load()
        if any(h not in where for h in missing):
            # Not on disk after all (not written, or removed or damaged since): this query
            # scores the vectors it just made.
            where = {**where, **{h: (len(matrices), row) for row, h in enumerate(missing)}}
            matrices = [*matrices, np.asarray(vectors, dtype=np.float16)]
    row_of = _stacked(where, matrices)[0]
    rows = np.fromiter((row_of[h] for h in hashes), dtype=np.intp, count=len(hashes))
    return (where, matrices), rows


_STACKED: dict[int, tuple[Any, dict[bytes, int], Any]] = {}


def _stacked(where: dict[bytes, tuple[int, int]], matrices: list[Any]) -> tuple[Any, Any]:
    """``({hash: row}, one float32 matrix)`` of the loaded packs, made once per load."""
    import numpy as np

    found = _STACKED.get(id(where))
    if found is not None and found[0] is where:
        return found[1], found[2]
    starts = [0]
    for m in matrices:
        starts.append(starts[-1] + len(m))
    row_of = {h: starts[p] + r for h, (p, r) in where.items()}
    dim = matrices[0].shape[1] if matrices else 0
    matrix = (
        np.concatenate(matrices).astype(np.float32)
        if matrices
        else np.zeros((0, dim), dtype=np.float32)
    )
    _STACKED.clear()  # one store's packs at a time, as ``_LOADED``
    _STACKED[id(where)] = (where, row_of, matrix)
    return row_of, matrix


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
