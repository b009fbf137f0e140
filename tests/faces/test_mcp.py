"""The MCP face: the SDK's own client against our MCPServer, in process and over stdio."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.tools_support import configure, promote
from truss_files.facade import MemoryStore
from truss_files.runs.runcontext import RunContext
from truss_files.tools import ToolSession

mcp = pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

from truss_files.faces.mcp import build_server  # noqa: E402

CONTEXT = RunContext(task="T-1", team="platform", enterprise="acme")


def run(coro: Any) -> Any:
    return anyio.run(coro)


def _stdio(store: MemoryStore, tmp_path: Path, *args: str, **env: str) -> Any:
    """The installed console script as a host starts it: `truss-files mcp` over stdio."""
    environ = {
        k: v for k, v in os.environ.items() if k.startswith(("GIT_", "HOME", "XDG_", "PATH"))
    }
    environ["TRUSS_KEY"] = str(tmp_path / "operator_key")
    environ.update(env)
    return StdioServerParameters(
        command=str(Path(sys.executable).with_name("truss-files")),
        args=["mcp", "--store", str(store.git.workdir), *args],
        env=environ,
    )


def test_tools_annotations_and_calls_in_process(store: MemoryStore) -> None:
    entry = store.write("lesson", "ci", "Retry flaky network tests once.")
    promote(store, entry.id)
    session = ToolSession(store, flags=["memory", "memory_write"], run_id="M1", context=CONTEXT)

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
            assert "/memories/lessons/dns.md [unverified]" in seen.content[0].text  # type: ignore[union-attr]

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
            assert names == ["memory_query", "memory_view", "read_memory"]

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
            "--memory-write",
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
    from truss_files.runs.ledger import RunLedger

    records = RunLedger(store, "S1").records()
    assert [r.entry.tool for r in records] == ["memory_query", "write_memory"]


def test_a_session_without_a_run_context_is_not_offered_the_context_tools(
    store: MemoryStore, tmp_path: Path
) -> None:
    """What `setup claude-code` starts (--memory-tools --memory-write --parent, no context)
    lists neither memory_ask nor memory_train, and refuses them as before when called anyway;
    the same server given a run context, by file or by TRUSS_RUN_CONTEXT, lists both."""
    context = tmp_path / "ctx.json"
    context.write_text(json.dumps({"taskId": "T-1", "teamId": "platform", "enterpriseId": "acme"}))
    gates = ("--memory-tools", "--memory-write")
    bare = _stdio(store, tmp_path, *gates, "--run", "H-1a", "--parent", "agent-h")
    by_file = _stdio(store, tmp_path, *gates, "--run", "H-2", "--run-context", str(context))
    by_env = _stdio(store, tmp_path, *gates, "--run", "H-3", TRUSS_RUN_CONTEXT=str(context))
    # a context without its enterprise is no context these tools can work in
    partial = _stdio(store, tmp_path, *gates, "--run", "H-4", TRUSS_RUN_CONTEXT='{"taskId": "T-1"}')
    calls = {
        "memory_ask": {"purpose": "what is the database"},
        "memory_train": {"body": "Redis 7.", "source": {"eventId": "evt_1", "revision": "1"}},
    }

    async def listed(params: Any) -> list[str]:
        async with Client(params) as client:
            return [t.name for t in (await client.list_tools()).tools]

    async def refused(params: Any) -> dict[str, dict[str, Any]]:
        out = {}
        async with Client(params) as client:
            for name, arguments in calls.items():
                done = await client.call_tool(name, arguments)
                assert done.is_error and done.structured_content is not None, name
                out[name] = done.structured_content["error"]
        return out

    async def main() -> None:
        for params in (bare, partial):
            names = await listed(params)
            assert names[:3] == ["memory_query", "memory_view", "read_memory"]
            assert "memory_ask" not in names and "memory_train" not in names
            errors = await refused(params)
            assert {e["code"] for e in errors.values()} == {"no_run_context"}
            assert "--run-context FILE" in errors["memory_ask"]["message"]
        for params in (by_file, by_env):
            assert (await listed(params))[-2:] == ["memory_ask", "memory_train"]

    run(main)
    assert store.list_entries() == []  # no refused call wrote anything


@pytest.mark.spawns  # the eager panel runs a shell check
def test_eager_write_over_mcp_keeps_the_result_and_tells_stderr(
    store: MemoryStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    define_checks: Callable[..., str],
) -> None:
    configure(store, memory_write=True)
    define_checks(store, {"holds": "true"})  # the contract names a check truss.toml defines
    contract = tmp_path / "contract.toml"
    contract.write_text('[policy]\nverification = "eager"\n[panel.reviewers]\nfact = ["holds"]\n')
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


def test_identity_goals_and_context_over_mcp(store: MemoryStore) -> None:
    from mcp_types import TextResourceContents

    from truss_files.format.trailers import trailers
    from truss_files.git.gitstore import Plan

    def set_self(text: str) -> None:
        message = "truss: amend identity/self.md\n\n" + trailers(op="identity")
        store._apply(lambda _s: Plan({"identity/self.md": text.encode()}, message), {"operator"})

    set_self("# Self\n\nv1\n")
    goal = store.write("goal", "ship", "Ship the notes.")
    promote(store, goal.id)
    hidden = store.write("goal", "nope", "An unverified goal.")
    session = ToolSession(store, flags=["memory"], run_id="M2")

    async def main() -> None:
        async with Client(build_server(session)) as client:
            uris = sorted(str(r.uri) for r in (await client.list_resources()).resources)
            assert uris == ["truss://goals", "truss://identity/core", "truss://identity/self"]
            prompt = await client.get_prompt("context", {})
            texts = [m.content.text for m in prompt.messages]  # type: ignore[union-attr]
            assert "v1" in texts[0] and "memory_query" in texts[0]
            assert "Ship the notes." in texts[1] and hidden.id[:12] not in "".join(texts)
            set_self("# Self\n\nv2\n")  # an amendment mid-run: this run keeps v1

            async def read(uri: str) -> str:
                [part] = (await client.read_resource(uri)).contents
                assert isinstance(part, TextResourceContents)
                return part.text

            assert await read("truss://identity/self") == "# Self\n\nv1\n"
            assert "# Core identity" in await read("truss://identity/core")
            goals = await read("truss://goals")
            assert "Ship the notes." in goals and "unverified" not in goals
            again = await client.get_prompt("context", {})
            assert again.messages[0].content.text == texts[0]  # type: ignore[union-attr]
            # Resumed: the prompt carries what changed in verified memory since, once.
            fresh = store.write("lesson", "mcp", "MCP resume sees this.")
            promote(store, fresh.id)
            third = await client.get_prompt("context", {})
            said = [m.content.text for m in third.messages]  # type: ignore[union-attr]
            assert said[0] == texts[0] and any("MCP resume sees this." in t for t in said)

    run(main)


def test_server_version_output_schemas_and_unserved_tools(store: MemoryStore) -> None:
    """MCP polish: serverInfo names our version, structured results declare their schema,
    and a tool this store does not serve is refused with how to enable it."""
    import jsonschema

    from truss_files import __version__

    entry = store.write("lesson", "ci", "Retry flaky network tests once.")
    promote(store, entry.id)
    configure(store, memory=True, memory_write=False)
    session = ToolSession(store, run_id="M-polish")

    async def main() -> None:
        async with Client(build_server(session)) as client:
            info = client.server_info
            assert info is not None and __version__
            assert (info.name, info.version) == ("truss-files", __version__)
            listed = {t.name: t for t in (await client.list_tools()).tools}
            for name in ("memory_query", "memory_view", "read_memory"):
                assert listed[name].output_schema is not None, name
            found = await client.call_tool("memory_query", {"query": "flaky"})
            schema = listed["memory_query"].output_schema
            jsonschema.validate(found.structured_content, schema)  # what it declares, it returns
            viewed = await client.call_tool("memory_view", {"id": entry.id})
            jsonschema.validate(viewed.structured_content, listed["memory_view"].output_schema)
            refused = await client.call_tool("memory", {"command": "view", "path": "/memories"})
            assert refused.is_error
            text = refused.content[0].text  # type: ignore[union-attr]
            assert "not enabled" in text and "--memory-write" in text
            assert "memory_write = true" in text
            unknown = await client.call_tool("memory_frobnicate", {})
            assert unknown.is_error and "this store serves" in unknown.content[0].text  # type: ignore[union-attr]

    run(main)
    assert [e.id for e in store.list_entries()] == [entry.id]  # nothing was written


def test_schema_export_carries_output_schemas(store: MemoryStore) -> None:
    from truss_files.tools.registry import all_tools
    from truss_files.tools.schema import export

    exported = {t["name"]: t for t in export(all_tools(), "mcp")}
    assert "outputSchema" in exported["memory_query"] and "outputSchema" in exported["write_memory"]
    assert exported["memory"]["outputSchema"]["required"] == ["content"]  # a text result


def test_a_delete_hides_the_note_from_every_read_tool_of_the_run(store: MemoryStore) -> None:
    """One MCP session: after `memory delete`, memory view and memory_query (at every floor)
    agree that the note is gone for this run; another run still reads it until the
    tombstone is verified, then nobody does at the verified floor."""
    entry = store.write("lesson", "dns", "Pin the resolver before the build.")
    promote(store, entry.id)
    session = ToolSession(store, flags=["memory", "memory_write"], run_id="M-del")
    other = ToolSession(store, flags=["memory", "memory_write"], run_id="M-other")

    def ids(sess: ToolSession, floor: str) -> list[str]:
        found = sess.call("memory_query", {"query": "resolver build", "min_trust": floor})
        return [e["id"] for e in found.payload["entries"]]

    async def main() -> None:
        async with Client(build_server(session)) as client:
            for floor in ("verified", "unverified"):
                hit = await client.call_tool(
                    "memory_query", {"query": "resolver build", "min_trust": floor}
                )
                assert [e["id"] for e in hit.structured_content["entries"]] == [entry.id]  # type: ignore[index]
            gone = await client.call_tool(
                "memory", {"command": "delete", "path": "/memories/lesson/dns.md"}
            )
            assert not gone.is_error
            seen = await client.call_tool(
                "memory", {"command": "view", "path": "/memories/lesson/dns.md"}
            )
            assert seen.is_error
            for floor in ("verified", "stale", "unverified"):
                hit = await client.call_tool(
                    "memory_query", {"query": "resolver build", "min_trust": floor}
                )
                assert hit.structured_content["entries"] == [], floor  # type: ignore[index]
            by_id = await client.call_tool(
                "memory_view", {"id": entry.id, "min_trust": "unverified"}
            )
            assert by_id.structured_content["entries"] == []  # type: ignore[index]
            assert by_id.structured_content["filtered"] == [entry.id]  # type: ignore[index]

    run(main)
    assert other.call("memory_view", {"id": entry.id}).payload["entries"][0]["id"] == entry.id
    assert ids(other, "verified") == [entry.id]  # the tombstone is not verified yet
    # Written again by this run after its delete: visible to it again.
    again = session.call(
        "memory",
        {"command": "create", "path": "/memories/lesson/dns.md", "file_text": "Pin the resolver."},
    )
    assert again.ok
    [new] = [i for i in ids(session, "unverified") if i != entry.id]
    assert entry.id not in ids(session, "unverified")
    [stone] = [
        e for e in store.list_entries(key="dns") if e.body.startswith("<!-- truss:tombstone")
    ]
    promote(store, stone.id)
    assert ids(other, "verified") == []
    assert new in ids(session, "unverified")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_an_error_before_the_server_starts_goes_to_stderr_in_the_asked_format(
    tmp_path: Path, fmt: str
) -> None:
    """stdout belongs to MCP: a store that is not there is reported on stderr only, as a line
    for a person (text) or the error object (json), exit 1."""
    import subprocess

    exe = str(Path(sys.executable).with_name("truss-files"))
    missing = tmp_path / "no-store"
    done = subprocess.run(
        [exe, "mcp", "--store", str(missing), "--format", fmt],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and done.stdout == ""
    if fmt == "json":
        error = json.loads(done.stderr)["error"]
        assert error["code"] == "store" and str(missing) in error["message"]
    else:
        assert done.stderr.startswith(f"error: {missing}") and "truss-files init" in done.stderr
