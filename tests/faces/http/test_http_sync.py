"""Two servers on two clones of one bare repository (``serve --sync origin``): each pushes its
writes by compare-and-swap and fetches the other's through the audit; in the end every note
is on both, and every history audits clean."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.http_support import agent_key, start
from truss_files.facade import MemoryStore
from truss_files.git.gitstore import GitStore
from truss_files.trust.audit import audit

pytest.importorskip("uvicorn")


def _notes(path: Path) -> dict[str, str]:
    store = MemoryStore(path)
    return {e.id: e.body for e in store.iter_entries() if e.kind.value == "fact"}


def test_two_servers_on_two_clones_end_with_every_note_on_both(
    bare_store: MemoryStore,
    server: Path,
    clone: Callable[[str], MemoryStore],
    add_signer: Callable[..., str],
    tmp_path: Path,
) -> None:
    key = agent_key(bare_store, add_signer, tmp_path)
    a, b = clone("a"), clone("b")
    paths = [Path(s.git.workdir or s.git.git_dir) for s in (a, b)]
    sync = ("--sync", "origin", "--sync-every", "0.3")
    servers = [start(p, key, tmp_path / "http", name=f"s{n}", extra=sync) for n, p in
               enumerate(paths)]  # fmt: skip
    try:
        trained: dict[str, str] = {}
        for round_ in range(3):
            for n, srv in enumerate(servers):
                body = f"Server {n} learned fact {round_}: cache {n}{round_} expires hourly."
                answer = srv.train(
                    "T-1", {"body": body, "source": {"eventId": f"s{n}-{round_}", "revision": "1"}}
                )
                assert answer.status == 200 and answer.body["status"] != "failed", answer.raw
                trained[answer.body["entry"]["id"]] = body
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if all(set(trained) <= set(_notes(p)) for p in paths):
                break
            time.sleep(0.3)
        for p in paths:
            assert _notes(p) == trained, p.name
        # Each server answers from the other's notes too (the task's own, unverified).
        asked = servers[1].ask("T-1", purpose="server 0 learned fact 2 cache")
        assert asked.status == 200
        assert any("Server 0 learned fact 2" in e["body"] for e in asked.body["evidence"])
    finally:
        logs = [srv.stop() for srv in servers]
    for path in (*paths, server):
        report = audit(GitStore(path))
        assert report.ok, (path, [str(v) for v in report.violations], logs)
    assert set(_notes(server)) == set(trained)
