"""Helpers shared by the recall tests (index, pipeline, modes, CLI): stores with mixed trust.

Everything goes through the real store: signed writes, signed panel verdicts, and -- for what
the library refuses to do, such as committing a thousand rejected entries at once -- signed
commits of entry files through ``GitStore.apply``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from truss_files import entryfile
from truss_files.gitstore import Identity, Plan, Snapshot
from truss_files.model import Entry, Kind, Trust
from truss_files.recall.engine import RecallResult, Searcher
from truss_files.recall.pipeline import Filter, Hit, recall
from truss_files.store import MemoryStore, trailers


def promote(store: MemoryStore, entry: Entry) -> Entry:
    return store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="checked"))


def reject(store: MemoryStore, entry: Entry) -> Entry:
    return store.reject(entry.id, store.sign_verdict(entry.id, "FAIL", note="wrong"))


def commit_entries(store: MemoryStore, entries: Iterable[Entry], message: str) -> str:
    """One signed commit adding entry files as they are (any trust): a bulk hand edit."""
    files = {e.path: entryfile.serialize(e).encode() for e in entries}

    def plan(_snap: Snapshot) -> Plan:
        body = trailers(op="write", entries=str(len(files)))
        return Plan(files, f"{message}\n\n{body}")

    who = Identity("Test Operator", "operator@example.test")
    done = store.git.apply(plan, store.signer, who)
    assert done is not None
    return str(done[0].id)


def as_rejected(entry: Entry) -> Entry:
    return dataclasses.replace(entry, trust=Trust.REJECTED)


def mixed_store(store: MemoryStore) -> dict[str, Entry]:
    """A small store: verified, stale, superseded, unverified, rejected, other kinds."""
    made: dict[str, Entry] = {}
    texts = {
        "v1": ("lesson", "flaky-ci", "Flaky CI tests: retry the network suite once, then fix."),
        "v2": ("lesson", "borrow", "BorrowChecker errors in store.rs: scope the guard first."),
        "v3": ("decision", "db", "We use Postgres 16 with pgbouncer for connection pooling."),
        "v4": ("fact", "ci-cache", "The CI cache key hashes Cargo.lock and the toolchain file."),
        "stale": ("lesson", "flaky-old", "Flaky network tests: just retry the whole CI job."),
        "u1": ("lesson", "flaky-new", "Retry flaky CI network tests with backoff."),
        "u2": ("playbook", "deploy", "Deploy: tag, push, watch the canary for ten minutes."),
        "rej": ("lesson", "flaky-bad", "Flaky CI network tests are fine, ignore the failures."),
    }
    for name, (kind, key, body) in texts.items():
        made[name] = store.write(kind, key, body)
    for name in ("v1", "v2", "v3", "v4", "stale"):
        made[name] = promote(store, made[name])
    made["stale"] = store.demote(made["stale"].id, "retrying the whole job hid real races")
    made["rej"] = reject(store, made["rej"])
    # A newer verified decision on key "db" supersedes v3 (verified-wins).
    made["v5"] = promote(
        store,
        store.write("decision", "db", "Postgres 16, pooled by pgbouncer in transaction mode."),
    )
    made["v3"] = store.get(made["v3"].id)
    return made


def same(a: Iterable[Hit], b: Iterable[Hit]) -> bool:
    return [(h.entry.id, h.score) for h in a] == [(h.entry.id, h.score) for h in b]


def check_against_pipeline(
    store: MemoryStore, query: str, flt: Filter, limit: int = 10
) -> RecallResult:
    """The index's answer must be the in-memory pipeline's, entry for entry, bit for bit."""
    found = Searcher(store.git.workdir or store.git.git_dir).query(query, flt, limit, mode="exact")
    want = recall(store.iter_entries(), query, flt, limit)
    assert [(h.entry.id, h.score) for h in found.hits] == [(h.entry.id, h.score) for h in want]
    assert [h.entry for h in found.hits] == [h.entry for h in want]
    return found


FLOORS = (Trust.VERIFIED, Trust.STALE, Trust.UNVERIFIED)
KINDS = (None, Kind.LESSON, Kind.DECISION)
