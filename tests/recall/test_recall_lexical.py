"""recall/lexical.py: the filter before ranking, statistics from the trust floor's own index,
and a run's own notes below the floor scored with the floor's statistics."""

from __future__ import annotations

import dataclasses
import marshal
import random
from pathlib import Path

import pytest
import tantivy

from tests.support.gated import Searcher
from tests.support.recall_support import (
    agrees,
    check_against_reference,
    commit_entries,
    mixed_store,
    reference,
    reject,
    writers_of,
)
from truss_files.facade import MemoryStore
from truss_files.model import Entry, Kind, Layer, Trust
from truss_files.recall.pipeline import Area, Filter

pytestmark = pytest.mark.heavy  # a corpus built per case

# The store fixture's principal: whose signature proves a run's own notes.
ME = "operator@example.test"

QUERY = "flaky CI network tests retry"


def _answer(searcher: Searcher, floor: Trust) -> list[tuple[str, float]]:
    found = searcher.query(QUERY, Filter(min_trust=floor), 50, mode="exact")
    return [(h.entry.id, h.score) for h in found.hits]


def _floor_index(store: MemoryStore, floor: Trust) -> tantivy.Searcher:
    """The floor's tantivy index as the head names it, opened directly."""
    folder = Path(store.git.git_dir) / "truss" / "recall"
    head = marshal.loads((folder / "head").read_bytes())
    return tantivy.Index.open(str(folder / head["floors"][floor.value][0])).searcher()


def _stuffing(store: MemoryStore, n: int, tag: str) -> list[Entry]:
    rng = random.Random(n)
    words = QUERY.lower().split()
    return [
        store.new_entry(
            "lesson", f"{tag}-{i}", " ".join(rng.choices(words, k=rng.randint(2, 20))) + f" {i}"
        )
        for i in range(n)
    ]


def test_changes_below_each_floor_move_nothing_at_it(store: MemoryStore) -> None:
    """Bit for bit: unverified entries written, and then rejected (out of the unverified
    floor's index again), a tombstone written, rejected and stale entries imported: the
    verified floor's scores and order stay as they were; all but the stale ones leave the
    stale floor's too. The index is updated, not rebuilt, and the changes are there below
    the floor."""
    mixed_store(store)
    searcher = Searcher(store.git.workdir)
    verified = _answer(searcher, Trust.VERIFIED)
    stale = _answer(searcher, Trust.STALE)
    assert verified and len(stale) > len(verified)

    written = store.write_many(_stuffing(store, 60, "stuffed"))
    reject(store, written[0])
    store.write("lesson", "removed", f"<!-- truss:tombstone -->\n{QUERY} removed")
    rejected = [dataclasses.replace(e, trust=Trust.REJECTED) for e in _stuffing(store, 40, "rej")]
    commit_entries(store, rejected, "truss: import rejected notes")
    assert _answer(searcher, Trust.VERIFIED) == verified
    assert _answer(searcher, Trust.STALE) == stale
    assert searcher.index.stats["op"] == "update"

    stale_ones = [dataclasses.replace(e, trust=Trust.STALE) for e in _stuffing(store, 30, "old")]
    commit_entries(store, stale_ones, "truss: import stale notes")
    assert _answer(searcher, Trust.VERIFIED) == verified
    assert _answer(searcher, Trust.STALE) != stale  # at the stale floor they count
    wide = {
        h.entry.key for h in searcher.query(QUERY, Filter(min_trust=Trust.UNVERIFIED), 200).hits
    }
    assert {"stuffed-1", "old-1"} <= wide
    assert not {"stuffed-0", "rej-1"} & wide


def test_a_rejected_entrys_words_are_in_no_floor_index(store: MemoryStore) -> None:
    """A word only rejected entries hold has document frequency 0 in every floor index --
    read from the tantivy indexes themselves -- and nothing finds them at any floor."""
    mixed_store(store)
    imported = store.new_entry("fact", "bad-import", "qqrejectedword imported and rejected")
    commit_entries(store, [dataclasses.replace(imported, trust=Trust.REJECTED)], "truss: import")
    searcher = Searcher(store.git.workdir)
    searcher.query("x", Filter())
    written = store.write("fact", "bad-write", "qqrejectedword written, then rejected")
    assert searcher.query("qqrejectedword", Filter(min_trust=Trust.UNVERIFIED), 5).hits
    reject(store, written)
    for floor in (Trust.VERIFIED, Trust.STALE, Trust.UNVERIFIED):
        assert not searcher.query("qqrejectedword", Filter(min_trust=floor), 5).hits
    assert _floor_index(store, Trust.VERIFIED).doc_freq("body", "qqrejectedword") == 0
    assert _floor_index(store, Trust.STALE).doc_freq("body", "qqrejectedword") == 0
    searcher.index.discard()  # rebuilt: tantivy no longer counts the deleted copy either
    searcher.query("x", Filter())
    for floor in (Trust.VERIFIED, Trust.STALE, Trust.UNVERIFIED):
        assert _floor_index(store, floor).doc_freq("body", "qqrejectedword") == 0


@pytest.fixture
def deep_store(store: MemoryStore) -> dict[str, Entry]:
    """200 short verified facts that rank first for "alpha", and below them a few long
    lessons of every kind of filter: a key, a layer, a scope, a run's unverified notes."""
    made: dict[str, Entry] = {}
    entries = [
        dataclasses.replace(
            store.new_entry("fact", f"top-{i}", f"alpha alpha note {i}"), trust=Trust.VERIFIED
        )
        for i in range(200)
    ]
    filler = " ".join(f"filler{i}" for i in range(60))
    for i in range(14):
        fields: dict[str, object] = {}
        if i % 2:
            fields["layer"] = Layer.TEAM.value
        if i % 3 == 0:
            fields["scope"] = {"agent": "deep-bot"}
        entry = store.new_entry(
            "lesson", "deep" if i < 12 else f"deep-{i}", f"alpha once in {filler} {i}", **fields
        )
        entries.append(dataclasses.replace(entry, trust=Trust.VERIFIED))
        made[f"deep{i}"] = entry
    for i in range(4):
        own = store.new_entry(
            "lesson", f"mine-{i}", f"alpha run note {i}", produced_by=f"run:R-7/{i}"
        )
        entries.append(own)
        made[f"own{i}"] = own
    commit_entries(store, entries, "truss: import notes")
    return made


FILTERS = {
    "kind": Filter(kind=Kind.LESSON),
    "key": Filter(key="deep"),
    "kind and key": Filter(kind=Kind.LESSON, key="deep"),
    "layer": Filter(layers=frozenset({Layer.TEAM})),
    "scope": Filter(scope={"agent": "deep-bot"}),
    "area": Filter(areas=(Area(Layer.TEAM),)),
    "run": Filter(kind=Kind.LESSON, visible_run="R-7", own_principal=ME),
    "own area": Filter(
        kind=Kind.LESSON, areas=(Area(Layer.TASK, own=True),), area_writers=frozenset({ME})
    ),
    "hidden": Filter(hidden_ids=frozenset()),
}


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_the_filter_runs_before_ranking_and_fills_the_limit(
    deep_store: dict[str, Entry], store: MemoryStore, name: str
) -> None:
    """Only admitted entries come back, and the limit is filled from deep in the ranking
    (the 200 facts above them never crowd them out): the filter is tantivy's clauses."""
    flt = FILTERS[name]
    if name == "hidden":
        top = Searcher(store.git.workdir).query("alpha", Filter(), 5).hits
        flt = Filter(hidden_ids=frozenset(h.entry.id for h in top))
    found = check_against_reference(store, "alpha", flt, 10)
    entries = {e.id: e for e in store.iter_entries()}
    assert all(flt.admits(entries[h.entry.id], writers_of(store)) for h in found.hits)
    want = [i for i, _ in reference(entries.values(), "alpha", flt, writers_of(store))]
    assert len(found.hits) == min(10, len(want)) and len(found.hits) >= 4
    if name == "hidden":
        assert not {h.entry.id for h in found.hits} & flt.hidden_ids


def test_a_runs_own_note_is_scored_in_the_unverified_floor(
    deep_store: dict[str, Entry], store: MemoryStore
) -> None:
    """A run's own unverified note at the verified floor is not in the floor's index: it is
    scored by tantivy in the unverified floor's index, which holds it (the reference agrees):
    the score a query at the unverified floor gives it. Its score never moves the verified
    entries'."""
    mine = store.write("lesson", "mine-alone", "alpha solo note", produced_by="run:R-8/1")
    flt = Filter(visible_run="R-8", own_principal=ME)
    searcher = Searcher(store.git.workdir)
    plain = {h.entry.id: h.score for h in searcher.query("alpha solo", Filter(), 300).hits}
    hits = searcher.query("alpha solo", flt, 300).hits
    agrees(hits, reference(store.iter_entries(), "alpha solo", flt, writers_of(store)), 300)
    before = {h.entry.id: h.score for h in hits}
    assert before.pop(mine.id) > 0 and before == plain
    bypassed = {h.entry.id: h.score for h in hits}[mine.id]
    wide = searcher.query("alpha solo", Filter(min_trust=Trust.UNVERIFIED), 300).hits
    assert {h.entry.id: h.score for h in wide}[mine.id] == bypassed


def test_a_runs_own_notes_score_above_zero_over_an_empty_floor(store: MemoryStore) -> None:
    """No verified entry at all: a run's own notes still rank, by their own lengths."""
    short = store.write("fact", "short", "epsilon note", produced_by="run:R-9/1")
    wide = store.write("fact", "wide", "epsilon " + "zeta " * 300, produced_by="run:R-9/2")
    hits = (
        Searcher(store.git.workdir)
        .query("epsilon", Filter(visible_run="R-9", own_principal=ME), 10)
        .hits
    )
    assert [h.entry.id for h in hits] == [short.id, wide.id]
    assert hits[0].score > hits[1].score > 0
