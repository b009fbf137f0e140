"""A schema-driven fuzz of the HTTP API: schemathesis generates requests from the server's own
/openapi.json and sends them to a running server. No request may make it fail (no 5xx), and
every status it answers with must be one the document lists for that route."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.http_support import Served, served_fixture  # noqa: F401 - the fixture
from truss_files.facade import MemoryStore
from truss_files.trust.audit import audit

pytest.importorskip("schemathesis")
pytest.importorskip("uvicorn")

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
# Examples per operation: a bounded sample by default, five times as many with TRUSS_SLOW=1.
SCALE = 10 if os.environ.get("TRUSS_SLOW") == "1" else 2


# ask and train (and the two open routes); the store routes have a fuzz of their own.
TOOLS = "^/(healthz|openapi.json|v1/tasks/[^/]+/memory/.*)$"
STORE = "^/v1/tasks/[^/]+/store/.*$"


def _fuzz(
    server: Served, where: Path, config: str, token: str, examples: int, paths: str = TOOLS
) -> None:
    where.mkdir(parents=True, exist_ok=True)
    config_file = where / "schemathesis.toml"
    config_file.write_text(config)
    done = subprocess.run(
        [
            str(SCHEMATHESIS),
            "--config-file",
            str(config_file),
            "run",
            f"{server.url}/openapi.json",
            "--checks",
            "not_a_server_error,status_code_conformance",
            "--header",
            f"Authorization: Bearer {token}",
            "--max-examples",
            str(examples),
            "--include-path-regex",
            paths,
            "--seed",
            "20261201",
            "--request-timeout",
            "60",
            "--no-color",
        ],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


@pytest.mark.timeout(600)
def test_no_generated_request_makes_the_server_fail(
    served: Callable[..., Served], store: MemoryStore, tmp_path: Path
) -> None:
    server = served()
    # Any task id at all (nearly all unknown: 404), then a real one so that generated inputs
    # reach memory.ask and memory.train themselves.
    _fuzz(server, tmp_path / "any", "", server.both, 4 * SCALE)
    _fuzz(server, tmp_path / "T-1", '[parameters]\n"path.taskId" = "T-1"\n', server.both, 6 * SCALE)
    log = server.stop()
    # The generated inputs did reach both tools, and were answered as well as refused.
    for line in ("T-1/memory/ask 200", "T-1/memory/ask 422", "T-1/memory/train 200",
                 "T-1/memory/train 422", "<unknown>/memory/train 404"):  # fmt: skip
        assert line in log, line
    assert " 500 " not in log and "unexpected" not in log
    report = audit(store.git)
    assert report.ok, [str(v) for v in report.violations]


# A minute and more on two cores: the long variant, with TRUSS_SLOW=1. The attacks and the
# functional tests of the store routes (tests/adversarial/test_http_store_attacks.py,
# test_http_store.py) run in the fast suite.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_no_generated_request_to_the_store_routes_makes_the_server_fail(
    served: Callable[..., Served], store: MemoryStore, tmp_path: Path
) -> None:
    from truss_files.faces.server.tokens import new_token

    server = served()
    every, _ = new_token(
        server.tokens, ["tasks:read", "tasks:write", "tasks:panel"], name="all", any_task=True
    )
    server.secrets.append(every)
    _fuzz(server, tmp_path / "store", '[parameters]\n"path.taskId" = "T-1"\n', every, 15, STORE)
    log = server.stop()
    for line in ("T-1/store/query 200", "T-1/store/query 422", "T-1/store/entries 200",
                 "T-1/store/entries 422", "T-1/store/entries/{entryId} 422"):  # fmt: skip
        assert line in log, line
    assert " 500 " not in log and "unexpected" not in log
    report = audit(store.git)
    assert report.ok, [str(v) for v in report.violations]
