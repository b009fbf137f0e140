"""`~` in every path a user gives: no shell expands it in `.mcp.json` args, a quoted
`--store '~/m'`, TRUSS_STORE or a Python call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from truss_files import MemoryStore
from truss_files.errors import StoreError
from truss_files.faces.cli.app import cli
from truss_files.git.gitstore import GitStore
from truss_files.tools.dispatch import ToolSession


@pytest.fixture
def home_store() -> Path:
    """`truss-files init '~/agent-memory'`, as .mcp.json or a quoted shell word passes it."""
    done = CliRunner().invoke(cli, ["init", "~/agent-memory", "--format", "json"])
    assert done.exit_code == 0, done.output
    path = Path(os.environ["HOME"]) / "agent-memory"
    assert (path / "truss.toml").is_file() and not Path("~").exists()
    return path


def test_python_api_and_tool_session_expand_the_home(home_store: Path) -> None:
    store = MemoryStore("~/agent-memory")
    entry = store.write("lesson", "home", "Paths under the home folder work as written.")
    assert store.git.workdir == home_store
    session = ToolSession("~/agent-memory", flags=["memory"])
    outcome = session.call("memory_view", {"id": entry.id, "min_trust": "unverified"})
    assert outcome.ok and entry.id in outcome.text


def test_cli_store_option_and_environment_expand_the_home(
    home_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    wrote = runner.invoke(
        cli, ["--store", "~/agent-memory", "write", "--kind", "fact", "--key", "k", "x y z"]
    )
    assert wrote.exit_code == 0, wrote.output
    listed = runner.invoke(cli, ["--store", "~/agent-memory", "list", "--format", "json"])
    assert [e["key"] for e in json.loads(listed.output)] == ["k"]
    monkeypatch.setenv("TRUSS_STORE", "~/agent-memory")
    assert json.loads(runner.invoke(cli, ["list", "--format", "json"]).output)[0]["key"] == "k"
    # The click-free query path of the console script, in a real process.
    done = subprocess.run(
        [sys.executable, "-m", "truss_files", "--store", "~/agent-memory", "query", "x y",
         "--min-trust", "unverified", "--format", "json"],
        capture_output=True, text=True, check=False, cwd="/",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [e["key"] for e in json.loads(done.stdout)["entries"]] == ["k"]


def test_a_path_that_does_not_exist_says_so() -> None:
    with pytest.raises(StoreError, match="does not exist; run `truss-files init"):
        GitStore("~/no-such-store")
    done = CliRunner().invoke(cli, ["--store", "~/no-such-store", "list", "--format", "json"])
    assert done.exit_code == 1
    message = json.loads(done.output)["error"]["message"]
    assert (
        str(Path(os.environ["HOME"]) / "no-such-store") in message and "does not exist" in message
    )
