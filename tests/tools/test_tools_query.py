"""memory_query, memory_view, read_memory and write_memory against a real signed store."""

from __future__ import annotations

import pytest

from tests.support.tools_support import call, configure, error, promote, reject
from truss_files.facade import MemoryStore
from truss_files.model import Trust

ENTRY_KEYS = ["id", "kind", "key", "body", "trust", "score", "ledger_ref", "provenance"]


def seed(store: MemoryStore) -> dict[str, str]:
    """A verified, a stale-able, an unverified and a rejected entry about CI flakes."""
    ids = {}
    verified = store.write(
        "lesson",
        "ci-flakes",
        "Retry flaky network tests once, then file a bug.",
        produced_by="run:R-7f3a/12",
        sources=["git:9e1d2c4"],
    )
    promote(store, verified.id)
    ids["verified"] = verified.id
    ids["unverified"] = store.write("lesson", "ci-guess", "Flaky network tests need sleep.").id
    rejected = store.write("lesson", "ci-wrong", "Flaky network tests: delete them.")
    reject(store, rejected.id)
    ids["rejected"] = rejected.id
    ids["fact"] = store.write("fact", "db", "The database is postgres 16.").id
    promote(store, ids["fact"])
    return ids


def test_query_output_shape_is_exact(store: MemoryStore) -> None:
    ids = seed(store)
    result = call(store, "memory_query", {"query": "flaky network tests"}).payload
    assert list(result) == ["recall_mode", "min_trust", "entries"]
    assert result["recall_mode"] == "exact" and result["min_trust"] == "verified"
    [hit] = result["entries"]
    assert list(hit) == ENTRY_KEYS
    assert hit["id"] == ids["verified"] and hit["trust"] == "verified"
    assert hit["ledger_ref"] == "run:R-7f3a/12"
    prov = hit["provenance"]
    assert prov["produced_by"] == "run:R-7f3a/12" and prov["sources"] == ["git:9e1d2c4"]
    assert prov["verified_by"]["outcome"] == "PASS"
    assert prov["verified_by"]["signer"] and prov["verified_by"]["verdict_id"]
    assert isinstance(hit["score"], float)


def test_floor_widens_but_never_to_rejected(store: MemoryStore) -> None:
    ids = seed(store)
    wide = call(store, "memory_query", {"contains": "flaky network", "min_trust": "unverified"})
    found = {e["id"] for e in wide.payload["entries"]}
    assert found == {ids["verified"], ids["unverified"]}
    assert wide.payload["min_trust"] == "unverified"
    refused = call(store, "memory_query", {"query": "flaky", "min_trust": "rejected"})
    assert refused.error is not None and "min_trust" in refused.error["message"]


def test_recall_mode_comes_from_the_store(store: MemoryStore) -> None:
    configure(store, recall_mode="hybrid")
    assert call(store, "memory_query", {"query": "x"}).payload["recall_mode"] == "hybrid"


def test_query_filters_and_aliases(store: MemoryStore) -> None:
    ids = seed(store)
    by_kind = call(store, "memory_query", {"query": "postgres database", "kind": "lesson"})
    assert by_kind.payload["entries"] == []
    by_key = call(store, "memory_query", {"query": "postgres", "key": "db"})
    assert [e["id"] for e in by_key.payload["entries"]] == [ids["fact"]]
    assert "same field" in error(call(store, "memory_query", {"query": "a", "contains": "b"}))
    assert "give `query`" in error(call(store, "memory_query", {"kind": "lesson"}))
    many = [store.write("fact", f"k{i}", f"widget number {i}").id for i in range(4)]
    for entry_id in many:
        promote(store, entry_id)
    limited = call(store, "memory_query", {"query": "widget", "limit": 2})
    assert len(limited.payload["entries"]) == 2


def test_a_run_sees_its_own_unverified_writes(store: MemoryStore) -> None:
    seed(store)
    mine = call(
        store,
        "write_memory",
        {"kind": "lesson", "key": "ci-mine", "body": "Flaky network: pin DNS."},
        run_id="R9",
    )
    assert mine.payload["trust"] == "unverified"
    in_run = call(store, "memory_query", {"query": "flaky network"}, run_id="R9")
    got = {e["id"]: e for e in in_run.payload["entries"]}
    assert mine.payload["id"] in got and got[mine.payload["id"]]["trust"] == "unverified"
    assert got[mine.payload["id"]]["ledger_ref"] == "run:R9/1"
    other = call(store, "memory_query", {"query": "flaky network"}, run_id="R10")
    assert mine.payload["id"] not in {e["id"] for e in other.payload["entries"]}
    outside = call(store, "memory_query", {"query": "flaky network"})
    assert mine.payload["id"] not in {e["id"] for e in outside.payload["entries"]}


def test_view_by_ids_prefixes_filtered_and_missing(store: MemoryStore) -> None:
    ids = seed(store)
    result = call(
        store,
        "memory_view",
        {
            "id": ids["verified"][:8],
            "ids": [ids["unverified"], ids["rejected"][:10], "ab" * 16, ids["verified"]],
        },
    ).payload
    assert list(result) == ["min_trust", "entries", "filtered", "missing"]
    assert [e["id"] for e in result["entries"]] == [ids["verified"]]
    assert result["filtered"] == [ids["unverified"], ids["rejected"]]
    assert result["missing"] == ["ab" * 16]
    wide = call(
        store,
        "memory_view",
        {"ids": [ids["unverified"], ids["rejected"]], "min_trust": "unverified"},
    ).payload
    assert [e["id"] for e in wide["entries"]] == [ids["unverified"]]
    assert wide["filtered"] == [ids["rejected"]]  # rejected: never, whatever the floor


def test_view_refuses_short_or_bad_ids(store: MemoryStore) -> None:
    seed(store)
    assert "8+" in error(call(store, "memory_view", {"id": "abc"}))
    assert "give `id` or `ids`" in error(call(store, "memory_view", {}))


def test_stale_entries_need_the_stale_floor(store: MemoryStore) -> None:
    old = store.write("decision", "db", "Use MySQL.")
    promote(store, old.id)
    new = store.write("decision", "db", "Use Postgres, not MySQL.")
    promote(store, new.id)
    assert store.get(old.id).trust is Trust.STALE
    hits = call(store, "memory_query", {"query": "mysql"}).payload["entries"]
    assert [h["id"] for h in hits] == [new.id]
    stale = call(store, "memory_query", {"query": "mysql", "min_trust": "stale"}).payload
    assert {h["id"] for h in stale["entries"]} == {old.id, new.id}
    view = call(store, "memory_view", {"id": old.id}).payload
    assert view["filtered"] == [old.id]


def test_read_memory_is_query_or_view(store: MemoryStore) -> None:
    ids = seed(store)
    by_text = call(store, "read_memory", {"query": "flaky network"}).payload
    assert [e["id"] for e in by_text["entries"]] == [ids["verified"]]
    by_id = call(store, "read_memory", {"id": ids["fact"]}).payload
    assert [e["id"] for e in by_id["entries"]] == [ids["fact"]] and by_id["missing"] == []
    assert "not both" in error(call(store, "read_memory", {"query": "x", "id": ids["fact"]}))


def test_write_memory_lands_unverified_and_is_read_only_elsewhere(store: MemoryStore) -> None:
    before = store.git.tip()
    done = call(store, "write_memory", {"kind": "decision", "key": "db", "body": "Postgres."})
    assert done.ok and done.payload == {"id": done.payload["id"], "trust": "unverified"}
    entry = store.get(done.payload["id"])
    assert entry.trust is Trust.UNVERIFIED
    assert entry.provenance.produced_by == "tool:operator@example.test"  # no run: the face
    assert store.git.tip().id != before.id  # type: ignore[union-attr]
    tip = store.git.tip()
    for name, tool_input in [
        ("memory_query", {"query": "postgres", "min_trust": "unverified"}),
        ("memory_view", {"id": entry.id}),
        ("read_memory", {"query": "postgres"}),
    ]:
        assert call(store, name, tool_input).ok
    assert store.git.tip().id == tip.id  # type: ignore[union-attr]  # reads never commit


@pytest.mark.parametrize(
    ("tool_input", "message"),
    [
        ({"kind": "mood", "key": "k", "body": "b"}, "`kind` must be one of"),
        ({"kind": "fact", "key": "k", "body": "   "}, "empty"),
        ({"kind": "fact", "key": "k\nx", "body": "b"}, "control characters"),
        ({"kind": "fact", "key": "k"}, "`body` is required"),
        ({"kind": "fact", "key": "k", "body": "<!-- truss:tombstone -->"}, "marks deletions"),
    ],
)
def test_write_memory_refusals(store: MemoryStore, tool_input: dict, message: str) -> None:
    assert message in error(call(store, "write_memory", tool_input))
