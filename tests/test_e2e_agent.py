"""End to end: a scripted provider drives a multi-turn agent through the real CLI.

The "model" is a script that emits Anthropic tool_use blocks, some built from what earlier
tool_results said; the harness pipes each block through `truss-files tool --block` in a
durable run and checks every tool_result. The run ends, a panel verifies the lesson and the
store moves on; the run is then resumed with --replay and must see exactly what it saw
before, until it asks to revalidate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support import console
from truss_files.facade import MemoryStore

RUN = "E2E-1"
LESSON = "Flaky CI: retry the network tests once, then file a bug with the run link."

Turn = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


class ScriptedProvider:
    """Turn n emits tool_use blocks; a turn may read the tool_results of earlier turns."""

    def __init__(self, turns: list[Turn]) -> None:
        self.turns = turns
        self.n = 0

    def next_blocks(self, results: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        if self.n == len(self.turns):
            return None
        blocks = self.turns[self.n](results)
        self.n += 1
        return blocks


def block(n: int, name: str, **tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{n:02d}", "name": name, "input": tool_input}


def first_id(results: list[dict[str, Any]], tool_use_id: str) -> str:
    [result] = [r for r in results if r["tool_use_id"] == tool_use_id]
    return str(json.loads(result["content"])["entries"][0]["id"])


TURNS: list[Turn] = [
    lambda _r: [block(1, "memory", command="view", path="/memories")],
    lambda _r: [
        block(2, "memory", command="create", path="/memories/lessons/flaky-ci.md", file_text=LESSON)
    ],
    lambda _r: [
        block(3, "memory", command="view", path="/memories"),
        block(4, "memory_query", query="flaky ci network retry", min_trust="verified"),
    ],
    lambda r: [block(5, "memory_view", id=first_id(r, "toolu_04")[:8])],
]


class Harness:
    def __init__(self, store: Path, env: dict[str, str]) -> None:
        self.exe = str(Path(sys.executable).with_name("truss-files"))
        self.store = str(store)
        self.env = env

    def run(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return console.run(
            [self.exe, "--store", self.store, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
        )

    def tool(self, use: dict[str, Any], *flags: str) -> dict[str, Any]:
        argv = ["tool", "--block", "--run", RUN, "--durable", "--memory-tools", "--memory-write"]
        done = self.run(*argv, *flags, stdin=json.dumps(use))
        result: dict[str, Any] = json.loads(done.stdout)  # exactly one JSON object
        assert done.returncode == (1 if result["is_error"] else 0), done.stderr
        assert result["type"] == "tool_result" and result["tool_use_id"] == use["id"]
        return result

    def agent(self, provider: ScriptedProvider, *flags: str) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        while (blocks := provider.next_blocks(results)) is not None:
            results.extend(self.tool(b, *flags) for b in blocks)
        return results


def test_agent_run_resume_and_replay(store: MemoryStore, tmp_path: Path) -> None:
    env = dict(os.environ, TRUSS_KEY=str(tmp_path / "operator_key"))
    harness = Harness(store.git.workdir, env)  # type: ignore[arg-type]

    first = harness.agent(ScriptedProvider(TURNS))
    by_id = {r["tool_use_id"]: r for r in first}
    assert not any(r["is_error"] for r in first)
    assert by_id["toolu_01"]["content"].endswith("4K\t/memories")
    assert by_id["toolu_02"]["content"] == (
        "File created successfully at: /memories/lessons/flaky-ci.md"
    )
    assert "/memories/lessons/flaky-ci.md [unverified]" in by_id["toolu_03"]["content"]
    hit = json.loads(by_id["toolu_04"]["content"])["entries"][0]
    assert hit["body"] == LESSON and hit["trust"] == "unverified"  # the run's own write
    assert hit["ledger_ref"] == f"run:{RUN}/2"
    viewed = json.loads(by_id["toolu_05"]["content"])
    assert [e["id"] for e in viewed["entries"]] == [hit["id"]]

    # The run ends. A panel verifies the lesson; someone else adds a verified note.
    verdict = tmp_path / "v.json"
    assert harness.run("verdict", "sign", hit["id"], "--pass", "-o", str(verdict)).returncode == 0
    assert harness.run("promote", hit["id"], "--verdict", str(verdict)).returncode == 0
    other = json.loads(
        harness.run(
            "write",
            "--kind",
            "lesson",
            "--key",
            "dns",
            "--format",
            "json",
            "Flaky CI network retry: pin the DNS resolver.",
        ).stdout
    )["id"]
    assert harness.run("verdict", "sign", other, "--pass", "-o", str(verdict)).returncode == 0
    assert harness.run("promote", other, "--verdict", str(verdict)).returncode == 0

    # Resume and replay: every call answers from its signed memo, exactly as before.
    replayed = harness.agent(ScriptedProvider(TURNS), "--replay")
    assert replayed == first
    assert len(store.list_entries(key="flaky-ci")) == 1  # the create was not run again

    # Continuing the run: a revalidated query sees the store as it is now.
    fresh = harness.tool(block(6, "memory_query", query="flaky ci network retry", revalidate=True))
    entries = json.loads(fresh["content"])["entries"]
    assert {e["id"] for e in entries} == {hit["id"], other}
    assert all(e["trust"] == "verified" for e in entries)

    shown = json.loads(harness.run("runs", "show", RUN, "--format", "json").stdout)
    tools = [c["tool"] for c in shown["calls"]]
    assert tools == ["memory", "memory", "memory", "memory_query", "memory_view", "memory_query"]
    assert all(c["signer"] == "operator@example.test" for c in shown["calls"])
    audit = harness.run("audit", "--format", "json")
    assert audit.returncode == 0, audit.stdout
