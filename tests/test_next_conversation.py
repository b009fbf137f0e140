"""The next-conversation story, end to end: an agent writes a note through the real MCP server
(stdio, the `mcp` client library), the store verifies it on write with a model judge (the
real anthropic SDK against the fake provider on 127.0.0.1), and a NEW MCP session — another
run, another server process — is served it. A note the judge fails is never served."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from examples.fake_provider import FakeProvider
from tests.support.model_judges import add_to_config
from truss_files.facade import MemoryStore
from truss_files.format.trailers import trailers
from truss_files.git.gitstore import Plan
from truss_files.panel.modeljudge import read_data_block

pytest.importorskip("mcp")
pytest.importorskip("anthropic")

from mcp import Client, StdioServerParameters  # noqa: E402

EDITOR = "The user edits in vim, with 4-space indents."
SECRET = "The deploy password is hunter2."


def eager(store: MemoryStore) -> None:
    """truss.toml: verify on write, with a model judge for preferences (operator-signed)."""
    snap = store.snapshot()
    text = (snap.read("truss.toml") or b"").decode()
    assert 'verification = "lazy"' in text
    text = text.replace('verification = "lazy"', 'verification = "eager"')
    message = "truss: eager\n\n" + trailers(op="config")
    store._apply(lambda _snap: Plan({"truss.toml": text.encode()}, message), {"operator"})
    add_to_config(
        store,
        '[panel.judges]\nclaude = {provider = "anthropic", model = "claude-test", '
        'max_retries = 0, timeout = 10}\n\n[panel.reviewers]\npreference = ["claude"]\n',
    )


def server(store: MemoryStore, key: Path, fake: FakeProvider, run: str) -> StdioServerParameters:
    exe = str(Path(sys.executable).with_name("truss-files"))
    env = {k: v for k, v in os.environ.items() if k.startswith(("GIT_", "TRUSS_", "HOME", "XDG_"))}
    env |= {
        "TRUSS_KEY": str(key),
        "ANTHROPIC_API_KEY": "sk-ant-fake",
        "ANTHROPIC_BASE_URL": fake.url,
    }
    args = ["mcp", "--store", str(store.git.workdir), "--memory-write", "--run", run]
    return StdioServerParameters(command=exe, args=args, env=env)


def test_a_note_written_today_is_judged_and_served_tomorrow(
    store: MemoryStore, tmp_path: Path
) -> None:
    eager(store)
    key = tmp_path / "operator_key"
    with FakeProvider(fail_if="password") as fake:

        async def today() -> dict[str, Any]:
            async with Client(server(store, key, fake, "today")) as client:
                # The server tells the agent how today's note reaches a later conversation.
                told = client.instructions or ""
                assert "reaches later conversations once it is verified" in told
                assert "truss-files review" in told and "model judge" in told
                made = await client.call_tool(
                    "memory",
                    {
                        "command": "create",
                        "path": "/memories/preferences/editor.md",
                        "file_text": EDITOR,
                    },
                )
                assert not made.is_error, made
                bad = await client.call_tool(
                    "write_memory", {"kind": "preference", "key": "deploy", "body": SECRET}
                )
                assert not bad.is_error and bad.structured_content is not None
                return dict(bad.structured_content)

        secret = anyio.run(today)
        assert secret["trust"] == "rejected"  # the judge failed it, on write

        async def tomorrow() -> tuple[Any, Any, Any]:
            async with Client(server(store, key, fake, "tomorrow")) as client:
                found = await client.call_tool("memory_query", {"query": "editor vim indents"})
                viewed = await client.call_tool(
                    "memory", {"command": "view", "path": "/memories/preferences/editor.md"}
                )
                leaked = await client.call_tool("memory_query", {"query": "deploy password"})
                return found, viewed, leaked

        found, viewed, leaked = anyio.run(tomorrow)
        asked = [read_data_block(r["body"]["messages"][0]["content"]) for r in fake.requests]

    assert not found.is_error and found.structured_content is not None
    [hit] = found.structured_content["entries"]
    assert hit["body"] == EDITOR and hit["trust"] == "verified"
    assert hit["ledger_ref"].startswith("run:today/")
    assert not viewed.is_error and EDITOR in viewed.content[0].text
    assert leaked.structured_content is not None
    assert leaked.structured_content["entries"] == []

    # The judge was asked once per note, with the note as data.
    assert [a["entry"]["body"] for a in asked if a] == [EDITOR, SECRET]
    verdict = store.get(hit["id"]).provenance.verified_by
    assert verdict is not None
    [vote] = verdict["votes"]
    assert vote["kind"] == "model" and vote["evidence"]["provider"] == "anthropic"
    assert vote["evidence"]["response_id"] == "msg_fake_0001"
    rejected = store.list_entries(key="deploy")
    assert [e.trust.value for e in rejected] == ["rejected"]
