"""The whole store over HTTP (``faces/http/store.py``): query, view, write, why, export, the
review queue, promote and reject, through one real ``truss-files serve`` on 127.0.0.1 for the
module (its panel key holds the panel role), against what the facade and the CLI say."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.http_support import StoreServer, start_store_server
from truss_files.faces.cli.main import cli
from truss_files.trust.audit import audit

pytest.importorskip("uvicorn")
pytestmark = pytest.mark.spawns

BASE = "/v1/tasks/T-1/store"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreServer]:
    yield from start_store_server(tmp_path_factory.mktemp("store-http"), panel=True)


def write(server: StoreServer, key: str, body: str, kind: str = "fact") -> str:
    answer = server.call(
        "POST", f"{BASE}/entries", "acme-write", body={"kind": kind, "key": key, "body": body}
    )
    assert answer.status == 200, answer.raw
    assert answer.body["trust"] == "unverified"
    return str(answer.body["id"])


def verdict(server: StoreServer, entry_id: str, outcome: str) -> bytes:
    """A panel member's verdict, as `truss-files verdict sign` prints it (the operator's key
    holds the panel role)."""
    signed = server.fresh().sign_verdict(entry_id, outcome, note="checked by hand")
    return signed.to_json().encode()


def test_the_openapi_document_lists_each_store_route_with_the_tools_fields(
    server: StoreServer,
) -> None:
    doc = server.call("GET", "/openapi.json", None).body
    paths = doc["paths"]
    ops = {
        (path, method): op
        for path, methods in paths.items()
        for method, op in methods.items()
        if path.startswith("/v1/tasks/{taskId}/store")
    }
    assert {op["operationId"] for op in ops.values()} == {
        "store_query", "store_view", "store_write", "store_why", "store_export",
        "store_pending", "store_promote", "store_reject",
    }  # fmt: skip
    query = paths[f"{'/v1/tasks/{taskId}/store'}/query"]["get"]
    names = {p["name"] for p in query["parameters"]}
    assert names == {"taskId", "query", "kind", "key", "limit", "min_trust", "at"}
    write_op = paths["/v1/tasks/{taskId}/store/entries"]["post"]
    body = write_op["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["kind", "key", "body"]
    for op in ops.values():
        assert {"401", "403", "404", "422", "503"} <= set(op["responses"]), op["operationId"]
        assert op["security"] == [{"bearer": []}]
    assert "413" in write_op["responses"] and "409" in write_op["responses"]


def test_serve_openapi_prints_the_document_the_server_serves(server: StoreServer) -> None:
    done = CliRunner().invoke(cli, ["serve", "--openapi"], env=server.env)
    assert done.exit_code == 0, done.output
    printed = json.loads(done.stdout)
    assert printed == server.call("GET", "/openapi.json", None).body
    ops = {(p, m) for p, methods in printed["paths"].items() for m in methods}
    assert ("/v1/tasks/{taskId}/store/entries", "post") in ops
    assert ("/v1/tasks/{taskId}/memory/ask", "get") in ops
    missing = CliRunner().invoke(cli, ["serve"], env=server.env)
    assert missing.exit_code == 2 and "--tasks" in missing.output


def test_a_write_lands_unverified_in_the_tasks_tenant_through_the_one_write_path(
    server: StoreServer,
) -> None:
    entry_id = write(server, "release-check", "The release check needs the preview URL.")
    entry = server.fresh().get(entry_id)
    assert entry.trust.value == "unverified"
    assert entry.scope["enterprise"] == "acme" and entry.scope["task"] == "T-1"
    assert entry.layer.value == "task" and entry.author == "member:m-1"
    assert entry.provenance.produced_by == "http:server@example.test"
    # The same content again changes nothing, as every write.
    again = server.call(
        "POST", f"{BASE}/entries", "acme-write",
        body={"kind": "fact", "key": "release-check",
              "body": "The release check needs the preview URL."},
    )  # fmt: skip
    assert again.status == 200 and again.body["id"] == entry_id
    bad = server.call("POST", f"{BASE}/entries", "acme-write", body={"kind": "fact", "key": "k"})
    assert bad.status == 422 and "`body`" in bad.body["error"]["message"]
    report = audit(server.fresh().git)
    assert report.ok, [str(v) for v in report.violations]


def test_query_and_view_take_the_read_tools_fields(server: StoreServer) -> None:
    before = str(server.fresh().git.tip().id)  # type: ignore[union-attr]
    entry_id = write(server, "flaky-net", "Retry the flaky network suite twice.", "lesson")
    found = server.call("GET", f"{BASE}/query?query=flaky+network&min_trust=unverified",
                        "acme-read")  # fmt: skip
    assert found.status == 200 and found.body["min_trust"] == "unverified"
    assert [e["id"] for e in found.body["entries"]] == [entry_id]
    # Verified by default, as every read.
    assert (
        server.call("GET", f"{BASE}/query?query=flaky+network", "acme-read").body["entries"] == []
    )
    other_kind = server.call(
        "GET", f"{BASE}/query?query=flaky+network&min_trust=unverified&kind=fact", "acme-read"
    )
    assert other_kind.body["entries"] == []
    bad = server.call("GET", f"{BASE}/query?query=x&min_trust=rejected", "acme-read")
    assert bad.status == 422 and "`min_trust`" in bad.body["error"]["message"]
    assert server.call("GET", f"{BASE}/query?query=x&limit=0", "acme-read").status == 422
    assert server.call("GET", f"{BASE}/query?query=x&colour=red", "acme-read").status == 422

    view = server.call("GET", f"{BASE}/entries/{entry_id}?min_trust=unverified", "acme-read")
    assert view.status == 200
    assert view.body["entry"]["body"] == "Retry the flaky network suite twice."
    assert view.body["entry"]["scope"]["enterprise"] == "acme"
    below = server.call("GET", f"{BASE}/entries/{entry_id}", "acme-read")
    assert below.status == 404 and below.body["error"]["code"] == "not_found"
    # As of before the write it did not exist; as of now it does.
    then = server.call(
        "GET", f"{BASE}/entries/{entry_id}?min_trust=unverified&at={before}", "acme-read"
    )
    assert then.status == 404
    past = server.call(
        "GET", f"{BASE}/query?query=flaky+network&min_trust=unverified&at={before}", "acme-read"
    )
    assert past.status == 200 and past.body["entries"] == []


def test_the_queue_promote_reject_and_why_with_each_change_dated(server: StoreServer) -> None:
    good = write(server, "db-version", "Production runs Postgres 16.")
    bad = write(server, "db-admin", "Everyone may administer the database.")
    queue = server.call("GET", f"{BASE}/pending?kind=fact", "acme-panel")
    assert queue.status == 200
    pending = {item["id"] for item in queue.body["pending"]}
    assert {good, bad} <= pending

    promoted = server.call(
        "POST", f"{BASE}/entries/{good}/promote", "acme-panel", raw=verdict(server, good, "PASS"),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    assert promoted.status == 200, promoted.raw
    assert promoted.body["trust"] == "verified"
    rejected = server.call(
        "POST", f"{BASE}/entries/{bad}/reject", "acme-panel", raw=verdict(server, bad, "FAIL")
    )
    assert rejected.status == 200 and rejected.body["trust"] == "rejected"
    store = server.fresh()
    assert store.get(good).trust.value == "verified" and store.get(bad).trust.value == "rejected"
    # The server committed with its panel key, and the audit from the root accepts it.
    assert store.log(good)[-1].signer == server.panel_principal
    report = audit(store.git)
    assert report.ok, [str(v) for v in report.violations]

    left = {item["id"] for item in server.call("GET", f"{BASE}/pending", "acme-panel").body[
        "pending"]}  # fmt: skip
    assert good not in left and bad not in left
    # The verified entry now answers a default (verified) query.
    hits = server.call("GET", f"{BASE}/query?query=postgres", "acme-read").body["entries"]
    assert [h["id"] for h in hits] == [good]

    why = server.call("GET", f"{BASE}/entries/{good}/why", "acme-read")
    assert why.status == 200
    history = why.body["history"]
    assert [h["op"] for h in history] == ["write", "promote"]
    assert all(h["time"] for h in history)
    assert history[-1]["to"] == "verified" and history[-1]["verdict"]["valid"] is True
    assert why.body == json.loads(json.dumps(store.why(good)))

    # A decision the store refuses: again (verified now), the wrong outcome, another entry's.
    again = server.call(
        "POST", f"{BASE}/entries/{good}/promote", "acme-panel", raw=verdict(server, good, "PASS")
    )
    assert again.status in (409, 422) and again.body["error"]["code"] in (
        "illegal_transition", "bad_verdict")  # fmt: skip
    third = write(server, "db-port", "Postgres listens on 5432.")
    wrong = server.call(
        "POST", f"{BASE}/entries/{third}/promote", "acme-panel", raw=verdict(server, third, "FAIL")
    )
    assert wrong.status == 422 and wrong.body["error"]["code"] == "bad_verdict"
    other = server.call(
        "POST", f"{BASE}/entries/{third}/promote", "acme-panel", raw=verdict(server, good, "PASS")
    )
    assert other.status == 422 and other.body["error"]["code"] == "bad_verdict"
    assert server.fresh().get(third).trust.value == "unverified"


def test_export_streams_the_tenants_entries_as_the_cli_writes_them(
    server: StoreServer,
) -> None:
    write(server, "export-me", "Exported over HTTP, line for line.")
    answer = server.call("GET", f"{BASE}/export?min_trust=unverified", "acme-read")
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("application/x-ndjson")
    lines = answer.raw.decode().splitlines()
    records = [json.loads(line) for line in lines]
    assert records and all(r["scope"]["enterprise"] == "acme" for r in records)
    assert "Exported over HTTP, line for line." in {r["body"] for r in records}
    cli_out = CliRunner().invoke(
        cli,
        ["--store", str(server.served.store_path), "export", "--min-trust", "unverified"],
        env=server.env,
    )
    assert cli_out.exit_code == 0, cli_out.output
    assert set(lines) <= set(cli_out.stdout.splitlines())


def test_the_log_names_the_store_routes_and_never_a_token_or_an_id(
    server: StoreServer, tmp_path: Path
) -> None:
    entry_id = write(server, "logged", "A note whose id stays out of the log.")
    server.call("GET", f"{BASE}/entries/{entry_id}/why", "acme-read")
    log = server.served.log.read_text()
    assert "POST /v1/tasks/T-1/store/entries 200" in log
    assert "GET /v1/tasks/T-1/store/entries/{entryId}/why 200" in log
    assert entry_id not in log
    for token in server.tokens.values():
        assert token not in log
