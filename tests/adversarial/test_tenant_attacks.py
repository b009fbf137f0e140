"""Attacks across tenants, and on the server's sockets and key, against a running server.

Issue 20, item 4: acme's write token trained into an evilcorp task on the same server, and
that task's ask served it. Now a token acts only for the tasks it is bound to (its
enterprises, its task ids, or any task); every other task answers 403 ``forbidden`` and
nothing is written. Tokens are made, listed and revoked through the installed console script.
Also: a client that sends a request's headers slowly is dropped (slow loris), and ``serve``
warns once when its key file can be read by others.
"""

from __future__ import annotations

import json
import select
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import console
from tests.support.extras import needs_minilm
from tests.support.http_support import (  # noqa: F401 - the fixtures
    SCRIPT,
    Served,
    agent_key,
    entries,
    intact,
    served_fixture,
    start,
)
from truss_files.facade import MemoryStore
from truss_files.faces.server.tokens import digest

pytest.importorskip("uvicorn")

CANARY = "canary-tenant-9b41 the deploy key lives in the vault"

TENANTS = """\
[tasks.T-acme]
member = "m-1"
role = "reviewer"
team = "platform"
enterprise = "acme"

[tasks.T-acme-2]
member = "m-2"
role = "builder"
team = "platform"
enterprise = "acme"

[tasks.T-evil]
member = "m-666"
role = "reviewer"
team = "red"
enterprise = "evilcorp"
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return console.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


def token(file: Path, *binding: str, name: str, scopes: tuple[str, ...] = ("read", "write")) -> str:
    """A token made by ``truss-files tokens new`` (the operator's way), with ``binding``."""
    argv = ["tokens", "new", "--file", str(file), "--name", name, "--format", "json"]
    for scope in scopes:
        argv += ["--scope", f"tasks:{scope}"]
    made = cli(*argv, *binding)
    assert made.returncode == 0, made.stdout + made.stderr
    return str(json.loads(made.stdout)["token"])


def train_body(n: int | str, body: str = CANARY) -> dict[str, Any]:
    return {"body": body, "source": {"eventId": f"evt-tenant-{n}", "revision": "1"}}


def forbidden(answer: Any) -> bool:
    return answer.status == 403 and answer.body["error"]["code"] == "forbidden"


def test_acmes_token_neither_trains_nor_asks_an_evilcorp_task(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    server = served(tasks=TENANTS)
    acme = token(server.tokens, "--enterprise", "acme", name="acme-ci")
    evil = token(server.tokens, "--enterprise", "evilcorp", name="evilcorp-ci")
    before = entries(store)
    # The exploit of the issue: acme's write token trains into evilcorp's task.
    train = server.train("T-evil", train_body(1), token=acme)
    assert forbidden(train), train.raw
    assert "acme" in train.body["error"]["message"]
    assert forbidden(server.ask("T-evil", token=acme, purpose="deploy key vault"))
    # Nor by a back door: an idempotency key, a header naming the tenant, a task id that the
    # registry lacks (403 as well, so the answer says nothing of which ids exist).
    assert forbidden(
        server.train(
            "T-evil",
            {"body": CANARY},
            token=acme,
            headers={"Idempotency-Key": "k-1", "X-Enterprise": "acme"},
        )
    )
    assert forbidden(server.train("T-nobody", train_body(2), token=acme))
    assert forbidden(server.ask("T-nobody", token=acme, purpose="x"))
    intact(server, store, before)
    # evilcorp's own ask serves nothing of acme's.
    asked = server.ask("T-evil", token=evil, purpose="where does the deploy key live")
    assert asked.status == 200 and asked.body["status"] == "insufficient_evidence"
    assert CANARY not in json.dumps(asked.body)
    # The same token still works for its own tenant's tasks, and each tenant sees only its own.
    own = server.train("T-acme", train_body(3), token=acme)
    assert own.status == 200 and own.body["status"] in ("accepted", "consolidating"), own.raw
    assert server.ask("T-acme", token=acme, purpose="deploy key vault").status == 200
    evil_ask = server.ask("T-evil", token=evil, purpose="where does the deploy key live")
    assert CANARY not in json.dumps(evil_ask.body)
    assert len(entries(store) - before) == 1


def test_every_route_that_takes_a_task_checks_the_binding(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    """Every task route the server documents, including any added later, refuses acme's
    token on evilcorp's task before it reads its input."""
    server = served(tasks=TENANTS)
    acme = token(server.tokens, "--enterprise", "acme", name="acme-all")
    before = entries(store)
    paths = server.request("GET", "/openapi.json").body["paths"]
    routes = [
        (method.upper(), path)
        for path, ops in paths.items()
        if "{taskId}" in path
        for method in ops
    ]
    assert len(routes) >= 2, routes
    for method, path in routes:
        target = path.replace("{taskId}", "T-evil")
        if method == "GET":
            answer = server.request(method, target + "?purpose=x", token=acme)
        else:
            answer = server.request(method, target, token=acme, body=train_body("route"))
        assert forbidden(answer), (method, path, answer.raw)
    intact(server, store, before)


def test_task_and_any_task_bindings(served: Callable[..., Served], store: MemoryStore) -> None:
    server = served(tasks=TENANTS)
    only = token(server.tokens, "--task", "T-acme", "--task", "T-planned", name="one-task")
    every = token(server.tokens, "--any-task", name="ops")
    before = entries(store)
    assert forbidden(server.train("T-acme-2", train_body(1), token=only))
    assert forbidden(server.train("T-evil", train_body(1), token=only))
    # A task id of its own that the registry lacks (yet): 404, as to any token for that id.
    missing = server.ask("T-planned", token=only, purpose="x")
    assert missing.status == 404 and missing.body["error"]["code"] == "unknown_task"
    intact(server, store, before)
    assert server.train("T-acme", train_body(2), token=only).status == 200
    for task in ("T-acme-2", "T-evil"):
        assert server.ask(task, token=every, purpose="x").status == 200
    assert server.ask("T-nobody", token=every, purpose="x").status == 404
    listed = cli("tokens", "list", "--file", str(server.tokens), "--format", "json")
    bindings = {t["name"]: t["binding"] for t in json.loads(listed.stdout)["tokens"]}
    assert bindings["one-task"] == {"tasks": ["T-acme", "T-planned"]}
    assert bindings["ops"] == {"any_task": True}
    text = cli("tokens", "list", "--file", str(server.tokens), "--format", "text").stdout
    assert "one-task\ttasks:read,tasks:write\ttask T-acme,T-planned" in text
    assert "ops\ttasks:read,tasks:write\tany task" in text


def test_tokens_new_without_a_binding_is_a_usage_error(tmp_path: Path) -> None:
    file = tmp_path / "tokens.toml"
    for binding in (
        (),
        ("--enterprise", "acme", "--any-task"),
        ("--task", "T", "--enterprise", "a"),
    ):
        made = cli("tokens", "new", "--file", str(file), "--scope", "tasks:write", *binding)
        assert made.returncode == 2, made.stdout + made.stderr
        for option in ("--enterprise", "--task", "--any-task"):
            assert option in made.stderr
        assert "tft_" not in made.stdout
    assert not file.exists()


def test_a_revoked_token_is_refused_at_once(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    server = served(tasks=TENANTS)
    acme = token(server.tokens, "--enterprise", "acme", name="acme-old")
    assert server.ask("T-acme", token=acme, purpose="x").status == 200
    before = entries(store)
    done = cli("tokens", "revoke", "--file", str(server.tokens), "acme-old")
    assert done.returncode == 0, done.stdout + done.stderr
    for answer in (
        server.ask("T-acme", token=acme, purpose="x"),
        server.train("T-acme", train_body(1), token=acme),
    ):
        assert answer.status == 401 and answer.body["error"]["code"] == "unauthorized"
    assert "acme-old" not in server.tokens.read_text()
    # The others stay.
    assert server.ask("T-acme", purpose="x").status == 200
    again = cli("tokens", "revoke", "--file", str(server.tokens), "acme-old", "--format", "json")
    assert again.returncode == 1
    error = json.loads(again.stdout)["error"]
    assert error["code"] == "not_found" and "acme-old" in error["message"]
    intact(server, store, before)


def test_a_token_from_before_bindings_fails_closed(
    served: Callable[..., Served], store: MemoryStore, tmp_path: Path
) -> None:
    """A token file written by the old ``tokens new`` (no binding): its tokens act for no
    task, the answer and the start-up warning say to issue new ones."""
    old = "tft_" + "q" * 43
    where = tmp_path / "http"
    where.mkdir(parents=True, exist_ok=True)
    (where / "legacy-tokens.toml").write_text(
        f'[tokens.legacy]\nhash = "{digest(old)}"\nscopes = ["tasks:read", "tasks:write"]\n'
    )
    server = served(tasks=TENANTS, name="legacy")
    before = entries(store)
    for answer in (
        server.train("T-acme", train_body(1), token=old),
        server.ask("T-evil", token=old, purpose="x"),
    ):
        assert forbidden(answer), answer.raw
        message = answer.body["error"]["message"]
        assert "before tokens were bound" in message and "tokens new" in message
    listed = cli("tokens", "list", "--file", str(server.tokens), "--format", "text").stdout
    assert "legacy\ttasks:read,tasks:write\tUNBOUND" in listed
    intact(server, store, before)
    log = server.stop()
    assert log.count("legacy were made before tokens were bound") == 1, log


# --------------------------------------------------------------------------- slow headers


def _closed_by_server(sock: socket.socket, trickle: bytes, within: float) -> float | None:
    """Send ``trickle`` a few bytes at a time, slowly, until the server closes the
    connection; the seconds that took, or None if it was still open after ``within``."""
    started = time.monotonic()
    sent = 0
    while time.monotonic() - started < within:
        try:
            if sent < len(trickle):
                sock.sendall(trickle[sent : sent + 4])
                sent += 4
            readable, _, _ = select.select([sock], [], [], 0.5)
            if readable and sock.recv(4096) == b"":
                return time.monotonic() - started
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - started
    return None


SLOW_HEAD = b"GET /v1/tasks/T-acme/memory/ask?purpose=x HTTP/1.1\r\nHost: x\r\n" + b"".join(
    b"X-Slow-%d: %s\r\n" % (n, b"y" * 20) for n in range(40)
)


def test_a_client_that_sends_its_headers_slowly_is_dropped(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    server = served(tasks=TENANTS, extra=("--header-timeout", "1"))
    before = entries(store)
    # Six at once, as in the report: each trickles a header line's worth every half second
    # (the whole head would take ~100 s); and one that connects and sends nothing at all.
    socks = [socket.create_connection((server.host, server.port), timeout=10) for _ in range(7)]
    try:
        took = [_closed_by_server(s, SLOW_HEAD if i < 6 else b"", 30) for i, s in enumerate(socks)]
    finally:
        for s in socks:
            s.close()
    assert all(t is not None for t in took), took
    # A kept-alive connection: the first request is answered, the next one's slow head is
    # dropped too (uvicorn's own keep-alive timer stops at its first byte).
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.endswith(b"}"):
            chunk = sock.recv(4096)
            assert chunk, reply
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 200"), reply[:100]
        assert _closed_by_server(sock, SLOW_HEAD, 30) is not None
    # The server still answers whole requests at once, and wrote nothing.
    assert server.ask("T-acme", purpose="x").status == 200
    intact(server, store, before)


# --------------------------------------------------------------------------- the key file


def test_serve_warns_once_when_its_key_file_can_be_read_by_others(
    store: MemoryStore, add_signer: Callable[..., str], tmp_path: Path
) -> None:
    key = agent_key(store, add_signer, tmp_path)
    where = Path(store.git.workdir or store.git.git_dir)
    assert key.stat().st_mode & 0o777 == 0o600  # keys are written private
    quiet = start(where, key, tmp_path / "http", tasks=TENANTS, name="private")
    assert quiet.ask("T-acme", purpose="x").status == 200
    assert "key file" not in quiet.stop()
    key.chmod(0o644)
    loud = start(where, key, tmp_path / "http", tasks=TENANTS, name="readable")
    try:
        assert loud.ask("T-acme", purpose="x").status == 200  # a warning, not a refusal
    finally:
        log = loud.stop()
    lines = [line for line in log.splitlines() if "key file" in line]
    assert len(lines) == 1, log
    assert str(key) in lines[0] and f"chmod 600 {key}" in lines[0] and "0644" in lines[0]


@needs_minilm
def test_a_semantic_ask_never_ranks_over_another_tenants_admitted_notes(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    """A long-lived server keeps the notes a filter admitted between semantic queries
    (``Searcher.admitted``). Asked by one tenant and then another, in turn, the kept list must
    be the asker's own: evilcorp never gets acme's note, acme keeps getting it."""
    from tests.support.recall_support import commit_toml
    from truss_files.signing.trustpolicy import CONFIG_PATH

    text = (store.snapshot().read(CONFIG_PATH) or b"").decode()
    assert 'mode = "exact"' in text
    commit_toml(store, text.replace('mode = "exact"', 'mode = "semantic"'))
    server = served(tasks=TENANTS)
    acme = token(server.tokens, "--enterprise", "acme", name="acme-ci")
    evil = token(server.tokens, "--enterprise", "evilcorp", name="evilcorp-ci")
    trained = server.train("T-acme", train_body(7), token=acme)
    assert trained.status == 200, trained.raw
    purpose = "where is the deploy key kept"
    for _turn in range(2):
        own = server.ask("T-acme", token=acme, purpose=purpose)
        assert own.status == 200 and CANARY in json.dumps(own.body), own.raw
        other = server.ask("T-evil", token=evil, purpose=purpose)
        assert other.status == 200 and CANARY not in json.dumps(other.body), other.raw
