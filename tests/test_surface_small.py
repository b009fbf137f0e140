"""The smaller parts of the public surface: repair says what it fixed, RecallResult iterates
and Hit is exported, the store's verbs are documented, colour only on a terminal without
NO_COLOR, and the demo outside a checkout ends with a message, not a traceback."""

from __future__ import annotations

import inspect
import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

import truss_files
from tests.support import console
from tests.support.tools_support import promote
from truss_files.facade import MemoryStore

SCRIPT = str(Path(sys.executable).with_name("truss-files"))


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRUSS_", "NO_COLOR"))}
    env |= {"TRUSS_KEY": str(tmp_path / "operator_key"), "TERM": "xterm"}
    return env | extra


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


def test_repair_counts_what_an_interrupted_import_left_staged(
    store: MemoryStore, tmp_path: Path
) -> None:
    for n in range(30):
        store.write("fact", f"f{n}", f"Fact number {n}.")
    root = tmp_path / "store"
    # What a Ctrl-C in the middle of an import's commit leaves: the branch has the entries,
    # the index has them removed (staged deletions), the work tree still holds the files.
    _git(root, "rm", "-q", "-r", "--cached", "memories")
    assert _git(root, "status", "--porcelain").count("D  memories/") == 30
    done = console.run(
        [SCRIPT, "--store", str(root), "repair", "--format", "text"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith("repaired: 30 store path(s) restored"), done.stdout
    assert "... and 10 more" in done.stdout  # twenty listed, the rest counted
    assert _git(root, "status", "--porcelain").strip() == ""
    again = console.run(
        [SCRIPT, "--store", str(root), "repair", "--format", "json"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
    )
    assert json.loads(again.stdout)["counts"] == {"restored": 0, "kept": 0, "notes": 0}
    plain = console.run(
        [SCRIPT, "--store", str(root), "repair", "--format", "text"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
    )
    assert plain.stdout.startswith("ok: nothing to repair")


def test_recall_result_iterates_its_hits_and_hit_is_exported(store: MemoryStore) -> None:
    entry = store.write("lesson", "ci", "Retry the flaky network tests once.")
    promote(store, entry.id)
    found = store.query("flaky network tests")
    hits = list(found)
    assert hits == found.hits and [h.entry.id for h in hits] == [entry.id]
    assert isinstance(hits[0], truss_files.Hit)
    assert isinstance(found, truss_files.RecallResult)
    assert {"Hit", "RecallResult"} <= set(truss_files.__all__)


@pytest.mark.parametrize("verb", ["get", "reject", "sign_verdict", "supersede"])
def test_the_store_verbs_people_call_are_documented(verb: str) -> None:
    doc = inspect.getdoc(getattr(truss_files.MemoryStore, verb))
    assert doc and len(doc.split()) >= 12, verb


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> bytes:
    """``argv``'s stdout when it is a terminal (a pty), as the user's screen gets it."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    out = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(30)
    os.close(leader)
    return out


def test_colour_only_on_a_terminal_and_never_with_no_color(
    store: MemoryStore, tmp_path: Path
) -> None:
    entry = store.write("lesson", "ci", "Retry the flaky network tests once.")
    promote(store, entry.id)
    argv = [SCRIPT, "--store", str(tmp_path / "store"), "query", "flaky network", "--format"]
    argv.append("text")
    screen = _on_a_terminal(argv, _env(tmp_path))
    assert b"\x1b[32m[verified]" in screen, screen  # green, on a terminal
    plain = _on_a_terminal(argv, _env(tmp_path, NO_COLOR="1"))
    assert b"[verified]" in plain and b"\x1b[" not in plain
    dumb = _on_a_terminal(argv, _env(tmp_path, TERM="dumb"))
    assert b"[verified]" in dumb and b"\x1b[" not in dumb
    piped = subprocess.run(argv, capture_output=True, env=_env(tmp_path))
    assert b"[verified]" in piped.stdout and b"\x1b[" not in piped.stdout


def test_the_demo_outside_a_checkout_says_what_it_needs(tmp_path: Path) -> None:
    for where in (tmp_path, tmp_path / "repo"):
        where.mkdir(exist_ok=True)
        if where.name == "repo":
            _git(where, "init", "-q")
        done = subprocess.run(
            [sys.executable, "-m", "examples.demo"],
            cwd=where,
            capture_output=True,
            text=True,
            env={**_env(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
        assert done.returncode == 2
        assert "Traceback" not in done.stderr
        assert "make demo" in done.stderr and "python -m examples.demo /path" in done.stderr
