"""Embeddings for the semantic and hybrid modes: the ``Embedder`` seam, two backends, a cache.

Optional: ``pip install 'truss-files[semantic]'`` brings the minilm model file; without it
the two modes raise a ``ConfigError`` that says so, and exact mode never imports this module.

Backends (``load_embedder``; truss.toml ``[recall] embedder``):

``minilm`` (default)
    all-MiniLM-L6-v2, a 6-layer sentence transformer, run in numpy over weights mapped from
    the user cache (``recall/minilm.py``). Chosen by measurement over wordllama: recall@5 of
    semantic mode 0.964 / 0.846 / 0.962 against 0.893 / 0.740 / 0.875 on tests/relevance, the
    hard set's held-out questions and the conversational set (README, "Semantic recall").
``wordllama`` (``pip install 'truss-files[wordllama]'``)
    WordLlama's ``l2_supercat`` 256-d static token embeddings, averaged and normalised. Its
    weights and tokenizer ship inside the wheel; ``WordLlama.load()`` finds them offline only
    when ``cache_dir`` is the package folder itself (it looks for ``<cache_dir>/tokenizers/``
    while the wheel's ``weights`` folder is found beside the module), and
    ``disable_download=True`` makes a missing file an error instead of a download. Documents
    are embedded by WordLlama (~11 ms per 100 notes). A *query* is embedded without it: its
    import (~600 ms: requests, pydantic) and the Rust tokenizer's load (~160 ms for 61k merges)
    would cost more than the whole query, so ``LlamaBPE`` re-implements the tokenizer's BPE
    (byte fallback, merges by rank, leftmost first) from a ``marshal`` copy of its vocabulary
    kept with the vectors, and the token rows are read from the memory-mapped weights. Tests
    check both against WordLlama's own output.
``sentence-transformers:<model dir>``
    any sentence-transformers model already on disk (never downloaded), if the package is
    installed.

Vectors are cached per (model fingerprint, content hash) under ``.git/truss/vectors/<fp>/``
(packs of float16 rows, sha256 of the embedded text as the key), so an entry is embedded once
whatever floor or trust it moves to. A query reads the content hashes of the admitted
documents from the floor indexes (fast fields ``c0``/``c1``) -- after the trust filter, never
before -- and scores their cached rows.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import marshal
import math
import operator
import os
import re
import struct
import sys
import time
from bisect import bisect_left
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from ..errors import ConfigError
from .docs import embed_text
from .modelfiles import (
    MODEL_CONFIG,
    Embedding,
    cache_root,
    embedding_layout,
    wordllama_files,
    wordllama_package,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ..gitdir import GitDir
    from .index import IndexView
    from .lexical import Match

__all__ = [
    "INSTALL_HINT",
    "Embedder",
    "LlamaBPE",
    "SentenceTransformerEmbedder",
    "WordLlamaEmbedder",
    "embed_text",
    "load_embedder",
    "semantic_rank",
]

INSTALL_HINT: Final = "pip install 'truss-files[semantic]'"
PACK_MAGIC: Final = b"TRUSSVEC"
BPE_MAGIC: Final = b"TRUSSBPE"
Q8_MAGIC: Final = b"TRUSSQ8\x00"
_BYTE_TOKEN: Final = re.compile(r"<0x[0-9A-F]{2}>\Z")
MAX_PACKS: Final = 16


class Embedder(Protocol):
    """Turns text into unit-length vectors; ``fingerprint`` changes whenever vectors would."""

    @property
    def fingerprint(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One L2-normalised row per text, float32."""
        ...

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """One L2-normalised vector (all zeros when the text has no tokens)."""
        ...


def _find(module: str) -> Any:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):  # ValueError: sys.modules[module] is None
        return None


def _need(module: str, what: str) -> None:
    if _find(module) is None:
        raise ConfigError(
            f"recall mode needs {what}, which is not installed; run `{INSTALL_HINT}` "
            "or query with --mode exact"
        )


DEFAULT_EMBEDDER: Final = "minilm"


def load_embedder(spec: str | None = None) -> Embedder:
    """The embedder named by ``[recall] embedder`` (default ``minilm``)."""
    spec = (spec or DEFAULT_EMBEDDER).strip()
    if spec == "minilm":
        # The semantic extra's model, run in numpy (recall/minilm.py).
        from .minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    if spec == "wordllama":
        return WordLlamaEmbedder()
    prefix = "sentence-transformers:"
    if spec.startswith(prefix):
        return SentenceTransformerEmbedder(spec[len(prefix) :])
    raise ConfigError(
        f'truss.toml: [recall] embedder \'{spec}\' is unknown; use "minilm", "wordllama" or '
        '"sentence-transformers:/path/to/model"'
    )


# -- wordllama -----------------------------------------------------------------------------


class WordLlamaEmbedder:
    """WordLlama's bundled ``l2_supercat`` model (offline; see the module docstring)."""

    CONFIG: Final = MODEL_CONFIG

    def __init__(self, dim: int = 256) -> None:
        _need("numpy", "numpy")
        package = wordllama_package()
        if package is None:
            _need("wordllama", "an embedder (wordllama)")
            raise ConfigError(f"wordllama is not importable; run `{INSTALL_HINT}`")
        self.package = package
        self._dim = dim
        self.weights, self.tokenizer_file = wordllama_files(package, dim)
        if not self.weights.is_file() or not self.tokenizer_file.is_file():
            raise ConfigError(
                f"wordllama at {self.package} has no bundled {self.CONFIG} {dim}-d model; "
                f"reinstall it (`{INSTALL_HINT}`)"
            )
        version = _package_version(self.package)
        sizes = f"{self.weights.stat().st_size}:{self.tokenizer_file.stat().st_size}"
        self._fingerprint = f"wordllama:{version}:{self.CONFIG}:{dim}:{sizes}"
        self._model: Any = None
        self._bpe: LlamaBPE | None = None
        self._rows: Any = None
        self._mapped: tuple[Any, int, int, int, str] | None = None

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def dim(self) -> int:
        return self._dim

    def model(self) -> Any:
        """``WordLlama.load`` from the wheel's own files, never the network."""
        if self._model is None:
            import logging

            root = logging.getLogger()
            saved = (root.level, list(root.handlers))
            try:
                from wordllama import WordLlama
            finally:
                # wordllama calls logging.basicConfig(level=INFO) on import: not its call to make.
                root.setLevel(saved[0])
                root.handlers[:] = saved[1]
            self._model = WordLlama.load(
                config=self.CONFIG, dim=self._dim, cache_dir=self.package, disable_download=True
            )
        return self._model

    def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        # WordLlama pads each batch of 64 to its longest text: batching texts of similar
        # length (sorted) instead of arrival order roughly halves the work on 20-200 word notes.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = self.model().embed([texts[i] for i in order], norm=True)
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        out[order] = np.nan_to_num(np.asarray(vectors, dtype=np.float32))
        return out

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        import numpy as np

        ids = self.bpe().encode(text)
        if not ids:
            return np.zeros(self._dim, dtype=np.float32)
        rows = self.rows()
        vocab = rows.shape[0]
        picked = rows[[min(max(i, 0), vocab - 1) for i in ids]].astype(np.float32)
        vector = np.asarray(np.sum(picked, axis=0, dtype=np.float32), dtype=np.float32)
        vector /= np.float32(len(ids))
        norm = float(np.linalg.norm(vector))
        if norm:
            vector /= np.float32(norm)
        return vector

    def query_vector(self, text: str) -> list[float]:
        """``embed_query`` without numpy: the mean of the query's token rows, read from the
        mapped weights (float16), L2-normalised; empty when the text has no tokens."""
        ids = self.bpe().encode(text)
        if not ids:
            return []
        data, start, vocab, dim, fmt = self.mapped_rows()
        total = [0.0] * dim
        for token in ids:
            row = struct.unpack_from(fmt, data, start + min(max(token, 0), vocab - 1) * dim * 2)
            total = list(map(operator.add, total, row))
        return _unit(total)

    def mapped_rows(self) -> tuple[Any, int, int, int, str]:
        """``(mapped file, offset of row 0, rows, dim, struct format of a row)``."""
        if self._mapped is None:
            import mmap

            layout = _layout(self.weights)
            if layout.dtype != "F16":
                raise ConfigError(f"{self.weights}: expected a float16 embedding.weight")
            with open(self.weights, "rb") as handle:
                data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            self._mapped = (data, layout.offset, layout.rows, layout.dim, f"<{layout.dim}e")
        return self._mapped

    def bpe(self) -> LlamaBPE:
        if self._bpe is None:
            self._bpe = LlamaBPE.load(self.tokenizer_file, cache_root() / "bpe")
        return self._bpe

    def rows(self) -> Any:
        """The embedding matrix, memory-mapped from the safetensors file (float16)."""
        if self._rows is None:
            import numpy as np

            layout = _layout(self.weights)
            dtype = {"F16": np.float16, "F32": np.float32}.get(layout.dtype)
            if dtype is None:
                raise ConfigError(
                    f"{self.weights}: embedding.weight is {layout.dtype}, not F16/F32"
                )
            self._rows = np.memmap(
                self.weights,
                dtype=dtype,
                mode="r",
                offset=layout.offset,
                shape=(layout.rows, layout.dim),
            )
        return self._rows


def _package_version(package: Path) -> str:
    try:
        text = (package / "_version.py").read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    found = re.search(r"__version__ = version = '([^']+)'", text)
    return found.group(1) if found else "unknown"


def _layout(weights: Path) -> Embedding:
    try:
        return embedding_layout(weights)
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        raise ConfigError(
            f"{weights}: unreadable model weights ({exc}); reinstall wordllama (`{INSTALL_HINT}`)"
        ) from exc


class LlamaBPE:
    """The Llama-2 BPE of WordLlama's ``tokenizer.json``, in Python, for short queries.

    Normalizer: prepend ``▁`` and replace spaces with ``▁``; no pre-tokenizer (the whole text
    is one word); characters missing from the vocabulary become ``<0xNN>`` byte tokens; then
    the lowest-ranked adjacent merge is applied, leftmost first, until none applies -- what
    ``tokenizers``' BPE model does with ``byte_fallback`` and no dropout.
    """

    def __init__(self, vocab: dict[str, int], merges: dict[int, int] | _SortedMerges) -> None:
        # merges: (left id << 20 | right id) -> (rank << 20 | merged id); ints load ~5x faster
        # from marshal than tuples, and the cold semantic query pays for this load.
        self.vocab = vocab
        self.merges = merges
        self.unk = vocab.get("<unk>", 0)

    @classmethod
    def from_json(cls, path: Path) -> LlamaBPE:
        data = json.loads(path.read_text(encoding="utf-8"))
        model = data["model"]
        if model.get("type") != "BPE" or not model.get("byte_fallback"):
            raise ConfigError(f"{path}: not a byte-fallback BPE tokenizer")
        vocab: dict[str, int] = dict(model["vocab"])
        if len(vocab) >= 1 << 20:
            raise ConfigError(f"{path}: vocabulary too large for LlamaBPE")
        merges: dict[int, int] = {}
        for rank, merge in enumerate(model["merges"]):
            left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
            merged = vocab.get(left + right)
            if left in vocab and right in vocab and merged is not None:
                merges.setdefault(vocab[left] << 20 | vocab[right], rank << 20 | merged)
        return cls(vocab, merges)

    @classmethod
    def load(cls, path: Path, cache: Path) -> LlamaBPE:
        """From a compact copy keyed by the file's size and mtime: the single-character part of
        the vocabulary (all ``encode`` looks up by string) and the merges as two sorted arrays
        of 64-bit ints, read whole (not mapped: see ``_from_copy``) and searched by bisection
        in place, instead of loading 61k merges (~25 ms for the marshal copy)."""
        import zlib

        stat = path.stat()
        # The file's name only spreads copies out (crc32: no hashlib import); the full
        # key inside the copy is what is checked. The arrays are in this machine's byte order,
        # so the order is part of the key.
        key = f"{path}:{stat.st_size}:{stat.st_mtime_ns}:{sys.byteorder}"
        copy = cache / f"{zlib.crc32(key.encode()):08x}.bpe"
        with contextlib.suppress(OSError, EOFError, ValueError, TypeError, struct.error):
            return cls._from_copy(copy, key)
        made = cls.from_json(path)
        with contextlib.suppress(OSError):
            cache.mkdir(parents=True, exist_ok=True)
            tmp = copy.with_name(f".{copy.name}.{os.getpid()}.tmp")
            tmp.write_bytes(made._copy_bytes(key))
            os.replace(tmp, copy)
        return made

    def _copy_bytes(self, key: str) -> bytes:
        from array import array

        chars = {t: i for t, i in self.vocab.items() if len(t) == 1 or _BYTE_TOKEN.match(t)}
        head = marshal.dumps((key, chars, self.unk))
        pairs = sorted(self.merges.items())
        keys = array("Q", [k for k, _ in pairs])
        values = array("Q", [v for _, v in pairs])
        return (
            BPE_MAGIC
            + struct.pack("<II", len(head), len(pairs))
            + head
            + bytes(-len(head) % 8)
            + keys.tobytes()
            + values.tobytes()
        )

    @classmethod
    def _from_copy(cls, copy: Path, key: str) -> LlamaBPE:
        # Read (~1 MB), not mapped: a cache truncated in place under a mapping is a SIGBUS.
        data = copy.read_bytes()
        if data[:8] != BPE_MAGIC:
            raise ValueError(f"{copy}: not a BPE copy")
        size, count = struct.unpack_from("<II", data, 8)
        stored, chars, unk = marshal.loads(data[16 : 16 + size])
        if stored != key:
            raise ValueError(f"{copy}: a copy of another tokenizer file")
        start = 16 + size + (-size % 8)
        if len(data) != start + 16 * count:
            raise ValueError(f"{copy}: truncated")
        made = cls(chars, _SortedMerges(data, start, count))
        made.unk = unk
        return made

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        normalized = "\u2581" + text.replace(" ", "\u2581")
        vocab = self.vocab
        symbols: list[int] = []
        for char in normalized:
            found = vocab.get(char)
            if found is not None:
                symbols.append(found)
                continue
            for byte in char.encode("utf-8"):
                symbols.append(vocab.get(f"<0x{byte:02X}>", self.unk))
        merges = self.merges
        while len(symbols) > 1:
            best = -1
            at = -1
            for pos in range(len(symbols) - 1):
                rule = merges.get(symbols[pos] << 20 | symbols[pos + 1])
                # Packed rank first: a smaller value is a lower rank; strict < keeps leftmost.
                if rule is not None and (best < 0 or rule < best):
                    best, at = rule, pos
            if best < 0:
                break
            symbols[at : at + 2] = [best & 0xFFFFF]
        return symbols


class _SortedMerges:
    """``dict.get`` over two sorted native-order uint64 arrays in a copy's bytes."""

    def __init__(self, data: Any, start: int, count: int) -> None:
        view = memoryview(data)
        self.keys = view[start : start + 8 * count].cast("Q")
        self.values = view[start + 8 * count : start + 16 * count].cast("Q")
        self.count = count

    def get(self, key: int) -> int | None:
        at = bisect_left(self.keys, key)
        if at < self.count and self.keys[at] == key:
            return int(self.values[at])
        return None

    def items(self) -> list[tuple[int, int]]:
        return list(zip(self.keys, self.values, strict=True))


# -- sentence-transformers -----------------------------------------------------------------


class SentenceTransformerEmbedder:
    """A sentence-transformers model from a folder on disk (nothing is downloaded)."""

    def __init__(self, model_dir: str | os.PathLike[str]) -> None:
        self.model_dir = Path(model_dir).expanduser()
        _need("sentence_transformers", "sentence-transformers (pip install sentence-transformers)")
        if (
            not (self.model_dir / "modules.json").is_file()
            and not (self.model_dir / "config.json").is_file()
        ):
            raise ConfigError(
                f"{self.model_dir} is not a sentence-transformers model folder (no modules.json "
                "or config.json); point [recall] embedder at a model saved with model.save()"
            )
        import hashlib

        digest = hashlib.sha256()
        for file in sorted(self.model_dir.rglob("*")):
            if file.is_file():
                stat = file.stat()
                digest.update(f"{file.relative_to(self.model_dir)}:{stat.st_size}\n".encode())
        self._fingerprint = f"st:{self.model_dir.name}:{digest.hexdigest()[:16]}"
        self._model: Any = None

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def model(self) -> Any:
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(self.model_dir), device="cpu")
        return self._model

    @property
    def dim(self) -> int:
        return int(self.model().get_sentence_embedding_dimension())

    def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        vectors = self.model().encode(list(texts), normalize_embeddings=True)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return self.embed_documents([text])[0]


# -- vectors: the content-hash cache ------------------------------------------------------


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

        where: dict[bytes, tuple[int, int]] = {}
        matrices: list[Any] = []
        for path in packs:
            try:
                data = path.read_bytes()
                if data[:8] != PACK_MAGIC:
                    continue
                n, dim = struct.unpack_from("<II", data, 8)
                hashes = data[16 : 16 + 16 * n]
                matrix = np.frombuffer(data, dtype=np.float16, offset=16 + 16 * n, count=n * dim)
                matrix = matrix.reshape(n, dim)
            except (OSError, ValueError, struct.error):
                continue  # a damaged pack only costs re-embedding its rows
            number = len(matrices)
            matrices.append(matrix)
            for row in range(n):
                where[hashes[16 * row : 16 * row + 16]] = (number, row)
        return where, matrices

    def add(self, hashes: Sequence[bytes], vectors: Any) -> None:
        import numpy as np

        rows = np.ascontiguousarray(vectors, dtype=np.float16)
        n, dim = rows.shape
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"v-{time.time_ns():x}-{os.getpid()}.vec"
        _atomic_write(
            path, PACK_MAGIC + struct.pack("<II", n, dim) + b"".join(hashes) + rows.tobytes()
        )

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


def _tag(fingerprint: str) -> str:
    """The fingerprint made safe for a file name: no hashing (nor hashlib's ~3 ms import) on
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


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else []


def semantic_rank(
    view: IndexView,
    git: GitDir,
    embedder: Embedder,
    cands: Sequence[Match],
    text: str,
    limit: int,
    memo: dict[str, Any] | None = None,
) -> list[Match]:
    """The ``limit`` admitted entries closest to ``text`` (cosine > 0), ties by entry id.

    Only admitted documents (``cands``, the filter already run) are scored: an entry's score
    and rank never depend on entries the filter left out. Each one's vector comes from the
    content-hash cache (``VectorCache``), embedded once when missing. ``memo`` belongs to
    ``cands`` (``Searcher.admitted``): their rows in the vector matrix are kept there while
    the vector packs are the same."""
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
        packs, rows = _rows(view, embedder, cache, packs, cands)
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


def _rows(
    view: IndexView,
    embedder: Embedder,
    cache: VectorCache,
    packs: tuple[dict[bytes, tuple[int, int]], list[Any]],
    cands: Sequence[Match],
) -> tuple[tuple[dict[bytes, tuple[int, int]], list[Any]], Any]:
    """The packs loaded, and the row of each of ``cands`` in their stacked matrix as an index
    array; the vectors missing from the cache are embedded and added first."""
    import numpy as np

    for floor in {id(m.floor): m.floor for m in cands}.values():
        # A floor never changes: each document's content hash is read once.
        mine = [m for m in cands if m.floor is floor and ("chash", m.id) not in floor.memo]
        if mine:
            addresses = [m.hit[3] for m in mine]
            pairs = zip(floor.fast("c0", addresses), floor.fast("c1", addresses), strict=True)
            digests = [hi.to_bytes(8, "big") + lo.to_bytes(8, "big") for hi, lo in pairs]
            floor.memo.update({("chash", m.id): d for m, d in zip(mine, digests, strict=True)})
    hashes = [m.floor.memo[("chash", m.id)] for m in cands]
    where, matrices = packs
    missing = {h: m for h, m in zip(hashes, cands, strict=True) if h not in where}
    if missing:
        entries = [view.entry(m.floor, m.hit) for m in missing.values()]
        vectors = embedder.embed_documents([embed_text(e.key, e.body) for e in entries])
        cache.add(list(missing), vectors)
        cache.compact()
        where, matrices = cache.load()
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
