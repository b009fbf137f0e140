"""Helpers shared by the recall tests (index, floors, modes, CLI): stores with mixed trust,
and a reference for what exact recall must answer.

Everything goes through the real store: signed writes, signed panel verdicts, and -- for what
the library refuses to do, such as committing a thousand rejected entries at once -- signed
commits of entry files through ``GitStore.apply``.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from tests.support.gated import Searcher
from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.format.trailers import trailers
from truss_files.git.gitstore import Identity, Plan, Snapshot
from truss_files.model import Conflict, Entry, Kind, Trust
from truss_files.recall.bounds import query_terms
from truss_files.recall.docs import document_tokens
from truss_files.recall.engine import RecallResult
from truss_files.recall.pipeline import Filter, Hit
from truss_files.trust.verdict import sign_verdict


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


# tantivy scores in f32; the reference below in f64: they agree to this relative error.
REL: Final = 2e-5


def reference(
    entries: Iterable[Entry],
    query: str,
    flt: Filter,
    writer_of: Callable[[str], str | None] | None = None,
) -> list[tuple[str, float]]:
    """Every entry ``flt`` admits that holds a query term, with its BM25 score over the trust
    floor's statistics -- ``N``, document frequencies and the average length of the entries at
    or above ``flt.min_trust`` (rejected ones never; entries let through below the floor are
    scored with the unverified floor's statistics, where they are indexed) -- as tantivy
    computes BM25 (k1 1.2, b 0.75, lengths quantised as it stores them); best first, ties by
    id."""
    entries = list(entries)
    admits = flt.admits
    if writer_of is not None:
        admits = lambda e: flt.admits(e, writer_of)  # noqa: E731 - the reference's one test
    terms = query_terms(query)
    tokens = {e.id: document_tokens(e) for e in entries}
    stats = {}
    for floor in (flt.min_trust, Trust.UNVERIFIED):
        members = [e for e in entries if e.trust.passes(floor) and e.trust is not Trust.REJECTED]
        total = sum(len(tokens[e.id]) for e in members)
        held = {t: sum(1 for e in members if t in tokens[e.id]) for t in terms}
        stats[floor] = (len(members), total, held)
    out = []
    for entry in entries:
        if not admits(entry):
            continue
        # An entry let through the floor it is below is scored in the unverified floor.
        floor = flt.min_trust if entry.trust.passes(flt.min_trust) else Trust.UNVERIFIED
        n_docs, total, held = stats[floor]
        length = len(tokens[entry.id])
        avgdl = total / n_docs
        counts = Counter(tokens[entry.id])
        norm = 1.2 * (1 - 0.75 + 0.75 * fieldnorm(length) / avgdl)
        score = 0.0
        for term in terms:
            tf = counts.get(term, 0)
            if tf:
                df = held[term]
                idf = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
                score += idf * 2.2 * tf / (tf + norm)
        if score:
            out.append((entry.id, score))
    out.sort(key=lambda hit: (-hit[1], hit[0]))
    return out


def _fieldnorms() -> list[int]:
    # tantivy's table of the 256 lengths a byte stands for: 0-40 exact, then 8 steps per
    # power of two; a length is stored as the largest one not above it.
    table = list(range(41))
    value, step = 40, 2
    while len(table) < 256:
        for _ in range(8):
            if len(table) < 256:
                value += step
                table.append(value)
        step *= 2
    return table


_FIELDNORMS = _fieldnorms()


def fieldnorm(length: int) -> int:
    """The length tantivy scores a document of ``length`` tokens with."""
    return _FIELDNORMS[bisect.bisect_right(_FIELDNORMS, length) - 1]


def agrees(hits: Sequence[Hit], want: Sequence[tuple[str, float]], limit: int) -> None:
    """``hits`` are ``want``'s first ``limit``, scores within ``REL``; where two scores of
    ``want`` are within ``REL`` of each other their order may differ."""
    assert len(hits) == min(limit, len(want)), ([h.entry.id for h in hits], want[:limit])
    ref = dict(want)
    keys = [(-h.score, h.entry.id) for h in hits]
    assert keys == sorted(keys), "score desc, then id asc"
    for hit in hits:
        assert hit.entry.id in ref, f"{hit.entry.id} is not admitted or holds no query term"
        assert math.isclose(hit.score, ref[hit.entry.id], rel_tol=REL), (hit.score, ref)
        assert hit.score > 0
    if len(want) > limit:
        cut = hits[-1].score
        beyond = {i for i, s in want if s > cut * (1 + REL)}
        assert beyond <= {h.entry.id for h in hits}


def check_against_reference(
    store: MemoryStore, query: str, flt: Filter, limit: int = 10
) -> RecallResult:
    """The index's answer, as it stands (updated incrementally), holds exactly the admitted
    entries a reference finds, the store's own entries, in score order; rebuilt from scratch
    (tantivy then counts no deleted document), its scores are the reference's (``agrees``)."""
    where = store.git.workdir or store.git.git_dir
    found = Searcher(where).query(query, flt, limit, mode="exact")
    entries = {e.id: e for e in store.iter_entries()}
    want = reference(entries.values(), query, flt, writers_of(store))
    assert len(found.hits) == min(limit, len(want))
    assert {h.entry.id for h in found.hits} <= dict(want).keys()
    assert all(h.entry == entries[h.entry.id] for h in found.hits)
    keys = [(-h.score, h.entry.id) for h in found.hits]
    assert keys == sorted(keys)
    searcher = Searcher(where)
    searcher.index.discard()
    agrees(searcher.query(query, flt, limit, mode="exact").hits, want, limit)
    return found


def writers_of(store: MemoryStore) -> Callable[[str], str | None]:
    """Who added each entry at the tip (``writers``): what proves a run's own notes."""
    from truss_files.git.gitdir import GitDir
    from truss_files.trust.writers import writers

    git = GitDir.discover(store.git.git_dir)
    return writers(git, store.snapshot().oid, store.git.repo).of


FLOORS = (Trust.VERIFIED, Trust.STALE, Trust.UNVERIFIED)
KINDS = (None, Kind.LESSON, Kind.DECISION)


def commit_toml(store: MemoryStore, text: str) -> None:
    """``text`` as the store's truss.toml, in one operator-signed commit."""
    from truss_files.signing.trustpolicy import CONFIG_PATH

    done = store.git.apply(
        lambda _snap: Plan({CONFIG_PATH: text.encode()}, "truss: config\n\nTruss-Op: config"),
        store.signer,
        Identity("Test Operator", "operator@example.test"),
    )
    assert done is not None


def _live(entry: Entry) -> bool:
    return entry.trust is Trust.VERIFIED and entry.superseded_by is None


def find_conflicts(
    returned: Iterable[Entry], universe: Iterable[Entry] | None = None
) -> list[Conflict]:
    """What a read must report of ``returned``, worked out from the entries themselves
    (looked up in ``universe``, default ``returned``): the reference the index's answer
    (``Searcher.conflicts``, from fast fields) is checked against."""
    returned = list(returned)
    wanted = {(e.kind.value, e.key) for e in returned if _live(e)}
    if not wanted:
        return []
    groups: dict[tuple[str, str], dict[str, Entry]] = {}
    for entry in [*returned, *(universe or ())]:
        slot = (entry.kind.value, entry.key)
        if slot in wanted and _live(entry):
            groups.setdefault(slot, {})[entry.id] = entry
    out = []
    for (kind, key), members in sorted(groups.items()):
        if len(members) > 1:
            ordered = sorted(members.values(), key=lambda e: (e.created, e.id))
            out.append(Conflict(kind, key, tuple(e.id for e in ordered)))
    return out
