"""The ``wordllama`` embedder (``pip install 'truss-files[wordllama]'``) and its query tokenizer.

WordLlama's ``l2_supercat`` 256-d static token embeddings, averaged and normalised. Its
weights and tokenizer ship inside the wheel; ``WordLlama.load()`` finds them offline only
when ``cache_dir`` is the package folder itself (it looks for ``<cache_dir>/tokenizers/``
while the wheel's ``weights`` folder is found beside the module), and
``disable_download=True`` makes a missing file an error instead of a download. Documents
are embedded by WordLlama. A *query* is embedded without it: its import (requests, pydantic)
and the Rust tokenizer's load (61k merges) would cost more than the whole query, so
``LlamaBPE`` re-implements the tokenizer's BPE (byte fallback, merges by rank, leftmost
first) from a ``marshal`` copy of its vocabulary
kept with the vectors, and the token rows are read from the memory-mapped weights. Tests
check both against WordLlama's own output.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import operator
import os
import re
import struct
import sys
from bisect import bisect_left
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ...errors import ConfigError
from .modelfiles import (
    INSTALL_HINT,
    MODEL_CONFIG,
    Embedding,
    _need,
    _unit,
    cache_root,
    embedding_layout,
    wordllama_files,
    wordllama_package,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["LlamaBPE", "WordLlamaEmbedder"]

BPE_MAGIC: Final = b"TRUSSBPE"
_BYTE_TOKEN: Final = re.compile(r"<0x[0-9A-F]{2}>\Z")


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
        # merges: (left id << 20 | right id) -> (rank << 20 | merged id); ints load much faster
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
        in place, instead of loading 61k merges from the marshal copy."""
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
