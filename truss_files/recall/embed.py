"""Embeddings for the semantic and hybrid modes: the ``Embedder`` seam, two backends, a cache.

Optional: ``pip install 'truss-files[semantic]'`` brings numpy and wordllama; without them the
two modes raise a ``ConfigError`` that says so, and exact mode never imports this module.

Backends (``load_embedder``; truss.toml ``[recall] embedder``):

``wordllama`` (default)
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
whatever segment it moves to. Each index segment then gets a matrix aligned with its docnos
(``<segment>.<fp>.vec``), built from the packs, which a query maps and indexes with the
candidates' docnos -- after the trust filter, never before.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import marshal
import os
import re
import struct
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from ..errors import ConfigError
from .docs import embed_text

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .gitread import GitDir
    from .lexical import Candidates, Match
    from .segment import Segment

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


def load_embedder(spec: str | None = None) -> Embedder:
    """The embedder named by ``[recall] embedder`` (default ``wordllama``)."""
    spec = (spec or "wordllama").strip()
    if spec == "wordllama":
        return WordLlamaEmbedder()
    prefix = "sentence-transformers:"
    if spec.startswith(prefix):
        return SentenceTransformerEmbedder(spec[len(prefix) :])
    raise ConfigError(
        f"truss.toml: [recall] embedder '{spec}' is unknown; use \"wordllama\" or "
        '"sentence-transformers:/path/to/model"'
    )


# -- wordllama -----------------------------------------------------------------------------


class WordLlamaEmbedder:
    """WordLlama's bundled ``l2_supercat`` model (offline; see the module docstring)."""

    CONFIG: Final = "l2_supercat"

    def __init__(self, dim: int = 256) -> None:
        _need("numpy", "numpy")
        spec = _find("wordllama")
        if spec is None or not spec.submodule_search_locations:
            _need("wordllama", "an embedder (wordllama)")
            raise AssertionError("unreachable")
        self.package = Path(next(iter(spec.submodule_search_locations)))
        self._dim = dim
        self.weights = self.package / "weights" / f"{self.CONFIG}_{dim}.safetensors"
        self.tokenizer_file = self.package / "tokenizers" / f"{self.CONFIG}_tokenizer_config.json"
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

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def dim(self) -> int:
        return self._dim

    def model(self) -> Any:
        """``WordLlama.load`` from the wheel's own files, never the network."""
        if self._model is None:
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

    def bpe(self) -> LlamaBPE:
        if self._bpe is None:
            self._bpe = LlamaBPE.load(self.tokenizer_file, _cache_root() / "bpe")
        return self._bpe

    def rows(self) -> Any:
        """The embedding matrix, memory-mapped from the safetensors file (float16)."""
        if self._rows is None:
            import numpy as np

            with open(self.weights, "rb") as handle:
                (size,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(size))
            info = header["embedding.weight"]
            dtype = {"F16": np.float16, "F32": np.float32}[info["dtype"]]
            start, _end = info["data_offsets"]
            self._rows = np.memmap(
                self.weights,
                dtype=dtype,
                mode="r",
                offset=8 + size + start,
                shape=tuple(info["shape"]),
            )
        return self._rows


def _package_version(package: Path) -> str:
    try:
        text = (package / "_version.py").read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    found = re.search(r"__version__ = version = '([^']+)'", text)
    return found.group(1) if found else "unknown"


def _cache_root() -> Path:
    """Where the BPE tables are kept: the user cache dir (they belong to the model, not a store)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "truss-files"


class LlamaBPE:
    """The Llama-2 BPE of WordLlama's ``tokenizer.json``, in Python, for short queries.

    Normalizer: prepend ``▁`` and replace spaces with ``▁``; no pre-tokenizer (the whole text
    is one word); characters missing from the vocabulary become ``<0xNN>`` byte tokens; then
    the lowest-ranked adjacent merge is applied, leftmost first, until none applies -- what
    ``tokenizers``' BPE model does with ``byte_fallback`` and no dropout.
    """

    def __init__(self, vocab: dict[str, int], merges: dict[int, int]) -> None:
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
        """From a marshal copy keyed by the file's size and mtime (~10x faster than JSON)."""
        stat = path.stat()
        key = hashlib.sha256(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()
        copy = cache / f"{key[:24]}.marshal"
        with contextlib.suppress(OSError, EOFError, ValueError, TypeError):
            vocab, merges = marshal.loads(copy.read_bytes())
            return cls(vocab, merges)
        made = cls.from_json(path)
        with contextlib.suppress(OSError):
            cache.mkdir(parents=True, exist_ok=True)
            tmp = copy.with_name(f".{copy.name}.{os.getpid()}.tmp")
            tmp.write_bytes(marshal.dumps((made.vocab, made.merges)))
            os.replace(tmp, copy)
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


# -- vectors: the content-hash cache and per-segment matrices ------------------------------


class VectorCache:
    """Vectors by content hash for one embedder: immutable packs of float16 rows."""

    def __init__(self, git: GitDir, embedder: Embedder) -> None:
        digest = hashlib.sha256(embedder.fingerprint.encode()).hexdigest()[:16]
        self.tag = digest
        self.dir = git.cache_dir / "vectors" / digest
        self.embedder = embedder

    def _packs(self) -> list[Path]:
        return sorted(self.dir.glob("v-*.vec")) if self.dir.is_dir() else []

    def load(self) -> tuple[dict[bytes, tuple[int, int]], list[Any]]:
        """``({hash: (pack number, row)}, [matrix per pack])``."""
        import numpy as np

        where: dict[bytes, tuple[int, int]] = {}
        matrices: list[Any] = []
        for path in self._packs():
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


def segment_vectors(git: GitDir, embedder: Embedder, seg: Segment) -> Any:
    """The (n, dim) float16 matrix of ``seg``'s documents, aligned with its docnos."""
    import numpy as np

    cache = VectorCache(git, embedder)
    path = seg.path.with_name(f"{seg.path.stem}.{cache.tag}.vec")
    dim = embedder.dim
    expected = 16 + seg.n * dim * 2
    with contextlib.suppress(OSError, ValueError):
        if path.stat().st_size == expected:
            return np.memmap(path, dtype=np.float16, mode="r", offset=16, shape=(seg.n, dim))
    hashes = [seg.content_hash(d) for d in range(seg.n)]
    where, matrices = cache.load()
    missing = sorted({h: d for d, h in enumerate(hashes) if h not in where}.items())
    if missing:
        texts = []
        for _hash, docno in missing:
            record = seg.record(docno)
            texts.append(embed_text(record[1], record[2]))
        vectors = embedder.embed_documents(texts)
        cache.add([h for h, _ in missing], vectors)
        cache.compact()
        where, matrices = cache.load()
    matrix = np.zeros((seg.n, dim), dtype=np.float16)
    for docno, digest in enumerate(hashes):
        found = where.get(digest)
        if found is not None:
            matrix[docno] = matrices[found[0]][found[1]]
    _atomic_write(path, PACK_MAGIC + struct.pack("<II", seg.n, dim) + matrix.tobytes())
    return matrix


def semantic_rank(
    git: GitDir, embedder: Embedder, cands: Candidates, text: str, limit: int
) -> list[Match]:
    """The ``limit`` admitted entries closest to ``text`` (cosine > 0), ties by entry id."""
    import numpy as np

    from .lexical import Match

    query = embedder.embed_query(text)
    if not np.any(query):
        return []
    found: list[tuple[float, int, int]] = []
    for number, (seg, mask) in enumerate(zip(cands.view.segments, cands.masks, strict=True)):
        docnos = np.flatnonzero(np.frombuffer(bytes(mask), dtype=np.uint8))
        if not len(docnos):
            continue
        matrix = segment_vectors(git, embedder, seg)
        sims = np.asarray(matrix[docnos], dtype=np.float32) @ query
        keep = min(limit, len(sims))
        best = np.argpartition(-sims, keep - 1)[:keep] if keep < len(sims) else np.arange(keep)
        found.extend((float(sims[i]), number, int(docnos[i])) for i in best if sims[i] > 0)
    ranked = sorted(((-score, cands.view.segments[n].doc_id(d), n, d) for score, n, d in found))[
        :limit
    ]
    return [Match(n, d, doc_id, -neg) for neg, doc_id, n, d in ranked]


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
