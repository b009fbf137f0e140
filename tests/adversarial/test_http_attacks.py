"""Attacks on the HTTP face, each performed for real against a running server.

Each test sends the hostile request over a socket to ``truss-files serve`` on 127.0.0.1 and
asserts the clear refusal, that the server still answers, that nothing in the store was
written, lost or corrupted (the audit passes), and that the server's log holds no secret.
"""

from __future__ import annotations

import datetime
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.http_support import Served, entries, intact, served_fixture  # noqa: F401 - the fixture
from truss_files.facade import MemoryStore
from truss_files.faces.server.tokens import new_token

pytest.importorskip("uvicorn")

CANARY = "canary-7f3a-body-text"


def test_no_bad_expired_or_wrong_scope_token_gets_in(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    server = served()
    before = entries(store)
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    expired, _ = new_token(
        server.tokens, ["tasks:read", "tasks:write"], expires=past, any_task=True
    )
    train = {"body": CANARY, "source": {"eventId": "evt-1", "revision": "1"}}
    attempts = {
        "missing": server.train("T-1", train, token=None, headers={}),
        "empty": server.train("T-1", train, token=""),
        "wrong": server.train("T-1", train, token="tft_" + "A" * 43),
        "truncated": server.train("T-1", train, token=server.write[:-2]),
        "hash as token": server.train("T-1", train, token=_hash_of(server)),
        "expired": server.train("T-1", train, token=expired),
        "basic": server.train("T-1", train, token=None,
                              headers={"Authorization": f"Basic {server.write}"}),
        "in query": server.request(
            "POST", f"/v1/tasks/T-1/memory/train?access_token={server.write}", body=train
        ),
    }  # fmt: skip
    for name, answer in attempts.items():
        assert answer.status == 401, (name, answer.raw)
        assert answer.body["error"]["code"] == "unauthorized"
    assert "expired" in attempts["expired"].body["error"]["message"]
    # A valid token for the other scope: 403, and still nothing written.
    other = server.train("T-1", train, token=server.read)
    assert other.status == 403 and "tasks:write" in other.body["error"]["message"]
    assert server.ask("T-1", token=server.write, purpose="x").status == 403
    intact(server, store, before)


def _hash_of(server: Served) -> str:
    # What a thief of the token file holds: the stored hash is no token.
    line = next(x for x in server.tokens.read_text().splitlines() if x.startswith("hash"))
    return line.split('"')[1]


def test_the_request_cannot_set_the_run_context(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    server = served()
    before = entries(store)
    for field, value in [
        ("author", "m-evil"),
        ("enterprise", "other-corp"),
        ("enterpriseId", "other-corp"),
        ("taskId", "T-2"),
        ("member", "m-evil"),
        ("scope", {"task": "T-2", "enterprise": "other-corp"}),
        ("grants", [{"layer": "enterprise", "eventPrefix": ""}]),
        ("clone", False),
    ]:
        answer = server.train(
            "T-clone", {"body": CANARY, field: value, "layer": "task"}, token=server.write
        )
        assert answer.status == 422, (field, answer.raw)
        assert field in answer.body["error"]["message"]
    ask = server.ask("T-1", purpose="x", enterpriseId="other-corp")
    assert ask.status == 422 and "enterpriseId" in ask.body["error"]["message"]
    # Headers that name another task or enterprise change nothing either: the write lands in
    # the path's task, authored by its member, in its enterprise.
    done = server.train(
        "T-1",
        {"body": "headers do not choose the task", "source": {"eventId": "ev-h", "revision": "1"}},
        headers={"X-Task-Id": "T-2", "X-Enterprise": "other-corp", "X-Member": "m-evil"},
    )
    assert done.status == 200 and done.body["status"] in ("accepted", "consolidating")
    stored = [e for e in MemoryStore(store.git.workdir or ".").iter_entries()
              if e.body == "headers do not choose the task"]  # fmt: skip
    assert len(stored) == 1
    scope = dict(stored[0].scope)
    assert scope.get("task") == "T-1" and scope.get("enterprise") == "acme"
    assert "m-evil" not in stored[0].author and "other-corp" not in str(scope)
    # A clone task may not use its grant, whatever the body says about layers.
    refused = server.train(
        "T-clone",
        {"body": CANARY, "layer": "team", "source": {"eventId": "ci:1", "revision": "1"}},
    )
    assert refused.status == 200 and refused.body["status"] == "failed"
    after = entries(store)
    assert len(after - before) == 1


@pytest.mark.parametrize(
    "path",
    [
        "/v1/tasks/..%2F..%2Fetc%2Fpasswd/memory/ask",
        "/v1/tasks/%2e%2e/memory/ask",
        "/v1/tasks/../tasks/T-1/memory/ask",
        "/v1/tasks/T-1%00/memory/ask",
        "/v1/tasks/T-1%2F..%2FT-2/memory/ask",
        "/v1/tasks/.git/memory/ask",
        "/v1/tasks/" + "A" * 5000 + "/memory/ask",
    ],
)
def test_path_tricks_in_the_task_id_name_no_task(
    served: Callable[..., Served], store: MemoryStore, path: str
) -> None:
    server = served()
    before = entries(store)
    answer = server.request("GET", path + "?purpose=x", token=server.read)
    assert answer.status in (400, 404, 414), answer.raw
    if answer.body is not None:
        assert "error" in answer.body
    posted = server.request(
        "POST", path.replace("/ask", "/train"), token=server.write, body={"body": CANARY}
    )
    assert posted.status in (400, 404, 414), posted.raw
    intact(server, store, before)


def test_oversized_bodies_are_refused_without_reading_them_whole(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    server = served(extra=("--max-body", "2048"))
    before = entries(store)
    declared = server.train("T-1", {"body": "x" * 4000})
    assert declared.status == 413
    # Content-Length lies low: the server counts what arrives.
    body = b'{"body": "' + b"x" * 4000 + b'"}'
    chunked = _raw(
        server,
        b"POST /v1/tasks/T-1/memory/train HTTP/1.1\r\nHost: x\r\n"
        + f"Authorization: Bearer {server.write}\r\n".encode()
        + b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n0\r\n\r\n",
    )
    assert chunked.startswith(b"HTTP/1.1 413"), chunked[:200]
    # A Content-Length of 10 GB is refused from the header alone.
    huge = _raw(
        server,
        b"POST /v1/tasks/T-1/memory/train HTTP/1.1\r\nHost: x\r\n"
        + f"Authorization: Bearer {server.write}\r\n".encode()
        + b"Content-Length: 10000000000\r\n\r\n{",
    )
    assert huge.startswith(b"HTTP/1.1 413"), huge[:200]
    intact(server, store, before)


def test_deeply_nested_and_hostile_json_is_422(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    server = served()
    before = entries(store)
    bodies = [
        b'{"body": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"body": ' + b'{"a":' * 50 + b"1" + b"}" * 50 + b"}",
        b'{"body": "x", "source": {"eventId": "e", "revision": ' + b"9" * 5000 + b"}}",
        b'{"body": NaN}',
        b'{"body": "\\ud800"}',
        b'\xff\xfe{"body": "x"}',
        b"",
        b"null",
    ]
    for raw in bodies:
        answer = server.train("T-1", None, raw=raw, headers={"Content-Type": "application/json"})
        assert answer.status == 422, (raw[:40], answer.raw)
        assert answer.body["error"]["code"] == "invalid_input"
    intact(server, store, before)


def test_a_body_that_never_finishes_is_cut_off(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    server = served(extra=("--body-timeout", "1"))
    before = entries(store)
    started = time.monotonic()
    with socket.create_connection((server.host, server.port), timeout=20) as sock:
        sock.sendall(
            b"POST /v1/tasks/T-1/memory/train HTTP/1.1\r\nHost: x\r\n"
            + f"Authorization: Bearer {server.write}\r\n".encode()
            + b"Content-Length: 100\r\n\r\n"
            + b'{"body": "'
        )
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert time.monotonic() - started < 10
    intact(server, store, before)


def test_the_log_holds_no_token_key_or_body(
    served: Callable[..., Served], store: MemoryStore, tmp_path: Path
) -> None:
    server = served()
    purpose = "canary-purpose-5e1d"
    server.ask("T-1", purpose=purpose)
    server.ask("T-1", token=server.write, purpose=purpose)
    server.train("T-1", {"body": CANARY, "source": {"eventId": "evt-log", "revision": "1"}})
    server.train("T-1", {"body": CANARY, "bogus": CANARY})
    server.train("T-404", {"body": CANARY})
    server.request("GET", f"/v1/tasks/{CANARY}/memory/ask?purpose={purpose}", token=server.read)
    server.request("GET", f"/{server.write}", token=server.both)
    server.tasks.write_text("[tasks.broken\n")  # a configuration error is logged, too
    server.ask("T-1", purpose=purpose)
    log = server.stop()
    assert "memory/train 200" in log and "memory/ask 403" in log  # it does log requests
    key_text = (tmp_path / "server_key").read_text()
    secret_lines = [line for line in key_text.splitlines() if "PRIVATE" not in line]
    for secret in [*server.secrets, CANARY, purpose, *secret_lines]:
        assert secret not in log, secret[:12]
    assert _hash_of(server).split(":")[1] not in log


def _raw(server: Served, request: bytes) -> bytes:
    with socket.create_connection((server.host, server.port), timeout=20) as sock:
        sock.sendall(request)
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
        return reply
