"""The HTTP face through a real uvicorn server on 127.0.0.1, started and stopped by each test."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import console
from tests.support.http_support import Served, served_fixture  # noqa: F401 - the fixture
from truss_files.facade import MemoryStore
from truss_files.trust.audit import audit

pytest.importorskip("uvicorn")


def test_serve_prints_one_flushed_line_naming_the_port_it_got(
    served: Callable[..., Served],
) -> None:
    server = served()
    assert server.url == f"http://127.0.0.1:{server.port}" and server.port > 0
    health = server.request("GET", "/healthz")
    assert health.status == 200 and health.body == {"status": "ok"}


# --------------------------------------------------------------------------- auth and errors


def test_every_error_is_json_with_a_code_and_a_message(served: Callable[..., Served]) -> None:
    server = served()
    cases = [
        (server.ask("T-1", token="", purpose="x"), 401, "unauthorized"),
        (server.ask("T-1", token="tft_not-a-token", purpose="x"), 401, "unauthorized"),
        (server.ask("T-1", token=server.write, purpose="x"), 403, "forbidden"),
        (server.train("T-1", {"body": "x"}, token=server.read), 403, "forbidden"),
        (server.ask("T-404", purpose="x"), 404, "unknown_task"),
        (server.train("T-404", {"body": "x"}), 404, "unknown_task"),
        (server.request("GET", "/v1/nowhere"), 404, "not_found"),
        (server.request("DELETE", "/v1/tasks/T-1/memory/ask", token=server.read), 405,
         "method_not_allowed"),
    ]  # fmt: skip
    for answer, status, code in cases:
        assert answer.status == status, (status, answer.raw)
        assert answer.body["error"]["code"] == code
        assert answer.body["error"]["message"]
    assert cases[0][0].headers.get("www-authenticate") == "Bearer"
    # A 405 names the methods the route does take (RFC 9110 15.5.6).
    assert set(cases[-1][0].headers["allow"].split(", ")) == {"GET", "HEAD"}


def test_an_invalid_input_is_422_and_names_the_field(served: Callable[..., Served]) -> None:
    server = served()
    bad_limit = server.ask("T-1", purpose="flaky checks", limit="many")
    assert bad_limit.status == 422 and "`limit`" in bad_limit.body["error"]["message"]
    unknown = server.ask("T-1", purpose="x", colour="red")
    assert unknown.status == 422 and "'colour'" in unknown.body["error"]["message"]
    twice = server.request("GET", "/v1/tasks/T-1/memory/ask?purpose=a&purpose=b", token=server.read)
    assert twice.status == 422 and "`purpose`" in twice.body["error"]["message"]
    not_json = server.train("T-1", None, raw=b"{body: nope}")
    assert not_json.status == 422 and "not JSON" in not_json.body["error"]["message"]
    not_object = server.train("T-1", ["a list"])
    assert not_object.status == 422
    wrong_type = server.train("T-1", {"body": 7})
    assert wrong_type.status == 422 and "body" in wrong_type.body["error"]["message"]
    unknown_field = server.train("T-1", {"body": "x", "author": "someone-else"})
    assert unknown_field.status == 422 and "author" in unknown_field.body["error"]["message"]


def test_an_oversized_body_is_413(served: Callable[..., Served]) -> None:
    server = served(extra=("--max-body", "4096"))
    big = server.train("T-1", {"body": "x" * 5000})
    assert big.status == 413 and big.body["error"]["code"] == "too_large"


# --------------------------------------------------------------------------- the files


def test_a_task_registry_change_takes_effect_without_a_restart(
    served: Callable[..., Served],
) -> None:
    server = served()
    assert server.ask("T-new", purpose="x").status == 404
    server.tasks.write_text(
        server.tasks.read_text()
        + '\n[tasks.T-new]\nmember = "m-9"\nrole = "r"\nteam = "t"\nenterprise = "acme"\n'
    )
    assert server.ask("T-new", purpose="x").status == 200
    # Removing a task revokes it at once, too.
    server.tasks.write_text(server.tasks.read_text().split("[tasks.T-new]")[0])
    assert server.ask("T-new", purpose="x").status == 404


def test_a_broken_task_registry_fails_closed_until_fixed(served: Callable[..., Served]) -> None:
    server = served()
    good = server.tasks.read_text()
    server.tasks.write_text(good + "\n[tasks.T-1\n")
    broken = server.ask("T-1", purpose="x")
    assert broken.status == 503 and "operator" in broken.body["error"]["message"]
    server.tasks.write_text(good)
    assert server.ask("T-1", purpose="x").status == 200
    assert "not valid TOML" in server.stop()


def test_a_new_token_works_and_a_removed_one_stops_without_a_restart(
    served: Callable[..., Served],
) -> None:
    from truss_files.faces.server.tokens import new_token

    server = served()
    token, _ = new_token(server.tokens, ["tasks:read"], name="late", any_task=True)
    assert server.ask("T-1", token=token, purpose="x").status == 200
    kept = [
        block for block in server.tokens.read_text().split("\n\n") if "[tokens.late]" not in block
    ]
    server.tokens.write_text("\n\n".join(kept))
    assert server.ask("T-1", token=token, purpose="x").status == 401
    assert server.ask("T-1", purpose="x").status == 200


def test_serve_refuses_a_key_that_holds_more_than_the_agent_role(
    store: MemoryStore, tmp_path: Path
) -> None:
    # The operator's key also holds operator and panel: a server must not carry it.
    from tests.support.http_support import SCRIPT, TASKS

    (tmp_path / "tasks.toml").write_text(TASKS)
    key = tmp_path / "operator_key"
    done = console.run(
        [str(SCRIPT), "--store", str(store.git.workdir), "--key", str(key), "serve",
         "--tasks", str(tmp_path / "tasks.toml"), "--tokens", str(tmp_path / "tokens.toml"),
         "--port", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]  # piped: the error as JSON, as every command
    assert error["code"] == "config" and "also holds operator, panel" in error["message"]
    assert "listening" not in done.stdout


def test_only_serve_imports_the_web_stack() -> None:
    """The plain CLI (help, tokens) never loads Starlette or uvicorn; the http face does."""
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from truss_files.faces.cli.main import cli\n"
        "for args, status in ((['--help'], 0), (['tokens', 'list', '--file', '/nonexistent'], 1),"
        " (['serve', '--help'], 0)):\n"
        "    assert CliRunner().invoke(cli, args).exit_code == status, args\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'starlette', 'uvicorn'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --------------------------------------------------------------------------- openapi


def test_openapi_describes_what_the_server_does(served: Callable[..., Served]) -> None:
    server = served(extra=("--max-body", "4096"))
    doc = server.request("GET", "/openapi.json")
    assert doc.status == 200
    paths = doc.body["paths"]
    # The store routes have their own test (test_http_store.py).
    assert {p for p in paths if "/store/" not in p} == {
        "/healthz",
        "/openapi.json",
        "/v1/tasks/{taskId}/memory/ask",
        "/v1/tasks/{taskId}/memory/train",
    }
    ask = paths["/v1/tasks/{taskId}/memory/ask"]["get"]
    train = paths["/v1/tasks/{taskId}/memory/train"]["post"]
    # The parameters are memory.ask's input fields, the body memory.train's schema.
    from truss_files.tools.registry import lookup

    ask_tool, train_tool = lookup("memory.ask"), lookup("memory.train")
    assert ask_tool is not None and train_tool is not None
    assert {p["name"] for p in ask["parameters"]} == {
        "taskId",
        *ask_tool.input_schema["properties"],
    }
    body = train["requestBody"]["content"]["application/json"]["schema"]
    assert body == json.loads(json.dumps(train_tool.input_schema))
    # Every status the server gives on these routes is documented.
    seen = {
        ("ask", server.ask("T-1", purpose="x").status),
        ("ask", server.ask("T-1", token="", purpose="x").status),
        ("ask", server.ask("T-1", token=server.write, purpose="x").status),
        ("ask", server.ask("T-9", purpose="x").status),
        ("ask", server.ask("T-1", limit="x", purpose="x").status),
        ("train", server.train("T-1", {"body": "a fact", "source": {"eventId": "e1",
                                                                  "revision": "1"}}).status),
        ("train", server.train("T-1", {"body": "x" * 5000}).status),
        ("train", server.train("T-1", {"bod": "x"}).status),
        ("train", server.train("T-1", {"body": "x"}, token="").status),
        ("train", server.train("T-1", {"body": "x"}, token=server.read).status),
        ("train", server.train("T-9", {"body": "x"}).status),
    }  # fmt: skip
    for route, status in seen:
        documented = (ask if route == "ask" else train)["responses"]
        assert str(status) in documented, (route, status)
    assert {s for _, s in seen} >= {200, 401, 403, 404, 413, 422}


# --------------------------------------------------------------------------- tokens


def test_tokens_new_prints_the_token_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    from tests.support.http_support import SCRIPT

    file = tmp_path / "tokens.toml"
    made = console.run(
        [str(SCRIPT), "tokens", "new", "--file", str(file), "--scope", "tasks:read",
         "--scope", "tasks:write", "--name", "ci", "--enterprise", "acme"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert len(made.stdout.splitlines()) == 1 and token.startswith("tft_")
    stored = file.read_text()
    assert token not in stored and token[4:20] not in stored
    assert hashlib.sha256(token.encode()).hexdigest() in stored
    assert oct(file.stat().st_mode & 0o777) == "0o600"
    as_json = console.run(
        [str(SCRIPT), "tokens", "new", "--file", str(file), "--scope", "tasks:read",
         "--task", "T-1", "--format", "json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    shown = json.loads(as_json.stdout)
    assert set(shown) == {"token", "name", "scopes", "binding"}
    assert shown["scopes"] == ["tasks:read"] and shown["binding"] == {"tasks": ["T-1"]}
    listed = console.run(
        [str(SCRIPT), "tokens", "list", "--file", str(file), "--format", "json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    names = json.loads(listed.stdout)["tokens"]
    assert [t["name"] for t in names] == ["ci", "token-1"]
    assert names[0]["binding"] == {"enterprises": ["acme"]}
    assert token not in listed.stdout and shown["token"] not in listed.stdout
    assert "sha256" not in listed.stdout
    again = console.run(
        [str(SCRIPT), "tokens", "new", "--file", str(file), "--scope", "tasks:read",
         "--name", "ci", "--any-task"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert again.returncode == 1
    assert "already has a token named ci" in json.loads(again.stdout)["error"]["message"]


# --------------------------------------------------------------------------- ask and train


def _event(n: int | str, revision: str = "1") -> dict[str, str]:
    return {"eventId": f"evt-{n}", "revision": revision}


def test_a_trained_note_is_asked_back_in_full_over_http(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    server = served()
    text = "The release check needs the preview URL before it can start."
    trained = server.train("T-1", {"body": text, "source": _event(1)})
    assert trained.status == 200 and trained.body["status"] == "accepted"
    entry = store.get(trained.body["entry"]["id"])
    assert entry.trust.value == "unverified" and entry.body == text
    assert entry.provenance.produced_by == "event:evt-1#1"
    asked = server.ask("T-1", purpose="what does the release check need")
    assert asked.status == 200 and asked.body["status"] == "answered"
    assert [e["id"] for e in asked.body["evidence"]] == [entry.id]
    assert asked.body["evidence"][0]["trust"] == "unverified"
    # Over HTTP nothing is left out and the answer carries the note's text.
    assert not asked.body.get("omitted") and text in asked.body["answer"]
    # Another task does not see T-1's unverified note: nothing in its scope.
    other = server.ask("T-2", purpose="what does the release check need")
    assert other.status == 200 and other.body["status"] == "insufficient_evidence"
    assert other.body["evidence"] == []


def test_train_is_idempotent_on_its_source_and_its_idempotency_key_across_restarts(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    server = served()
    first = server.train("T-1", {"body": "Flaky checks retry once.", "source": _event(2)})
    again = server.train("T-1", {"body": "Flaky checks retry once.", "source": _event(2)})
    assert (first.body["status"], again.body["status"]) == ("accepted", "retained")
    assert again.body["entry"]["id"] == first.body["entry"]["id"]
    keyed = {"Idempotency-Key": "req-42"}
    one = server.train("T-1", {"body": "Deploys wait for green."}, headers=keyed)
    two = server.train("T-1", {"body": "Deploys wait for green."}, headers=keyed)
    assert (one.body["status"], two.body["status"]) == ("accepted", "retained")
    count = len(list(store.iter_entries()))
    server.stop()
    restarted = served()
    assert (
        restarted.train("T-1", {"body": "Flaky checks retry once.", "source": _event(2)}).body[
            "status"
        ]
        == "retained"
    )
    assert (
        restarted.train("T-1", {"body": "Deploys wait for green."}, headers=keyed).body["status"]
        == "retained"
    )
    assert len(list(MemoryStore(store.git.workdir or ".").iter_entries())) == count


def test_a_train_the_rules_refuse_is_a_200_saying_failed(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    server = served()
    before = len(list(store.iter_entries()))
    cases = [
        {"body": "x", "layer": "team", "source": _event("no-grant")},  # prefix ci: is granted
        {"body": "x", "source": {"eventId": "team:forged", "revision": "1"}},  # reserved
        {"body": "x", "source": {"eventId": "gate:forged", "revision": "1"}},  # reserved
    ]
    for body in cases:
        answer = server.train("T-1", body)
        assert answer.status == 200 and answer.body["status"] == "failed", answer.raw
        assert answer.body["reason"] and "entry" not in answer.body
    clone = server.train(
        "T-clone", {"body": "x", "layer": "team", "source": {"eventId": "ci:1", "revision": "1"}}
    )
    assert clone.body["status"] == "failed"
    granted = server.train(
        "T-1", {"body": "CI notes", "layer": "team", "source": {"eventId": "ci:7", "revision": "1"}}
    )
    assert granted.body["status"] == "accepted"
    assert len(list(MemoryStore(store.git.workdir or ".").iter_entries())) == before + 1


def test_concurrent_trains_lose_and_duplicate_nothing_while_asks_answer(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    """40 notes from 8 clients, each sent twice (a retry after a lost reply), asks alongside:
    every note is stored exactly once and every ask is answered."""
    from concurrent.futures import ThreadPoolExecutor

    server = served()
    before = {e.id for e in store.iter_entries()}

    def train(n: int) -> str:
        body = {"body": f"Note {n}: service {n} restarts with backoff {n} s.", "source": _event(n)}
        for _attempt in range(10):
            answer = server.train("T-1", body)
            if answer.status == 200:
                assert answer.body["status"] in ("accepted", "consolidating", "retained")
                return str(answer.body["entry"]["id"])
            assert answer.status in (409, 503), answer.raw  # the store kept moving: retry
        raise AssertionError(f"note {n} never landed")

    def ask(n: int) -> int:
        return server.ask("T-1", purpose=f"service {n} restarts").status

    with ThreadPoolExecutor(8) as pool:
        trains = [pool.submit(train, n % 40) for n in range(80)]
        asks = [pool.submit(ask, n) for n in range(16)]
        ids = [f.result() for f in trains]
        statuses = [f.result() for f in asks]
    assert statuses == [200] * 16
    assert len(set(ids)) == 40 and ids[:40] == ids[40:]
    now = {e.id for e in MemoryStore(store.git.workdir or ".").iter_entries()}
    assert now - before == set(ids)
    report = audit(store.git)
    assert report.ok, [str(v) for v in report.violations]


def test_several_worker_processes_share_one_port(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    server = served(extra=("--workers", "2"))
    trained = [
        server.train("T-1", {"body": f"Worker note {n} about queue {n}.", "source": _event(n)})
        for n in range(6)
    ]
    assert all(t.status == 200 and t.body["status"] != "failed" for t in trained)
    asked = [server.ask("T-1", purpose=f"queue {n}") for n in range(6)]
    assert all(a.status == 200 and a.body["status"] == "answered" for a in asked)
    assert server.ask("T-1", token="", purpose="x").status == 401
    log = server.stop()
    assert log.count("memory/train 200") == 6


def test_vectors_missing_is_a_503_that_names_the_index_command() -> None:
    """A semantic ask whose notes lack vectors: the operator is told what to run, not that
    an index is damaged (``VectorsMissing`` is not ``IndexUnavailable``)."""
    from truss_files.errors import VectorsMissing
    from truss_files.faces.http.app import _answer

    said = "900 of the 900 notes this query ranks have no vector yet; run `truss-files index`"
    answered = _answer(VectorsMissing(said))
    assert answered.status_code == 503
    assert json.loads(bytes(answered.body)) == {
        "error": {"code": "vectors_missing", "message": said}
    }
