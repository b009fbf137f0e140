"""A FAKE model provider, for tests and the README's walk-through. It is not a model.

``python -m examples.fake_provider [--port 0] [--vote PASS] [--fail-if TEXT] [--log FILE]``
serves, on 127.0.0.1 only, just enough of Anthropic's Messages API (``POST /v1/messages``)
and OpenAI's Chat Completions API (``POST /v1/chat/completions``) for truss-files' model
judges (``panel/modeljudge.py``) to run against it through the real SDKs. It prints one line,
``listening on http://127.0.0.1:PORT``: point ``ANTHROPIC_BASE_URL`` at it (or
``OPENAI_BASE_URL`` at it plus ``/v1``), with any non-empty key.

It judges nothing: every answer is ``--vote``, except FAIL when the entry's body contains
``--fail-if`` text. Asked to learn from a transcript (``truss-files learn``: the tool
``record_notes``, or the JSON schema ``notes``), it understands nothing either: each line of
a message that starts ``Lesson:``, ``Decision:`` or ``Fact:`` becomes one note of that kind,
its key the line's first words, naming the message it is in.

Tests also script its next answers (``--script`` or ``FakeProvider.script``; a learn's
notes with ``FakeProvider.notes``)
as a vote, ``garbage`` (200 with a body that is not JSON), ``badjson`` (the same, labelled
JSON), ``badvote``, ``notool``, ``500``,
``drop`` (the connection closed with no answer), ``refusal`` or ``slow:SECONDS``, and read
what it was sent and the sha256 of what it answered (``--log`` as JSON lines, or
``FakeProvider.requests``); it never records a key.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import sys
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["FakeProvider", "main"]

VOTES = ("PASS", "FAIL", "ABSTAIN")


class FakeProvider:
    """The fake as an object: ``start()`` it on a free port of 127.0.0.1, ``url``, ``stop()``."""

    def __init__(
        self,
        *,
        vote: str = "PASS",
        fail_if: str | None = None,
        script: Iterable[str] = (),
        log: Path | None = None,
        port: int = 0,
    ) -> None:
        self.vote = vote
        self.fail_if = fail_if
        self.script: list[str] = list(script)
        # The notes to answer the next learn request with, instead of reading the transcript.
        self.notes: list[dict[str, Any]] | None = None
        self.log = log
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeProvider:
        serve = self._server.serve_forever
        self._thread = threading.Thread(target=serve, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve(self) -> None:
        self._server.serve_forever()

    # -- what it answers ---------------------------------------------------------------

    def record(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, str]:
        """Note the request; its number and the behaviour to answer it with."""
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            body = None
        entry = {
            "path": path,
            "headers": headers,
            "body": body,
            "sha256": hashlib.sha256(raw).hexdigest(),
        }
        with self._lock:
            self.requests.append(entry)
            n = len(self.requests)
            behaviour = self.script.pop(0) if self.script else None
        if behaviour is None:
            text = _entry_body(body)
            fails = self.fail_if and self.fail_if.lower() in text.lower()
            behaviour = "FAIL" if fails else self.vote
        return n, behaviour

    def scripted_notes(self) -> list[dict[str, Any]] | None:
        """The notes a test scripted for this learn request (once), or None."""
        with self._lock:
            notes, self.notes = self.notes, None
        return notes

    def answered(self, n: int, data: bytes | None) -> None:
        """Note what request ``n`` was answered (None: nothing, the connection dropped)."""
        with self._lock:
            entry = self.requests[n - 1]
            entry["answer_sha256"] = hashlib.sha256(data).hexdigest() if data is not None else None
            if self.log is not None:
                with open(self.log, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(entry) + "\n")


def _entry_body(body: Any) -> str:
    """The body of the entry in a judge's data block (any line of the user turn that is a
    JSON object with an ``entry``), or ""."""
    for message in body.get("messages", []) if isinstance(body, dict) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if message.get("role") != "user" or not isinstance(content, str):
            continue
        for line in content.splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict) and isinstance(data.get("entry"), dict):
                return str(data["entry"].get("body", ""))
    return ""


LEARN_TOOL = "record_notes"
_NOTE_LINE = re.compile(r"^\s*(lesson|decision|fact):\s*(\S.*)$", re.IGNORECASE | re.MULTILINE)


def _learning(body: Any) -> bool:
    """Whether the request asks for notes (``truss-files learn``), not a vote."""
    if not isinstance(body, dict):
        return False
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("name") == LEARN_TOOL:
        return True
    schema = (body.get("response_format") or {}).get("json_schema") or {}
    return isinstance(schema, dict) and schema.get("name") == "notes"


def _notes(body: Any) -> list[dict[str, Any]]:
    """The notes the fake "learns": every ``Lesson:``/``Decision:``/``Fact:`` line of the
    transcript in the request's data block, naming its message's seq."""
    notes: list[dict[str, Any]] = []
    for message in body.get("messages", []) if isinstance(body, dict) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            continue
        for line in content.splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            said = data.get("transcript") if isinstance(data, dict) else None
            for item in said if isinstance(said, list) else []:
                text = str(item.get("text", "")) if isinstance(item, dict) else ""
                for kind, rest in _NOTE_LINE.findall(text):
                    key = "-".join(re.findall(r"[a-z0-9]+", rest.lower())[:5]) or "note"
                    notes.append(
                        {
                            "kind": kind.lower(),
                            "key": key,
                            "body": rest.strip(),
                            "message": item.get("seq"),
                        }
                    )
    return notes


def _rationale(vote: str) -> str:
    return f"the fake provider votes {vote}: it is a test double and read nothing"


def _anthropic_answer(n: int, model: str, behaviour: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": f"msg_fake_{n:04d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 10},
    }
    if behaviour == "refusal":
        return message | {"content": [], "stop_reason": "refusal"}
    if behaviour == "notool":
        text = {"type": "text", "text": "I think it is fine. PASS."}
        return message | {"content": [text], "stop_reason": "end_turn"}
    vote = "MAYBE" if behaviour == "badvote" else behaviour
    call = {
        "type": "tool_use",
        "id": f"toolu_fake_{n:04d}",
        "name": "cast_vote",
        "input": {"vote": vote, "rationale": _rationale(vote)},
    }
    return message | {"content": [call], "stop_reason": "tool_use"}


def _openai_answer(n: int, model: str, behaviour: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    finish = "stop"
    if behaviour == "refusal":
        message["refusal"] = "I can't help with that."
    elif behaviour == "notool":
        message["content"] = "I think it is fine. PASS."
    else:
        vote = "MAYBE" if behaviour == "badvote" else behaviour
        message["content"] = json.dumps({"vote": vote, "rationale": _rationale(vote)})
    return {
        "id": f"chatcmpl-fake-{n:04d}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


def _handler(fake: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # the tests read .requests; stderr stays quiet

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            path = self.path.split("?", 1)[0]
            kept = {k.lower(): v for k, v in self.headers.items()}
            for secret in ("x-api-key", "authorization"):
                kept.pop(secret, None)  # never keep a key, even a fake one
            n, behaviour = fake.record(path, kept, raw)
            try:
                model = str(json.loads(raw).get("model", ""))
            except (json.JSONDecodeError, AttributeError):
                model = ""
            if behaviour.startswith("slow:"):
                time.sleep(float(behaviour.split(":", 1)[1]))
                behaviour = fake.vote
            if behaviour == "drop":
                fake.answered(n, None)
                self.close_connection = True
                return  # no status line at all: the client sees the connection go
            status, ctype = 200, "application/json"
            if behaviour == "500":
                status = 500
                data = b'{"type":"error","error":{"type":"api_error","message":"boom"}}'
            elif behaviour == "garbage":
                data, ctype = b"<html>this is not the API you are looking for", "text/plain"
            elif behaviour == "badjson":
                data = b'{"id": "msg_broken", "content": [{"type": "tool_'
            elif path.endswith("/messages"):
                answer = _anthropic_answer(n, model, behaviour)
                if _learning(fake.requests[n - 1]["body"]) and answer["content"]:
                    call = answer["content"][0]
                    notes = fake.scripted_notes() or _notes(fake.requests[n - 1]["body"])
                    call.update(name=LEARN_TOOL, input={"notes": notes})
                data = json.dumps(answer).encode()
            elif path.endswith("/chat/completions"):
                answer = _openai_answer(n, model, behaviour)
                message = answer["choices"][0]["message"]
                if _learning(fake.requests[n - 1]["body"]) and message["content"]:
                    notes = fake.scripted_notes() or _notes(fake.requests[n - 1]["body"])
                    message["content"] = json.dumps({"notes": notes})
                data = json.dumps(answer).encode()
            else:
                status = 404
                data = (
                    b'{"error":{"message":"the fake serves /v1/messages and /v1/chat/completions"}}'
                )
            fake.answered(n, data)
            self._send(status, data, ctype, n)

        def _send(self, status: int, data: bytes, ctype: str, n: int) -> None:
            try:
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_fake_{n:04d}")
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.fake_provider",
        description="A FAKE Anthropic/OpenAI endpoint for tests and demos: it votes --vote "
        "(FAIL when the entry's body contains --fail-if) and judges nothing.",
    )
    parser.add_argument("--port", type=int, default=0, help="0: the system picks one")
    parser.add_argument("--vote", choices=VOTES, default="PASS")
    parser.add_argument("--fail-if", default=None, metavar="TEXT")
    parser.add_argument("--script", default="", help="comma-separated next answers")
    parser.add_argument("--log", type=Path, default=None, help="append each request (JSON)")
    args = parser.parse_args(argv)
    script = [s for s in args.script.split(",") if s]
    fake = FakeProvider(
        vote=args.vote, fail_if=args.fail_if, script=script, log=args.log, port=args.port
    )
    print(f"listening on {fake.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        fake.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
