"""memory.ask and memory.train through the installed console script, in real processes: the
run context from ``--run-context FILE`` or ``TRUSS_RUN_CONTEXT``, one JSON object out."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.support import console
from tests.support.tools_support import configure, promote
from truss_files.facade import MemoryStore
from truss_files.format.trailers import trailers
from truss_files.git.gitstore import Plan

SCRIPT = Path(sys.executable).with_name("truss-files")
CONTEXT = {
    "taskId": "T-1",
    "memberId": "m-7",
    "teamId": "platform",
    "enterpriseId": "acme",
    "grants": [{"layer": "team", "eventPrefix": "ci:"}],
}


def run(
    store: MemoryStore,
    args: list[str],
    stdin: Any,
    *,
    context: dict[str, Any] | None = None,
    env_context: bool = False,
) -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "TRUSS_KEY": str(Path(store.git.workdir).parent / "operator_key")}
    extra: list[str] = []
    ctx = {**CONTEXT, **(context or {})}
    if env_context:
        env["TRUSS_RUN_CONTEXT"] = json.dumps(ctx)
    else:
        path = Path(store.git.workdir).parent / "ctx.json"
        path.write_text(json.dumps(ctx))
        extra = ["--run-context", str(path)]
    done = console.run(
        [str(SCRIPT), "--store", str(store.git.workdir), "tool", *args, "--memory-write", *extra],
        input=json.dumps(stdin),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.stdout.count("\n") == 1, (done.stdout, done.stderr)
    return done.returncode, json.loads(done.stdout)


def train(store: MemoryStore, inp: dict[str, Any], **kw: Any) -> dict[str, Any]:
    code, value = run(store, ["memory.train"], inp, **kw)
    assert code == 0, value
    return value


def ask(store: MemoryStore, inp: dict[str, Any], **kw: Any) -> dict[str, Any]:
    code, value = run(store, ["memory.ask", "--memory-tools"], inp, **kw)
    assert code == 0, value
    return value


def src(event: str, revision: str = "1") -> dict[str, str]:
    return {"eventId": event, "revision": revision}


def test_train_then_retained_in_a_new_process(store: MemoryStore) -> None:
    first = train(store, {"body": "Release needs the preview URL.", "source": src("e1")})
    assert first["status"] == "accepted" and first["entry"]["trust"] == "unverified"
    assert first["entry"]["provenance"]["produced_by"] == "event:e1#1"
    tip = str(store.git.tip().id)  # type: ignore[union-attr]
    again = train(store, {"body": "Release needs the preview URL.", "source": src("e1")})
    assert again["status"] == "retained" and again["entry"]["id"] == first["entry"]["id"]
    assert str(store.git.tip().id) == tip  # type: ignore[union-attr]


def test_block_call_id_keys_a_note_without_source(store: MemoryStore) -> None:
    block = {
        "type": "tool_use",
        "id": "toolu_77",
        "name": "memory_train",
        "input": {"body": "Prefer rebase over merge here."},
    }
    code, first = run(store, ["--block"], block)
    assert code == 0 and first["tool_use_id"] == "toolu_77" and first["is_error"] is False
    assert json.loads(first["content"])["status"] == "accepted"
    code, again = run(store, ["--block"], block)
    assert json.loads(again["content"])["status"] == "retained"
    code, plain = run(store, ["memory_train"], {"body": "No id."})
    assert code == 0 and plain["status"] == "failed" and "source" in plain["reason"]


def test_ask_statuses_through_the_console_script(store: MemoryStore) -> None:
    empty = ask(store, {"purpose": "quantum flux"})
    assert empty["status"] == "insufficient_evidence" and empty["evidence"] == []
    note = train(store, {"body": "The flux capacitor needs 1.21 GW.", "source": src("e1")})
    own = ask(store, {"purpose": "flux capacitor"}, env_context=True)
    assert own["status"] == "answered" and own["evidence"][0]["trust"] == "unverified"
    other_task = ask(store, {"purpose": "flux capacitor"}, context={"taskId": "T-2"})
    assert other_task["status"] == "insufficient_evidence"
    promote(store, note["entry"]["id"])
    seen = ask(store, {"purpose": "flux capacitor"}, context={"taskId": "T-2"})
    assert seen["status"] == "insufficient_evidence"  # a task note stays its task's
    team = train(
        store,
        {"body": "The flux capacitor is shared.", "layer": "team", "source": src("ci:3")},
    )
    promote(store, team["entry"]["id"])
    shared = ask(store, {"purpose": "flux capacitor"}, context={"taskId": "T-2"})
    assert [e["id"] for e in shared["evidence"]] == [team["entry"]["id"]]
    code, missing = run(
        store, ["memory_ask", "--memory-tools"], {"purpose": "x"}, context={"enterpriseId": None}
    )
    assert code == 1 and missing["error"]["code"] == "no_run_context"
    fix = train(
        store,
        {
            "body": "The flux capacitor needs 2 GW.",
            "kind": "correction",
            "source": src("e2"),
            "supersedes": {"entryId": note["entry"]["id"]},
        },
    )
    assert fix["entry"]["supersedes"] == note["entry"]["id"]
    assert ask(store, {"purpose": "flux capacitor"})["status"] == "conflict"


def test_budget_from_truss_toml_and_consolidating(store: MemoryStore) -> None:
    configure(store)
    text = (store.snapshot().read("truss.toml") or b"").decode()
    text += "\n[enterprise]\nask_budget_chars = 40\n"
    message = "truss: configure\n\n" + trailers(op="config")
    store._apply(lambda _s: Plan({"truss.toml": text.encode()}, message), {"operator"})
    body = "the nightly job fails when the artifact cache is full and must be pruned"
    assert train(store, {"body": body, "source": src("e1")})["status"] == "accepted"
    close = train(store, {"body": body + " weekly", "source": src("e2")})
    assert close["status"] == "consolidating"
    reply = ask(store, {"purpose": "nightly artifact cache"})
    assert reply["evidence"][0]["partial"] is True and len(reply["evidence"][0]["body"]) == 40
    assert reply["usage"]["evidenceOmitted"] == len(reply["omitted"]) == 1


def test_unavailable_when_history_is_forged(store: MemoryStore, git: Any) -> None:
    note = train(store, {"body": "Ports: the API listens on 8080.", "source": src("e1")})
    work = Path(store.git.workdir)
    path = work / note["entry"]["path"]
    path.write_text(path.read_text().replace("\ntrust: unverified\n", "\ntrust: verified\n"))
    git(work, "commit", "--no-verify", "-q", "-am", "make it verified")
    reply = ask(store, {"purpose": "api port"})
    assert reply["status"] == "unavailable" and reply["evidence"] == [] and not reply["answer"]
    assert "audit" in reply["reason"] or "history" in reply["reason"]


def test_schema_offers_both_tools(store: MemoryStore) -> None:
    done = console.run(
        [
            str(SCRIPT),
            "--store",
            str(store.git.workdir),
            "tools",
            "schema",
            "--format",
            "openai",
            "--memory-tools",
            "--memory-write",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    names = [d["function"]["name"] for d in json.loads(done.stdout)]
    assert names[-2:] == ["memory_ask", "memory_train"]
