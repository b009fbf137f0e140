"""Semantic mode ranks as its encoder does, used directly with cosine over the same notes.

Whatever the store adds between a note and its vector (the text embedded, the vector cache's
float16 rows, the trust filter, the cut at ``limit``) must not move an answer: a store's
semantic top k is the encoder's own top k over the notes' bodies, in the same order, with the
same cosines (to float16 rounding), none at or below 0. The keys below are chosen to pull the
other way -- a key that names another note's topic, an opaque id -- so a vector that mixes the
key in ranks differently from the encoder alone.
"""

from __future__ import annotations

import pytest

from tests.support.extras import needs_minilm
from tests.support.gated import Searcher
from truss_files.facade import MemoryStore
from truss_files.model import Trust
from truss_files.recall.encoders.minilm import MiniLMEmbedder
from truss_files.recall.pipeline import Filter

# (kind, key, body): keys that name the wrong topic or nothing at all.
NOTES = (
    ("fact", "garden-tomatoes", "We run Postgres 16 behind pgbouncer for connection pooling."),
    ("fact", "database-pooling", "The tomatoes in the back garden need watering every evening."),
    ("lesson", "conv-26-D1:3", "Caroline went to the LGBTQ support group on 7 May."),
    ("lesson", "flaky-ci-retry", "Melanie painted a sunrise over the lake last year."),
    ("decision", "painting-sunrise", "Retry the flaky CI network suite once, then fix the test."),
    ("fact", "x7f3a9", "The deploy playbook: tag, push, watch the canary for ten minutes."),
    ("preference", "lake-trip", "Deploys happen on Tuesdays, never on a Friday afternoon."),
)
QUERIES = (
    "database connection pooling",
    "how often should the garden be watered",
    "when did Caroline go to the support group",
    "what did Melanie paint",
    "what to do about flaky tests",
    "how do we release to production",
)
TOP = 4


@needs_minilm
def test_semantic_mode_ranks_as_the_encoder_alone(store: MemoryStore) -> None:
    import numpy as np

    made = [store.write(kind, key, body) for kind, key, body in NOTES]
    encoder = MiniLMEmbedder()
    bodies = encoder.embed_documents([e.body for e in made])
    searcher = Searcher(store.git.workdir, embedder=MiniLMEmbedder())
    wide = Filter(min_trust=Trust.UNVERIFIED)
    for query in QUERIES:
        cosines = bodies @ encoder.embed_query(query)
        # Semantic mode answers no entry at or below cosine 0 (``embed.semantic_rank``).
        kept = [i for i in range(len(made)) if cosines[i] > 0]
        order = sorted(kept, key=lambda i: (-float(cosines[i]), made[i].id))[:TOP]
        hits = searcher.query(query, wide, TOP, mode="semantic").hits
        assert [h.entry.id for h in hits] == [made[i].id for i in order], query
        # float16 rows in the vector cache: a cosine moves by well under 0.002
        assert [h.score for h in hits] == pytest.approx(
            [float(cosines[i]) for i in order], abs=2e-3
        ), query
    # The keys were chosen to matter: a vector of key and body ranks otherwise.
    mixed = encoder.embed_documents([f"{e.key}\n{e.body}" for e in made])
    queries = np.stack([encoder.embed_query(query) for query in QUERIES])
    top_mixed = np.argsort(-(queries @ mixed.T), axis=1, kind="stable")[:, :TOP]
    top_bodies = np.argsort(-(queries @ bodies.T), axis=1, kind="stable")[:, :TOP]
    assert (top_mixed != top_bodies).any(axis=1).sum() >= 1
