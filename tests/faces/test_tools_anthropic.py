"""The anthropic adapter, driven by the SDK's own tool runner against a scripted Messages API.

No network: the SDK's HTTP client gets a transport that answers each request with the next
scripted assistant message and records what the runner sent back (the tool_result blocks).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.tools_support import promote
from truss_files.facade import MemoryStore
from truss_files.model import Trust

anthropic = pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")

from truss_files.faces.anthropic_adapter import TrussMemoryTool  # noqa: E402


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


def use(n: int, **tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{n}", "name": "memory", "input": tool_input}


class ScriptedAPI:
    """Answers POST /v1/messages with scripted replies; keeps every request body."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = replies
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Any:
        self.requests.append(json.loads(request.content))
        return httpx2.Response(200, json=self.replies[len(self.requests) - 1])

    def results(self) -> dict[str, dict[str, Any]]:
        """Every tool_result the runner sent, by tool_use_id."""
        found = {}
        for body in self.requests:
            for msg in body["messages"]:
                if msg["role"] == "user" and isinstance(msg["content"], list):
                    for block in msg["content"]:
                        if block.get("type") == "tool_result":
                            found[block["tool_use_id"]] = block
        return found


def test_sdk_tool_runner_dispatches_to_the_store(store: MemoryStore) -> None:
    verified = store.write("decision", "db", "Use Postgres.")
    promote(store, verified.id)
    api = ScriptedAPI(
        [
            message(1, [use(1, command="view", path="/memories")]),
            message(
                2,
                [
                    use(
                        2, command="create", path="/memories/lessons/ci.md", file_text="Retry once."
                    ),
                    use(
                        3,
                        command="str_replace",
                        path="/memories/lessons/ci.md",
                        old_str="once",
                        new_str="twice",
                    ),
                ],
            ),
            message(
                3,
                [
                    use(4, command="view", path="/memories/lessons/ci.md", view_range=[1, -1]),
                    use(5, command="view", path="/memories/../etc/passwd"),
                    use(6, command="delete", path="/memories/decision/db.md"),
                    use(
                        7,
                        command="rename",
                        old_path="/memories/lessons/ci.md",
                        new_path="/memories/playbooks/ci.md",
                    ),
                ],
            ),
            message(4, [{"type": "text", "text": "Done."}], stop="end_turn"),
        ]
    )
    client = anthropic.Anthropic(
        api_key="test-key",
        base_url="http://scripted.invalid",
        http_client=httpx2.Client(transport=httpx2.MockTransport(api)),
        max_retries=0,
    )
    tool = TrussMemoryTool(store, run_id="sdk-run")  # the one line an SDK user writes
    assert tool.name == "memory" and tool.to_dict() == {"type": "memory_20250818", "name": "memory"}
    runner = client.beta.messages.tool_runner(
        model="claude-scripted",
        max_tokens=256,
        messages=[{"role": "user", "content": "Remember how we handle flaky CI."}],
        tools=[tool],
    )
    final = runner.until_done()
    assert final.content[0].text == "Done."  # type: ignore[union-attr]
    assert api.requests[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]

    results = api.results()
    assert set(results) == {f"toolu_{n}" for n in range(1, 8)}
    assert "/memories/decision/db.md" in results["toolu_1"]["content"]
    assert results["toolu_2"]["content"] == "File created successfully at: /memories/lessons/ci.md"
    assert results["toolu_3"]["content"].startswith("The memory file has been edited.")
    assert "     1\tRetry twice." in results["toolu_4"]["content"]
    assert "[unverified]" in results["toolu_4"]["content"]
    bad = results["toolu_5"]
    assert bad["is_error"] is True
    assert bad["content"] == "Path /memories/../etc/passwd would escape /memories directory"
    assert results["toolu_6"]["content"] == "Successfully deleted /memories/decision/db.md"
    assert results["toolu_7"]["content"] == (
        "Successfully renamed /memories/lessons/ci.md to /memories/playbooks/ci.md"
    )
    assert not any(r.get("is_error") for k, r in results.items() if k != "toolu_5")

    # Every write landed unverified, produced by the adapter's run; nothing was destroyed.
    written = [e for e in store.list_entries() if e.id != verified.id]
    assert written and all(e.trust is Trust.UNVERIFIED for e in written)
    assert all((e.provenance.produced_by or "").startswith("run:sdk-run/") for e in written)
    assert store.get(verified.id).trust is Trust.VERIFIED


def test_adapter_respects_allow_tools(store: MemoryStore) -> None:
    from tests.support.tools_support import configure

    configure(store, allow_tools=["memory_query"])
    tool = TrussMemoryTool(store)
    with pytest.raises(anthropic.lib.tools.ToolError, match="allow_tools"):
        tool.call({"command": "view", "path": "/memories"})


@pytest.mark.spawns  # the eager panel runs a shell check
def test_adapter_applies_an_eager_policy_from_its_contract(
    store: MemoryStore, tmp_path: Any, define_checks: Any
) -> None:
    from tests.support.tools_support import configure

    configure(store, memory_write=True)  # lazy in the store itself
    define_checks(store, {"holds": "true"})  # the contract names a check truss.toml defines
    contract = tmp_path / "contract.toml"
    contract.write_text('[policy]\nverification = "eager"\n[panel.reviewers]\nlesson = ["holds"]\n')
    tool = TrussMemoryTool(store, run_id="sdk-eager", contract=contract)
    text = tool.call({"command": "create", "path": "/memories/lessons/ci.md", "file_text": "x"})
    assert text == "File created successfully at: /memories/lessons/ci.md"  # the SDK's words
    [entry] = store.list_entries(key="ci")
    assert entry.trust is Trust.VERIFIED


def test_adapter_expands_a_home_relative_store(
    store: MemoryStore, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`TrussMemoryTool("~/…")` as the README writes it: the store under HOME is found."""
    entry = store.write("lesson", "ci", "Retry flaky network tests once.")
    promote(store, entry.id)
    monkeypatch.setenv("HOME", str(tmp_path))  # the fixture's store is tmp_path/store
    tool = TrussMemoryTool("~/store", run_id="sdk-home")
    text = tool.call({"command": "view", "path": "/memories/lesson/ci.md"})
    assert text == (
        "Here's the content of /memories/lesson/ci.md with line numbers:\n"
        "     1\tRetry flaky network tests once."
    )
