"""A real ``truss-files serve`` on 127.0.0.1 for the HTTP tests, started and stopped by them.

``serve_store(store, ...)`` gives the store a server key (the agent and trainer roles only),
writes a task registry and a token file, starts the console script with ``--port 0`` and
reads the port from its one start-up line. Requests go through ``http.client``: a plain
HTTP/1.1 client that sends exactly what a test asks for, malformed requests included.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from truss_files.facade import MemoryStore
from truss_files.faces.server.tokens import new_token
from truss_files.signing import Ed25519Signer
from truss_files.trust.audit import audit

SCRIPT = Path(sys.executable).parent / "truss-files"
# ask/train send the route's own token unless told otherwise; None sends no header at all.
OWN = "\0own-token"

TASKS = """\
[tasks.T-1]
member = "m-1"
role = "reviewer"
team = "platform"
enterprise = "acme"
project = "p-1"
version = "1"
grants = [{layer = "team", eventPrefix = "ci:"}]

[tasks.T-2]
member = "m-2"
role = "builder"
team = "platform"
enterprise = "acme"

[tasks.T-clone]
member = "m-1"
role = "reviewer"
team = "platform"
enterprise = "acme"
clone = true
grants = [{layer = "team", eventPrefix = "ci:"}]
"""


@dataclass
class Answer:
    status: int
    body: Any
    headers: Mapping[str, str]
    raw: bytes


@dataclass
class Served:
    url: str
    host: str
    port: int
    proc: subprocess.Popen[bytes]
    store_path: Path
    tasks: Path
    tokens: Path
    log: Path
    read: str
    write: str
    both: str
    secrets: list[str] = field(default_factory=list)

    def request(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        body: Any = None,
        raw: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 60,
    ) -> Answer:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        data = raw
        if data is None and body is not None:
            data = json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=data, headers=sent)
            resp = conn.getresponse()
            payload = resp.read()
        finally:
            conn.close()
        try:
            parsed = json.loads(payload) if payload else None
        except ValueError:
            parsed = None
        return Answer(resp.status, parsed, dict(resp.getheaders()), payload)

    def ask(self, task: str, token: str | None = OWN, **params: Any) -> Answer:
        query = urlencode(params)
        return self.request(
            "GET",
            f"/v1/tasks/{task}/memory/ask" + (f"?{query}" if query else ""),
            token=self.read if token == OWN else token,
        )

    def train(self, task: str, body: Any, token: str | None = OWN, **kwargs: Any) -> Answer:
        return self.request(
            "POST",
            f"/v1/tasks/{task}/memory/train",
            token=self.write if token == OWN else token,
            body=body,
            **kwargs,
        )

    def stop(self) -> str:
        """Stop the server (SIGINT, as Ctrl-C) and return its log."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.log.read_text(errors="replace")


def entries(store: MemoryStore) -> set[str]:
    return {e.id for e in MemoryStore(store.git.workdir or ".").iter_entries()}


def intact(server: Served, store: MemoryStore, before: set[str]) -> None:
    """The server still answers, nothing was written, and the history audits clean."""
    assert server.request("GET", "/healthz").status == 200
    assert entries(store) == before
    report = audit(store.git)
    assert report.ok, [str(v) for v in report.violations]


def agent_key(store: MemoryStore, add_signer: Callable[..., str], where: Path) -> Path:
    """A key of its own for the server, holding the agent and trainer roles only."""
    key = Ed25519Signer.generate("server@example.test")
    path = where / "server_key"
    key.save(path)
    add_signer(store, key, "server@example.test", ("agent", "trainer"))
    return path


def start(
    store_path: Path,
    key: Path,
    where: Path,
    *,
    tasks: str = TASKS,
    extra: tuple[str, ...] = (),
    name: str = "server",
    env: Mapping[str, str] | None = None,
) -> Served:
    where.mkdir(parents=True, exist_ok=True)
    tasks_file = where / f"{name}-tasks.toml"
    tasks_file.write_text(tasks)
    tokens_file = where / f"{name}-tokens.toml"
    # Bound to any task: every task of these registries is acme's (the tenant tests bind
    # their own tokens to enterprises and task ids).
    read, _ = new_token(tokens_file, ["tasks:read"], name="reader", any_task=True)
    write, _ = new_token(tokens_file, ["tasks:write"], name="writer", any_task=True)
    both, _ = new_token(tokens_file, ["tasks:read", "tasks:write"], name="both", any_task=True)
    log = where / f"{name}.log"
    argv = [
        str(SCRIPT),
        "--store",
        str(store_path),
        "--key",
        str(key),
        "serve",
        "--tasks",
        str(tasks_file),
        "--tokens",
        str(tokens_file),
        "--port",
        "0",
        *extra,
    ]
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=err,
            env=dict(os.environ if env is None else env),
        )
    line = _first_line(proc, log, 60)
    assert line.startswith("listening on http://"), line
    url = line.removeprefix("listening on ")
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return Served(
        url, host, int(port), proc, store_path, tasks_file, tokens_file, log, read, write, both,
        [read, write, both],
    )  # fmt: skip


def _first_line(proc: subprocess.Popen[bytes], log: Path, timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            proc.kill()
            raise AssertionError(f"the server did not start: {log.read_text(errors='replace')}")
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.5))
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                continue
            buf += chunk
    return buf.split(b"\n", 1)[0].decode()


@pytest.fixture(name="served")
def served_fixture(
    store: MemoryStore, add_signer: Callable[..., str], tmp_path: Path
) -> Iterator[Callable[..., Served]]:
    """``served(**options)``: a running server on the ``store`` fixture's repository."""
    running: list[Served] = []

    def make(**options: Any) -> Served:
        if not running:
            make.key = agent_key(store, add_signer, tmp_path)  # type: ignore[attr-defined]
        where = Path(store.git.workdir or store.git.git_dir)
        options.setdefault("name", f"server-{len(running)}")
        found = start(where, make.key, tmp_path / "http", **options)  # type: ignore[attr-defined]
        running.append(found)
        return found

    yield make
    for found in running:
        found.stop()


# --------------------------------------------------------------------------- the whole store

STORE_TASKS = (
    TASKS
    + """
[tasks.T-evil]
member = "m-666"
role = "reviewer"
team = "red"
enterprise = "evilcorp"
"""
)


@dataclass
class StoreServer:
    """One running server for a test module, on a store of its own: tokens by name, the
    operator's store (it signs verdicts: it holds the panel role) and the server's log."""

    served: Served
    store: MemoryStore
    tokens: dict[str, str]
    env: dict[str, str]
    panel_principal: str | None

    def call(self, method: str, path: str, token: str | None, **kwargs: Any) -> Answer:
        return self.served.request(
            method, path, token=self.tokens.get(token or "", token), **kwargs
        )

    def fresh(self) -> MemoryStore:
        """The store as the server left it (a new handle: the server wrote behind ours)."""
        return MemoryStore(self.served.store_path, signer=self.store.signer, environ=self.env)


# name -> (scopes, binding)
STORE_TOKENS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "acme-read": (("tasks:read",), {"enterprises": ["acme"]}),
    "acme-write": (("tasks:write",), {"enterprises": ["acme"]}),
    "acme-panel": (("tasks:panel",), {"enterprises": ["acme"]}),
    "acme-all": (("tasks:read", "tasks:write", "tasks:panel"), {"enterprises": ["acme"]}),
    "evil-all": (("tasks:read", "tasks:write", "tasks:panel"), {"enterprises": ["evilcorp"]}),
    "t1-read": (("tasks:read",), {"tasks": ["T-1"]}),
}


def start_store_server(
    where: Path,
    *,
    panel: bool,
    extra: tuple[str, ...] = (),
    prepare: Callable[[MemoryStore], None] | None = None,
) -> Iterator[StoreServer]:
    """A store, a server key (agent and trainer), with ``panel`` a panel key for the server
    too, and one ``truss-files serve`` on 127.0.0.1 for a whole test module. The environment
    is the test's isolated one (HOME, git identity), set here since a module's fixture runs
    before the per-test isolation does. ``prepare`` runs on the operator's store before the
    server starts; ``extra`` are more options of ``serve``."""
    from truss_files.store.initstore import init_store

    home = where / "home"
    home.mkdir(parents=True)
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test Operator\n\temail = operator@example.test\n"
        "[init]\n\tdefaultBranch = main\n"
    )
    env = dict(os.environ)
    for name in ("TRUSS_KEY", "TRUSS_SIGNER", "TRUSS_ROOT", "TRUSS_STORE", "TRUSS_PANEL_KEY"):
        env.pop(name, None)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        TRUSS_CONFIG_DIR=str(home / ".config" / "truss-files"),
        GIT_AUTHOR_NAME="Test Operator",
        GIT_AUTHOR_EMAIL="operator@example.test",
        GIT_COMMITTER_NAME="Test Operator",
        GIT_COMMITTER_EMAIL="operator@example.test",
        GIT_CONFIG_NOSYSTEM="1",
    )
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        operator = Ed25519Signer.generate("operator@example.test")
        path = where / "store"
        init_store(path, operator, "operator@example.test")
        store = MemoryStore(path, signer=operator, environ=env)
        server_key = Ed25519Signer.generate("server@example.test")
        server_key.save(where / "server_key")
        store.add_signer("server@example.test", server_key.public_line, source="server_key.pub")
        for role in ("agent", "trainer"):
            store.grant_role(role, "server@example.test")
        principal = None
        if panel:
            principal = "panel-server@example.test"
            panel_key = Ed25519Signer.generate(principal)
            panel_key.save(where / "panel_key")
            store.add_signer(principal, panel_key.public_line, source="panel_key.pub")
            store.grant_role("panel", principal)
            extra = (*extra, "--panel-key", str(where / "panel_key"))
        if prepare is not None:
            prepare(store)
        served = start(path, where / "server_key", where / "http", tasks=STORE_TASKS,
                       extra=extra, env=env)  # fmt: skip
        tokens = {}
        for name, (scopes, binding) in STORE_TOKENS.items():
            tokens[name], _ = new_token(served.tokens, scopes, name=name, **binding)
        served.secrets.extend(tokens.values())
        try:
            yield StoreServer(served, store, tokens, env, principal)
        finally:
            served.stop()
