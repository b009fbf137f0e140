"""Helpers shared by the recall tests (index, pipeline, modes, CLI): stores with mixed trust.

Everything goes through the real store: signed writes, signed panel verdicts, and -- for what
the library refuses to do, such as committing a thousand rejected entries at once -- signed
commits of entry files through ``GitStore.apply``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from truss_files import entryfile
from truss_files.gitstore import Identity, Plan, Snapshot
from truss_files.model import Entry, Kind, Trust
from truss_files.panel.verdict import sign_verdict
from truss_files.recall.engine import RecallResult, Searcher
from truss_files.recall.pipeline import Filter, Hit, recall
from truss_files.store import MemoryStore, trailers


def promote(store: MemoryStore, entry: Entry) -> Entry:
    return store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="checked"))


def reject(store: MemoryStore, entry: Entry) -> Entry:
    return store.reject(entry.id, store.sign_verdict(entry.id, "FAIL", note="wrong"))


def commit_entries(store: MemoryStore, entries: Iterable[Entry], message: str) -> str:
    """Entry files as they are (any trust), committed as the audit demands -- the reads refuse
    a history it rejects: all land unverified in one signed commit, the next gives each its
    trust with a verdict signed for its id, a third demotes the stale ones. A bulk import."""
    wanted = list(entries)
    principal = store.principal()

    def apply(changed: Iterable[Entry], text: str, **fields: str) -> str:
        files = {e.path: entryfile.serialize(e).encode() for e in changed}

        def plan(_snap: Snapshot) -> Plan:
            return Plan(files, f"{text}\n\n{trailers(**fields)}")

        who = Identity("Test Operator", "operator@example.test")
        done = store.git.apply(plan, store.signer, who)
        assert done is not None
        return str(done[0].id)

    tip = apply(
        [_with(e, Trust.UNVERIFIED, None) for e in wanted],
        message,
        op="write",
        entries=str(len(wanted)),
    )
    decided: list[Entry] = []
    for entry in wanted:
        if entry.trust is Trust.UNVERIFIED:
            continue
        outcome = "FAIL" if entry.trust is Trust.REJECTED else "PASS"
        vote = {"reviewer": principal, "kind": "human", "vote": outcome, "evidence": {}}
        verdict = sign_verdict(
            entry.id,
            outcome,
            [vote],
            signer=store.signer,
            principal=principal,
            quorum="1-of-1",
            policy="manual",
            now="2026-11-29T11:00:00Z",
        )
        trust = Trust.REJECTED if outcome == "FAIL" else Trust.VERIFIED
        decided.append(_with(entry, trust, verdict.to_dict()))
    if decided:
        tip = apply(decided, f"{message}: verdicts", op="promote")
    stale = [
        _with(e, Trust.STALE, e.provenance.verified_by)
        for e in decided
        if e.id in _ids(wanted, Trust.STALE)
    ]
    if stale:
        tip = apply(stale, f"{message}: stale", op="demote")
    return tip


def _with(entry: Entry, trust: Trust, verdict: Mapping[str, Any] | None) -> Entry:
    prov = dataclasses.replace(entry.provenance, verified_by=verdict)
    return dataclasses.replace(entry, trust=trust, provenance=prov)


def _ids(entries: Iterable[Entry], trust: Trust) -> set[str]:
    return {e.id for e in entries if e.trust is trust}


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


def commit_toml(store: MemoryStore, text: str) -> None:
    """``text`` as the store's truss.toml, in one operator-signed commit."""
    from truss_files.config import CONFIG_PATH

    done = store.git.apply(
        lambda _snap: Plan({CONFIG_PATH: text.encode()}, "truss: config\n\nTruss-Op: config"),
        store.signer,
        Identity("Test Operator", "operator@example.test"),
    )
    assert done is not None
