"""The anthropic SDK's real clients, over real HTTP to a scripted Messages API on 127.0.0.1:
an ``AsyncAnthropic`` tool runner with ``TrussAsyncMemoryTool`` and ``read_tools``, a sync one
with ``read_tools``, and the README's SDK snippet run as written."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.tools_support import promote
from truss_files.facade import MemoryStore
from truss_files.model import Trust

anthropic = pytest.importorskip("anthropic")

from truss_files.faces.anthropic_adapter import (  # noqa: E402
    TrussAsyncMemoryTool,
    TrussMemoryTool,
    read_tools,
)


def message(n: int, blocks: list[dict[str, Any]], stop: str = "tool_use") -> dict[str, Any]:
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": "claude-scripted",
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def use(n: int, name: str, **tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": tool_input}


DONE = {"type": "text", "text": "Noted."}


class FakeMessagesAPI:
    """POST /v1/messages answered by the next scripted reply; every request body kept."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = replies
        self.requests: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                api.requests.append(body)
                if self.path.split("?")[0] != "/v1/messages" or len(api.requests) > len(
                    api.replies
                ):
                    self.send_response(400)
                    self.end_headers()
                    return
                data = json.dumps(api.replies[len(api.requests) - 1]).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def results(self) -> dict[str, dict[str, Any]]:
        found = {}
        for body in self.requests:
            for msg in body["messages"]:
                if msg["role"] == "user" and isinstance(msg["content"], list):
                    for block in msg["content"]:
                        if block.get("type") == "tool_result":
                            found[block["tool_use_id"]] = block
        return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api_factory() -> Iterator[Any]:
    made: list[FakeMessagesAPI] = []

    def make(replies: list[dict[str, Any]]) -> FakeMessagesAPI:
        made.append(FakeMessagesAPI(replies))
        return made[-1]

    yield make
    for api in made:
        api.close()


def _text(block: dict[str, Any]) -> str:
    content = block["content"]
    return content if isinstance(content, str) else "".join(c.get("text", "") for c in content)


def test_an_async_tool_runner_writes_through_the_async_memory_tool(
    store: MemoryStore, api_factory: Any, tmp_path: Path
) -> None:
    verified = store.write("decision", "db", "Use Postgres for the ledger.")
    promote(store, verified.id)
    api = api_factory(
        [
            message(
                1,
                [
                    use(
                        1,
                        "memory",
                        command="create",
                        path="/memories/lessons/ci.md",
                        file_text="Retry the network tests once.\n",
                    ),
                    use(2, "memory_query", query="ledger database"),
                ],
            ),
            message(2, [use(3, "memory_view", id=verified.id)]),
            message(3, [use(4, "memory", command="view", path="/memories/../identity")]),
            message(4, [DONE], stop="end_turn"),
        ]
    )
    memory = TrussAsyncMemoryTool(store)
    tools = [memory, *read_tools(memory, asynchronous=True)]

    async def main() -> Any:
        client = anthropic.AsyncAnthropic(api_key="test-key", base_url=api.url, max_retries=0)
        runner = client.beta.messages.tool_runner(
            model="claude-sonnet-4-5",
            max_tokens=1024,
            messages=[{"role": "user", "content": "Remember how we handle flaky CI."}],
            tools=tools,
        )
        return await runner.until_done()

    final = asyncio.run(main())
    assert final.content[0].text == "Noted."
    offered = {t["name"] for t in api.requests[0]["tools"]}
    assert offered == {"memory", "memory_query", "memory_view"}
    results = api.results()
    assert not results["toolu_1"].get("is_error"), results["toolu_1"]
    found = json.loads(_text(results["toolu_2"]))
    assert [e["id"] for e in found["entries"]] == [verified.id]
    assert "Use Postgres" in _text(results["toolu_3"])
    assert results["toolu_4"].get("is_error") is True  # a path outside /memories: refused
    # The memory file landed in the store, unverified, written by this run.
    fresh = MemoryStore(tmp_path / "store")
    (lesson,) = [e for e in fresh.iter_entries() if e.key == "ci"]
    assert lesson.trust is Trust.UNVERIFIED
    assert lesson.body.strip() == "Retry the network tests once."
    assert memory.run_id in str(lesson.provenance.produced_by)


def test_a_sync_runner_calls_the_read_tools_and_an_error_comes_back_as_is_error(
    store: MemoryStore, api_factory: Any
) -> None:
    api = api_factory(
        [
            message(1, [use(1, "memory_view", id="0123456789abcdef")]),
            message(2, [use(2, "memory_query", query=5)]),
            message(3, [DONE], stop="end_turn"),
        ]
    )
    client = anthropic.Anthropic(api_key="test-key", base_url=api.url, max_retries=0)
    runner = client.beta.messages.tool_runner(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        messages=[{"role": "user", "content": "What do we know?"}],
        tools=read_tools(store, run_id="R-read"),
    )
    runner.until_done()
    results = api.results()
    assert not results["toolu_1"].get("is_error")
    assert json.loads(_text(results["toolu_1"]))["missing"] == ["0123456789abcdef"]
    assert results["toolu_2"]["is_error"] is True  # a query that is not a string
    assert "query" in _text(results["toolu_2"])
    definitions = {t["name"]: t for t in api.requests[0]["tools"]}
    assert definitions["memory_query"]["input_schema"]["type"] == "object"
    assert "query" in definitions["memory_query"]["input_schema"]["properties"]


def test_the_sync_and_async_tools_refuse_the_other_runner(store: MemoryStore) -> None:
    client = anthropic.Anthropic(api_key="test-key", base_url="http://127.0.0.1:9")
    with pytest.raises(TypeError, match="async"):
        client.beta.messages.tool_runner(
            model="m",
            max_tokens=1,
            messages=[{"role": "user", "content": "x"}],
            tools=[TrussAsyncMemoryTool(store)],
        )
    with pytest.raises(TypeError, match="run is fixed"):
        read_tools(TrussMemoryTool(store), run_id="other")


def test_the_readme_sdk_snippet_runs_as_written(
    store: MemoryStore, api_factory: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The docs' block (agent tools and MCP), verbatim, with the client pointed at the fake API
    by the SDK's own environment variables and the store's path put in for /abs/path/to/store."""
    page = Path(__file__).resolve().parents[2] / "docs" / "agents" / "tools.md"
    readme = page.read_text()
    start = readme.index("```python\nimport anthropic\n")
    block = readme[start + len("```python\n") : readme.index("```", start + 10)]
    api = api_factory(
        [
            message(
                1,
                [
                    use(
                        1,
                        "memory",
                        command="create",
                        path="/memories/lessons/flaky-ci.md",
                        file_text="Retry once, then quarantine.\n",
                    )
                ],
            ),
            message(2, [DONE], stop="end_turn"),
        ]
    )
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("TRUSS_KEY", str(tmp_path / "operator_key"))  # the store's own key
    code = block.replace("/abs/path/to/store", str(tmp_path / "store"))
    scope: dict[str, Any] = {}
    exec(compile(code, "docs/agents/tools.md", "exec"), scope)
    keys = {e.key for e in MemoryStore(tmp_path / "store").iter_entries()}
    assert "flaky-ci" in keys
    assert api.results()["toolu_1"].get("is_error") is not True
