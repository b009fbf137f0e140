"""The recall pipeline: filter before ranking, BM25 statistics from the trust floor's members."""

from __future__ import annotations

import dataclasses
import random

import pytest

from tests.support.bm25_reference import LuceneOkapi
from tests.support.gated import Searcher
from tests.support.recall_support import (
    FLOORS,
    KINDS,
    as_rejected,
    check_against_reference,
    commit_entries,
    mixed_store,
    promote,
    reject,
    writers_of,
)
from truss_files.facade import MemoryStore
from truss_files.model import Kind, Layer, Trust
from truss_files.recall.docs import document_tokens
from truss_files.recall.pipeline import Filter
from truss_files.recall.tokenize import tokenize

# The store fixture's principal: whose signature proves a run's own notes.
ME = "operator@example.test"

QUERY = "flaky CI network tests retry"


def test_stuffing_below_the_floor_changes_nothing(store: MemoryStore) -> None:
    """Record the verified answer; pile up 1,000 unverified and rejected entries stuffed with the
    query's words; ask again: same ids, same order, same scores, bit for bit (the verified
    floor's index is never touched by them)."""
    mixed_store(store)
    searcher = Searcher(store.git.workdir)
    flt = Filter(min_trust=Trust.VERIFIED)
    before = searcher.query(QUERY, flt, limit=10, mode="exact").hits
    assert before and [h.entry.trust for h in before] == [Trust.VERIFIED] * len(before)
    rng = random.Random(5)
    words = QUERY.split()
    stuffed = [
        store.new_entry(
            "lesson",
            f"stuffed-{i}",
            " ".join(rng.choices(words, k=rng.randint(3, 30))) + f" (variant {i})",
        )
        for i in range(600)
    ]
    store.write_many(stuffed)
    # Rejected through the real panel path, and in bulk as files carrying trust: rejected.
    for entry in stuffed[:3]:
        reject(store, entry)
    rejected = [
        as_rejected(store.new_entry("lesson", f"rejected-{i}", f"{QUERY} {QUERY} ({i})"))
        for i in range(400)
    ]
    commit_entries(store, rejected, "truss: import rejected notes")
    after = searcher.query(QUERY, flt, limit=10, mode="exact").hits
    key = [(h.entry.id, h.score) for h in before]
    assert [(h.entry.id, h.score) for h in after] == key
    # ... while below the floor the stuffing is there, and rejected entries never are.
    wide = searcher.query(QUERY, Filter(min_trust=Trust.UNVERIFIED), limit=50, mode="exact")
    assert any(h.entry.key.startswith("stuffed-") for h in wide.hits)
    assert all(h.entry.trust is not Trust.REJECTED for h in wide.hits)
    assert not any(h.entry.key.startswith("rejected-") for h in wide.hits)


@pytest.mark.parametrize("floor", FLOORS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.heavy  # a corpus per case
def test_index_answers_what_the_reference_answers(
    store: MemoryStore, floor: Trust, kind: Kind | None
) -> None:
    made = mixed_store(store)
    for query in (QUERY, "postgres pgbouncer pooling", "borrow checker", "zzz"):
        check_against_reference(store, query, Filter(min_trust=floor, kind=kind))
    check_against_reference(store, "flaky", Filter(min_trust=floor, key="flaky-ci"))
    check_against_reference(store, "postgres", Filter(min_trust=floor, include_superseded=True))
    check_against_reference(store, "flaky", Filter(min_trust=floor, visible_ids={made["u1"].id}))


def test_superseded_rejected_and_stale_by_floor(store: MemoryStore) -> None:
    made = mixed_store(store)
    searcher = Searcher(store.git.workdir)

    def ids(query: str, floor: Trust) -> set[str]:
        return {h.entry.id for h in searcher.query(query, Filter(min_trust=floor), 20).hits}

    assert made["v3"].superseded_by == made["v5"].id
    assert ids("postgres", Trust.VERIFIED) == {made["v5"].id}  # superseded v3 is out
    assert ids("postgres", Trust.STALE) == {made["v5"].id, made["v3"].id}
    flaky = ids("flaky network", Trust.UNVERIFIED)
    assert made["stale"].id in flaky and made["u1"].id in flaky
    assert made["rej"].id not in flaky and made["rej"].id not in ids(
        "ignore failures", Trust.UNVERIFIED
    )


def test_layers_scope_runs_and_markers(store: MemoryStore) -> None:
    team = store.write(
        "fact", "oncall", "The on-call rota lives in the ops calendar.", layer="team"
    )
    scoped = store.write(
        "fact", "oncall-b", "On-call handover happens Mondays.", scope={"agent": "build-bot"}
    )
    mine = store.write(
        "fact", "oncall-c", "On-call pager test every Friday.", produced_by="run:R-1/3"
    )
    other = store.write(
        "fact", "oncall-d", "On-call swaps go in the rota.", produced_by="run:R-2/1"
    )
    marker = store.write("fact", "oncall-e", "<!-- truss:tombstone -->\nOn-call note deleted.")
    for entry in (team, scoped, marker):
        promote(store, entry)
    cases = [
        Filter(layers=frozenset({Layer.TEAM})),
        Filter(layers=frozenset({Layer.TASK, Layer.ROLE})),
        Filter(scope={"agent": "build-bot"}),
        Filter(visible_run="R-1", own_principal=ME),
        Filter(visible_run="R-1", own_principal=ME, kind=Kind.LESSON),
        Filter(skip_marked=True),
        Filter(min_trust=Trust.UNVERIFIED, skip_marked=True, visible_run="R-2", own_principal=ME),
    ]
    for flt in cases:
        check_against_reference(store, "on-call rota pager handover deleted", flt)
    found = Searcher(store.git.workdir).query(
        "on-call pager", Filter(visible_run="R-1", own_principal=ME), 10
    )
    assert mine.id in {h.entry.id for h in found.hits}
    assert other.id not in {h.entry.id for h in found.hits}
    skipping = Searcher(store.git.workdir).query("on-call deleted", Filter(skip_marked=True), 10)
    assert marker.id not in {h.entry.id for h in skipping.hits}


@pytest.mark.heavy  # a corpus and a reference ranking
def test_top_ten_agree_with_rank_bm25(store: MemoryStore) -> None:
    """Our top 10 are rank-bm25's top 10 (its arithmetic, Lucene's idf, k1 1.2) over the
    verified floor's members and the same tokens, and every hit scores above 0. Lengths are
    quantised in the floor index, so only near-ties may swap (measured: every query's top 10
    the same set; scores within 5% of the unquantised ones)."""
    rng = random.Random(11)
    vocab = [f"{a}{b}" for a in ("cache", "retry", "flaky", "index", "guard") for b in range(60)]
    entries = [
        store.new_entry(
            rng.choice(["lesson", "fact", "decision"]),
            f"note-{i}",
            " ".join(rng.choices(vocab, k=rng.randint(5, 40))),
        )
        for i in range(300)
    ]
    verified = [dataclasses.replace(e, trust=Trust.VERIFIED) for e in entries[:120]]
    commit_entries(store, verified + entries[120:], "truss: import notes")
    searcher = Searcher(store.git.workdir)
    flt = Filter()
    candidates = [e for e in store.iter_entries() if flt.admits(e)]
    assert len(candidates) == 120
    okapi = LuceneOkapi([document_tokens(e) for e in candidates], k1=1.2, b=0.75)
    for query in ("flaky7 retry7 guard3", "index1 cache12", "cache0 cache0 retry59", "guard42"):
        # A repeated query term is scored once (recall.bounds): the reference over distinct terms.
        tokens = list(dict.fromkeys(tokenize(query)))
        scores = okapi.get_scores(tokens)
        terms = set(tokens)
        want = sorted(
            (
                (-float(s), e.id)
                for e, s in zip(candidates, scores, strict=True)
                if terms & set(document_tokens(e))
            )
        )[:10]
        got = searcher.query(query, flt, 10, mode="exact").hits
        assert got and (len(got) == 10 or query == "guard42")
        assert all(h.score > 0 for h in got)
        assert {h.entry.id for h in got} == {i for _, i in want}
        for hit, (neg, _) in zip(got, want, strict=True):
            assert hit.score == pytest.approx(-neg, rel=0.05)


def test_a_single_or_exact_hit_in_a_small_store_scores_above_zero(store: MemoryStore) -> None:
    # Okapi's idf scored these -0.67 and 0.0: agent code keeping score > 0 lost the answer.
    only = store.new_entry("fact", "rust", "rust borrow checker")
    commit_entries(store, [dataclasses.replace(only, trust=Trust.VERIFIED)], "truss: import")
    hits = Searcher(store.git.workdir).query("borrow", Filter(), 10, mode="exact").hits
    assert [h.entry.id for h in hits] == [only.id] and hits[0].score > 0
    twin = store.new_entry("fact", "rust-twin", "rust borrow checker")
    commit_entries(store, [dataclasses.replace(twin, trust=Trust.VERIFIED)], "truss: import")
    hits = Searcher(store.git.workdir).query("rust borrow checker", Filter(), 10, mode="exact").hits
    assert len(hits) == 2 and all(h.score > 0 for h in hits)


def test_filter_admits_visible_run_only_for_unverified(store: MemoryStore) -> None:
    mine = store.write("fact", "mine", "text", produced_by="run:R-9/1")
    flt = Filter(visible_run="R-9", own_principal=ME)
    by = writers_of(store)
    assert flt.admits(mine, by)
    assert not flt.admits(mine)  # without the history, no note is proven a run's own
    assert not Filter(visible_run="R-9", own_principal="someone-else").admits(mine, by)
    assert not Filter(visible_run="R-10", own_principal=ME).admits(mine, by)
    assert not flt.admits(dataclasses.replace(mine, trust=Trust.REJECTED), by)
    assert Filter(skip_marked=True).admits(mine) is False  # unverified, below the floor
    marked = dataclasses.replace(mine, body="<!-- truss:tombstone -->", trust=Trust.VERIFIED)
    assert Filter().admits(marked) and not Filter(skip_marked=True).admits(marked)
