"""Attacks on the whole store over HTTP (``faces/http/store.py``), against one running server
for the module that holds a panel key, takes bodies of at most 4 KiB, and serves a store
whose trust root is pinned after its first notes.

A token of another tenant reaches none of the store routes (403 on a task it is not bound to,
and from its own task no entry of another enterprise: 404 as for no entry at all); a read
token neither writes nor decides; a decision needs the panel scope, and then a key of the
server's with the panel role -- without one the server signs nothing and answers with the
CLI's code -- and it settles no other tenant's entry of the same kind and key; bodies are
bounded; an entry id is 32 hex digits and nothing else; ``at`` below the trust floor is
refused as the CLI refuses it; a credential in a write is refused (422 ``secret``) and never
echoed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.support.credentials import CREDENTIALS
from tests.support.http_support import StoreServer, entries, start_store_server
from truss_files.errors import ConfigError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.trust.audit import audit

pytest.importorskip("uvicorn")
pytestmark = pytest.mark.spawns

ACME = "/v1/tasks/T-1/store"
EVIL = "/v1/tasks/T-evil/store"
CANARY = "canary-store-7c2e the staging database password rotates on fridays"
MISSING = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreServer]:
    floor: dict[str, str] = {}

    def prepare(store: MemoryStore) -> None:
        # A note from before the trust root, then the root pinned after it.
        floor["old"] = store.write("fact", "old-news", "From before the trust root.").id
        floor["before"] = str(store.git.tip().id)  # type: ignore[union-attr]
        store.write("fact", "root-marker", "The trust root is pinned here.")
        work = store.git.workdir
        assert work is not None
        subprocess.run(
            ["git", "config", "truss.root", str(store.git.tip().id)],  # type: ignore[union-attr]
            cwd=work,
            check=True,
        )

    where = tmp_path_factory.mktemp("store-attacks")
    for found in start_store_server(
        where, panel=True, extra=("--max-body", "4096"), prepare=prepare
    ):
        found.env["FLOOR_BEFORE"] = floor["before"]
        found.env["FLOOR_OLD"] = floor["old"]
        yield found


def write(server: StoreServer, token: str, base: str, key: str, body: str) -> Any:
    return server.call("POST", f"{base}/entries", token,
                       body={"kind": "fact", "key": key, "body": body})  # fmt: skip


def verdict(server: StoreServer, entry_id: str, outcome: str = "PASS") -> bytes:
    return server.fresh().sign_verdict(entry_id, outcome, note="looked at it").to_json().encode()


def every_route(server: StoreServer, base: str, entry_id: str) -> list[tuple[str, str, Any]]:
    """(method, path, body) of each store route, with inputs that would succeed."""
    return [
        ("GET", f"{base}/query?query=staging+database&min_trust=unverified", None),
        ("GET", f"{base}/entries/{entry_id}?min_trust=unverified", None),
        ("GET", f"{base}/entries/{entry_id}/why", None),
        ("GET", f"{base}/export?min_trust=unverified", None),
        ("GET", f"{base}/pending", None),
        ("POST", f"{base}/entries", {"kind": "fact", "key": "planted", "body": "Planted."}),
        ("POST", f"{base}/entries/{entry_id}/promote", verdict(server, entry_id)),
        ("POST", f"{base}/entries/{entry_id}/reject", verdict(server, entry_id, "FAIL")),
    ]


def send(server: StoreServer, method: str, path: str, token: str, body: Any) -> Any:
    if isinstance(body, bytes):
        return server.call(method, path, token, raw=body)
    return server.call(method, path, token, body=body)


def acme_note(server: StoreServer) -> str:
    answer = write(server, "acme-write", ACME, "staging-db", CANARY)
    assert answer.status == 200, answer.raw
    return str(answer.body["id"])


def intact(server: StoreServer, before: set[str]) -> None:
    assert server.call("GET", "/healthz", None).status == 200
    store = server.fresh()
    assert entries(store) == before
    report = audit(store.git)
    assert report.ok, [str(v) for v in report.violations]


# --------------------------------------------------------------------------- tenants


def test_a_token_bound_elsewhere_reaches_no_store_route(server: StoreServer) -> None:
    entry_id = acme_note(server)
    before = entries(server.fresh())
    cases = [("evil-all", ACME), ("acme-all", EVIL)]
    for token, base in cases:
        for method, path, body in every_route(server, base, entry_id):
            answer = send(server, method, path, token, body)
            assert answer.status == 403, (token, path, answer.raw)
            assert answer.body["error"]["code"] == "forbidden"
            assert CANARY not in answer.raw.decode()
    # Bound to task T-1 only: T-2 of the same enterprise is another tenant of the token.
    other_task = server.call("GET", "/v1/tasks/T-2/store/query?query=x", "t1-read")
    assert other_task.status == 403
    intact(server, before)


def test_from_its_own_task_a_tenant_sees_nothing_of_another(server: StoreServer) -> None:
    entry_id = acme_note(server)
    before = entries(server.fresh())
    seen = []
    for method, path, body in every_route(server, EVIL, entry_id)[:5]:
        answer = send(server, method, path, "evil-all", body)
        assert answer.status in (200, 404), (path, answer.raw)
        seen.append(answer)
        assert CANARY not in answer.raw.decode(), path
    query, view, why, export, pending = seen
    assert query.body["entries"] == [] and export.raw == b""
    assert [p["id"] for p in pending.body["pending"]] == []
    for listing in (query, export, pending):
        assert entry_id not in listing.raw.decode()
    # Another tenant's entry answers exactly as an id no one wrote.
    unknown = server.call("GET", f"{EVIL}/entries/{MISSING}/why", "evil-all")
    assert why.status == unknown.status == 404
    assert why.body["error"]["message"] == unknown.body["error"]["message"].replace(
        MISSING, entry_id
    )
    unknown_view = server.call("GET", f"{EVIL}/entries/{MISSING}?min_trust=unverified", "evil-all")
    assert view.status == unknown_view.status == 404
    assert view.body["error"]["message"] == unknown_view.body["error"]["message"].replace(
        MISSING, entry_id
    )
    # A valid panel verdict for acme's entry, sent through evilcorp's task: refused as no entry.
    for outcome, verb in (("PASS", "promote"), ("FAIL", "reject")):
        decided = server.call("POST", f"{EVIL}/entries/{entry_id}/{verb}", "evil-all",
                              raw=verdict(server, entry_id, outcome))  # fmt: skip
        assert decided.status == 404, decided.raw
    assert server.fresh().get(entry_id).trust.value == "unverified"
    # evilcorp's own write lands in evilcorp, where acme's token cannot see it.
    planted = write(server, "evil-all", EVIL, "evil-note", "evilcorp's own note")
    assert planted.status == 200
    assert server.fresh().get(planted.body["id"]).scope["enterprise"] == "evilcorp"
    acme_view = server.call(
        "GET", f"{ACME}/entries/{planted.body['id']}?min_trust=unverified", "acme-read"
    )
    assert acme_view.status == 404
    assert entries(server.fresh()) == before | {planted.body["id"]}


def test_a_rival_of_another_tenant_is_not_named_in_a_conflict(server: StoreServer) -> None:
    """Two enterprises' verified notes on one kind and key, both kept (keep-both-flagged):
    acme's query reports no conflict naming evilcorp's note, not even by id."""
    ours = write(server, "acme-write", ACME, "shared-key", "Acme deploys on tuesdays.")
    theirs = write(server, "evil-all", EVIL, "shared-key", "Evilcorp deploys on tuesdays too.")
    mine = write(server, "acme-all", ACME, "shared-key", "Acme deploys on tuesdays at noon.")
    store = server.fresh()
    for answer in (ours, theirs, mine):
        entry_id = answer.body["id"]
        store.promote(entry_id, store.sign_verdict(entry_id, "PASS"), conflict="keep-both-flagged")
    found = server.call("GET", f"{ACME}/query?query=deploys+tuesdays", "acme-read")
    assert found.status == 200
    assert {e["id"] for e in found.body["entries"]} == {ours.body["id"], mine.body["id"]}
    assert found.body["conflicts"] == [
        {"kind": "fact", "key": "shared-key", "ids": [ours.body["id"], mine.body["id"]]}
    ]
    assert theirs.body["id"] not in found.raw.decode()


def test_an_entry_with_no_enterprise_is_no_tenants(server: StoreServer) -> None:
    loose = server.fresh().write("fact", "loose", "Written by the operator with no scope.")
    answer = server.call("GET", f"{ACME}/entries/{loose.id}?min_trust=unverified", "acme-all")
    assert answer.status == 404
    queue = server.call("GET", f"{ACME}/pending", "acme-all").body["pending"]
    assert loose.id not in {p["id"] for p in queue}


# --------------------------------------------------------------------------- scopes


def test_a_read_token_neither_writes_nor_decides(server: StoreServer) -> None:
    entry_id = acme_note(server)
    before = entries(server.fresh())
    for method, path, body in every_route(server, ACME, entry_id)[4:]:
        answer = send(server, method, path, "acme-read", body)
        assert answer.status == 403 and answer.body["error"]["code"] == "forbidden", path
        assert "tasks:" in answer.body["error"]["message"]
    intact(server, before)


def test_a_decision_needs_the_panel_scope(server: StoreServer) -> None:
    entry_id = acme_note(server)
    before = entries(server.fresh())
    for token in ("acme-read", "acme-write"):
        for verb, outcome in (("promote", "PASS"), ("reject", "FAIL")):
            answer = server.call("POST", f"{ACME}/entries/{entry_id}/{verb}", token,
                                 raw=verdict(server, entry_id, outcome))  # fmt: skip
            assert answer.status == 403, (token, verb)
            assert "tasks:panel" in answer.body["error"]["message"]
    assert server.fresh().get(entry_id).trust.value == "unverified"
    intact(server, before)


def test_when_the_servers_key_lacks_the_panel_role_it_signs_no_decision(
    server: StoreServer, tmp_path: Path
) -> None:
    """The operator revokes the panel role of the server's panel key: the next promote is
    refused with the CLI's code for that key, before anything is signed."""
    entry_id = write(server, "acme-write", ACME, "revoked", "Decided once the role is back.")
    entry_id = entry_id.body["id"]
    pass_verdict = verdict(server, entry_id)
    principal = server.panel_principal
    assert principal is not None
    server.store.revoke_role("panel", principal)
    try:
        store = server.fresh()
        tip = str(store.git.tip().id)  # type: ignore[union-attr]
        objects = _loose_objects(store)
        answer = server.call("POST", f"{ACME}/entries/{entry_id}/promote", "acme-panel",
                             raw=pass_verdict)  # fmt: skip
        assert answer.status == 403, answer.raw
        # The CLI's answer for the same key and verdict, code for code.
        (tmp_path / "v.json").write_bytes(pass_verdict)
        key = server.served.store_path.parent / "panel_key"
        done = CliRunner().invoke(
            cli,
            ["--store", str(server.served.store_path), "--key", str(key), "promote", entry_id,
             "--verdict", str(tmp_path / "v.json"), "--format", "json"],
            env=server.env,
        )  # fmt: skip
        assert done.exit_code == 1
        assert answer.body["error"]["code"] == json.loads(done.stdout)["error"]["code"]
        assert answer.body["error"]["code"] == "bad_signature"
        # Nothing signed, nothing moved.
        after = server.fresh()
        assert str(after.git.tip().id) == tip  # type: ignore[union-attr]
        assert _loose_objects(after) == objects
        assert after.get(entry_id).trust.value == "unverified"
    finally:
        server.store.grant_role("panel", principal)
    # With the role back, the same verdict goes through.
    again = server.call("POST", f"{ACME}/entries/{entry_id}/promote", "acme-panel",
                        raw=pass_verdict)  # fmt: skip
    assert again.status == 200 and again.body["trust"] == "verified"


def test_without_a_panel_key_a_server_commits_with_its_own_key_and_is_refused(
    server: StoreServer,
) -> None:
    """A server started without --panel-key answers a promote through its agent key, which
    holds no panel role: refused before anything is signed (the route's 403)."""
    from truss_files.errors import SignatureError
    from truss_files.facade import read_verdict, tenant_scope
    from truss_files.faces.http.app import Backend, ServeOptions
    from truss_files.faces.server.tasks import TaskRegistry

    fresh = write(server, "acme-write", ACME, "no-panel-key", "Promoted by nobody here.")
    entry_id = fresh.body["id"]
    pass_verdict = verdict(server, entry_id)
    served = server.served
    options = ServeOptions(
        store=str(served.store_path),
        tasks=str(served.tasks),
        tokens=str(served.tokens),
        key=str(served.store_path.parent / "server_key"),
    )
    backend = Backend(options)
    context = TaskRegistry.parse(served.tasks.read_bytes()).get("T-1")
    assert context is not None
    scope = tenant_scope(context)
    objects = _loose_objects(server.fresh())
    with pytest.raises(SignatureError, match="operator or panel role"):
        backend.decide(
            lambda store: store.promote(
                entry_id, read_verdict(pass_verdict.decode(), "v"), scope=scope
            )
        )
    assert _loose_objects(server.fresh()) == objects
    assert server.fresh().get(entry_id).trust.value == "unverified"


def test_a_tenants_promotion_retires_no_other_tenants_entry(server: StoreServer) -> None:
    """Under verified-wins a promotion stales the older verified entries of its kind and
    key: only the tenant's own. evilcorp's note on acme's key leaves acme's note verified."""
    ours = write(server, "acme-write", ACME, "release-day", "Acme releases on thursdays.")
    promoted = server.call("POST", f"{ACME}/entries/{ours.body['id']}/promote", "acme-panel",
                           raw=verdict(server, ours.body["id"]))  # fmt: skip
    assert promoted.status == 200, promoted.raw
    theirs = write(server, "evil-all", EVIL, "release-day", "Releases are cancelled forever.")
    decided = server.call("POST", f"{EVIL}/entries/{theirs.body['id']}/promote", "evil-all",
                          raw=verdict(server, theirs.body["id"]))  # fmt: skip
    assert decided.status == 200, decided.raw
    store = server.fresh()
    assert store.get(ours.body["id"]).trust.value == "verified"
    assert store.get(ours.body["id"]).superseded_by is None
    assert store.get(theirs.body["id"]).trust.value == "verified"
    # Within a tenant the policy holds as ever: acme's newer note retires its older one.
    newer = write(server, "acme-write", ACME, "release-day", "Acme releases on fridays now.")
    server.call("POST", f"{ACME}/entries/{newer.body['id']}/promote", "acme-panel",
                raw=verdict(server, newer.body["id"]))  # fmt: skip
    after = server.fresh()
    assert after.get(ours.body["id"]).trust.value == "stale"
    assert after.get(theirs.body["id"]).trust.value == "verified"
    report = audit(after.git)
    assert report.ok, [str(v) for v in report.violations]


def test_a_panel_key_without_the_panel_role_stops_the_server_at_start(
    server: StoreServer,
) -> None:
    from truss_files.faces.http.factory import create_app

    where = server.served.store_path.parent
    environ = {
        **server.env,
        "TRUSS_STORE": str(server.served.store_path),
        "TRUSS_TASKS": str(server.served.tasks),
        "TRUSS_TOKENS": str(server.served.tokens),
        "TRUSS_KEY": str(where / "server_key"),
        "TRUSS_PANEL_KEY": str(where / "server_key"),  # agent and trainer: no panel role
    }
    with pytest.raises(ConfigError, match="panel role"):
        create_app(environ)


# --------------------------------------------------------------------------- bounds


def test_an_oversized_body_is_refused_before_it_is_read(server: StoreServer) -> None:
    entry_id = acme_note(server)
    before = entries(server.fresh())
    big = {"kind": "fact", "key": "big", "body": "x" * 5000}
    for path in (f"{ACME}/entries", f"{ACME}/entries/{entry_id}/promote"):
        answer = server.call("POST", path, "acme-all", body=big)
        assert answer.status == 413 and answer.body["error"]["code"] == "too_large", path
    intact(server, before)


@pytest.mark.parametrize(
    "ref",
    [
        "..%2F..%2Fetc%2Fpasswd",
        "..%2f..%2f.truss%2fallowed_signers",
        "%2e%2e",
        "..",
        "0123456789abcdef0123456789abcde",  # 31 digits
        "0123456789ABCDEF0123456789ABCDEF",
        "01234567",  # a prefix: ambiguity would name other tenants' ids
        "0123456789abcdef0123456789abcdef%00",
        "memories%2Ffact%2F01%2F0123456789abcdef0123456789abcdef.md",
    ],
)
def test_an_entry_id_is_32_hex_digits_and_nothing_else(server: StoreServer, ref: str) -> None:
    for path in (f"{ACME}/entries/{ref}?min_trust=unverified", f"{ACME}/entries/{ref}/why"):
        answer = server.call("GET", path, "acme-all")
        assert answer.status in (404, 422), (ref, answer.raw)
        text = answer.raw.decode(errors="replace")
        assert "allowed_signers" not in text or answer.status == 422
        assert "root:" not in text and "ssh-ed25519" not in text
    assert server.call("GET", "/healthz", None).status == 200


def test_at_below_the_trust_floor_is_refused_as_the_cli_refuses_it(server: StoreServer) -> None:
    before, old = server.env["FLOOR_BEFORE"], server.env["FLOOR_OLD"]
    refused = [
        server.call("GET", f"{ACME}/query?query=news&min_trust=unverified&at={before}",
                    "acme-read"),
        server.call("GET", f"{ACME}/entries/{old}?min_trust=unverified&at={before}",
                    "acme-read"),
        server.call("GET", f"{ACME}/export?min_trust=unverified&at={before}", "acme-read"),
    ]  # fmt: skip
    done = CliRunner().invoke(
        cli,
        ["--store", str(server.served.store_path), "query", "news", "--min-trust",
         "unverified", "--at", before, "--format", "json"],
        env=server.env,
    )  # fmt: skip
    assert done.exit_code == 1
    said = json.loads(done.stdout)["error"]
    assert "before the pinned trust root" in said["message"]
    for answer in refused:
        assert answer.status == 422, answer.raw
        assert answer.body["error"] == said
    # A commit that is not on the branch at all: refused too, never read.
    work = server.fresh().git.workdir
    assert work is not None
    forged = subprocess.run(
        ["git", "commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", "forged"],
        cwd=work, env=server.env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    off = server.call("GET", f"{ACME}/query?query=news&at={forged}", "acme-read")
    assert off.status == 422 and "not in the history of" in off.body["error"]["message"]
    garbage = server.call("GET", f"{ACME}/query?query=news&at=2026-13-45", "acme-read")
    assert garbage.status == 422


# --------------------------------------------------------------------------- secrets


@pytest.mark.parametrize("kind", ["github-token", "aws-access-key-id", "private-key"])
def test_a_credential_in_a_write_is_refused_and_never_echoed(
    server: StoreServer, kind: str
) -> None:
    value = CREDENTIALS[kind]
    before = entries(server.fresh())
    bodies = [{"kind": "fact", "key": "deploy", "body": f"Deploy with {value} from CI."}]
    if "\n" not in value:  # a key is one line: a PEM block cannot be one
        bodies.append({"kind": "fact", "key": f"k-{value}", "body": "harmless"})
    for body in bodies:
        answer = server.call("POST", f"{ACME}/entries", "acme-write", body=body)
        assert answer.status == 422, answer.raw
        assert answer.body["error"]["code"] == "secret"
        assert value[:20] not in answer.raw.decode()
    assert value[:20] not in server.served.log.read_text()
    intact(server, before)


def _loose_objects(store: MemoryStore) -> set[str]:
    base = Path(store.git.git_dir) / "objects"
    return {
        f"{d.name}{f.name}"
        for d in base.iterdir()
        if len(d.name) == 2 and d.is_dir()
        for f in d.iterdir()
    }
