"""Consult at start (context/consult.py) and the train guard against echoing an ask
(runs/asked.py): a run is told what memory knows, and never trains it back as learned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.context.test_context import add_config
from tests.support.tools_support import configure, promote
from tests.tools.test_tools_enterprise import ctx, src, trained
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.runs.asked import CONTAINMENT, containment
from truss_files.tools import ToolSession
from truss_files.tools.ask import ask
from truss_files.tools.train import train

FLAKY = "Flaky checks on the release branch are retried once, then quarantined with an issue."


def verified_note(store: MemoryStore, body: str, event: str) -> str:
    entry_id = str(trained(store, ctx(), body, source=src(event))["entry"]["id"])
    promote(store, entry_id)
    return entry_id


def consult_block(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in data["messages"] if m.get("layer") == "consult"]


def test_a_first_context_carries_the_answer_to_the_runs_purpose_as_citable_evidence(
    store: MemoryStore,
) -> None:
    note = verified_note(store, FLAKY, "e1")
    add_config(store, "[enterprise]\nconsult_at_start = true\n")
    prefix = store.context("R1", run_context=ctx(), purpose="How are flaky checks handled?")
    data = prefix.render("json")
    assert data["consult"]["status"] == "answered"
    assert [e["id"] for e in data["consult"]["evidence"]] == [note]
    [block] = consult_block(data)
    text = block["content"][0]["text"]
    assert "How are flaky checks handled?" in text and note in text and FLAKY in text
    assert block["ids"] == [note]
    # The purpose may come from the run context; only the first context consults.
    again = store.context("R1", run_context=ctx(), purpose="How are flaky checks handled?")
    assert again.consulted is None and consult_block(again.render("json")) == []
    other = store.context("R2", run_context=ctx(purpose="flaky checks release branch"))
    assert [e["id"] for e in other.consulted["evidence"]] == [note]  # type: ignore[index]


def test_consult_is_off_by_default_and_needs_a_run_context_and_a_purpose(
    store: MemoryStore,
) -> None:
    verified_note(store, FLAKY, "e1")
    assert store.context("R1", run_context=ctx(), purpose="flaky").consulted is None
    add_config(store, "[enterprise]\nconsult_at_start = true\n")
    assert store.context("R2", purpose="flaky").consulted is None  # no run context
    assert store.context("R3", run_context=ctx()).consulted is None  # no purpose
    nothing = store.context("R4", run_context=ctx(), purpose="quantum teleportation")
    assert nothing.consulted is not None and nothing.consulted["status"] == "insufficient_evidence"


def test_cli_context_purpose_consults(store: MemoryStore, tmp_path: Path) -> None:
    note = verified_note(store, FLAKY, "e1")
    add_config(store, "[enterprise]\nconsult_at_start = true\n")
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"taskId": "T-1", "teamId": "platform", "enterpriseId": "acme"}))
    runner = CliRunner()
    out = runner.invoke(
        cli,
        [
            "--store",
            str(store.git.workdir),
            "context",
            "--run",
            "R9",
            "--run-context",
            str(path),
            "--purpose",
            "flaky checks",
            "--format",
            "anthropic",
        ],
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["consult"]["evidence"][0]["id"] == note
    assert any(FLAKY in m["content"][0]["text"] for m in data["messages"])


# -- never train what an ask gave back ---------------------------------------------------


def test_containment_is_the_share_of_the_bodys_shingles_in_the_evidence() -> None:
    assert containment(FLAKY, FLAKY) == 1.0
    assert containment(FLAKY.upper().replace(" ", "  "), FLAKY) == 1.0
    padded = "Noted: " + FLAKY
    assert containment(padded, FLAKY) >= CONTAINMENT
    own = (
        "Today the release check failed twice on the network suite; retrying did not help, "
        "so I opened issue 42 and pinned the mirror. " + FLAKY
    )
    assert containment(own, FLAKY) < CONTAINMENT
    assert containment("retried once", FLAKY) == 1.0  # short: all its words, in order
    assert containment("quarantined once", FLAKY) == 0.0
    assert containment("", FLAKY) == 0.0


def test_train_refuses_what_an_ask_gave_back_to_the_same_run(store: MemoryStore) -> None:
    note = verified_note(store, FLAKY, "e1")
    reply = ask(store, ctx(), {"purpose": "flaky checks"}, run_id="R1")
    assert [e["id"] for e in reply["evidence"]] == [note]
    tip = store.git.tip()
    for body in (FLAKY, "Learned: " + FLAKY, FLAKY.lower()):
        refused = train(store, ctx(), {"body": body, "source": src("e2")}, run_id="R1")
        assert refused["status"] == "failed" and "entry" not in refused
        assert "memory.ask gave back to this run" in refused["reason"] and note in refused["reason"]
    assert store.git.tip().id == tip.id  # type: ignore[union-attr]
    # The run's own observation is fine; so is the same text in another run, never told it.
    own = (
        "The network suite failed twice today; a retry did not help, so issue 42 quarantines "
        "it and the mirror is pinned."
    )
    assert train(store, ctx(), {"body": own, "source": src("e3")}, run_id="R1")["status"] in (
        "accepted",
        "consolidating",
    )
    elsewhere = train(store, ctx(), {"body": FLAKY + " Seen.", "source": src("e4")}, run_id="R2")
    assert elsewhere["status"] != "failed"


def test_the_guard_holds_through_the_tools_and_the_consult(store: MemoryStore) -> None:
    configure(store, memory_write=True)
    verified_note(store, FLAKY, "e1")
    session = ToolSession(store, flags=["memory", "memory_write"], run_id="R5", context=ctx())
    asked = session.call("memory_ask", {"purpose": "flaky checks"})
    assert asked.ok and asked.payload["evidence"]
    back = session.call("memory_train", {"body": FLAKY, "source": src("e9")})
    assert back.ok and back.payload["status"] == "failed"
    add_config(store, "[enterprise]\nconsult_at_start = true\n")
    store.context("R6", run_context=ctx(), purpose="flaky checks")
    told = ToolSession(store, flags=["memory", "memory_write"], run_id="R6", context=ctx())
    echoed = told.call("memory_train", {"body": FLAKY, "source": src("e10")})
    assert echoed.ok and echoed.payload["status"] == "failed"


@pytest.mark.parametrize("damage", [b"\xff\xfe garbage\n", b'{"id": 1}\n[1,2]\n', b""])
def test_a_damaged_asked_log_never_fails_a_train(store: MemoryStore, damage: bytes) -> None:
    verified_note(store, FLAKY, "e1")
    ask(store, ctx(), {"purpose": "flaky checks"}, run_id="R1")
    path = Path(store.git.git_dir) / "truss" / "runs" / "asked" / "R1"
    assert path.exists()
    path.write_bytes(damage)
    done = train(store, ctx(), {"body": "A fresh observation of mine.", "source": src("e5")})
    assert done["status"] != "failed"
    assert train(store, ctx(), {"body": FLAKY, "source": src("e6")}, run_id="R1")["status"] in (
        "accepted",
        "consolidating",
        "retained",
    )
