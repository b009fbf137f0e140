"""``truss-files query``: modes, errors, and the index behind it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_recall_support import mixed_store

from truss_files.faces.cli import cli
from truss_files.store import MemoryStore

SCRIPT = Path(sys.executable).parent / "truss-files"


def run(store: MemoryStore, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli, ["--store", str(store.git.workdir), "query", *args, "--format", "json"]
    )
    return result.exit_code, result.output


def test_query_reports_its_mode_and_follows_writes(store: MemoryStore) -> None:
    made = mixed_store(store)
    code, out = run(store, "flaky network retry")
    data = json.loads(out)
    assert code == 0 and data["recall_mode"] == "exact" and data["min_trust"] == "verified"
    assert [e["id"] for e in data["entries"]] == [made["v1"].id]
    fresh = store.write("lesson", "flaky-2", "flaky network: retry with jitter")
    code, out = run(store, "flaky network retry", "--min-trust", "unverified")
    assert fresh.id in {e["id"] for e in json.loads(out)["entries"]}


def test_unknown_mode_is_a_usage_error(store: MemoryStore) -> None:
    code, out = run(store, "x", "--mode", "fuzzy")
    assert code == 2 and "'fuzzy' is not one of 'exact', 'semantic', 'hybrid'" in out


def test_semantic_without_the_extra_says_how_to_install(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "wordllama", None)
    code, out = run(store, "x", "--mode", "semantic")
    error = json.loads(out)["error"]
    assert code == 1 and error["code"] == "config"
    assert "pip install 'truss-files[semantic]'" in error["message"]


def test_console_script_end_to_end(store: MemoryStore) -> None:
    made = mixed_store(store)
    for _ in range(2):  # cold (builds the index), then warm
        done = subprocess.run(
            [str(SCRIPT), "--store", str(store.git.workdir), "query", "postgres pgbouncer"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert [e["id"] for e in json.loads(done.stdout)["entries"]] == [made["v5"].id]
