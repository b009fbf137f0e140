"""The MCP face: the SDK's own client against our MCPServer, in process and over stdio."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_tools_support import configure, promote

from truss_files.store import MemoryStore
from truss_files.tools import ToolSession

mcp = pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

from truss_files.faces.mcp import build_server  # noqa: E402


def run(coro: Any) -> Any:
    return anyio.run(coro)


def test_tools_annotations_and_calls_in_process(store: MemoryStore) -> None:
    entry = store.write("lesson", "ci", "Retry flaky network tests once.")
    promote(store, entry.id)
    session = ToolSession(store, flags=["memory", "memory_write"], run_id="M1")

    async def main() -> None:
        async with Client(build_server(session)) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert list(listed) == [
                "memory_query",
                "memory_view",
                "read_memory",
                "memory",
                "write_memory",
                "memory_ask",
                "memory_train",
            ]
            for name in ("memory_query", "memory_view", "read_memory", "memory_ask"):
                hints = listed[name].annotations
                assert hints is not None and hints.read_only_hint is True
                assert hints.open_world_hint is False
            for name in ("memory", "write_memory"):
                hints = listed[name].annotations
                assert hints is not None and hints.read_only_hint is False
                assert hints.destructive_hint is False and hints.open_world_hint is False
            assert listed["memory_query"].input_schema["properties"]["min_trust"]["enum"] == [
                "verified",
                "stale",
                "unverified",
            ]

            found = await client.call_tool("memory_query", {"query": "flaky network"})
            assert not found.is_error
            assert found.structured_content is not None
            assert [e["id"] for e in found.structured_content["entries"]] == [entry.id]
            assert json.loads(found.content[0].text)["entries"][0]["id"] == entry.id  # type: ignore[union-attr]

            made = await client.call_tool(
                "memory",
                {
                    "command": "create",
                    "path": "/memories/lessons/dns.md",
                    "file_text": "Pin the resolver.",
                },
            )
            assert not made.is_error
            assert made.content[0].text == "File created successfully at: /memories/lessons/dns.md"  # type: ignore[union-attr]
            seen = await client.call_tool(
                "memory", {"command": "view", "path": "/memories/lessons"}
            )
            assert "/memories/lesson/dns.md\t[unverified]" in seen.content[0].text  # type: ignore[union-attr]

            refused = await client.call_tool("memory", {"command": "view", "path": "/etc/passwd"})
            assert refused.is_error
            assert refused.content[0].text.endswith(  # type: ignore[union-attr]
                "Path must start with /memories, got: /etc/passwd"
            )
            bad = await client.call_tool("memory_query", {"query": "x", "min_trust": "rejected"})
            assert bad.is_error and "min_trust" in bad.content[0].text  # type: ignore[union-attr]

    run(main)
    [written] = store.list_entries(key="dns")
    assert written.provenance.produced_by == "run:M1/1"


def test_only_served_tools_are_listed(store: MemoryStore) -> None:
    configure(store, memory=True, memory_write=True, allow_tools=["memory_view", "memory"])

    async def main() -> None:
        async with Client(build_server(ToolSession(store, run_id="M2"))) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["memory_view", "memory"]
            missing = await client.call_tool("memory_query", {"query": "x"})
            assert missing.is_error

    run(main)

    async def reads_only() -> None:
        configure(store, memory=True, memory_write=False)
        async with Client(build_server(ToolSession(store, run_id="M3"))) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["memory_query", "memory_view", "read_memory", "memory_ask"]

    run(reads_only)


def test_stdio_subprocess(store: MemoryStore, tmp_path: Path) -> None:
    entry = store.write("fact", "db", "The database is postgres 16.")
    promote(store, entry.id)
    exe = str(Path(sys.executable).with_name("truss-files"))
    env = {k: v for k, v in os.environ.items() if k.startswith(("GIT_", "TRUSS_", "HOME", "XDG_"))}
    env["TRUSS_KEY"] = str(tmp_path / "operator_key")
    params = StdioServerParameters(
        command=exe,
        args=[
            "mcp",
            "--store",
            str(store.git.workdir),
            "--memory-tool",
            "--run",
            "S1",
            "--durable",
        ],
        env=env,
    )

    async def main() -> None:
        async with Client(params) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == [
                "memory_query",
                "memory_view",
                "read_memory",
                "memory",
                "write_memory",
                "memory_ask",
                "memory_train",
            ]
            found = await client.call_tool("memory_query", {"query": "postgres"})
            assert not found.is_error and found.structured_content is not None
            assert found.structured_content["entries"][0]["id"] == entry.id
            made = await client.call_tool(
                "write_memory", {"kind": "fact", "key": "cache", "body": "Redis 7."}
            )
            assert not made.is_error and made.structured_content is not None
            assert made.structured_content["trust"] == "unverified"

    run(main)
    from truss_files.tools.runs import RunLedger

    records = RunLedger(store, "S1").records()
    assert [r.entry.tool for r in records] == ["memory_query", "write_memory"]


def test_eager_write_over_mcp_keeps_the_result_and_tells_stderr(
    store: MemoryStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configure(store, memory_write=True)
    contract = tmp_path / "contract.toml"
    contract.write_text(
        '[policy]\nverification = "eager"\n'
        '[panel.reviewers]\nfact = [{type = "check", command = "true"}]\n'
    )
    session = ToolSession(store, flags=["memory_write"], run_id="M-eager", contract=contract)

    async def main() -> None:
        async with Client(build_server(session)) as client:
            done = await client.call_tool(
                "write_memory", {"kind": "fact", "key": "db", "body": "Postgres 16."}
            )
            assert not done.is_error
            assert done.structured_content is not None
            assert done.structured_content["trust"] == "verified"
            made = await client.call_tool(
                "memory",
                {"command": "create", "path": "/memories/facts/os.md", "file_text": "Linux."},
            )
            assert [c.text for c in made.content] == [  # type: ignore[union-attr]
                "File created successfully at: /memories/facts/os.md"
            ]

    run(main)
    assert capsys.readouterr().err.count("eager verification") == 2
    assert {e.trust.value for e in store.list_entries()} == {"verified"}
