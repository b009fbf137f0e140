"""Durable runs: each call one signed ledger commit; replay only from signed, matching memos."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.tools_support import call, cli, out, promote
from truss_files.errors import PROVENANCE_MESSAGE
from truss_files.facade import MemoryStore
from truss_files.format.trailers import parse_trailers, trailers
from truss_files.runs.ledger import (
    RUN_REF_PREFIX,
    LedgerEntry,
    RunLedger,
    calls_path,
    canonical,
    memo_key,
    memo_path,
    sha256,
)
from truss_files.signing import Ed25519Signer
from truss_files.tools import Outcome

QUERY = {"query": "flaky network"}


def durable(store: MemoryStore, name: str, tool_input: dict[str, Any], **kw: Any) -> Outcome:
    return call(store, name, tool_input, run_id=kw.pop("run_id", "R1"), durable=True, **kw)


def lesson(store: MemoryStore, key: str, body: str) -> str:
    entry = store.write("lesson", key, body)
    promote(store, entry.id)
    return entry.id


def ids(outcome: Outcome) -> list[str]:
    return [e["id"] for e in outcome.payload["entries"]]


def test_each_call_is_one_signed_commit_with_its_memo(store: MemoryStore) -> None:
    first = lesson(store, "ci", "Flaky network tests: retry once.")
    branch_tip = store.git.tip()
    done = durable(store, "memory_query", QUERY)
    assert done.ok and ids(done) == [first] and done.ledger_ref == "run:R1/1"
    failed = durable(store, "memory_view", {"id": "xyz"})
    assert not failed.ok and failed.ledger_ref == "run:R1/2"
    assert store.git.tip().id == branch_tip.id  # type: ignore[union-attr]  # reads: no branch commit

    ledger = RunLedger(store, "R1")
    chain = list(ledger.chain())
    assert len(chain) == 2 and chain[0].parents[0].id == chain[1].id and not chain[1].parents
    for commit, seq, tool, outcome in [
        (chain[1], 1, "memory_query", done),
        (chain[0], 2, "memory_view", failed),
    ]:
        assert commit.gpg_signature[0] is not None
        fields = parse_trailers(commit.message)
        assert fields["Truss-Seq"] == [str(seq)] and fields["Truss-Tool"] == [tool]
        entry = LedgerEntry.from_bytes(commit.tree[calls_path(seq)].data)  # type: ignore[attr-defined]
        key = memo_key(tool, QUERY if seq == 1 else {"id": "xyz"})
        memo = commit.tree[memo_path(key)].data  # type: ignore[attr-defined]
        assert entry.memo_key == key and entry.tool == tool
        assert entry.ledger_ref == f"run:R1/{seq}"
        assert entry.error is (seq == 2)
        assert entry.result_sha256 == sha256(memo)
        assert json.loads(memo) == outcome.payload  # the full result, in the same commit
        assert entry.input_sha256 == sha256(canonical(QUERY if seq == 1 else {"id": "xyz"}))
    run_info = json.loads(chain[1].tree["run.json"].data)  # type: ignore[attr-defined]
    assert run_info["run"] == "R1"


def test_git_itself_verifies_the_ledger_commits(store: MemoryStore) -> None:
    durable(store, "memory_query", QUERY)
    workdir = store.git.workdir
    assert workdir is not None
    cfg = [
        "-c",
        "gpg.format=ssh",
        "-c",
        f"gpg.ssh.allowedSignersFile={workdir / '.truss/allowed_signers'}",
    ]
    done = subprocess.run(
        ["git", "-C", str(workdir), *cfg, "verify-commit", RUN_REF_PREFIX + "R1"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert 'Good "git" signature for operator@example.test' in done.stderr


def test_repeated_read_replays_the_old_observation(store: MemoryStore) -> None:
    first = lesson(store, "ci", "Flaky network tests: retry once.")
    original = durable(store, "memory_query", QUERY)
    second = lesson(store, "dns", "Flaky network tests: pin the DNS resolver.")
    assert set(ids(call(store, "memory_query", QUERY))) == {first, second}  # the store moved

    again = durable(store, "memory_query", QUERY)
    assert again.replayed and again.payload == original.payload and ids(again) == [first]
    assert again.ledger_ref == "run:R1/2"  # a live run journals the memo hit too
    assert RunLedger(store, "R1").records()[-1].entry.replay_of == 1
    replayed = durable(store, "memory_query", QUERY, replay=True)
    assert replayed.replayed and replayed.payload == original.payload
    assert len(list(RunLedger(store, "R1").chain())) == 2  # a replay records nothing

    fresh = durable(store, "memory_query", {**QUERY, "revalidate": True})
    assert not fresh.replayed and set(ids(fresh)) == {first, second}
    assert fresh.ledger_ref == "run:R1/3"
    entry = RunLedger(store, "R1").records()[-1].entry
    assert entry.revalidate and entry.memo_key == memo_key("memory_query", QUERY)
    # The replacement memo is what the run now replays.
    assert durable(store, "memory_query", QUERY).payload == fresh.payload
    records = RunLedger(store, "R1").records()
    assert [r.memo_matches for r in records] == [False, False, True, True]


def test_replay_without_a_memo_fails(store: MemoryStore) -> None:
    done = durable(store, "memory_query", QUERY, replay=True)
    assert done.error == {"code": "memo_provenance", "message": PROVENANCE_MESSAGE}
    assert RunLedger(store, "R1").tip() is None


def test_failed_calls_replay_as_failures(store: MemoryStore) -> None:
    failed = durable(store, "memory_view", {"id": "xyz"})
    again = durable(store, "memory_view", {"id": "xyz"}, replay=True)
    assert again.replayed and again.error == failed.error


def test_writes_in_a_durable_run(store: MemoryStore) -> None:
    create = {"command": "create", "path": "/memories/lessons/ci.md", "file_text": "Retry once."}
    durable(store, "memory_query", QUERY)
    made = durable(store, "memory", create)
    assert made.ok and made.ledger_ref == "run:R1/2"
    [entry] = store.list_entries(key="ci")
    assert entry.provenance.produced_by == "run:R1/2"
    record = RunLedger(store, "R1").records()[-1]
    assert record.entry.produced == (entry.id,)
    # A resumed run replays the write instead of writing again.
    tip = store.git.tip()
    replayed = durable(store, "memory", create, replay=True)
    assert replayed.replayed and replayed.payload == made.payload
    assert store.git.tip().id == tip.id  # type: ignore[union-attr]
    # Without --replay the binding runs live (and the run sees its own write).
    live = durable(store, "memory", create)
    assert live.error is not None and "already exists" in live.error["message"]


# -- tampering ------------------------------------------------------------------------------


def _forge(
    store: MemoryStore,
    *,
    signer: Ed25519Signer | None,
    rewrite_entry: bool,
    claim: bool,
    seq: int = 1,
) -> None:
    """Commit an edited memo on top of the ledger, the way an attacker with write access could."""
    ledger = RunLedger(store, "R1")
    tip = ledger.tip()
    assert tip is not None
    key = memo_key("memory_query", QUERY)
    forged = {"recall_mode": "exact", "min_trust": "verified", "entries": []}
    memo = canonical(forged)
    files: dict[str, bytes | None] = {memo_path(key): memo}
    if rewrite_entry:
        raw = json.loads(tip.tree[calls_path(1)].data)  # type: ignore[attr-defined]
        raw["result_sha256"] = sha256(memo)
        files[calls_path(1)] = json.dumps(raw).encode()
    tree = store.git.write_tree(tip.tree, files)
    assert tree is not None
    message = "edit memo\n\n"
    if claim:
        message += trailers(
            op="tool-call", run="R1", seq=str(seq), tool="memory_query", memo_key=key
        )
    identity = store.identity("mallory")
    if signer is None:
        who = identity.signature()
        oid = store.git.repo.create_commit(None, who, who, message, tree, [tip.id])
    else:
        oid = store.git.make_commit(tree, [tip.id], message, signer, identity)
    assert store.git.update_ref(ledger.ref, tip.id, oid, "forge")


@pytest.mark.parametrize(
    ("who", "rewrite_entry", "claim"),
    [
        ("unsigned", False, False),  # memo edited and committed unsigned
        ("unsigned", True, True),  # ... with a matching (unsigned) ledger entry
        ("unknown", True, True),  # signed by a key the store does not know
        ("unknown", False, False),
        ("agent", False, False),  # a valid agent signature, but sha != the signed entry's
        ("agent", False, True),
    ],
)
def test_tampered_memos_are_refused(
    store: MemoryStore, operator_key: Ed25519Signer, who: str, rewrite_entry: bool, claim: bool
) -> None:
    lesson(store, "ci", "Flaky network tests: retry once.")
    durable(store, "memory_query", QUERY)
    signer = {"unsigned": None, "unknown": Ed25519Signer.generate("eve"), "agent": operator_key}[
        who
    ]
    _forge(store, signer=signer, rewrite_entry=rewrite_entry, claim=claim)
    for replay in (True, False):
        refused = durable(store, "memory_query", QUERY, replay=replay)
        assert refused.error == {"code": "memo_provenance", "message": PROVENANCE_MESSAGE}
        assert refused.note  # the detail goes to people, not the model


def test_revalidate_recovers_from_a_tampered_memo(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    first = lesson(store, "ci", "Flaky network tests: retry once.")
    durable(store, "memory_query", QUERY)
    # The run's own key recorded call #2 with a memo its ledger entry does not vouch for.
    _forge(store, signer=operator_key, rewrite_entry=False, claim=True, seq=2)
    assert durable(store, "memory_query", QUERY, replay=True).error is not None
    fresh = durable(store, "memory_query", {**QUERY, "revalidate": True})
    assert fresh.ok and ids(fresh) == [first] and fresh.ledger_ref == "run:R1/3"
    assert durable(store, "memory_query", QUERY, replay=True).payload == fresh.payload


def test_revalidate_cannot_build_on_a_broken_ledger(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    durable(store, "memory_query", QUERY)
    _forge(store, signer=operator_key, rewrite_entry=False, claim=False)
    refused = durable(store, "memory_query", {**QUERY, "revalidate": True})
    assert refused.error == {"code": "memo_provenance", "message": PROVENANCE_MESSAGE}
    assert refused.note is not None and "not a call of run R1" in refused.note


def test_appending_to_a_forged_ledger_is_refused(store: MemoryStore) -> None:
    durable(store, "memory_query", QUERY)
    _forge(store, signer=None, rewrite_entry=False, claim=False)
    refused = durable(store, "memory_view", {"id": "0" * 32})
    assert refused.error == {"code": "memo_provenance", "message": PROVENANCE_MESSAGE}
    assert refused.note is not None and "unsigned" in refused.note


# -- run ids, run context, and the CLI ------------------------------------------------------


@pytest.mark.parametrize("run_id", ["", "../x", "a..b", "x.lock", "-x", "a/b", "a b", "x" * 129])
def test_bad_run_ids(store: MemoryStore, run_id: str) -> None:
    with pytest.raises(Exception, match="run id|durable run needs"):
        durable(store, "memory_query", QUERY, run_id=run_id)


def test_cli_durable_replay_and_runs(store: MemoryStore, tmp_path: Path) -> None:
    first = lesson(store, "ci", "Flaky network tests: retry once.")
    path = str(store.git.workdir)
    key = str(tmp_path / "operator_key")
    ctx = tmp_path / "ctx.json"
    ctx.write_text(json.dumps({"taskId": "T-118", "teamId": "platform", "clone": False}))
    base = ["--store", path, "tool", "memory_query", "--run", "R-7f3a", "--durable"]
    done = cli([*base, "--run-context", str(ctx)], QUERY, key=key)
    assert done.exit_code == 0, done.output
    assert [e["id"] for e in out(done)["entries"]] == [first]
    lesson(store, "dns", "Flaky network tests: pin DNS.")
    replayed = cli([*base, "--replay"], QUERY, key=key)
    assert replayed.exit_code == 0 and out(replayed) == out(done)
    missing = cli([*base, "--replay"], {"query": "other"}, key=key)
    assert missing.exit_code == 1
    assert out(missing) == {"error": {"code": "memo_provenance", "message": PROVENANCE_MESSAGE}}
    assert "note:" in missing.stderr
    assert cli(["--store", path, "tool", "memory_query", "--durable"], QUERY).exit_code == 2

    listed = cli(["--store", path, "runs", "list", "--format", "json"])
    assert [(r["run"], r["calls"]) for r in json.loads(listed.stdout)] == [("R-7f3a", 1)]
    shown = json.loads(cli(["--store", path, "runs", "show", "R-7f3a", "--format", "json"]).stdout)
    assert shown["ledger"] == {"ok": True, "principal": "operator@example.test", "calls": 1}
    [record] = shown["calls"]
    assert record["tool"] == "memory_query" and record["signer"] == "operator@example.test"
    assert record["memo_matches"] is True and record["ledger_ref"] == "run:R-7f3a/1"
    text = cli(["--store", path, "runs", "show", "R-7f3a", "--format", "text"]).stdout
    assert "#1" in text and "memory_query" in text
    assert text.startswith("run R-7f3a: verified ledger of operator@example.test")
    nothing = cli(["--store", path, "runs", "show", "nope", "--format", "json"])
    assert nothing.exit_code == 1
    run_json = json.loads(RunLedger(store, "R-7f3a").tip().tree["run.json"].data)  # type: ignore[union-attr,attr-defined]
    assert run_json["context"] == {
        "taskId": "T-118",
        "teamId": "platform",
        "clone": False,
        "grants": [],
    }


def test_run_context_from_the_environment(tmp_path: Path) -> None:
    from truss_files.model import Layer
    from truss_files.runs.runcontext import load_run_context

    raw = {"taskId": "T1", "member_id": "m", "grants": [{"layer": "team", "eventPrefix": "ci:"}]}
    ctx = load_run_context(environ={"TRUSS_RUN_CONTEXT": json.dumps(raw)})
    assert ctx is not None and ctx.task == "T1" and ctx.member == "m"
    assert ctx.grants_for(Layer.TEAM)[0].event_prefix == "ci:"
    file = tmp_path / "c.json"
    file.write_text(json.dumps(raw))
    assert load_run_context(environ={"TRUSS_RUN_CONTEXT": str(file)}) == ctx
    assert load_run_context(environ={}) is None
    file.write_text("{nope")
    with pytest.raises(Exception, match="not valid JSON"):
        load_run_context(file)
    with pytest.raises(Exception, match="cannot read run context"):
        load_run_context(tmp_path / "absent.json")
    with pytest.raises(Exception, match="eventPrefix"):
        load_run_context(environ={"TRUSS_RUN_CONTEXT": '{"grants": [{"layer": "team"}]}'})
