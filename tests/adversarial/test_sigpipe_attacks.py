"""Attacks on the promise that a reader leaving the output ends any command as SIGPIPE ends
git: no traceback, no exit 3 (which says "a bug, report it"), at most one line on stderr, and
exit 141 (or 1).

A pipeline's reader leaves early all the time -- ``| head -1``, ``| true``, a ``promote``
that refuses its options before it reads the verdict piped into it. Python ignores SIGPIPE,
so the write fails with EPIPE instead; a command that took that for a bug would bury the
pipeline's real error (``promote``'s usage line) under a traceback, and a script checking for
exit 3 would file a bug report for ``| head``.

Each case runs the console script in its own process, its stdout the write end of a pipe
whose reader is already gone (what ``| true`` leaves when ``true`` exits first), or in a real
pipeline whose reader leaves before the writer is done.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from truss_files.facade import MemoryStore

SCRIPT = Path(sys.executable).with_name("truss-files")
ENDED_BY_THE_READER = (141, 1)  # git's 128 + SIGPIPE, or 1; never 3, never a traceback


def argv(store: MemoryStore, *args: str) -> list[str]:
    where = Path(str(store.git.workdir))
    return [str(SCRIPT), "--store", str(where), "--key", str(where.parent / "operator_key"), *args]


def into_a_closed_pipe(command: list[str]) -> tuple[int, str]:
    """Run ``command`` with stdout into a pipe nobody reads any more: exit status, stderr."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(command, stdout=write, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write)
    return done.returncode, done.stderr.decode(errors="replace")


def assert_ended_quietly(code: int, err: str) -> None:
    assert "Traceback" not in err and "unexpected bug" not in err, err
    assert "Exception ignored" not in err, err
    assert len(err.splitlines()) <= 1, err
    assert code in ENDED_BY_THE_READER, (code, err)


@pytest.fixture
def many(store: MemoryStore, tmp_path: Path) -> MemoryStore:
    """A store whose ``list`` is far more than a pipe holds (~0.2 MB of JSON), one entry
    verified so a default query answers."""
    notes = tmp_path / "notes.jsonl"
    notes.write_text(
        "".join(
            json.dumps({"kind": "fact", "key": f"k{i}", "body": f"note {i} about postgres " * 4})
            + "\n"
            for i in range(400)
        )
    )
    done = subprocess.run(argv(store, "import", str(notes)), capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    entry = store.write("fact", "db", "The database is postgres.")
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS"))
    return store


def one_id(store: MemoryStore) -> str:
    return store.list_entries(key="db")[0].id


@pytest.mark.parametrize(
    "args",
    [
        ["query", "postgres", "--format", "json"],
        ["query", "postgres", "--format", "text", "--min-trust", "unverified"],
        ["log", "ID"],
        ["show", "ID", "--format", "json"],
        ["why", "ID"],
        ["verdict", "sign", "ID", "--pass"],
    ],
    ids=" ".join,
)
def test_a_reader_that_left_ends_the_command_quietly(many: MemoryStore, args: list[str]) -> None:
    wanted = [one_id(many) if a == "ID" else a for a in args]
    assert_ended_quietly(*into_a_closed_pipe(argv(many, *wanted)))


def test_list_into_head_ends_like_git(many: MemoryStore) -> None:
    """``truss-files list | head -1``: head takes its line and leaves. Whether list is still
    writing then (EPIPE on its next write) or blocked in a write the kernel cuts short, it
    ends quietly -- and when head is gone before list writes at all (what a fast reader such
    as ``| true`` leaves), it ends as git does."""
    writer = subprocess.Popen(argv(many, "list"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert writer.stdout is not None
    head = subprocess.run(["head", "-1"], stdin=writer.stdout, capture_output=True, timeout=120)
    writer.stdout.close()
    _, err = writer.communicate(timeout=120)
    assert head.stdout == b"[\n"
    said = err.decode(errors="replace")
    assert "Traceback" not in said and len(said.splitlines()) <= 1, said
    assert writer.returncode in (0, *ENDED_BY_THE_READER), (writer.returncode, said)
    assert_ended_quietly(*into_a_closed_pipe(argv(many, "list")))


def test_verdict_sign_into_a_promote_that_refused_its_options(many: MemoryStore) -> None:
    """``truss-files verdict sign ID --pass | truss-files promote ID --verdict - --bad-option``:
    promote stops at its bad option (exit 2, its usage on stderr) before reading a byte; the
    signer then finds no reader and ends quietly, so promote's error is the one shown."""
    entry = many.write("fact", "other", "Another note to verify.")
    read, write = os.pipe()
    try:
        promote = subprocess.run(
            argv(many, "promote", entry.id, "--verdict", "-", "--bad-option"),
            stdin=read,
            capture_output=True,
            timeout=120,
        )
    finally:
        os.close(read)
    assert promote.returncode == 2 and b"--bad-option" in promote.stderr
    try:
        sign = subprocess.run(
            argv(many, "verdict", "sign", entry.id, "--pass"),
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write)
    assert_ended_quietly(sign.returncode, sign.stderr.decode(errors="replace"))
    assert many.get(entry.id).trust.value == "unverified"  # nothing was promoted
