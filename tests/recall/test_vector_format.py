"""Vectors of another format are never reused: the minilm fingerprint names the arithmetic
(``minilm.VECTOR_FORMAT``; 2 = int8 activations, each note alone), and the vector cache is
keyed by it (``recall/embed.py``), so a store indexed with float vectors (format 1) embeds
every note again, once, when the int8 runner first meets it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.support.extras import needs_minilm
from tests.support.gated import Searcher
from truss_files.facade import MemoryStore
from truss_files.recall.encoders import minilm
from truss_files.recall.encoders.minilm import MiniLMEmbedder

NOTES = (
    ("fact", "db", "We run Postgres 16 behind pgbouncer."),
    ("fact", "garden", "The tomatoes need watering every evening."),
    ("lesson", "ci", "Retry the flaky CI network suite once, then fix the test."),
)


class FormatOne:
    """The same model under the fingerprint float vectors had (format 1)."""

    def __init__(self, inner: MiniLMEmbedder) -> None:
        self.inner = inner
        self.fingerprint = inner.fingerprint.rsplit(":", 1)[0] + ":1"
        self.dim = inner.dim

    def embed_documents(self, texts: Sequence[str]) -> Any:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Any:
        return self.inner.embed_query(text)


@needs_minilm
def test_vectors_of_the_old_format_are_not_reused(store: MemoryStore) -> None:
    for kind, key, body in NOTES:
        store.write(kind, key, body)
    current = MiniLMEmbedder()
    assert current.fingerprint.endswith(f":{minilm.VECTOR_FORMAT}") and minilm.VECTOR_FORMAT == 2
    old = FormatOne(current)
    assert old.fingerprint != current.fingerprint
    first = Searcher(store.git.workdir, embedder=old).embed_missing()
    assert (first.embedded, first.embedder) == (len(NOTES), old.fingerprint)
    assert Searcher(store.git.workdir, embedder=old).embed_missing().embedded == 0
    # The int8 runner finds no vector of its format: every note is embedded again, once.
    again = Searcher(store.git.workdir, embedder=current).embed_missing()
    assert (again.embedded, again.embedder) == (len(NOTES), current.fingerprint)
    assert Searcher(store.git.workdir, embedder=current).embed_missing().embedded == 0
