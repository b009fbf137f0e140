"""The HTTP API under load: a real ``truss-files serve`` on 127.0.0.1 and 16 client threads.

* ask p50/p95 with 16 concurrent clients at 10k notes of the asking task, beside a cold
  ``truss-files query --min-trust unverified`` of the same words on the same store (what a
  person or a script pays for one answer without a server);
* the same asks against ``--workers 2`` beside ``--workers 1`` (threads in one process):
  whether a second process pays on this 2-core machine;
* train throughput with 16 concurrent clients (ms of wall time per stored note), beside one
  client training alone;
* 2,000 trains from 16 clients, each sent again after it landed (a retry after a lost reply),
  with retries on 409/503: lost or duplicated notes, beside the number sent (must be 0).
"""

from __future__ import annotations

import dataclasses
import http.client
import itertools
import json
import os
import re
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

from truss_files.facade import MemoryStore
from truss_files.faces.server.tokens import new_token
from truss_files.git.gitstore import Plan, Snapshot
from truss_files.model import Entry, Kind, Layer, Trust
from truss_files.signing import AllowedSigners, Ed25519Signer, PublicKey
from truss_files.signing.trustpolicy import CONFIG_PATH, SIGNERS_PATH

from .bench_cli import console_script
from .common import (
    Figure,
    Synth,
    Timings,
    commit_files,
    freeze_heap,
    label,
    measure,
    new_store,
    progress,
    scaled,
    scratch,
    signed_apply,
)

CLIENTS = 16
SERVER = "server@example.test"
TASKS = """\
[tasks.T-1]
member = "m-1"
role = "builder"
team = "platform"
enterprise = "acme"
"""


class TaskNotes(Synth):
    """Notes task T-1 trained itself (unverified, so they pass the floor for T-1 alone): what
    every ask of T-1 reads. Verified notes would need 10k signed verdicts to pass the read
    gate's audit; the ranking work per ask is the same."""

    def entry(self, i: int, salt: str = "") -> Entry:
        return dataclasses.replace(
            super().entry(i, salt),
            layer=Layer.TASK,
            scope={"enterprise": "acme", "task": "T-1", "team": "platform"},
            trust=Trust.UNVERIFIED,
        )


def _agent_key(store: MemoryStore, where: Path) -> Path:
    """A server key holding the agent and trainer roles only (what ``serve`` accepts), added
    in one operator-signed commit."""
    key = Ed25519Signer.generate(SERVER)
    key.save(where / "server_key")

    def plan(snap: Snapshot) -> Plan:
        signers = AllowedSigners.parse((snap.read(SIGNERS_PATH) or b"").decode())
        signers = signers.with_signer(SERVER, PublicKey.from_line(key.public_line), ("git",))
        toml = (snap.read(CONFIG_PATH) or b"").decode()
        for role in ("agent", "trainer"):
            toml = re.sub(
                rf"^{role} = \[(.*)\]$", rf'{role} = [\1, "{SERVER}"]', toml, count=1, flags=re.M
            )
        return Plan(
            {SIGNERS_PATH: signers.render().encode(), CONFIG_PATH: toml.encode()},
            f"truss: add signer {SERVER}\n\nTruss-Op: signers",
        )

    signed_apply(store, plan, {"operator"})
    return where / "server_key"


class Server:
    def __init__(self, argv: Sequence[str], env: dict[str, str], log: Path) -> None:
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=err, env=env)
        assert self.proc.stdout is not None
        buf = b""
        deadline = time.monotonic() + 60
        while b"\n" not in buf:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.proc.kill()
                raise RuntimeError(f"serve did not start: {log.read_text()[-500:]}")
            if select.select([self.proc.stdout], [], [], 0.5)[0]:
                buf += os.read(self.proc.stdout.fileno(), 4096)
        self.port = int(buf.split(b"\n")[0].rsplit(b":", 1)[1])

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Client:
    """One keep-alive connection, as a real client would hold."""

    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.auth = {"Authorization": f"Bearer {token}"}

    def send(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = dict(self.auth)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in range(3):
            try:
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                return resp.status, json.loads(resp.read() or b"null")
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()  # the server closed an idle keep-alive: reconnect
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def _concurrent(port: int, token: str, jobs: Sequence[Callable[[Client], Any]]) -> list[Any]:
    local = threading.local()

    def run(job: Callable[[Client], Any]) -> Any:
        if not hasattr(local, "client"):
            local.client = Client(port, token)
        return job(local.client)

    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(pool.map(run, jobs))


def _asks(port: int, token: str, purposes: list[str]) -> Timings:
    def job(purpose: str) -> Callable[[Client], float]:
        def go(client: Client) -> float:
            started = time.perf_counter()
            status, body = client.send("GET", f"/v1/tasks/T-1/memory/ask?purpose={quote(purpose)}")
            took = time.perf_counter() - started
            if status != 200 or body["status"] != "answered":
                raise RuntimeError(f"ask failed: {status} {str(body)[:300]}")
            return took

        return go

    return Timings(tuple(_concurrent(port, token, [job(p) for p in purposes])))


def _alone(port: int, token: str, purposes: list[str], n: int) -> Timings:
    client = Client(port, token)
    asked = itertools.cycle(purposes)

    def one() -> None:
        status, _ = client.send("GET", f"/v1/tasks/T-1/memory/ask?purpose={quote(next(asked))}")
        if status != 200:
            raise RuntimeError(f"ask failed: {status}")

    return measure(one, n)


def _train(client: Client, n: int, prefix: str) -> tuple[str, str]:
    body = {
        "body": f"Service {prefix}{n} restarts after {n % 97} s of backoff on pool {n % 13}.",
        "source": {"eventId": f"{prefix}-{n}", "revision": "1"},
    }
    for _attempt in range(20):
        status, answer = client.send("POST", "/v1/tasks/T-1/memory/train", body)
        if status == 200 and answer["status"] != "failed":
            return str(answer["entry"]["id"]), str(answer["status"])
        if status not in (409, 503):
            raise RuntimeError(f"train {n} failed: {status} {str(answer)[:300]}")
        time.sleep(0.01)
    raise RuntimeError(f"train {n} never landed")


def _serve(exe: str, path: str, key: Path, tmp: Path, env: dict[str, str], workers: int) -> Server:
    return Server(
        [exe, "--store", path, "--key", str(key), "serve", "--tasks", str(tmp / "tasks.toml"),
         "--tokens", str(tmp / "tokens.toml"), "--port", "0", "--workers", str(workers)],
        env, tmp / f"serve-{workers}.log",
    )  # fmt: skip


def _setup(tmp: Path, notes: int) -> tuple[str, Path, str, dict[str, str], list[str]]:
    store = new_store(tmp / "store.git")
    synth = TaskNotes(kind=Kind.FACT, seed=31)
    if notes:
        progress(f"seeding {label(notes)} notes of task T-1")
        commit_files(store, synth.files(synth.entries(notes)), f"seed {notes} notes")
    key = _agent_key(store, tmp)
    (tmp / "tasks.toml").write_text(TASKS)
    token, _ = new_token(tmp / "tokens.toml", ["tasks:read", "tasks:write"], any_task=True)
    env = dict(os.environ, TRUSS_CONFIG_DIR=str(tmp / "config"), HOME=str(tmp))
    env.pop("TRUSS_STORE", None)
    return str(store.git.git_dir), key, token, env, synth.words


def run(quick: bool) -> list[Figure]:
    exe = console_script()
    total = scaled(2_000 if quick else 10_000)
    n_asks = scaled(64 if quick else 320, floor=CLIENTS)
    # A train at 10k notes costs ~100-200 ms here: a few dozen show the throughput.
    n_trains = scaled(32 if quick else 64, floor=CLIENTS)
    n_race = scaled(400 if quick else 2_000, floor=CLIENTS)
    figures: list[Figure] = []
    with scratch("http") as tmp:
        path, key, token, env, words = _setup(tmp, total)
        freeze_heap()
        purposes = [f"{words[i % 50]} {words[40 + i % 300]}" for i in range(n_asks)]
        progress(f"query baseline: cold `truss-files query` x 9 at {label(total)}")

        def query() -> None:
            done = subprocess.run(
                [exe, "--store", path, "query", purposes[0], "--format", "json",
                 "--min-trust", "unverified"],
                capture_output=True,
                env=env,
            )  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError((done.stdout + done.stderr).decode()[-300:])

        query_t = measure(query, 9)
        results: dict[int, Timings] = {}
        walls: dict[int, float] = {}
        for workers in (1, 2):
            progress(f"{n_asks} asks from {CLIENTS} clients, --workers {workers}")
            server = _serve(exe, path, key, tmp, env, workers)
            try:
                _asks(server.port, token, purposes[:CLIENTS])  # warm every worker's caches
                if workers == 1:
                    progress(f"{CLIENTS * 2} asks from one client")
                    alone = _alone(server.port, token, purposes, CLIENTS * 2)
                started = time.perf_counter()
                results[workers] = _asks(server.port, token, purposes)
                walls[workers] = time.perf_counter() - started
            finally:
                server.stop()
        one, two = results[1], results[2]
        size = label(total)
        figures.append(
            Figure(
                name=f"ask over HTTP, one client, {size} notes (p50)",
                value=alone.ms(),
                unit="ms",
                baseline_name="cold `truss-files query` same store, same floor (p50)",
                baseline_value=query_t.ms(),
                note=f"p95 {alone.ms('p95'):.1f} ms",
            )
        )
        for stat in ("p50", "p95"):
            figures.append(
                Figure(
                    name=f"ask over HTTP, {CLIENTS} concurrent clients, {size} notes ({stat})",
                    value=one.ms(stat),
                    unit="ms",
                    baseline_name="cold `truss-files query` same store, same floor (p50)",
                    baseline_value=query_t.ms(),
                    note=f"{n_asks / walls[1]:.1f} asks/s in all; latency includes the queue",
                )
            )
        figures.append(
            Figure(
                name=f"ask, {CLIENTS} clients, --workers 2 (p50)",
                value=two.ms(),
                unit="ms",
                baseline_name="--workers 1 (threads)",
                baseline_value=one.ms(),
                note=f"p95 {two.ms('p95'):.1f} ms vs {one.ms('p95'):.1f} ms; "
                f"{n_asks / walls[2]:.1f} asks/s vs {n_asks / walls[1]:.1f}",
            )
        )
        server = _serve(exe, path, key, tmp, env, 1)
        try:
            client = Client(server.port, token)
            solo_n = max(4, n_trains // 4)
            progress(f"{solo_n} trains from one client at {size}")
            started = time.perf_counter()
            for n in range(solo_n):
                _train(client, n, "solo")
            solo = (time.perf_counter() - started) / solo_n
            progress(f"{n_trains} trains from {CLIENTS} clients at {size}")
            started = time.perf_counter()
            _concurrent(
                server.port, token, [partial(_train, n=n, prefix="many") for n in range(n_trains)]
            )
            many = (time.perf_counter() - started) / n_trains
        finally:
            server.stop()
        figures.append(
            Figure(
                name=f"train at {size} notes, {CLIENTS} concurrent clients (wall ms per note)",
                value=many * 1000,
                unit="ms",
                baseline_name="one client alone",
                baseline_value=solo * 1000,
                note=f"{1 / many:.1f} trains/s with {CLIENTS} clients, {1 / solo:.1f} alone",
            )
        )
    with scratch("http-race") as tmp:
        # A fresh store: the property is about concurrency, not size, and 4,000 trains at 10k
        # notes would take ten minutes of the run.
        path, key, token, env, _ = _setup(tmp, 0)
        server = _serve(exe, path, key, tmp, env, 1)
        try:
            progress(f"{n_race} trains from {CLIENTS} clients, each sent twice")
            jobs = [partial(_train, n=n % n_race, prefix="race") for n in range(2 * n_race)]
            started = time.perf_counter()
            landed = _concurrent(server.port, token, jobs)
            took = time.perf_counter() - started
        finally:
            server.stop()
        first, second = landed[:n_race], landed[n_race:]
        # Each note's two sends race: one stores it, the other answers retained.
        retained = sum(status == "retained" for _, status in landed)
        per_event: dict[str, int] = {}
        for e in MemoryStore(path).iter_entries():
            produced = e.provenance.produced_by or ""
            if produced.startswith("event:race-"):
                per_event[produced] = per_event.get(produced, 0) + 1
        lost = n_race - len(per_event)
        duplicated = sum(c - 1 for c in per_event.values())
        if [i for i, _ in first] != [i for i, _ in second] or retained != n_race:
            raise RuntimeError(f"answers disagree: {retained}/{n_race} retained")
        figures.append(
            Figure(
                name=f"lost or duplicated notes after {2 * n_race} concurrent trains",
                value=lost + duplicated,
                unit="notes",
                baseline_name=f"distinct notes sent ({n_race}, each twice)",
                baseline_value=n_race,
                target=0,
                note=f"every repeat answered retained ({retained}); "
                f"{2 * n_race / took:.0f} trains/s as the store grew from 0 to {n_race}",
            )
        )
    return figures
