"""memory.ask and memory.train against a real signed store: the public entry points (what the
HTTP face calls) and the registry (what the CLI, MCP and the SDK adapter serve)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.tools_support import configure, promote
from truss_files.facade import MemoryStore
from truss_files.format.trailers import parse_trailers
from truss_files.model import Trust
from truss_files.tools import RunContext, ToolSession
from truss_files.tools.ask import ask
from truss_files.tools.train import CONSOLIDATE_AT, train
from truss_files.trust.audit import audit

BASE = {"taskId": "T-1", "teamId": "platform", "enterpriseId": "acme", "memberId": "m-7"}


def ctx(**fields: Any) -> RunContext:
    return RunContext.from_dict({**BASE, **fields})


GRANTED = ctx(grants=[{"layer": "team", "eventPrefix": "ci:"}])


def src(event: str, revision: str = "1") -> dict[str, str]:
    return {"eventId": event, "revision": revision}


def trained(store: MemoryStore, context: RunContext, body: str, **inp: Any) -> dict[str, Any]:
    result = train(store, context, {"body": body, **inp})
    assert result["status"] in ("accepted", "consolidating"), result
    return result


def commits(store: MemoryStore) -> int:
    return sum(1 for _ in store.git.repo.walk(store.git.tip().id))


# -- the public entry points ------------------------------------------------------------


def test_train_lands_unverified_in_one_signed_commit_recording_the_event(
    store: MemoryStore,
) -> None:
    before = commits(store)
    result = trained(store, ctx(), "The release check needs the preview URL.", source=src("e1"))
    assert result["status"] == "accepted" and result["usage"]["commits"] == 1
    entry = result["entry"]
    assert entry["trust"] == "unverified" and entry["layer"] == "task"
    assert entry["provenance"]["produced_by"] == "event:e1#1"
    assert entry["provenance"]["sources"] == ["event:e1#1"]
    assert entry["scope"] == {"task": "T-1", "team": "platform", "enterprise": "acme"}
    assert entry["author"] == "member:m-7" and entry["sourceEventId"] == "e1"
    assert commits(store) == before + 1
    tip = store.git.tip()
    assert tip.gpg_signature[0] is not None
    fields = parse_trailers(tip.message)
    assert fields["Truss-Event"] == ["event:e1#1"] and fields["Truss-Entry"] == [entry["id"]]
    assert audit(store.git).ok


def test_train_is_idempotent_on_event_and_revision(store: MemoryStore) -> None:
    first = trained(store, ctx(), "Builds need the cache warmed.", source=src("e1"))
    before = commits(store)
    again = train(store, ctx(), {"body": "A different text.", "source": src("e1")})
    assert again["status"] == "retained" and again["usage"]["commits"] == 0
    assert again["entry"]["id"] == first["entry"]["id"]
    assert again["entry"]["body"] == "Builds need the cache warmed."
    assert commits(store) == before
    # A new revision of the event is a new note; a reopened store still finds the old one.
    second = trained(store, ctx(), "Builds need the cache warmed twice.", source=src("e1", "2"))
    assert second["entry"]["id"] != first["entry"]["id"]
    reopened = MemoryStore(store.git.workdir, signer=store.signer)
    repeat = train(reopened, ctx(), {"body": "x", "source": src("e1", "2")})
    assert repeat["status"] == "retained" and repeat["entry"]["id"] == second["entry"]["id"]


def test_train_without_source_is_idempotent_on_the_call_id(store: MemoryStore) -> None:
    first = train(store, ctx(), {"body": "Prefer small commits."}, call_id="toolu_01")
    assert first["status"] == "accepted"
    again = train(store, ctx(), {"body": "Prefer small commits."}, call_id="toolu_01")
    assert again["status"] == "retained" and again["entry"]["id"] == first["entry"]["id"]
    other = train(store, ctx(), {"body": "Prefer small commits."}, call_id="toolu_02")
    assert other["status"] in ("accepted", "consolidating")
    refused = train(store, ctx(), {"body": "No id at all."})
    assert refused["status"] == "failed" and "source" in refused["reason"]
    assert "entry" not in refused


def test_train_finds_a_rejected_note_and_does_not_write_it_again(store: MemoryStore) -> None:
    # Rejected notes are in no floor index (their words move no score), yet a note already
    # stored for a source is found whatever its trust: a rejected one is not written again.
    first = trained(store, ctx(), "Deploys skip the smoke test.", source=src("e9"))
    entry_id = first["entry"]["id"]
    store.reject(entry_id, store.sign_verdict(entry_id, "FAIL"))
    before = commits(store)
    again = train(store, ctx(), {"body": "Deploys skip the smoke test.", "source": src("e9")})
    assert again["status"] == "retained" and again["usage"]["commits"] == 0
    assert again["entry"]["id"] == entry_id and again["entry"]["trust"] == "rejected"
    assert commits(store) == before
    # The same through the call id, for a note trained without a source.
    note = train(store, ctx(), {"body": "Prefer rebases."}, call_id="toolu_r")
    store.reject(note["entry"]["id"], store.sign_verdict(note["entry"]["id"], "FAIL"))
    before = commits(store)
    repeat = train(store, ctx(), {"body": "Prefer rebases."}, call_id="toolu_r")
    assert repeat["status"] == "retained" and repeat["entry"]["id"] == note["entry"]["id"]
    assert commits(store) == before


def test_ask_answers_from_task_team_and_enterprise_only(store: MemoryStore) -> None:
    mine = trained(store, GRANTED, "Flaky checks: rerun the lint job once.", source=src("e1"))
    team = trained(
        store,
        GRANTED,
        "Flaky checks on platform come from the cache.",
        source=src("ci:7"),
        layer="team",
    )
    theirs = trained(store, ctx(taskId="T-2"), "Flaky checks in T-2 are network.", source=src("e2"))
    elsewhere = trained(
        store, ctx(enterpriseId="other"), "Flaky checks elsewhere.", source=src("e3")
    )
    for result in (mine, team, theirs, elsewhere):
        promote(store, result["entry"]["id"])
    answer = ask(store, ctx(), {"purpose": "flaky checks"})
    assert answer["status"] == "answered"
    ids = {e["id"] for e in answer["evidence"]}
    assert ids == {mine["entry"]["id"], team["entry"]["id"]}
    assert answer["appliedFilters"] == {"layers": ["task", "team", "enterprise"]}
    assert answer["usage"]["notesMatched"] == 2 and answer["omitted"] == []
    for item in answer["evidence"]:
        assert item["id"] in answer["answer"] and item["body"] not in answer["answer"]
        assert set(item) == {
            "id",
            "layer",
            "kind",
            "body",
            "sourceEventId",
            "partial",
            "chars",
            "trust",
        }
    # Another task of the same team sees the team note, not T-1's task note.
    sibling = ask(store, ctx(taskId="T-3"), {"purpose": "flaky checks"})
    assert {e["id"] for e in sibling["evidence"]} == {team["entry"]["id"]}


def test_ask_filters_narrow_and_never_widen(store: MemoryStore) -> None:
    team = trained(store, GRANTED, "Deploys freeze on Fridays.", source=src("ci:1"), layer="team")
    promote(store, team["entry"]["id"])
    other_team = ctx(teamId="search", taskId="T-9", grants=[{"layer": "team", "eventPrefix": "x"}])
    theirs = trained(
        store, other_team, "Deploys freeze on Mondays.", source=src("x1"), layer="team"
    )
    promote(store, theirs["entry"]["id"])
    # A filter naming another team cannot reach that team's notes.
    forged = ask(store, ctx(), {"purpose": "deploys freeze", "teamId": "search"})
    assert forged["status"] == "insufficient_evidence" and forged["evidence"] == []
    assert forged["appliedFilters"] == {"layers": ["enterprise"], "teamId": "search"}
    own = ask(store, ctx(), {"purpose": "deploys freeze", "teamId": "platform"})
    assert [e["id"] for e in own["evidence"]] == [team["entry"]["id"]]
    narrowed = ask(store, ctx(), {"purpose": "deploys freeze", "projectId": "p-none"})
    assert narrowed["status"] == "insufficient_evidence"


def test_ask_trust_floor_own_unverified_marked_rejected_never(store: MemoryStore) -> None:
    own = trained(store, ctx(), "The staging database restarts at noon.", source=src("e1"))
    other = trained(store, ctx(taskId="T-2"), "The staging database is slow.", source=src("e2"))
    answer = ask(store, ctx(), {"purpose": "staging database"})
    assert [(e["id"], e["trust"]) for e in answer["evidence"]] == [
        (own["entry"]["id"], "unverified")
    ]
    assert "unverified" in answer["answer"]
    assert ask(store, ctx(taskId="T-3"), {"purpose": "staging database"})["evidence"] == []
    store.reject(other["entry"]["id"], store.sign_verdict(other["entry"]["id"], "FAIL"))
    assert ask(store, ctx(taskId="T-2"), {"purpose": "staging database"})["evidence"] == []


def test_ask_budget_cuts_a_first_note_too_long_alone(store: MemoryStore) -> None:
    for n in range(3):  # other notes, so that the query's word is a rare one
        trained(store, ctx(), f"filler note {n} about something else", source=src(f"f{n}"))
    long = trained(store, ctx(), "delta " * 400, source=src("e1"))
    answer = ask(store, ctx(), {"purpose": "delta"}, budget=100)
    [first] = answer["evidence"]
    assert first["partial"] is True and len(first["body"]) == 100
    assert first["chars"] == len(long["entry"]["body"]) == 2399
    assert answer["omitted"] == [] and answer["usage"]["chars"] == 100
    assert "cut at 100 of 2399" in answer["answer"]
    # Behind a cut note the budget is spent: the next match is omitted, named with its size.
    short = trained(store, ctx(), "delta epsilon", source=src("e2"))
    answer = ask(store, ctx(), {"purpose": "delta"}, budget=100)
    assert [e["id"] for e in answer["evidence"]] == [long["entry"]["id"]]
    assert answer["omitted"] == [
        {"id": short["entry"]["id"], "layer": "task", "sourceEventId": "e2", "chars": 13}
    ]
    assert answer["usage"]["evidenceOmitted"] == 1
    # Second in rank, a note too long for what is left is omitted, never cut.
    wide = trained(store, ctx(), "epsilon " + "zeta " * 300, source=src("e3"))
    answer = ask(store, ctx(), {"purpose": "epsilon"}, budget=100)
    assert [e["id"] for e in answer["evidence"]] == [short["entry"]["id"]]
    assert [e["id"] for e in answer["omitted"]] == [wide["entry"]["id"]]
    assert answer["omitted"][0]["chars"] == len(wide["entry"]["body"])
    assert all(not e["partial"] for e in answer["evidence"])
    # Over HTTP (no budget) nothing is left out, and the answer carries every note's text.
    whole = ask(store, ctx(), {"purpose": "delta"}, budget=None)
    assert "omitted" not in whole and whole["usage"]["evidenceOmitted"] == 0
    assert all(not e["partial"] for e in whole["evidence"]) and len(whole["evidence"]) == 2
    assert long["entry"]["body"] in whole["answer"] and "delta epsilon" in whole["answer"]
    # A run's budget comes from [enterprise] ask_budget_chars.
    configure(store)
    _set_budget(store, 5)
    run = ask(store, ctx(), {"purpose": "delta"})
    assert run["evidence"][0]["partial"] is True and len(run["evidence"][0]["body"]) == 5
    assert len(run["omitted"]) == 1


def test_ask_whole_notes_that_fit(store: MemoryStore) -> None:
    for n in range(3):
        trained(store, ctx(), f"gamma note number {n} " + "x" * 30, source=src(f"e{n}"))
    answer = ask(store, ctx(), {"purpose": "gamma"}, budget=110)
    assert len(answer["evidence"]) == 2 and len(answer["omitted"]) == 1
    assert not any(e["partial"] for e in answer["evidence"])
    assert answer["usage"]["chars"] == sum(len(e["body"]) for e in answer["evidence"])


def _set_budget(store: MemoryStore, chars: int) -> None:
    from truss_files.format.trailers import trailers
    from truss_files.git.gitstore import Plan

    text = (store.snapshot().read("truss.toml") or b"").decode()
    text += f"\n[enterprise]\nask_budget_chars = {chars}\n"
    message = "truss: configure\n\n" + trailers(op="config")
    store._apply(lambda _s: Plan({"truss.toml": text.encode()}, message), {"operator"})


def test_ask_conflict_on_verified_rivals_with_different_bodies(store: MemoryStore) -> None:
    configure(store, conflict="keep-both-flagged")
    one = trained(store, ctx(), "The cache lives in redis.", source=src("e1", "1"))
    two = trained(store, ctx(), "The cache lives in memcached.", source=src("e1", "2"))
    promote(store, one["entry"]["id"])
    promote(store, two["entry"]["id"])
    answer = ask(store, ctx(), {"purpose": "cache lives"})
    assert answer["status"] == "conflict"
    [conflict] = answer["conflicts"]
    assert set(conflict["ids"]) == {one["entry"]["id"], two["entry"]["id"]}


def test_correction_is_a_conflict_until_verified_then_retires_the_note(
    store: MemoryStore,
) -> None:
    old = trained(store, ctx(), "The build runs on node 18.", source=src("e1"))
    promote(store, old["entry"]["id"])
    fix = train(
        store,
        ctx(),
        {
            "body": "The build runs on node 22 now.",
            "kind": "correction",
            "source": src("e2"),
            "supersedes": {"entryId": old["entry"]["id"]},
        },
    )
    assert fix["status"] in ("accepted", "consolidating")
    assert fix["entry"]["supersedes"] == old["entry"]["id"]
    pending = ask(store, ctx(), {"purpose": "build node"})
    assert pending["status"] == "conflict"
    promote(store, fix["entry"]["id"])
    settled = ask(store, ctx(), {"purpose": "build node"})
    assert settled["status"] == "answered"
    assert [e["id"] for e in settled["evidence"]] == [fix["entry"]["id"]]
    retired = store.get(old["entry"]["id"])
    assert retired.trust is Trust.STALE and retired.superseded_by == fix["entry"]["id"]
    assert audit(store.git).ok


def test_consolidating_measured_by_jaccard_both_sides(store: MemoryStore) -> None:
    base = "the nightly job fails when the artifact cache is full and must be pruned"
    trained(store, ctx(), base, source=src("e1"))
    close = train(store, ctx(), {"body": base + " weekly", "source": src("e2")})
    assert close["status"] == "consolidating"
    assert close["usage"]["similarity"] >= CONSOLIDATE_AT
    far = train(store, ctx(), {"body": "the nightly job is owned by ops", "source": src("e3")})
    assert far["status"] == "accepted" and far["usage"]["similarity"] < CONSOLIDATE_AT
    # Another task's notes are not in this note's part of the task layer.
    elsewhere = train(store, ctx(taskId="T-2"), {"body": base, "source": src("e4")})
    assert elsewhere["status"] == "accepted"


def test_ask_unavailable_on_untrusted_history_and_timeout(store: MemoryStore, git: Any) -> None:
    note = trained(store, ctx(), "Ports: the API listens on 8080.", source=src("e1"))
    promote(store, note["entry"]["id"])
    late = ask(store, ctx(), {"purpose": "api port"}, timeout=0)
    assert late["status"] == "unavailable" and late["evidence"] == [] and late["answer"] == ""
    assert "in time" in late["reason"]
    # A promotion committed by hand, bypassing every hook: the read gate refuses the history.
    sneak = trained(store, ctx(), "Ports: the API also listens on 9090.", source=src("e2"))
    work = store.git.workdir
    path = work / sneak["entry"]["path"]
    path.write_text(path.read_text().replace("\ntrust: unverified\n", "\ntrust: verified\n"))
    git(work, "commit", "--no-verify", "-q", "-am", "make it verified")
    refused = ask(store, ctx(), {"purpose": "api port"})
    assert refused["status"] == "unavailable" and refused["evidence"] == []
    assert refused["reason"].startswith("memory could not be read")


def test_ask_never_stores_anything(store: MemoryStore) -> None:
    trained(store, ctx(), "Logs rotate daily.", source=src("e1"))
    before = commits(store)
    ask(store, ctx(), {"purpose": "logs rotate"})
    assert commits(store) == before


# -- through the registry ----------------------------------------------------------------


def session(store: MemoryStore, context: RunContext | None = None, **kw: Any) -> ToolSession:
    return ToolSession(store, flags=("memory", "memory_write"), context=context or ctx(), **kw)


@pytest.mark.parametrize("name", ["memory.train", "memory_train"])
def test_registry_train_both_spellings(store: MemoryStore, name: str) -> None:
    outcome = session(store).call(name, {"body": "Note.", "source": src("e1")})
    assert outcome.ok and outcome.payload["status"] == "accepted"
    again = session(store).call(name, {"body": "Note.", "source": src("e1")})
    assert again.payload["status"] == "retained"


@pytest.mark.parametrize("name", ["memory.ask", "memory_ask"])
def test_registry_ask_both_spellings(store: MemoryStore, name: str) -> None:
    session(store).call("memory.train", {"body": "Queues drain at night.", "source": src("e1")})
    outcome = session(store).call(name, {"purpose": "queues drain"})
    assert outcome.ok and outcome.payload["status"] == "answered"


def test_registry_train_without_source_uses_the_tool_call_id(store: MemoryStore) -> None:
    first = session(store).call("memory.train", {"body": "Keep PRs small."}, call_id="toolu_9")
    again = session(store).call("memory.train", {"body": "Keep PRs small."}, call_id="toolu_9")
    assert first.payload["status"] == "accepted" and again.payload["status"] == "retained"


def test_registry_needs_a_run_context(store: MemoryStore) -> None:
    plain = ToolSession(store, flags=("memory", "memory_write"))
    for name, inp in (("memory.ask", {"purpose": "x"}), ("memory.train", {"body": "x"})):
        outcome = plain.call(name, inp)
        assert outcome.error is not None and outcome.error["code"] == "no_run_context"
        assert "--run-context" in outcome.error["message"]


def test_registry_unknown_fields_are_invalid_input(store: MemoryStore) -> None:
    for name, inp in (
        ("memory.ask", {"purpose": "x", "layers": ["member"]}),
        ("memory.train", {"body": "x", "author": "ceo"}),
        ("memory.train", {"body": "x", "source": {"eventId": "e", "revision": "1", "x": 1}}),
        ("memory.train", {"body": "x", "source": {"eventId": "e"}}),
    ):
        outcome = session(store).call(name, inp)
        assert outcome.error is not None and outcome.error["code"] == "invalid_input", inp


def test_registry_gates(store: MemoryStore) -> None:
    reads = ToolSession(store, flags=("memory",), context=ctx())
    assert reads.call("memory.ask", {"purpose": "x"}).ok
    refused = reads.call("memory.train", {"body": "x", "source": src("e1")})
    assert refused.error is not None and refused.error["code"] == "tool_not_served"
    assert "--memory-write" in refused.error["message"]
