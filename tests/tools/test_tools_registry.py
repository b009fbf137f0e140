"""Registration: which tools a store serves, per truss.toml switches, flags and allow_tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tools_support import cli, configure, out
from truss_files.facade import MemoryStore
from truss_files.runs.runcontext import RunContext
from truss_files.signing.trustpolicy import StoreConfig
from truss_files.tools import Serving, ToolSession, all_tools, lookup
from truss_files.tools.schema import check_input, export

READS = {"memory_query", "memory_view", "read_memory", "memory.ask"}
WRITES = {"memory", "write_memory", "memory.train"}
ALL = READS | WRITES


def config(memory: bool | None, memory_write: bool | None, allow: list[str] | None) -> StoreConfig:
    lines = ["[tools]"]
    if memory is not None:
        lines.append(f"memory = {str(memory).lower()}")
    if memory_write is not None:
        lines.append(f"memory_write = {str(memory_write).lower()}")
    if allow is not None:
        lines += ["[policy]", "allow_tools = [" + ", ".join(f'"{a}"' for a in allow) + "]"]
    return StoreConfig.parse("\n".join(lines).encode())


# (memory, memory_write, flags, allow_tools) -> served
COMBINATIONS = [
    (None, None, [], None, set()),  # both default off without a config line
    (True, None, [], None, READS),
    (False, False, ["memory"], None, READS),  # --memory-tools
    (False, False, ["memory_write"], None, WRITES),  # --memory-write opens no read tool
    (False, True, [], None, WRITES),
    (True, True, [], None, ALL),
    (False, False, ["memory", "memory_write"], None, ALL),
    (True, True, [], ["memory_query", "memory"], {"memory_query", "memory"}),
    (True, False, [], ["memory_query", "memory"], {"memory_query"}),  # allow never opens a gate
    (False, False, ["memory"], ["memory_view"], {"memory_view"}),
    (True, True, [], [], set()),  # an empty allow list serves nothing
    (True, True, [], ["memory*"], set()),  # exact names, no patterns
    (True, True, [], ["memory_ask", "memory.train"], {"memory.ask", "memory.train"}),
]


@pytest.mark.parametrize(("memory", "write", "flags", "allow", "served"), COMBINATIONS)
def test_each_combination_serves_exactly(
    memory: bool | None,
    write: bool | None,
    flags: list[str],
    allow: list[str] | None,
    served: set[str],
) -> None:
    serving = Serving.resolve(config(memory, write, allow), flags)
    assert {t.name for t in serving.served()} == served
    for tool in all_tools():
        if tool.name in served:
            assert serving.require(tool.name) is tool
        else:
            with pytest.raises(Exception) as caught:
                serving.require(tool.name)
            message = str(caught.value)
            if tool.gate == "identity":
                # No flag opens the identity tool: only the store's signed truss.toml.
                assert "identity = true" in message and "--" not in message
            elif tool.gate not in serving.gates:
                flag = "--memory-tools" if tool.gate == "memory" else "--memory-write"
                line = "memory = true" if tool.gate == "memory" else "memory_write = true"
                assert flag in message and line in message
            else:
                assert "allow_tools" in message and f'"{tool.name}"' in message


def test_read_gate_never_opens_a_write_path() -> None:
    serving = Serving.resolve(config(True, False, None), ["memory"])
    writes = [t for t in all_tools() if not t.annotations.read_only]
    assert {t.name for t in writes} == WRITES | {"identity_propose"}
    assert not any(serving.serves(t) for t in writes)
    assert {t.name: t.gate for t in writes if t.gate != "memory_write"} == {
        "identity_propose": "identity"
    }


def test_unknown_tool_names_what_is_served() -> None:
    serving = Serving.resolve(config(True, False, None))
    with pytest.raises(Exception, match="no tool named 'memory_delete'.*memory_query"):
        serving.require("memory_delete")


def test_bad_config_values_are_config_errors() -> None:
    with pytest.raises(Exception, match="tools.memory must be true or false"):
        Serving.resolve(StoreConfig.parse(b'[tools]\nmemory = "yes"\n'))
    with pytest.raises(Exception, match="allow_tools must be a list"):
        Serving.resolve(StoreConfig.parse(b'[policy]\nallow_tools = "memory_query"\n'))


def test_provider_spelling_is_accepted() -> None:
    for tool in all_tools():
        assert lookup(tool.provider_name) is tool
        assert "." not in tool.provider_name


def test_each_tool_is_defined_once() -> None:
    names = [t.name for t in all_tools()]
    assert len(names) == len(set(names))
    assert names[:5] == ["memory_query", "memory_view", "read_memory", "memory", "write_memory"]
    for tool in all_tools():
        assert tool.description and tool.input_schema["type"] == "object"
        assert tool.annotations.open_world is False
        assert tool.annotations.destructive is False


def test_input_checker_words_errors_for_a_model() -> None:
    schema = lookup("memory_query").input_schema  # type: ignore[union-attr]
    with pytest.raises(Exception, match="`limit` must be an integer"):
        check_input(schema, {"query": "x", "limit": "3"})
    with pytest.raises(Exception, match="`limit` must be between 1 and 1000"):
        check_input(schema, {"query": "x", "limit": 0})
    with pytest.raises(Exception, match="unknown field.*'qeury'.*takes: query"):
        check_input(schema, {"qeury": "x"})
    with pytest.raises(Exception, match="`min_trust` must be one of: verified, stale, unverified"):
        check_input(schema, {"query": "x", "min_trust": "rejected"})
    with pytest.raises(Exception, match="must be a JSON object"):
        check_input(schema, ["x"])


def test_export_formats() -> None:
    tools = [t for t in all_tools() if t.name in ALL]
    anthropic = {d.get("name"): d for d in export(tools, "anthropic")}
    assert anthropic["memory"] == {"type": "memory_20250818", "name": "memory"}
    assert set(anthropic["memory_query"]) == {"name", "description", "input_schema"}
    openai = export(tools, "openai")
    assert all(
        d["type"] == "function" and set(d["function"]) >= {"name", "parameters"} for d in openai
    )
    mcp = {d["name"]: d for d in export(tools, "mcp")}
    assert mcp["memory_query"]["annotations"]["readOnlyHint"] is True
    assert mcp["memory"]["annotations"]["readOnlyHint"] is False
    assert mcp["memory"]["annotations"]["destructiveHint"] is False
    assert all(d["annotations"]["openWorldHint"] is False for d in mcp.values())
    assert mcp["memory"]["inputSchema"]["properties"]["command"]["enum"] == [
        "view",
        "create",
        "str_replace",
        "insert",
        "delete",
        "rename",
    ]


@pytest.mark.parametrize(("memory", "write", "flags", "allow", "served"), COMBINATIONS)
def test_without_a_run_context_the_context_tools_are_neither_served_nor_run(
    memory: bool | None,
    write: bool | None,
    flags: list[str],
    allow: list[str] | None,
    served: set[str],
) -> None:
    """Every gate and allow_tools combination, served by a process with no run context:
    the same tools less memory.ask and memory.train, which are refused as they refuse
    themselves without one (no_run_context), after the gate and allow_tools checks."""
    serving = Serving.resolve(config(memory, write, allow), flags, context=False)
    needing = {t.name for t in all_tools() if t.needs_context}
    assert needing == {"memory.ask", "memory.train"}
    assert {t.name for t in serving.served()} == served - needing
    for name in needing & served:
        with pytest.raises(Exception) as caught:
            serving.require(name)
        assert getattr(caught.value, "code", None) == "no_run_context"
        assert "--run-context FILE" in str(caught.value)
    with_context = Serving.resolve(config(memory, write, allow), flags, context=True)
    assert {t.name for t in with_context.served()} == served


def test_a_context_without_task_or_enterprise_serves_no_context_tool(store: MemoryStore) -> None:
    for partial in (RunContext(task="T-1"), RunContext(enterprise="acme"), RunContext()):
        session = ToolSession(store, flags=["memory", "memory_write"], context=partial)
        names = {t.name for t in session.served()}
        assert names == ALL - {"memory.ask", "memory.train"}
        for name in ("memory_ask", "memory.train"):
            refused = session.call(name, {"purpose": "x"})
            assert refused.error is not None and refused.error["code"] == "no_run_context"


# -- the same switches through the store and the CLI --------------------------------------


def test_init_serves_read_tools_and_not_the_write_binding(store: MemoryStore) -> None:
    session = ToolSession(store)
    assert {t.name for t in session.served()} == READS - {"memory.ask"}  # no run context
    with_context = ToolSession(store, context=RunContext(task="T-1", enterprise="acme"))
    assert {t.name for t in with_context.served()} == READS
    refused = session.call("memory", {"command": "view", "path": "/memories"})
    assert refused.error is not None and refused.error["code"] == "tool_not_served"
    assert "memory_write = true" in refused.error["message"]


@pytest.mark.parametrize(
    ("memory", "write", "flags", "allow", "served"),
    [c for c in COMBINATIONS if c[0] is not None and c[1] is not None],
)
def test_cli_tool_and_schema_follow_the_store(
    store: MemoryStore,
    tmp_path: Path,
    memory: bool,
    write: bool,
    flags: list[str],
    allow: list[str] | None,
    served: set[str],
) -> None:
    configure(store, memory=memory, memory_write=write, allow_tools=allow)
    switches = [{"memory": "--memory-tools", "memory_write": "--memory-write"}[f] for f in flags]
    path = str(store.git.workdir)
    for fmt in ("anthropic", "openai", "mcp"):
        done = cli(["--store", path, "tools", "schema", "--format", fmt, *switches])
        assert done.exit_code == 0, done.output
        defs = __import__("json").loads(done.stdout)
        names = {d.get("name") or d.get("function", {}).get("name") for d in defs}
        assert names == {name.replace(".", "_") for name in served}  # provider spellings
    inputs = {
        "memory_query": {"query": "x"},
        "memory_view": {"id": "0" * 32},
        "read_memory": {"query": "x"},
        "memory": {"command": "view", "path": "/memories"},
        "write_memory": {"kind": "fact", "key": "k", "body": "b"},
    }
    key = str(tmp_path / "operator_key")
    for name, tool_input in inputs.items():
        done = cli(["--store", path, "tool", name, *switches], tool_input, key=key)
        result = out(done)
        if name in served:
            assert done.exit_code == 0, result
            assert "error" not in result
        else:
            assert done.exit_code == 1
            assert result["error"]["code"] == "tool_not_served"
