"""`truss-files tool`: one JSON object on stdout, exit 0 / 1 / 2, and --block round trips."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import console
from tests.support.tools_support import cli, out, promote
from truss_files.facade import MemoryStore


@pytest.fixture
def path(store: MemoryStore) -> str:
    return str(store.git.workdir)


@pytest.fixture
def key(tmp_path: Path) -> str:
    return str(tmp_path / "operator_key")


def test_success_and_tool_error(store: MemoryStore, path: str) -> None:
    entry = store.write("fact", "db", "The database is postgres.")
    promote(store, entry.id)
    done = cli(["--store", path, "tool", "memory_query"], {"query": "postgres"})
    assert done.exit_code == 0
    assert [e["id"] for e in out(done)["entries"]] == [entry.id]
    refused = cli(
        ["--store", path, "tool", "memory_query"], {"query": "x", "min_trust": "rejected"}
    )
    assert refused.exit_code == 1
    assert set(out(refused)) == {"error"} and set(out(refused)["error"]) == {"code", "message"}
    unknown = cli(["--store", path, "tool", "memory_forget"], {})
    assert unknown.exit_code == 1 and out(unknown)["error"]["code"] == "unknown_tool"


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["tool", "memory_query"], "{not json"),
        (["tool", "memory_query"], "[1, 2]"),
        (["tool"], "{}"),
        (["tool", "memory_query", "--durable"], "{}"),
        (["tool", "memory_query", "--replay"], "{}"),
        (["tool", "--block"], '{"type": "text", "text": "hi"}'),
        (["tool", "--block"], '{"type": "tool_use", "name": "memory_query", "input": {}}'),
        (
            ["tool", "memory_view", "--block"],
            '{"type": "tool_use", "id": "t1", "name": "memory_query", "input": {}}',
        ),
    ],
)
def test_bad_usage_exits_2_with_one_json_object(path: str, args: list[str], stdin: str) -> None:
    done = cli(["--store", path, *args], stdin)
    assert done.exit_code == 2
    assert out(done)["error"]["code"] == "invalid_input"


def test_unknown_option_is_usage(path: str) -> None:
    assert cli(["--store", path, "tool", "memory_query", "--frobnicate"], "{}").exit_code == 2


def test_block_round_trip(store: MemoryStore, path: str, key: str) -> None:
    create = {
        "type": "tool_use",
        "id": "toolu_01",
        "name": "memory",
        "input": {
            "command": "create",
            "path": "/memories/lessons/ci.md",
            "file_text": "Retry once.",
        },
    }
    done = cli(
        ["--store", path, "tool", "--block", "--memory-write", "--run", "R1"], create, key=key
    )
    assert done.exit_code == 0
    assert out(done) == {
        "type": "tool_result",
        "tool_use_id": "toolu_01",
        "content": "File created successfully at: /memories/lessons/ci.md",
        "is_error": False,
    }
    again = cli(
        ["--store", path, "tool", "memory", "--block", "--memory-write", "--run", "R1"],
        create,
        key=key,
    )
    assert again.exit_code == 1
    assert out(again)["is_error"] is True
    assert out(again)["content"] == "File /memories/lessons/ci.md already exists"
    query = {
        "type": "tool_use",
        "id": "toolu_02",
        "name": "memory_query",
        "input": {"query": "retry", "min_trust": "unverified"},
    }
    found = out(cli(["--store", path, "tool", "--block"], query))
    assert found["tool_use_id"] == "toolu_02" and found["is_error"] is False
    assert json.loads(found["content"])["entries"][0]["key"] == "ci"


def test_console_script_end_to_end(store: MemoryStore, path: str, key: str) -> None:
    exe = Path(sys.executable).with_name("truss-files")
    env = dict(os.environ, TRUSS_KEY=key)
    done = console.run(
        [str(exe), "--store", path, "tool", "write_memory", "--memory-write"],
        input=json.dumps({"kind": "fact", "key": "db", "body": "postgres"}),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == {"id": result["id"], "trust": "unverified"}
    assert done.stdout.count("\n") == 1
    bad = console.run(
        [str(exe), "--store", path, "tool", "write_memory"],
        input="{}",
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"]["code"] == "tool_not_served"


def test_tools_schema_outside_a_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    none = cli(["tools", "schema"])
    assert none.exit_code == 0 and json.loads(none.stdout) == []
    both = cli(["tools", "schema", "--format", "mcp", "--memory-tools", "--memory-write"])
    assert [d["name"] for d in json.loads(both.stdout)] == [
        "memory_query",
        "memory_view",
        "read_memory",
        "memory",
        "write_memory",
        "memory_ask",
        "memory_train",
    ]
    missing = cli(["--store", str(tmp_path / "nope"), "tools", "schema"])
    assert missing.exit_code == 1


def test_cold_read_path_stays_light(store: MemoryStore, path: str) -> None:
    """An indexed memory_query answers without importing pygit2, YAML or the signing stack."""
    entry = store.write("fact", "db", "The database is postgres.")
    promote(store, entry.id)
    probe = (
        "import sys\n"
        "sys.argv = ['truss-files', '--store', sys.argv[1], 'tool', 'memory_query']\n"
        "from truss_files.faces.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = ('pygit2', 'yaml', 'cryptography', 'truss_files.store.store',\n"
        "         'truss_files.facade', 'mcp', 'anthropic')\n"
        "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)\n"
    )
    for _ in range(2):  # the first call may build the index; the second is the warm path
        done = subprocess.run(
            [sys.executable, "-c", probe, path],
            input=json.dumps({"query": "postgres"}),
            capture_output=True,
            text=True,
            check=False,
        )
    assert json.loads(done.stdout)["entries"][0]["id"] == entry.id
    assert done.stderr.strip().splitlines()[-1] == "[]"


def test_the_write_switch_is_memory_write_and_the_old_name_still_works(
    store: MemoryStore, path: str, key: str
) -> None:
    """--memory-write serves the write binding; --memory-tool (one letter from the read switch
    --memory-tools) keeps working for old configurations but is no longer offered in help."""
    view = {"command": "view", "path": "/memories"}
    refused = cli(["--store", path, "tool", "memory"], view, key=key)
    assert refused.exit_code == 1 and "--memory-write" in out(refused)["error"]["message"]
    for flag in ("--memory-write", "--memory-tool"):
        done = cli(["--store", path, "tool", "memory", flag, "--run", "R1"], view, key=key)
        assert done.exit_code == 0, done.output
    for command in (["tool"], ["tools", "schema"], ["mcp"], ["context"]):
        shown = cli([*command, "--help"]).stdout
        assert "--memory-write" in shown and "--memory-tools" in shown
        assert "--memory-tool " not in shown and "--memory-tool\n" not in shown
    # The read switch alone still serves no write.
    schema = cli(["--store", path, "tools", "schema", "--memory-tools"])
    assert "write_memory" not in {d["name"] for d in json.loads(schema.stdout)}
    both = cli(["--store", path, "tools", "schema", "--memory-tool"])
    assert "write_memory" in {d["name"] for d in json.loads(both.stdout)}


def test_format_text_indents_the_same_object(store: MemoryStore, path: str) -> None:
    entry = store.write("fact", "db", "The database is postgres.")
    promote(store, entry.id)
    line = cli(["--store", path, "tool", "memory_query"], {"query": "postgres"})
    text = cli(["--store", path, "tool", "memory_query", "--format", "text"], {"query": "postgres"})
    assert text.exit_code == 0 and len(text.stdout.splitlines()) > 1
    assert len(line.stdout.splitlines()) == 1
    assert json.loads(text.stdout) == json.loads(line.stdout)
    bad = {"query": "x", "min_trust": "rejected"}
    refused = cli(["--store", path, "tool", "memory_query", "--format", "text"], bad)
    assert refused.exit_code == 1 and set(json.loads(refused.stdout)) == {"error"}
