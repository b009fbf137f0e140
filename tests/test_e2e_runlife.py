"""A run's life end to end, hermetic: a scripted Messages API on 127.0.0.1, driven through the
real ``anthropic`` client, runs an orchestrator with two child runs over several turns --
writes, a promotion in between, a resume with the delta, a compaction -- and the test checks
what each request carried. Real git, real keys; the only fake is the model."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.tools_support import configure, promote
from truss_files.facade import MemoryStore
from truss_files.tools import ToolSession

anthropic = pytest.importorskip("anthropic")

MODEL = "claude-test-1"
GATES = ("memory", "memory_write")


class Scripted:
    """The fake API: answers each POST /v1/messages with the next scripted reply and keeps
    every request body it was sent."""

    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def say(self, *content: dict[str, Any]) -> None:
        uses = any(c["type"] == "tool_use" for c in content)
        self.replies.append(
            {
                "id": f"msg_{len(self.replies)}",
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": list(content),
                "stop_reason": "tool_use" if uses else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 5},
            }
        )

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.requests.append({"path": self.path, "body": body})
                    reply = fake.replies.pop(0) if fake.replies else None
                if reply is None or self.path != "/v1/messages":
                    self.send_response(500)
                    self.end_headers()
                    return
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def api() -> Iterator[tuple[Scripted, Any]]:
    fake = Scripted()
    server = ThreadingHTTPServer(("127.0.0.1", 0), fake.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = anthropic.Anthropic(
        base_url=f"http://127.0.0.1:{server.server_address[1]}", api_key="test", max_retries=0
    )
    try:
        yield fake, client
    finally:
        server.shutdown()
        server.server_close()


def tool_use(n: int, name: str, **inp: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": inp}


def text(said: str) -> dict[str, Any]:
    return {"type": "text", "text": said}


def create(path: str, body: str) -> dict[str, Any]:
    return {"command": "create", "path": path, "file_text": body}


def turn(
    store: MemoryStore, client: Any, run: str, task: str, parent: str | None = None
) -> dict[str, Any]:
    """One turn of a harness: the run's context, the task, and the tool loop until the
    model ends its turn. Returns the context it started the turn from."""
    prefix = store.context(run, parent=parent, gates=GATES, fmt="anthropic", model=MODEL)
    params = prefix.render("anthropic")
    session = ToolSession(store, flags=GATES, run_id=run, parent=parent)
    messages: list[dict[str, Any]] = [*params["messages"]]
    messages.append({"role": "user", "content": [{"type": "text", "text": task}]})
    for _ in range(8):
        reply = client.messages.create(
            model=MODEL,
            max_tokens=512,
            tools=params["tools"],
            system=params["system"],
            messages=messages,
        )
        if reply.stop_reason != "tool_use":
            break
        results = []
        for block in reply.content:
            if block.type != "tool_use":
                continue
            outcome = session.call(block.name, block.input, call_id=block.id)
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": block.id,
                    "content": outcome.text,
                    "is_error": not outcome.ok,
                }
            )
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        messages.append({"role": "user", "content": results})
    return params


def carried(request: dict[str, Any]) -> str:
    """Every text a request's messages carried, joined."""
    out = []
    for message in request["body"]["messages"]:
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
            continue
        for block in content:
            out.append(str(block.get("text") or block.get("content") or ""))
    return "\n".join(out)


def test_an_orchestrator_and_two_children_over_several_turns(
    store: MemoryStore, api: tuple[Scripted, Any]
) -> None:
    fake, client = api
    configure(store, memory_write=True)

    # Turn 1: the orchestrator writes its plan.
    fake.say(tool_use(1, "memory", **create("/memories/notes/plan.md", "Plan: split A and B.")))
    fake.say(text("Planned."))
    turn(store, client, "O", "Plan the work.")
    # The children: each writes what it found, under the orchestrator.
    fake.say(tool_use(2, "memory", **create("/memories/notes/a.md", "Child A: the cache is cold.")))
    fake.say(text("Done A."))
    turn(store, client, "C-A", "Look into A.", parent="O")
    fake.say(tool_use(3, "memory", **create("/memories/notes/b.md", "Child B: the lock is held.")))
    fake.say(text("Done B."))
    turn(store, client, "C-B", "Look into B.", parent="O")
    first_o, first_a, first_b = fake.requests[0], fake.requests[2], fake.requests[4]
    assert "Plan: split A and B." not in carried(first_o)  # nothing written yet
    assert "Plan: split A and B." not in carried(first_a)  # a child keeps its own L4
    assert "Child A" not in carried(first_b)  # ... and so does its sibling

    # A promotion in between: the panel verifies child A's finding.
    [found_a] = [e for e in store.iter_entries() if e.body == "Child A: the cache is cold."]
    promote(store, found_a.id)

    # Turn 2: the orchestrator resumes: the delta, its own notes, its children's newest notes.
    fake.say(text("Resumed."))
    turn(store, client, "O", "Carry on.")
    resumed = fake.requests[-1]
    said = carried(resumed)
    assert "Changed in verified memory since this run last read its context" in said
    assert "Child A: the cache is cold." in said.split("Changed in verified memory")[1]
    assert "Plan: split A and B." in said
    assert "Child runs of this run" in said and "run C-B:" in said
    assert "Child B: the lock is held." in said
    # Tools and system bytes: exactly those the orchestrator started with.
    for key in ("system", "tools"):
        assert json.dumps(resumed["body"][key], sort_keys=True) == json.dumps(
            first_o["body"][key], sort_keys=True
        )

    # Turn 3: nothing moved, so no delta; then a compaction shortens the orchestrator's tail.
    fake.say(text("Still here."))
    turn(store, client, "O", "Anything new?")
    assert "Changed in verified memory" not in carried(fake.requests[-1])
    summary = store.compact("O", "Summary: A is a cold cache (verified); B waits on a lock.")
    fake.say(tool_use(4, "memory", **create("/memories/notes/next.md", "Next: warm the cache.")))
    fake.say(text("Noted."))
    turn(store, client, "O", "Decide the next step.")
    after = carried(fake.requests[-2])
    assert "Summary: A is a cold cache" in after and "Plan: split A and B." not in after
    notes = after.split("Working notes of this run")[1]
    assert notes.index("Summary: A is a cold cache") < notes.index("Child runs of this run")
    # The summarised note stays in the store; the next context shows the newest note after
    # the summary; every request of the orchestrator had the same head.
    assert any(e.body == "Plan: split A and B." for e in store.iter_entries())
    last = store.context("O", gates=GATES, fmt="anthropic", model=MODEL).render("json")
    [l4] = [m for m in last["messages"] if m["layer"] == "L4"]
    assert l4["ids"][0] == summary.id
    body = l4["content"][0]["text"]
    assert body.index("Summary: A") < body.index("Next: warm the cache.")
    heads = {
        json.dumps([r["body"]["system"], r["body"]["tools"]], sort_keys=True)
        for r in fake.requests
        if "Plan the work." in carried(r) or "Carry on." in carried(r) or "next step" in carried(r)
    }
    assert len(heads) == 1
    assert all(r["path"] == "/v1/messages" for r in fake.requests)
