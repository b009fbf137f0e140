"""Vectors made before a query needs them: ``truss-files index``, the bound on what a query
embeds itself, and embedding at write, import and sync time in a long-lived process.

A semantic or hybrid query embeds at most ``EMBED_IN_QUERY`` notes; past that it raises
``VectorsMissing`` naming ``truss-files index`` at once, never embedding for minutes. The
index command embeds what is missing (and nothing twice) with progress; a process that asked
a semantic query embeds new notes as they land, so its next query embeds none.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from tests.support.extras import needs_minilm
from tests.support.gated import Searcher
from truss_files.errors import VectorsMissing
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.model import Trust
from truss_files.recall.bounds import EMBED_IN_QUERY
from truss_files.recall.pipeline import Filter

pytestmark = [pytest.mark.heavy, needs_minilm]

EVERY = Filter(min_trust=Trust.UNVERIFIED)
MANY = EMBED_IN_QUERY + 6
TOPICS = ("the deploy pipeline", "the garden", "postgres pooling", "the lake trip", "flaky CI")


def _notes(store: MemoryStore, n: int, start: int = 0) -> Iterator[object]:
    for i in range(start, start + n):
        yield store.new_entry("fact", f"note-{i}", f"Note {i} is about {TOPICS[i % 5]} ({i}).")


def _query(store: MemoryStore, *args: str) -> tuple[int, dict[str, object]]:
    clicked = CliRunner().invoke(
        cli, ["--store", str(store.git.workdir), *args, "--format", "json"]
    )
    return clicked.exit_code, json.loads(clicked.stdout)


def test_a_query_that_would_embed_many_notes_names_index_instead(store: MemoryStore) -> None:
    store.import_entries(_notes(store, MANY))  # type: ignore[arg-type]
    for mode in ("semantic", "hybrid"):
        with pytest.raises(VectorsMissing, match=r"truss-files index") as raised:
            Searcher(store.git.workdir).query("garden", EVERY, 5, mode=mode)
        assert f"{MANY} of the {MANY} notes" in raised.value.message
        code, said = _query(store, "query", "garden", "--mode", mode, "--min-trust", "unverified")
        assert code == 1 and said["error"]["code"] == "vectors_missing"  # type: ignore[index]
    # Exact mode needs no vector: it answers as before.
    assert Searcher(store.git.workdir).query("garden", EVERY, 5, mode="exact").hits

    heard: list[tuple[int, int]] = []
    done = store.index(progress=lambda d, m: heard.append((d, m)))
    assert (done.embedded, done.notes) == (MANY, MANY)
    assert heard[0] == (0, MANY) and heard[-1] == (MANY, MANY)
    assert [d for d, _ in heard] == sorted(d for d, _ in heard)
    # Every vector is there now: a searcher that may embed nothing answers.
    strict = Searcher(store.git.workdir, embed_limit=0)
    hits = strict.query("watering the garden", EVERY, 3, mode="semantic").hits
    assert hits and all("garden" in h.entry.body for h in hits)
    assert strict.query("garden", EVERY, 3, mode="hybrid").hits
    # Run again: nothing to embed; the CLI says the same in JSON.
    code, said = _query(store, "index")
    assert code == 0 and said == {"embedded": 0, "notes": MANY, "embedder": done.embedder}


def test_a_few_missing_notes_are_embedded_by_the_query(store: MemoryStore) -> None:
    store.import_entries(_notes(store, EMBED_IN_QUERY))  # type: ignore[arg-type]
    hits = Searcher(store.git.workdir).query("garden", EVERY, 3, mode="semantic").hits
    assert hits and all("garden" in h.entry.body for h in hits)
    assert store.index().embedded == 0  # the query cached what it embedded


def test_a_long_lived_process_embeds_at_write_and_import(store: MemoryStore) -> None:
    store.write("fact", "first", "Note about the garden and its tomatoes.")
    wide = {"min_trust": "unverified", "mode": "semantic"}
    assert store.query("tomatoes", **wide).hits  # type: ignore[arg-type]  # loads the embedder
    written = store.write("fact", "second", "The lake trip is in June.")
    store.import_entries(_notes(store, MANY))  # type: ignore[arg-type]
    # What the process embedded as the notes landed: a searcher that may embed none answers.
    strict = Searcher(store.git.workdir, embed_limit=0)
    assert strict.query("lake trip", EVERY, 1, mode="semantic").hits[0].entry.id == written.id
    assert store.index().embedded == 0


def test_a_process_that_never_asked_a_semantic_query_embeds_nothing(store: MemoryStore) -> None:
    store.query("garden", min_trust="unverified")  # exact: no embedder loaded
    store.import_entries(_notes(store, MANY))  # type: ignore[arg-type]
    with pytest.raises(VectorsMissing):
        Searcher(store.git.workdir).query("garden", EVERY, 3, mode="semantic")


def test_a_write_embeds_a_bounded_number_of_notes(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A never-indexed store is left to ``truss-files index``: a write in a process that asked
    a semantic query embeds at most ``EMBED_AT_WRITE`` notes, not every missing one."""
    from truss_files.recall import engine

    monkeypatch.setattr(engine, "EMBED_AT_WRITE", 10)
    store.import_entries(_notes(store, MANY))  # type: ignore[arg-type]
    with pytest.raises(VectorsMissing):  # the query loads the embedder, then says index
        store.query("garden", min_trust="unverified", mode="semantic")
    store.write("fact", "late", "A late note about the lake trip.")
    assert store.index().embedded == MANY + 1 - 10
