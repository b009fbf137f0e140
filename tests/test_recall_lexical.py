"""recall/lexical.py: the top of a query holding common words, found without scoring every
document that holds only them -- the same entries, bit for bit, as scoring every match."""

from __future__ import annotations

import dataclasses
import random
from itertools import compress

import pytest
from test_recall_support import check_against_reference, commit_entries, promote, reject

from truss_files.model import Entry, Kind, Trust
from truss_files.recall import lexical as lexical_module
from truss_files.recall import segment as segment_module
from truss_files.recall.engine import Searcher
from truss_files.recall.lexical import lexical, scores, top
from truss_files.recall.pipeline import Filter
from truss_files.recall.tokenize import tokenize
from truss_files.store import MemoryStore

COMMON = ["service", "request", "config", "update"]
RARE = ["pgbouncer", "borrowck", "kerberos", "flamegraph", "tombstone", "quorum"]
QUERIES = [
    "pgbouncer service",
    "kerberos request config",
    "service request config update",
    "flamegraph quorum service update",
    "borrowck",
    "tombstone service service",
]


def _notes(store: MemoryStore, n: int, seed: int, prefix: str) -> list[Entry]:
    """Notes where every common word sits in most of them and each rare word in a few."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [w for w in COMMON if rng.random() < 0.7]
        words += [w for w in RARE if rng.random() < 0.04]
        words += [f"filler{rng.randrange(400)}" for _ in range(rng.randint(3, 40))]
        rng.shuffle(words)
        kind = ("lesson", "fact")[i % 2]
        trust = Trust.VERIFIED if rng.random() < 0.4 else Trust.UNVERIFIED
        entry = store.new_entry(kind, f"{prefix}-{i}", " ".join(words) or "empty note")
        out.append(dataclasses.replace(entry, trust=trust))
    return out


@pytest.fixture
def common_store(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> MemoryStore:
    # Terms of 8 documents or more carry their counts per class (hundreds in a real store),
    # so these small segments take the counted path too.
    monkeypatch.setattr(segment_module, "COUNTED_AT", 8)
    commit_entries(store, _notes(store, 400, 1, "note"), "truss: import notes")
    return store


def test_pruned_top_is_the_full_top_bit_for_bit(
    common_store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every floor, kind and limit: the answer equals the in-memory pipeline's, and the
    shortcut was taken for some of them (else this would test nothing)."""
    taken = []
    real = lexical_module._pruned

    def spy(*args: object, **kwargs: object) -> object:
        found = real(*args, **kwargs)  # type: ignore[arg-type]
        taken.append(found is not None)
        return found

    monkeypatch.setattr(lexical_module, "_pruned", spy)
    for floor in (Trust.VERIFIED, Trust.UNVERIFIED):
        for kind in (None, Kind.LESSON):
            for query in QUERIES:
                for limit in (1, 5, 10, 60):
                    flt = Filter(min_trust=floor, kind=kind)
                    check_against_reference(common_store, query, flt, limit=limit)
    assert any(taken) and not all(taken)


def test_pruned_equals_scoring_every_match_on_random_queries(common_store: MemoryStore) -> None:
    searcher = Searcher(common_store.git.git_dir)
    view = searcher.view()
    rng = random.Random(7)
    words = COMMON + RARE + [f"filler{i}" for i in range(0, 400, 37)]
    for floor in (Trust.VERIFIED, Trust.UNVERIFIED):
        cands = searcher.candidates(view, Filter(min_trust=floor))
        for _ in range(150):
            terms = tokenize(" ".join(rng.choices(words, k=rng.randint(2, 6))))
            limit = rng.choice((1, 3, 10, 25))
            assert lexical(cands, terms, limit) == top(view, scores(cands, terms), limit)


def test_a_flood_of_common_words_below_the_floor_moves_nothing(
    common_store: MemoryStore,
) -> None:
    """Hundreds of unverified and rejected notes stuffed with the query's common and rare words:
    the verified answer keeps its entries, order and scores (the shortcut's bound comes from
    the admitted candidates only)."""
    searcher = Searcher(common_store.git.git_dir)
    flt = Filter(min_trust=Trust.VERIFIED)
    before = {q: searcher.query(q, flt, 10, mode="exact").hits for q in QUERIES}
    assert all(before.values())
    rng = random.Random(3)
    flood = []
    for i in range(500):
        text = " ".join(rng.choices(COMMON + RARE, k=rng.randint(5, 60)))
        entry = common_store.new_entry("lesson", f"flood-{i}", text)
        trust = Trust.REJECTED if i % 5 == 0 else Trust.UNVERIFIED
        flood.append(dataclasses.replace(entry, trust=trust))
    commit_entries(common_store, flood, "truss: import a flood")
    for query, hits in before.items():
        after = searcher.query(query, flt, 10, mode="exact").hits
        assert [(h.entry.id, h.score) for h in after] == [(h.entry.id, h.score) for h in hits]
    wide = searcher.query("pgbouncer service", Filter(min_trust=Trust.UNVERIFIED), 50)
    assert any(h.entry.key.startswith("flood-") for h in wide.hits)
    assert all(h.entry.trust is not Trust.REJECTED for h in wide.hits)


def test_counted_frequencies_less_deleted_documents(common_store: MemoryStore) -> None:
    """Document frequencies and lengths from the sums per class, once entries of the counted
    segment are replaced (promoted, rejected, rewritten: deleted there, added to a new
    segment), equal the mask walked posting by posting -- under filters of classes and
    others."""
    searcher = Searcher(common_store.git.git_dir)
    searcher.query("service", Filter())
    notes = [e for e in common_store.iter_entries() if e.trust is Trust.UNVERIFIED][:40]
    for entry in notes[:15]:
        promote(common_store, entry)
    for entry in notes[15:25]:
        reject(common_store, entry)
    common_store.write_many(
        [common_store.new_entry("lesson", e.key, e.body + " service") for e in notes[25:]]
    )
    view = searcher.view()
    service = tokenize("service")[0]  # as the index holds it (stemmed)
    counted = [seg.counted_postings(service) for seg in view.segments]
    assert any(view.deleted) and any(c is not None and c[2] for c in counted)
    for flt in (
        Filter(),
        Filter(min_trust=Trust.UNVERIFIED),
        Filter(kind=Kind.LESSON),
        Filter(min_trust=Trust.UNVERIFIED, key="note-3"),
    ):
        cands = searcher.candidates(view, flt)
        lengths = sum(
            sum(compress(seg.lengths, mask))
            for seg, mask in zip(view.segments, cands.masks, strict=True)
        )
        assert cands.avgdl == lengths / cands.n  # from the sums per class when it can
        for term in tokenize(" ".join(COMMON + RARE)):
            found = lexical_module._postings(cands, term)
            walked = sum(sum(map(cands.masks[n].__getitem__, held[0])) for n, held, _c in found)
            assert lexical_module._masked_count(cands, found) == walked
        for query in QUERIES:
            check_against_reference(common_store, query, flt)
