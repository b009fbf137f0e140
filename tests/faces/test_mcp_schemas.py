"""Over stdio, through the mcp SDK's own client: every tool declares an outputSchema, and
every call -- a success, an invalid input, a refusal, a tool not served -- answers with
structuredContent (the result, valid against that schema, or ``{"error": {code, message}}``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.tools_support import promote
from truss_files.facade import MemoryStore

mcp = pytest.importorskip("mcp")
jsonschema = pytest.importorskip("jsonschema")

from mcp import Client, StdioServerParameters  # noqa: E402

ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string", "minLength": 1},
            },
            "required": ["code", "message"],
        }
    },
    "required": ["error"],
}


def test_every_tool_declares_and_keeps_its_output_schema_over_stdio(
    store: MemoryStore, tmp_path: Path
) -> None:
    entry = store.write("fact", "db", "The database is postgres 16.")
    promote(store, entry.id)
    context = tmp_path / "ctx.json"
    context.write_text(
        json.dumps(
            {"taskId": "T-1", "memberId": "m-1", "teamId": "platform", "enterpriseId": "acme"}
        )
    )
    env = {k: v for k, v in os.environ.items() if k.startswith(("GIT_", "HOME", "XDG_", "PATH"))}
    env["TRUSS_KEY"] = str(tmp_path / "operator_key")
    params = StdioServerParameters(
        command=str(Path(sys.executable).with_name("truss-files")),
        args=["mcp", "--store", str(store.git.workdir), "--memory-write", "--run", "S-schemas"]
        + ["--run-context", str(context)],
        env=env,
    )
    calls: dict[str, dict[str, Any]] = {
        "memory_query": {"query": "postgres"},
        "memory_view": {"id": entry.id},
        "read_memory": {"query": "postgres"},
        "memory": {"command": "view", "path": "/memories"},
        "write_memory": {"kind": "fact", "key": "cache", "body": "Redis 7."},
        "memory_train": {
            "body": "The preview URL is posted on the PR.",
            "source": {"eventId": "evt_1", "revision": "1"},
        },
        "memory_ask": {"purpose": "what is the database"},
    }

    async def main() -> None:
        async with Client(params) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert set(listed) == set(calls)
            for name, tool in listed.items():
                schema = tool.output_schema
                assert schema is not None and schema["type"] == "object", name
                jsonschema.Draft202012Validator.check_schema(schema)
            for name, arguments in calls.items():
                done = await client.call_tool(name, arguments)
                assert not done.is_error, (name, done.content)
                assert done.structured_content is not None, name
                jsonschema.validate(done.structured_content, listed[name].output_schema)
            asked = await client.call_tool("memory_ask", calls["memory_ask"])
            assert asked.structured_content is not None
            assert asked.structured_content["status"] in ("answered", "insufficient_evidence")
            text = await client.call_tool("memory", calls["memory"])
            assert text.structured_content == {"content": text.content[0].text}  # type: ignore[union-attr]

            failures = {
                "invalid input": ("memory_query", {"query": 5}),
                "a refusal": ("memory", {"command": "view", "path": "/etc/passwd"}),
                "an unknown tool": ("memory_frobnicate", {}),
                "an ask with a number for its purpose": ("memory_ask", {"purpose": 5}),
            }
            for why, (name, arguments) in failures.items():
                failed = await client.call_tool(name, arguments)
                assert failed.is_error, why
                assert failed.structured_content is not None, why
                jsonschema.validate(failed.structured_content, ERROR)
                message = failed.structured_content["error"]["message"]
                assert failed.content[0].text == message, why  # type: ignore[union-attr]

            # A refusal of train's own rules is a reply (status failed), still in its schema.
            refused = await client.call_tool("memory_train", {"body": ""})
            assert not refused.is_error and refused.structured_content is not None
            assert refused.structured_content["status"] == "failed"
            jsonschema.validate(refused.structured_content, listed["memory_train"].output_schema)

    anyio.run(main)
