"""Bad input a user types, through the console script: a clear refusal naming what to fix,
the documented exit status, never a traceback, and nothing written.

Each case was found by running the CLI the way a newcomer does (a shallow clone's audit
range, a body that is not UTF-8, a harness whose $RUN_ID is unset, a typo in a run context
file, an output folder that is not there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import console
from truss_files.facade import MemoryStore
from truss_files.model import Trust

SCRIPT = Path(sys.executable).with_name("truss-files")


def run(
    store: MemoryStore, *args: str, stdin: bytes | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    where = Path(str(store.git.workdir))
    done = console.run(
        [str(SCRIPT), "--store", str(where), "--key", str(where.parent / "operator_key"), *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        cwd=cwd or where,
        env={**os.environ, "TRUSS_CONFIG_DIR": str(where.parent / "config")},
    )
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    assert "Traceback" not in err and "unexpected bug" not in err, err
    return done.returncode, out, err


def error_of(out: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(out)["error"]
    return found


def tip(store: MemoryStore) -> str:
    found = store.git.tip()
    assert found is not None
    return str(found.id)


@pytest.mark.parametrize("base", ["nosuch", "HEAD~1000", "HEAD^{tree}"])
def test_audit_of_a_range_whose_start_is_not_there_says_so(store: MemoryStore, base: str) -> None:
    code, out, _ = run(store, "audit", f"{base}..HEAD", "--format", "json")
    assert code == 1
    assert error_of(out)["message"].startswith(f"no commit named '{base}'")


def test_a_body_that_is_not_utf8_is_refused_and_nothing_is_written(store: MemoryStore) -> None:
    before = tip(store)
    for args, stdin in (
        (["write", "--kind", "fact", "--key", "k", "-"], b"\xff bad"),
        (["write", "--kind", "fact", "--key", "k", os.fsdecode(b"\xff body")], None),
    ):
        code, out, _ = run(store, *args, "--format", "json", stdin=stdin)
        assert code == 1, out
        message = error_of(out)["message"]
        assert message.startswith("body holds an unpaired surrogate at character 1")
        assert "UTF-8" in message
    assert tip(store) == before


def test_import_names_the_line_that_is_not_utf8_and_imports_nothing(
    store: MemoryStore, tmp_path: Path
) -> None:
    lines = tmp_path / "notes.jsonl"
    lines.write_bytes(
        b'{"kind": "fact", "key": "a", "body": "fine"}\n'
        b'{"kind": "fact", "key": "b", "body": "caf\xe9"}\n'
    )
    before = tip(store)
    code, out, _ = run(store, "import", str(lines), "--format", "json")
    assert code == 1
    assert error_of(out)["message"].startswith(f"{lines}:2: not UTF-8 (byte 42 of the line)")
    code, out, _ = run(store, "import", "-", "--format", "json", stdin=b"\xff\n")
    assert code == 1 and error_of(out)["message"].startswith("<stdin>:1: not UTF-8")
    escaped = b'{"kind": "fact", "key": "c", "body": "x \\ud800"}\n'  # JSON's own escape
    code, out, _ = run(store, "import", "-", "--format", "json", stdin=escaped)
    assert code == 1 and "<stdin>:1: body holds an unpaired surrogate" in out
    assert tip(store) == before


def test_verdict_sign_refuses_both_outcomes_or_none(store: MemoryStore) -> None:
    entry = store.write("fact", "deploy-day", "Deploys happen on Tuesdays.")
    for flags in (["--pass", "--fail"], ["--fail", "--pass"], []):
        code, out, err = run(store, "verdict", "sign", entry.id, *flags)
        assert code == 2 and out == "", out
        assert ("not both" if flags else "say --pass or --fail") in err
    assert store.get(entry.id).trust is Trust.UNVERIFIED


def test_an_output_file_in_a_missing_folder_is_said(store: MemoryStore, tmp_path: Path) -> None:
    entry = store.write("fact", "deploy-day", "Deploys happen on Tuesdays.")
    missing = tmp_path / "no" / "such" / "v.json"
    code, out, _ = run(store, "verdict", "sign", entry.id, "--pass", "-o", str(missing))
    assert code == 1
    assert error_of(out)["message"].startswith(f"cannot write the verdict to {missing}")
    tokens = tmp_path / "no" / "t.toml"
    code, out, _ = run(
        store, "tokens", "new", "--file", str(tokens), "--scope", "tasks:read", "--any-task"
    )
    assert code == 1
    assert error_of(out)["message"].startswith(f"cannot write the token file {tokens}")
    assert not missing.parent.exists() and not tokens.parent.exists()


def test_tokens_list_of_a_file_that_is_not_there_is_an_error(
    store: MemoryStore, tmp_path: Path
) -> None:
    code, out, _ = run(store, "tokens", "list", "--file", str(tmp_path / "typo.toml"))
    assert code == 1
    assert error_of(out)["code"] == "not_found"
    assert "tokens new --file" in error_of(out)["message"]


def test_merge_driver_names_a_missing_file(store: MemoryStore, tmp_path: Path) -> None:
    code, _, err = run(store, "merge-driver", "/x", "/y", "/z", "memories/x.md")
    assert code == 2 and "'/x' does not exist" in err


@pytest.mark.parametrize("flag", ["--run", "--parent"])
def test_an_empty_run_id_is_refused_not_taken_for_no_run(store: MemoryStore, flag: str) -> None:
    """A harness whose $RUN_ID is unset passes --run "": the write must not land outside
    the run without a word."""
    before = tip(store)
    extra = ["--run", ""] if flag == "--run" else ["--run", "R-1", "--parent", ""]
    note = json.dumps({"kind": "fact", "key": "k", "body": "x"}).encode()
    code, out, _ = run(store, "tool", "write_memory", "--memory-write", *extra, stdin=note)
    assert code == 1
    assert error_of(out)["message"].startswith("run id '' is not usable")
    assert tip(store) == before


@pytest.mark.parametrize(
    ("field", "hint"), [("taskID", "did you mean 'taskId'?"), ("teamid", "'teamId'"), ("x", "")]
)
def test_a_run_context_field_it_does_not_know_is_refused(
    store: MemoryStore, tmp_path: Path, field: str, hint: str
) -> None:
    context = tmp_path / "ctx.json"
    context.write_text(json.dumps({field: "T-118", "memberId": "m-7"}))
    before = tip(store)
    note = json.dumps({"kind": "fact", "key": "k", "body": "x"}).encode()
    code, out, _ = run(
        store,
        "tool",
        "write_memory",
        "--memory-write",
        "--run",
        "R-1",
        "--run-context",
        str(context),
        stdin=note,
    )
    assert code == 1, out
    message = error_of(out)["message"]
    assert message.startswith(f"{context}: unknown field '{field}'") and hint in message
    assert "taskId, memberId" in message
    assert tip(store) == before
    context.write_text(json.dumps({"taskId": "T-118", "purpose": "ship the release"}))
    code, out, _ = run(
        store, "tool", "memory_query", "--memory-tools", "--run-context", str(context),
        stdin=b'{"query": "release"}',
    )  # fmt: skip
    assert code == 0, out


def test_supersede_refuses_an_entry_another_already_superseded(store: MemoryStore) -> None:
    from tests.support.recall_support import promote

    first, second, third = (
        store.write("fact", f"k{n}", f"Version {n} of the fact.") for n in range(3)
    )
    for entry in (first, second, third):
        promote(store, entry)
    code, out, _ = run(store, "supersede", first.id, second.id, "--format", "json")
    assert code == 0, out
    before = tip(store)
    code, out, _ = run(store, "supersede", first.id, third.id, "--format", "json")
    assert code == 1
    message = error_of(out)["message"]
    assert f"is already superseded by {second.id}" in message
    assert f"truss-files supersede {second.id[:12]} {third.id[:12]}" in message
    assert tip(store) == before and store.get(first.id).superseded_by == second.id
    code, out, _ = run(store, "supersede", first.id, second.id, "--format", "json")
    assert code == 0, out  # the same link again changes nothing it has not already


def test_a_diff_range_that_runs_backwards_is_refused_not_read_as_deletions(
    store: MemoryStore,
) -> None:
    for n in range(2):
        store.write("fact", f"k{n}", f"Fact {n}.")
    code, out, _ = run(store, "diff", "HEAD..HEAD~2", "--format", "json")
    assert code == 1
    assert error_of(out)["message"] == (
        "HEAD..HEAD~2 runs backwards: HEAD~2 is older than HEAD; give HEAD~2..HEAD"
    )
    code, out, _ = run(store, "diff", "HEAD~2..HEAD", "--format", "json")
    assert code == 0, out


@pytest.mark.parametrize(
    "args", [["list"], ["runs", "list"], ["identity", "show"], ["query", "x"], ["show", "abcd1234"]]
)
def test_a_git_repository_without_a_store_is_said_alike_by_every_command(
    tmp_path: Path, args: list[str]
) -> None:
    """Not an empty list (which reads as "no entries"), and one code for all."""
    repo = tmp_path / "code"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(
        ["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty",
         "-m", "x"], cwd=repo, check=True,
    )  # fmt: skip
    done = console.run(
        [str(SCRIPT), *args, "--format", "json"], cwd=repo, capture_output=True, text=True
    )
    assert done.returncode == 1, done.stdout
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "store" and "holds no truss store" in error["message"]
    assert "truss-files init" in error["message"]


@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_query_is_bad_usage_as_the_tool_says(store: MemoryStore, text: str) -> None:
    code, out, err = run(store, "query", text)
    assert code == 2 and out == "" and "give words to look for" in err


def test_the_sdk_adapter_refuses_an_empty_run_id_too(store: MemoryStore) -> None:
    """The same rule as the CLI's (``ToolSession``): only None means "a run of its own"."""
    from truss_files.errors import UsageError
    from truss_files.faces.anthropic_adapter import TrussMemoryTool

    with pytest.raises(UsageError, match="run id '' is not usable"):
        TrussMemoryTool(store, run_id="")
    assert TrussMemoryTool(store).run_id.startswith("sdk-")
