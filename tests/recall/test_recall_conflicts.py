"""Conflicts from the index: a query names every group of a returned live verified entry
that holds two or more live verified entries, as ``find_conflicts`` (test_recall_support) does over
every entry of the store -- from the verified floor's fast fields, with no rival decoded.

Each answer is checked against that reference over the entry files themselves, on groups of
one to five verified rivals whose ``created`` order is not their id order, before and after a
supersession, and with every group given one code (so the groups one search asks for cannot
be told apart by it and are searched apart).
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from tests.support.gated import Searcher
from tests.support.recall_support import commit_entries, find_conflicts
from truss_files.facade import MemoryStore
from truss_files.model import Trust
from truss_files.recall import engine, floors
from truss_files.recall.pipeline import Filter

QUERIES = ("retry cache", "flaky guard", "index", "cache guard retry flaky index", "nothing")


def _rivals(store: MemoryStore) -> None:
    rng = random.Random(5)
    words = ("retry", "cache", "flaky", "guard", "index", "pool", "lock")
    entries = []
    for group in range(12):
        for member in range(1 + group % 5):
            entry = store.new_entry(
                rng.choice(["decision", "fact"]),
                f"topic-{group % 7}",
                f"{' '.join(rng.choices(words, k=6))} note {group}.{member}",
            )
            created = (
                f"2026-0{1 + rng.randrange(9)}-1{rng.randrange(10)}T0{rng.randrange(10)}:00:00Z"
            )
            entries.append(dataclasses.replace(entry, trust=Trust.VERIFIED, created=created))
    unverified = [store.new_entry("decision", "topic-1", "retry cache unverified rival")]
    commit_entries(store, entries + unverified, "truss: import rivals")


def _check(store: MemoryStore) -> int:
    everything = list(store.iter_entries())
    searcher = Searcher(store.git.git_dir)
    reported = 0
    for floor in ("verified", "unverified"):
        for query in QUERIES:
            result = searcher.query(query, Filter(min_trust=Trust(floor)), 5, mode="exact")
            returned = [hit.entry for hit in result.hits]
            assert result.conflicts == find_conflicts(returned, everything), query
            named = {i for conflict in result.conflicts for i in conflict.ids}
            assert {e.id for e in result.related} == named
            assert all(e.trust is Trust.VERIFIED for e in result.related)
            reported += len(result.conflicts)
    return reported


def test_conflicts_from_fast_fields_match_the_reference_over_the_files(
    store: MemoryStore,
) -> None:
    _rivals(store)
    assert _check(store) > 0  # the set has conflicts to find
    rivals = find_conflicts(list(store.iter_entries()), store.iter_entries())
    older, newer = rivals[0].ids[:2]
    store.supersede(older, newer)
    assert _check(store) > 0


def test_groups_that_share_a_code_are_searched_apart(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(floors, "group_code", lambda kind, key: 7)
    monkeypatch.setattr(engine, "group_code", lambda kind, key: 7)
    _rivals(store)
    assert _check(store) > 0
