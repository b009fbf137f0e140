"""``uvicorn --factory truss_files.http:create_app``: a real uvicorn process on 127.0.0.1,
configured by TRUSS_STORE / TRUSS_TASKS / TRUSS_TOKENS alone; and the deploy/ files that run
it (a systemd unit, a Dockerfile), checked."""

from __future__ import annotations

import configparser
import os
import re
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.http_support import TASKS, Served, agent_key
from truss_files.errors import ConfigError
from truss_files.facade import MemoryStore
from truss_files.faces.server.tokens import new_token

pytest.importorskip("uvicorn")
from truss_files.faces.http.factory import create_app  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _uvicorn(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], int | None]:
    """uvicorn as a newcomer runs it; the port it got, from its start-up line."""
    argv = [sys.executable, "-m", "uvicorn", "--factory", "truss_files.http:create_app"]
    argv += ["--host", "127.0.0.1", "--port", "0"]
    err = open(log, "wb")  # noqa: SIM115 - the child holds it
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.5)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 4096)
            if not chunk:
                break
            seen += chunk
            found = re.search(rb"running on http://127\.0\.0\.1:(\d+)", seen)
            if found:
                err.write(seen)
                return proc, int(found.group(1))
        elif proc.poll() is not None:
            break
    proc.wait(10)
    rest = proc.stderr.read() or b""
    err.write(seen + rest)
    err.close()
    return proc, None


@pytest.fixture
def factory_env(
    store: MemoryStore, add_signer: Callable[..., str], tmp_path: Path
) -> Iterator[tuple[dict[str, str], str, str]]:
    key = agent_key(store, add_signer, tmp_path)
    (tmp_path / "tasks.toml").write_text(TASKS)
    tokens = tmp_path / "tokens.toml"
    read, _ = new_token(tokens, ["tasks:read"], name="reader", any_task=True)
    write, _ = new_token(tokens, ["tasks:write"], name="writer", any_task=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRUSS_")}
    env |= {
        "TRUSS_STORE": str(tmp_path / "store"),
        "TRUSS_TASKS": str(tmp_path / "tasks.toml"),
        "TRUSS_TOKENS": str(tokens),
        "TRUSS_KEY": str(key),
    }
    yield env, read, write


def test_uvicorn_factory_serves_what_serve_serves(
    factory_env: tuple[dict[str, str], str, str], tmp_path: Path
) -> None:
    env, read, write = factory_env
    log = tmp_path / "uvicorn.log"
    proc, port = _uvicorn(env, log)
    assert port is not None, log.read_text()
    server = Served(
        f"http://127.0.0.1:{port}", "127.0.0.1", port, proc, Path(env["TRUSS_STORE"]),
        Path(env["TRUSS_TASKS"]), Path(env["TRUSS_TOKENS"]), log, read, write, "", [read, write],
    )  # fmt: skip
    try:
        assert server.request("GET", "/healthz").body == {"status": "ok"}
        source = {"eventId": "e1", "revision": "1"}
        trained = server.train("T-1", {"body": "The preview URL is posted.", "source": source})
        assert trained.status == 200 and trained.body["status"] == "accepted", trained.raw
        asked = server.ask("T-1", purpose="secret-purpose-words")
        assert asked.status == 200 and "answer" in asked.body, asked.raw
        assert server.ask("T-1", token=write, purpose="x").status == 403
        wrong = server.request("DELETE", "/v1/tasks/T-1/memory/ask", token=read)
        assert wrong.status == 405 and wrong.body["error"]["code"] == "method_not_allowed"
        assert set(wrong.headers["allow"].split(", ")) == {"GET", "HEAD"}
        assert server.request("GET", "/v1/tasks/T-1/memory/train").headers["allow"] == "POST"
    finally:
        server.stop()
    said = log.read_bytes() + (proc.stderr.read() if proc.stderr else b"")
    assert b"secret-purpose-words" not in said  # uvicorn's access log (query strings) is off
    keys = {e.key for e in MemoryStore(env["TRUSS_STORE"]).iter_entries()}
    assert "event:e1" in keys  # the trained note, in the store TRUSS_STORE names


def test_the_factory_refuses_a_missing_variable_by_name(
    factory_env: tuple[dict[str, str], str, str], tmp_path: Path
) -> None:
    env, _, _ = factory_env
    with pytest.raises(ConfigError, match="TRUSS_TASKS, TRUSS_TOKENS"):
        create_app({"TRUSS_STORE": env["TRUSS_STORE"]})
    broken = dict(env) | {"TRUSS_TASKS": str(tmp_path / "nowhere.toml")}
    proc, port = _uvicorn(broken, tmp_path / "broken.log")
    assert port is None and proc.returncode != 0
    assert "nowhere.toml" in (tmp_path / "broken.log").read_text()


def test_the_factory_refuses_a_key_that_may_do_more_than_the_agent_role(
    factory_env: tuple[dict[str, str], str, str], tmp_path: Path
) -> None:
    env, _, _ = factory_env
    owner = dict(env) | {"TRUSS_KEY": str(tmp_path / "operator_key")}
    with pytest.raises(ConfigError):
        create_app(owner)


# --------------------------------------------------------------------------- deploy/


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((ROOT / "deploy" / "truss-files.service").read_text())
    return parser


def test_the_systemd_unit_runs_the_factory_bound_to_localhost() -> None:
    unit = _unit()
    service = unit["Service"]
    assert "uvicorn --factory truss_files.http:create_app" in service["ExecStart"]
    assert "--host 127.0.0.1" in service["ExecStart"]
    assert "--proxy-headers" in service["ExecStart"]
    assert {"TRUSS_STORE", "TRUSS_TASKS", "TRUSS_TOKENS", "TRUSS_KEY"} <= {
        part.split("=", 1)[0] for part in service["Environment"].split()
    }
    assert service["User"] and service["NoNewPrivileges"] == "yes"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(ROOT / "deploy" / "truss-files.service")],
        capture_output=True,
        text=True,
    )
    # The unit names a binary under /opt that this machine need not have; anything else
    # (an unknown key, a bad section, a syntax error) fails the test.
    problems = [
        line
        for line in done.stderr.splitlines()
        if line.strip() and "/opt/truss-files" not in line and "not executable" not in line
    ]
    assert not problems, done.stderr


def test_the_dockerfile_installs_the_wheel_and_runs_the_factory_unprivileged() -> None:
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    lines = [line.strip() for line in text.replace("\\\n", " ").splitlines() if line.strip()]
    instructions = [line.split()[0] for line in lines if not line.startswith("#")]
    assert instructions[0] == "FROM" and instructions.count("FROM") == 2  # build, then run
    assert set(instructions) <= {
        "FROM", "RUN", "COPY", "WORKDIR", "ENV", "USER", "EXPOSE", "CMD", "HEALTHCHECK", "ARG",
        "LABEL", "VOLUME", "ENTRYPOINT",
    }  # fmt: skip
    assert any("pip wheel" in line for line in lines)
    assert not any(re.search(r"pip install\s+['\"]?truss-files", line) for line in lines)
    user = [line for line in lines if line.startswith("USER ")]
    assert user and user[-1] != "USER root"
    cmd = next(line for line in lines if line.startswith("CMD "))
    assert "truss_files.http:create_app" in cmd and "--factory" in cmd
    assert "git" in next(line for line in lines if "apt-get install" in line)
    for copied in re.findall(r"^COPY (?!--from)(\S+)", text, re.M):
        assert (ROOT / copied).exists(), copied
