"""The run's prefix (context/): cache order, breakpoints, layers, run starts, repin, delta."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.support.tools_support import call, promote
from truss_files.context.assemble import build_context, repin
from truss_files.errors import BadCursor, NotFound, UsageError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.format.trailers import trailers
from truss_files.git.gitstore import Plan

SELF_V1 = "# Self\n\nTerse. Cites entry ids.\n"
SELF_V2 = "# Self\n\nTerse. Cites entry ids. Prefers tables.\n"


def set_file(store: MemoryStore, path: str, text: str, op: str = "identity") -> None:
    """An operator-signed change of one file (as `identity set` or `principal set` makes)."""
    message = f"truss: set {path}\n\n" + trailers(op=op)
    store._apply(lambda _s: Plan({path: text.encode()}, message), {"operator"})


def add_config(store: MemoryStore, extra: str) -> None:
    snap = store.snapshot()
    text = (snap.read("truss.toml") or b"").decode() + "\n" + extra + "\n"
    set_file(store, "truss.toml", text, op="config")


def goal(store: MemoryStore, key: str, body: str, *, verify: bool = True, **fields: Any) -> str:
    entry = store.write("goal", key, body, **fields)
    if verify:
        promote(store, entry.id)
    return entry.id


# -- shape, order and breakpoints ------------------------------------------------------------


def test_json_prefix_has_the_contract_keys_and_layers_in_cache_order(store: MemoryStore) -> None:
    set_file(store, "identity/self.md", SELF_V1)
    set_file(store, "principals/alice.md", "# Alice\n\nWants short answers.\n", op="principal")
    data = store.context("R1", principal="alice").render("json")
    assert list(data)[:3] == ["run", "started_at", "new_run"]
    assert {"tools", "system", "messages", "cursor", "tokens"} <= set(data)
    assert [b["layer"] for b in data["system"]] == ["L0 core", "L0 self", "L1 principal", "memory"]
    core = (store.snapshot().read("identity/core.md") or b"").decode()
    assert data["system"][0]["text"] == core and data["system"][1]["text"] == SELF_V1
    assert data["system"][2]["text"].startswith("# Alice")
    assert [t["name"] for t in data["tools"]] == [
        "memory_query",
        "memory_view",
        "read_memory",
        "memory_ask",
    ]
    assert set(data["tokens"]) >= {"L0", "L1", "L3", "L4"}
    assert data["tokens"]["L0"] > 0 and data["tokens"]["L1"] > 0
    assert data["tokens"]["total"] == sum(v for k, v in data["tokens"].items() if k != "total")


def test_a_missing_layer_is_empty_and_said_so(store: MemoryStore) -> None:
    data = store.context("R1", principal="nobody").render("json")
    by_layer = {b["layer"]: b for b in data["system"]}
    # init writes both identity templates; a principal nobody wrote is the missing layer.
    assert not by_layer["L0 self"]["missing"] and by_layer["L0 self"]["text"]
    assert by_layer["L1 principal"] == {
        "layer": "L1 principal",
        "path": "principals/nobody.md",
        "text": "",
        "missing": True,
    }
    assert data["tokens"]["L1"] == 0
    # The API shapes leave an empty block out (an empty text block is refused by the API).
    anthropic = store.context("R1").render("anthropic")
    assert all(block["text"] for block in anthropic["system"])


def test_anthropic_breakpoints_sit_on_the_last_tool_and_the_last_system_block(
    store: MemoryStore,
) -> None:
    set_file(store, "identity/self.md", SELF_V1)
    goal(store, "ship", "Ship the release notes.")
    data = store.context("R1", gates=["memory", "memory_write"]).render("anthropic")
    marks = [i for i, t in enumerate(data["tools"]) if "cache_control" in t]
    assert marks == [len(data["tools"]) - 1]
    assert data["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    marks = [i for i, b in enumerate(data["system"]) if "cache_control" in b]
    assert marks == [len(data["system"]) - 1]
    # The goal ledger comes after both breakpoints and carries none.
    assert "cache_control" not in json.dumps(data["messages"])
    assert data["messages"][0]["content"][0]["text"].startswith("Goal ledger")


def test_anthropic_params_pass_the_sdks_own_types(store: MemoryStore) -> None:
    """Differential: the installed anthropic SDK's request types accept the params as given,
    and every key we send is one those types define."""
    pydantic = pytest.importorskip("pydantic")
    types = pytest.importorskip("anthropic.types")
    create = pytest.importorskip("anthropic.types.message_create_params")
    set_file(store, "identity/self.md", SELF_V1)
    goal(store, "ship", "Ship the release notes.")
    data = store.context("R1", gates=["memory", "memory_write"]).render("anthropic")
    params = {
        "model": "test-model",
        "max_tokens": 256,
        **{k: data[k] for k in ("tools", "system", "messages")},
    }
    adapter = pydantic.TypeAdapter(create.MessageCreateParamsNonStreaming)
    adapter.validate_python(params)

    def keys(cls: Any) -> set[str]:
        return set(cls.__required_keys__) | set(cls.__optional_keys__)

    for tool in data["tools"]:
        cls = types.MemoryTool20250818Param if tool.get("type") else types.ToolParam
        assert set(tool) <= keys(cls), (tool.get("name"), set(tool) - keys(cls))
        assert keys(types.ToolParam) >= {"name", "input_schema"}
    for block in data["system"]:
        assert set(block) <= keys(types.TextBlockParam)
    for message in data["messages"]:
        assert set(message) <= keys(types.UserMessageParam)
        for block in message["content"]:
            assert set(block) <= keys(types.TextBlockParam)
    assert set(data["tools"][-1]["cache_control"]) <= keys(types.CacheControlEphemeralParam)
    # What the SDK puts on the wire is what we built: a real client, a local server.
    sent = _through_the_sdk(params)
    assert sent == json.loads(json.dumps(params))


def _through_the_sdk(params: dict[str, Any]) -> Any:
    """POST ``params`` with the anthropic SDK's client to a local server; the body it got."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    anthropic = pytest.importorskip("anthropic")
    bodies: list[Any] = []
    reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": params["model"],
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            length = int(self.headers["content-length"])
            bodies.append(json.loads(self.rfile.read(length)))
            payload = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = anthropic.Anthropic(
            api_key="test", base_url=f"http://127.0.0.1:{server.server_port}", max_retries=0
        )
        client.messages.create(**params)
    finally:
        server.shutdown()
        server.server_close()
    [body] = bodies
    return body


def test_openai_format_is_the_chat_completions_shape(store: MemoryStore) -> None:
    set_file(store, "identity/self.md", SELF_V1)
    goal(store, "ship", "Ship the release notes.")
    data = store.context("R1").render("openai")
    assert "system" not in data
    first, second = data["messages"]
    assert first["role"] == "system" and SELF_V1 in first["content"]
    assert isinstance(first["content"], str)
    assert second == {"role": "user", "content": second["content"]}
    assert second["content"].startswith("Goal ledger")
    for tool in data["tools"]:
        assert tool["type"] == "function"
        assert set(tool["function"]) == {"name", "description", "parameters"}
        assert "." not in tool["function"]["name"]


def test_memory_is_pulled_never_pushed(store: MemoryStore) -> None:
    lesson = store.write("lesson", "ci-flakes", "Retry the network tests exactly once.")
    promote(store, lesson.id)
    text = json.dumps(store.context("R1").render("json"))
    assert "Retry the network tests" not in text and lesson.id[:12] not in text
    note = store.context("R1").render("json")["system"][-1]["text"]
    assert "memory_query" in note and "one lesson per entry" not in note  # no write tool
    with_write = store.context("R2", gates=["memory_write"]).render("json")
    assert "one lesson per entry, a one-line summary first" in with_write["system"][-1]["text"]


def test_the_memory_note_is_configurable(store: MemoryStore) -> None:
    add_config(store, '[context]\ninstruction = "Memory: ask memory_query first."')
    data = store.context("R1").render("json")
    assert data["system"][-1]["text"] == "Memory: ask memory_query first."


# -- L3 and L4 -------------------------------------------------------------------------------


def test_goal_ledger_holds_verified_live_goals_only_pinned(store: MemoryStore) -> None:
    first = goal(store, "ship", "Ship the release notes.")
    pending = goal(store, "later", "An unverified goal.", verify=False)
    old = goal(store, "docs", "Write docs v1.")
    new = goal(store, "docs", "Write docs v2.")  # verified-wins: supersedes v1
    data = store.context("R1").render("json")
    [ledger] = [m for m in data["messages"] if m["layer"] == "L3"]
    assert ledger["pinned"] is True and ledger["ids"] == [first, new]
    text = ledger["content"][0]["text"]
    assert "Write docs v2." in text and "Write docs v1." not in text
    assert pending not in text and old[:12] not in text


def test_the_tail_is_the_runs_own_notes_bounded_and_never_a_goal(store: MemoryStore) -> None:
    add_config(store, "[context]\nscratch_tail = 3")
    for n in range(5):
        out = call(
            store,
            "write_memory",
            {"kind": "scratch", "key": f"s{n}", "body": f"note {n}"},
            run_id="R1",
        )
        assert out.ok, out.error
    call(store, "write_memory", {"kind": "goal", "key": "g", "body": "my own goal"}, run_id="R1")
    call(store, "write_memory", {"kind": "lesson", "key": "o", "body": "other run"}, run_id="R2")
    data = store.context("R1").render("json")
    [tail] = [m for m in data["messages"] if m["layer"] == "L4"]
    text = tail["content"][0]["text"]
    assert "note 2" in text and "note 4" in text and "note 1" not in text
    assert text.index("note 2") < text.index("note 4")  # newest last
    assert "my own goal" not in json.dumps(data) and "other run" not in text
    assert tail["pinned"] is False and data["tokens"]["L4"] > 0


# -- run boundaries --------------------------------------------------------------------------


def test_an_amendment_reaches_the_next_run_not_the_running_one(store: MemoryStore) -> None:
    set_file(store, "identity/self.md", SELF_V1)
    before = store.context("R1").stable_bytes()
    set_file(store, "identity/self.md", SELF_V2)
    again = store.context("R1")
    assert again.new_run is False and again.stable_bytes() == before
    assert again.render("json")["system"][1]["text"] == SELF_V1
    later = store.context("R2")
    assert later.new_run is True and later.render("json")["system"][1]["text"] == SELF_V2


def test_a_started_run_keeps_its_tools_when_truss_toml_changes(store: MemoryStore) -> None:
    before = store.context("R1").render("anthropic")["tools"]
    add_config(store, "[policy.x]\n")  # any change: then a tools change
    text = (store.snapshot().read("truss.toml") or b"").decode()
    set_file(
        store,
        "truss.toml",
        text.replace("memory_write = false", "memory_write = true"),
        op="config",
    )
    assert store.context("R1").render("anthropic")["tools"] == before
    assert len(store.context("R2").render("anthropic")["tools"]) > len(before)


def test_a_run_cannot_switch_principal(store: MemoryStore) -> None:
    store.context("R1", principal="alice")
    assert store.context("R1").start.principal == "alice"  # left out: the recorded one
    with pytest.raises(UsageError, match="started with principal 'alice'"):
        store.context("R1", principal="bob")


@pytest.mark.parametrize("bad", ["../x", "a/b", "x.md", "", "..", "a\nb"])
def test_a_principal_names_one_file(store: MemoryStore, bad: str) -> None:
    with pytest.raises(UsageError, match="principal"):
        store.context("R1", principal=bad)


# -- repin -----------------------------------------------------------------------------------


def test_repin_answers_true_exactly_on_positive_multiples(store: MemoryStore) -> None:
    add_config(store, "[context]\nrepin_every = 3")
    goal(store, "ship", "Ship it.")
    store.context("R1")
    answers = {t: repin(store, "R1", t)["repin"] for t in range(0, 10)}
    assert [t for t, due in answers.items() if due] == [3, 6, 9]
    due = repin(store, "R1", 6)
    assert due["turn"] == 6 and "Ship it." in due["messages"][0]["content"][0]["text"]
    assert repin(store, "R1", 4)["messages"] == []


def test_repin_of_a_run_that_never_started_is_refused(store: MemoryStore) -> None:
    with pytest.raises(NotFound, match="has not started"):
        repin(store, "R9", 10)


# -- delta -----------------------------------------------------------------------------------


def test_delta_names_what_changed_in_verified_l2_since_the_cursor(store: MemoryStore) -> None:
    kept = store.write("lesson", "a", "An old lesson.")
    promote(store, kept.id)
    doomed = store.write("fact", "db", "Postgres 15.")
    promote(store, doomed.id)
    cursor = store.context("R1").cursor

    fresh = store.write("lesson", "b", "A new lesson.")
    promote(store, fresh.id)
    successor = store.write("fact", "db", "Postgres 16.")
    promote(store, successor.id)  # supersedes doomed: verified -> stale
    store.demote(kept.id, "contradicted by the new CI")
    store.write("lesson", "c", "Unverified: never in a delta.")
    goal(store, "ship", "Goals are L3, re-pinned by context.")

    delta = store.delta_since(cursor)
    got = {(c.id, c.from_, c.to) for c in delta.changes}
    assert got == {
        (fresh.id, None, "verified"),
        (successor.id, None, "verified"),
        (doomed.id, "verified", "stale"),
        (kept.id, "verified", "stale"),
    }
    assert delta.to_dict()["changes"][0].keys() == {"id", "kind", "key", "from", "to"}
    assert store.delta_since(delta.cursor).changes == ()


def test_a_reverted_promotion_is_a_change_back_from_verified(store: MemoryStore) -> None:
    entry = store.write("lesson", "a", "A lesson.")
    promote(store, entry.id)
    cursor = store.context("R1").cursor
    last = store.git.tip()
    assert last is not None
    promoted = [c for c in store.log(entry.id) if c.op == "promote"][0].commit
    store.revert(promoted)
    [change] = store.delta_since(cursor).changes
    assert (change.id, change.from_, change.to) == (entry.id, "verified", "unverified")


# -- the MemoryStore surface -----------------------------------------------------------------


def test_memory_store_offers_query_and_view(store: MemoryStore) -> None:
    entry = store.write("lesson", "ci", "Retry flaky network tests once.")
    hidden = store.write("lesson", "ci2", "Flaky network tests: unverified guess.")
    promote(store, entry.id)
    result = store.query("flaky network tests")
    assert [h.entry.id for h in result.hits] == [entry.id]
    assert [e.id for e in store.view([entry.id, hidden.id])] == [entry.id]
    assert {e.id for e in store.view([entry.id[:10], hidden.id], min_trust="unverified")} == {
        entry.id,
        hidden.id,
    }


# -- the CLI ---------------------------------------------------------------------------------


def _cli(store: MemoryStore, *args: str) -> Any:
    root = str(store.git.workdir)
    return CliRunner().invoke(cli, ["--store", root, *args], catch_exceptions=False)


def test_cli_context_repin_and_delta(store: MemoryStore, operator_key: Any, tmp_path: Path) -> None:
    goal(store, "ship", "Ship it.")
    out = _cli(
        store,
        "--key",
        str(tmp_path / "operator_key"),
        "context",
        "--run",
        "R1",
        "--format",
        "anthropic",
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    repinned = json.loads(_cli(store, "context", "repin", "--run", "R1", "--turn", "10").output)
    assert repinned["repin"] is True and repinned["turn"] == 10 and repinned["messages"]
    entry = store.write("lesson", "a", "A lesson.")
    promote(store, entry.id)
    done = _cli(store, "delta", "--since", data["cursor"])
    assert done.exit_code == 0, done.output
    assert [c["id"] for c in json.loads(done.output)["changes"]] == [entry.id]


@pytest.mark.parametrize(
    "make", [lambda c: "garbage", lambda c: c[:-1] + ("0" if c[-1] != "0" else "1")]
)
def test_cli_a_bad_cursor_is_exit_1_with_a_json_error(
    store: MemoryStore, make: Callable[[str], str]
) -> None:
    cursor = store.context("R1").cursor
    out = _cli(store, "delta", "--since", make(cursor))
    assert out.exit_code == 1
    error = json.loads(out.output)["error"]
    assert error["code"] == "bad_cursor" and "cursor" in error["message"]
    with pytest.raises(BadCursor):
        store.delta_since(make(cursor))


def test_cli_context_needs_a_run(store: MemoryStore) -> None:
    out = _cli(store, "context")
    assert out.exit_code == 2 and "--run" in out.output


def test_build_context_and_store_context_agree(store: MemoryStore) -> None:
    a = build_context(store, "R1").stable_bytes("openai")
    b = store.context("R1").stable_bytes("openai")
    assert a == b and b"memory_query" in a


@pytest.mark.parametrize("turn", ["-1", "abc", "1e3", ""])
def test_cli_repin_refuses_a_turn_that_is_no_count(store: MemoryStore, turn: str) -> None:
    store.context("R1")
    out = _cli(store, "context", "repin", "--run", "R1", "--turn", turn)
    assert out.exit_code == 2 and "--turn" in out.output


def test_cli_context_formats_are_refused_by_name(store: MemoryStore) -> None:
    out = _cli(store, "context", "--run", "R1", "--format", "yaml")
    assert out.exit_code == 2 and "yaml" in out.output
    with pytest.raises(UsageError, match="unknown context format"):
        store.context("R1").render("yaml")
