"""The ``Embedder`` seam every backend meets, ``load_embedder`` that picks one, and the
sentence-transformers backend.

``Embedder`` is the ``typing.Protocol`` recall embeds and queries through. This module is
loaded only by semantic and hybrid mode (``recall/engine.py`` imports it when it first needs
an embedder), so it imports the default backend, minilm, at its top.

``sentence-transformers:<model dir>`` (``SentenceTransformerEmbedder``): any
sentence-transformers model already on disk (never downloaded), if the package is installed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from ...errors import ConfigError
from .minilm import MiniLMEmbedder
from .modelfiles import _need

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["DEFAULT_EMBEDDER", "Embedder", "SentenceTransformerEmbedder", "load_embedder"]


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


DEFAULT_EMBEDDER: Final = "minilm"


def load_embedder(spec: str | None = None) -> Embedder:
    """The embedder named by ``[recall] embedder`` (default ``minilm``)."""
    spec = (spec or DEFAULT_EMBEDDER).strip()
    if spec == "minilm":
        return MiniLMEmbedder()
    if spec == "wordllama":
        # The wordllama extra (recall/encoders/wordllama.py): loaded only when it is chosen.
        from .wordllama import WordLlamaEmbedder

        return WordLlamaEmbedder()
    prefix = "sentence-transformers:"
    if spec.startswith(prefix):
        return SentenceTransformerEmbedder(spec[len(prefix) :])
    raise ConfigError(
        f'truss.toml: [recall] embedder \'{spec}\' is unknown; use "minilm", "wordllama" or '
        '"sentence-transformers:/path/to/model"'
    )
