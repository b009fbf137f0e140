"""context: a run's prefix in cache order -- tools, the system layers, then messages: the
verified goals pinned (L3) and the run's own unverified notes (L4) -- with a cursor that
delta_since accepts. Memory itself is pulled through the tools, never pushed."""

from __future__ import annotations

import json

import pytest

from truss_files.errors import UsageError
from truss_files.memory import Memory

from .conftest import Panel


def test_the_prefix_assembles_its_layers_in_cache_order(memory: Memory, panel: Panel) -> None:
    ship = memory.write("goal", "ship", "Ship the release notes.")
    memory.promote(ship.id, panel.verdict(ship.id))
    maybe = memory.write("goal", "later", "An unverified goal.")
    lesson = memory.write("lesson", "ci", "Retry the network tests exactly once.")
    memory.promote(lesson.id, panel.verdict(lesson.id))
    note = memory.write("scratch", "s1", "My own working note.", produced_by="run:R1/1")
    other = memory.write("scratch", "s2", "Another run's note.", produced_by="run:R2/1")

    data = memory.context("R1", principal="alice").render("json")
    assert {"tools", "system", "messages", "cursor", "tokens"} <= set(data)
    assert [b["layer"] for b in data["system"]] == ["L0 core", "L0 self", "L1 principal", "memory"]
    assert data["system"][2]["path"].endswith("alice.md")
    assert [m["layer"] for m in data["messages"]] == ["L3", "L4"]
    goals, tail = data["messages"]
    assert goals["pinned"] is True and goals["ids"] == [ship.id]
    assert "Ship the release notes." in goals["content"][0]["text"]
    assert tail["pinned"] is False and tail["ids"] == [note.id]
    text = json.dumps(data)
    assert maybe.id not in text and other.id not in text
    # L2 is pulled through the tools, never pushed into the prefix.
    assert "Retry the network tests" not in text and lesson.id not in text
    assert {t["name"] for t in data["tools"]} >= {"memory_query", "memory_view"}


def test_a_run_keeps_its_tools_and_system_bytes_and_its_cursor_feeds_delta(
    memory: Memory, panel: Panel
) -> None:
    first = memory.context("R1")
    assert first.new_run is True
    lesson = memory.write("lesson", "ci", "Retry the network tests exactly once.")
    memory.promote(lesson.id, panel.verdict(lesson.id))
    again = memory.context("R1")
    assert again.new_run is False and again.stable_bytes() == first.stable_bytes()
    assert [(c.id, c.to) for c in memory.delta_since(first.cursor).changes] == [
        (lesson.id, "verified")
    ]
    assert memory.delta_since(again.cursor).changes == ()


@pytest.mark.parametrize(
    ("run", "principal"), [("../escape", None), ("", None), ("R1", "../x"), ("R1", "a/b")]
)
def test_a_bad_run_or_principal_is_refused(memory: Memory, run: str, principal: str | None) -> None:
    with pytest.raises(UsageError):
        memory.context(run, principal=principal)
