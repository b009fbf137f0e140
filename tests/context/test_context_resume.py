"""Resume with the delta (context/resume.py): a later context or repin says what moved."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from tests.support.tools_support import promote
from truss_files.context.assemble import repin
from truss_files.context.resume import DELTA_HEAD
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.git.gitdir import GitDir


def _delta_messages(data: dict) -> list[dict]:
    return [m for m in data["messages"] if m.get("layer") == "delta"]


def test_a_resumed_context_carries_what_changed_with_bodies_and_the_same_head(
    store: MemoryStore,
) -> None:
    old = store.write("fact", "db", "Postgres 15.")
    promote(store, old.id)
    first = store.context("R1", gates=["memory", "memory_write"])
    assert first.new_run and first.delta == ()
    head = first.stable_bytes("anthropic")
    head_openai = first.stable_bytes("openai")

    fresh = store.write("fact", "db", "Postgres 16 since the upgrade.")
    promote(store, fresh.id)  # old: verified -> stale
    store.write("lesson", "u", "Unverified: never in a delta.")
    store.write("goal", "g", "A goal, verified: L3, not the delta.")

    again = store.context("R1", gates=["memory", "memory_write"])
    got = {c.id: c for c in again.delta}
    assert set(got) == {old.id, fresh.id}
    assert (got[fresh.id].from_, got[fresh.id].to) == (None, "verified")
    assert got[fresh.id].body == "Postgres 16 since the upgrade."
    assert (got[old.id].from_, got[old.id].to, got[old.id].body) == ("verified", "stale", None)
    # The tools and system bytes are those the run started with, in every format.
    assert again.stable_bytes("anthropic") == head
    assert again.stable_bytes("openai") == head_openai

    data = again.render("json")
    assert data["delta"] == [c.to_dict() for c in again.delta]
    assert data["delta"][0].keys() == {"id", "kind", "key", "from", "to", "body"}
    [block] = _delta_messages(data)
    text = block["content"][0]["text"]
    assert text.startswith(DELTA_HEAD)
    assert "Postgres 16 since the upgrade." in text and "Postgres 15." not in text
    assert "Unverified" not in text
    assert block["ids"] == [c.id for c in again.delta]
    # After the goal ledger, before the tail.
    layers = [m["layer"] for m in data["messages"]]
    assert layers.index("delta") == len([x for x in layers if x == "L3"])

    # Each change once: nothing moved since, so no block at all.
    third = store.context("R1")
    assert third.delta == () and _delta_messages(third.render("json")) == []
    assert third.render("json")["delta"] == []
    assert third.stable_bytes("anthropic") == head


def test_repin_carries_the_delta_and_moves_the_cursor(store: MemoryStore) -> None:
    store.context("R1")
    entry = store.write("lesson", "flaky", "Retry the flaky check once, then report it.")
    promote(store, entry.id)
    out = repin(store, "R1", 3)
    assert out["repin"] is False
    assert [c["id"] for c in out["delta"]] == [entry.id]
    assert out["delta"][0]["body"] == "Retry the flaky check once, then report it."
    [message] = out["messages"]
    assert "Retry the flaky check once" in message["content"][0]["text"]
    # Said once: the next context and repin carry nothing.
    assert store.context("R1").delta == ()
    assert repin(store, "R1", 4)["delta"] == []


def test_a_lost_or_garbled_cursor_cache_costs_a_longer_delta_never_a_wrong_one(
    store: MemoryStore,
) -> None:
    store.context("R1")
    entry = store.write("lesson", "a", "A lesson.")
    promote(store, entry.id)
    assert [c.id for c in store.context("R1").delta] == [entry.id]
    path = os.path.join(GitDir.discover(store.git.git_dir).cache_str, "context", "runs")
    cache = Path(path) / "R1.cursor"
    for damage in ("tc1.garbage\n", "\xff not a cursor", ""):
        cache.write_text(damage, encoding="utf-8", errors="surrogateescape")
        # From the run's start commit: the promotion again, nothing invented.
        assert [c.id for c in store.context("R1").delta] == [entry.id]
    cache.unlink()
    assert [c.id for c in store.context("R1").delta] == [entry.id]
    assert store.context("R1").delta == ()


def test_the_delta_honours_memory_scope(store: MemoryStore) -> None:
    store.context("R1", agent="alpha")
    mine = store.write("lesson", "m", "Alpha's lesson.", scope={"agent": "alpha"})
    theirs = store.write("lesson", "t", "Beta's lesson.", scope={"agent": "beta"})
    promote(store, mine.id)
    promote(store, theirs.id)
    assert [c.id for c in store.context("R1", agent="alpha").delta] == [mine.id]


def test_cli_context_and_repin_print_the_delta(store: MemoryStore, tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["--store", str(store.git.workdir)]
    first = runner.invoke(cli, [*base, "context", "--run", "R9"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.output)["delta"] == []
    entry = store.write("fact", "ci", "CI runs on the self-hosted pool.")
    promote(store, entry.id)
    later = runner.invoke(cli, [*base, "context", "--run", "R9", "--format", "anthropic"])
    assert later.exit_code == 0, later.output
    data = json.loads(later.output)
    assert data["delta"][0]["body"] == "CI runs on the self-hosted pool."
    assert any("self-hosted pool" in m["content"][0]["text"] for m in data["messages"])
    entry2 = store.write("fact", "cd", "Deploys go through the release train.")
    promote(store, entry2.id)
    repinned = runner.invoke(cli, [*base, "context", "repin", "--run", "R9", "--turn", "1"])
    assert repinned.exit_code == 0, repinned.output
    assert [c["id"] for c in json.loads(repinned.output)["delta"]] == [entry2.id]
