"""Bulk import (``Store.import_entries`` and ``truss-files import``): the same entries, ids,
files, commit and signature as ``write_many``, written through one pack while the input is
read, and nothing left behind when it is stopped."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Clock
from truss_files.errors import TransitionError, UsageError
from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.git.bulkpack import STAGING
from truss_files.git.gitstore import GitStore
from truss_files.git.worktree import WorkTree
from truss_files.model import Entry, Trust
from truss_files.signing import Ed25519Signer
from truss_files.store.initstore import init_store
from truss_files.trust.audit import audit

SCRIPT = Path(sys.executable).with_name("truss-files")


def _twin(tmp_path: Path, key: Ed25519Signer, name: str) -> MemoryStore:
    path = tmp_path / name
    init_store(path, key, "operator@example.test")
    return MemoryStore(path, signer=key, clock=Clock(), environ=dict(os.environ))


def _entries(store: MemoryStore, n: int) -> list[Entry]:
    return [
        store.new_entry("fact", f"k{i % 7}", f"fact number {i}\n\nsecond line") for i in range(n)
    ]


def _files(store: MemoryStore) -> dict[str, bytes]:
    return {path: blob.data for path, blob in store.snapshot().walk("memories")}


def test_an_import_stores_what_write_many_stores(
    tmp_path: Path, operator_key: Ed25519Signer
) -> None:
    one = _twin(tmp_path, operator_key, "one")
    two = _twin(tmp_path, operator_key, "two")
    batch = _entries(one, 250)
    assert [e.id for e in _entries(two, 250)] == [e.id for e in batch]  # same clock, same ids
    written = one.write_many(batch)
    imported = two.import_entries(iter(batch))
    assert imported == [e.id for e in written]
    assert _files(two) == _files(one)
    tip_one, tip_two = one.git.tip(), two.git.tip()
    assert tip_one is not None and tip_two is not None
    assert tip_two.tree_id == tip_one.tree_id and tip_two.message == tip_one.message
    # Signed as every write: git itself verifies it against the store's allowed signers.
    workdir = str(two.git.workdir)
    done = subprocess.run(
        [
            "git",
            "-c",
            "gpg.ssh.allowedSignersFile=.truss/allowed_signers",
            "verify-commit",
            str(tip_two.id),
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "Good" in done.stderr, done.stderr
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=workdir, capture_output=True, text=True, check=True
    )
    assert status.stdout == ""  # the work tree and index follow the new commit
    assert audit(two.git).ok
    # Already stored: nothing to commit, the ids come back all the same.
    assert two.import_entries(iter(batch[:3])) == [e.id for e in batch[:3]]
    assert two.git.tip() is not None and two.git.tip().id == tip_two.id  # type: ignore[union-attr]


def test_one_new_entry_is_named_in_the_subject_as_a_write_names_it(store: MemoryStore) -> None:
    (entry,) = _entries(store, 1)
    store.import_entries([entry])
    tip = store.git.tip()
    assert tip is not None and tip.message.startswith(f"truss: write fact {entry.key}\n")


def test_the_input_is_read_as_it_is_packed(store: MemoryStore) -> None:
    packed: list[int] = []

    def lazily() -> Iterator[Entry]:
        for n, entry in enumerate(_entries(store, 400)):
            # Entry n is asked for only once entries 0..n-1 went into the pack.
            assert len(packed) == n
            yield entry

    store.import_entries(lazily(), on_entry=packed.append)
    assert packed == list(range(1, 401))
    assert len(list(store.iter_entries())) == 400


def test_a_refused_entry_midway_imports_nothing_and_leaves_no_objects(
    store: MemoryStore,
) -> None:
    git_dir = store.git.git_dir
    before = sorted(p.name for p in (git_dir / "objects").rglob("*"))
    tip = store.git.tip()
    batch = _entries(store, 300)
    bad = dataclasses.replace(batch[200], trust=Trust.VERIFIED)
    with pytest.raises(TransitionError, match="every write lands unverified"):
        store.import_entries([*batch[:200], bad, *batch[201:]])
    assert sorted(p.name for p in (git_dir / "objects").rglob("*")) == before
    assert store.git.tip() is not None and store.git.tip().id == tip.id  # type: ignore[union-attr]
    assert list((git_dir / STAGING).iterdir()) == []
    with pytest.raises(UsageError, match="checks"):
        store.import_entries([dataclasses.replace(batch[0], checks=("nope",))])


def _line(i: int) -> bytes:
    body = f"note {i}: " + "the quick brown fox jumps over the lazy dog " * 20
    return json.dumps({"kind": "fact", "key": f"n{i % 50}", "body": body}).encode() + b"\n"


def _pack_bytes(git_dir: Path) -> int:
    return sum(p.stat().st_size for p in (git_dir / STAGING).rglob("*") if p.is_file())


def test_a_real_import_streams_from_a_pipe_and_a_kill_leaves_the_store_as_before(
    store: MemoryStore, tmp_path: Path
) -> None:
    """The file is read as it comes: the pack grows while the pipe is still open. A kill
    then (a real SIGKILL) leaves the branch, work tree, index and objects as they were; the
    next import sweeps what the killed one left and imports everything."""
    workdir = Path(str(store.git.workdir))
    git_dir = store.git.git_dir
    store.write("fact", "before", "already here")
    tip = store.git.tip()
    objects = sorted(str(p) for p in (git_dir / "objects").rglob("*"))
    argv = [str(SCRIPT), "--store", str(workdir), "--key", str(tmp_path / "operator_key")]
    proc = subprocess.Popen(
        [*argv, "import", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    try:
        sent = 0
        deadline = time.monotonic() + 60
        while _pack_bytes(git_dir) == 0:  # feed until fast-import has written part of a pack
            assert time.monotonic() < deadline and proc.poll() is None, "nothing was packed"
            proc.stdin.write(b"".join(_line(i) for i in range(sent, sent + 200)))
            proc.stdin.flush()
            sent += 200
            time.sleep(0.05)
        assert sent < 20_000  # streamed: the input is nowhere near its end (no EOF yet)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    after = store.git.tip()
    assert tip is not None and after is not None and after.id == tip.id
    assert sorted(str(p) for p in (git_dir / "objects").rglob("*")) == objects
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=workdir, capture_output=True, text=True, check=True
    )
    assert status.stdout == ""
    source = tmp_path / "again.jsonl"
    source.write_bytes(b"".join(_line(i) for i in range(300)))
    done = subprocess.run(
        [*argv, "import", str(source), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["imported"] == 300
    assert list((git_dir / STAGING).iterdir()) == []  # the killed import's folder is swept
    assert len(list(store.iter_entries())) == 301
    assert audit(store.git).ok


def test_memory_stays_bounded_whatever_the_size_of_the_input(
    store: MemoryStore, tmp_path: Path
) -> None:
    """Ten times the bytes (about 60 MB more of bodies) costs far less than ten times the
    memory: the bodies pass through; only paths and ids stay (peak RSS of real processes)."""
    argv = [
        str(SCRIPT),
        "--store",
        str(store.git.workdir),
        "--key",
        str(tmp_path / "operator_key"),
        "import",
    ]

    def peak(n: int, salt: str) -> float:
        source = tmp_path / f"{salt}.jsonl"
        with source.open("wb") as out:
            for i in range(n):
                body = f"{salt} {i} " + "x" * 30_000
                out.write(json.dumps({"kind": "fact", "key": salt, "body": body}).encode() + b"\n")
        done = subprocess.run(
            ["/usr/bin/time", "-f", "%M", *argv, str(source)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
        return float(done.stderr.strip().splitlines()[-1]) / 1024

    if not Path("/usr/bin/time").exists():
        pytest.skip("/usr/bin/time is not installed: no way to read a child's peak RSS")
    small = peak(200, "small")  # ~6 MB of bodies
    large = peak(2000, "large")  # ~60 MB of bodies
    assert large - small < 30, (small, large)
    tip = store.git.tip()
    assert tip is not None
    assert len(list(store.iter_entries())) == 2200
    # Each file is the entry it was made from, byte for byte as write_many writes it.
    for path, data in _files(store).items():
        assert entryfile.serialize(entryfile.parse(data, path)).encode() == data


def _git(work: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=work, capture_output=True, text=True, check=True)
    return done.stdout


def test_a_big_import_is_checked_out_by_git_and_keeps_the_users_own_changes(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From ``BULK_SYNC`` paths on, git's own checkout writes and stages the new files (none
    is written from here), and what the user has staged or left untracked stays as it was."""
    monkeypatch.setattr(GitStore, "BULK_SYNC", 40)  # 512 in use; 60 entries keep this cheap
    work = store.git.workdir
    assert work is not None
    (work / "notes.txt").write_text("mine, staged\n")
    _git(work, "add", "notes.txt")
    (work / "draft.txt").write_text("mine, untracked\n")

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a bulk import's files were written one at a time")

    monkeypatch.setattr(WorkTree, "write_all", refused)
    batch = _entries(store, 60)
    store.import_entries(batch)
    assert _git(work, "status", "--porcelain") == "A  notes.txt\n?? draft.txt\n"
    # git's index holds each new file with its stat: nothing to hash again, nothing differs.
    assert subprocess.run(["git", "diff-files", "--quiet"], cwd=work).returncode == 0
    for entry in batch:
        assert (work / entry.path).read_bytes() == entryfile.serialize(entry).encode()


def test_when_git_cannot_check_out_the_import_the_files_are_written_from_here(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index git refuses to merge into (an unresolved conflict on another file): the
    import's files are written and staged path by path instead, the conflict left alone."""
    monkeypatch.setattr(GitStore, "BULK_SYNC", 40)
    work = store.git.workdir
    assert work is not None
    sides = [
        subprocess.run(
            ["git", "hash-object", "-w", "--stdin"],
            cwd=work,
            input=f"side {n}\n",
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for n in (1, 2, 3)
    ]
    unmerged = "".join(f"100644 {b} {n}\tclash.txt\n" for n, b in enumerate(sides, 1))
    subprocess.run(
        ["git", "update-index", "--index-info"], cwd=work, input=unmerged, text=True, check=True
    )
    written: list[int] = []
    by_path = WorkTree.write_all

    def counted(self: WorkTree, files: Any, read: Any) -> None:
        written.append(len(files))
        by_path(self, files, read)

    monkeypatch.setattr(WorkTree, "write_all", counted)
    batch = _entries(store, 60)
    store.import_entries(batch)
    assert written == [60]
    assert _git(work, "status", "--porcelain") == "UU clash.txt\n"
    for entry in batch:
        assert (work / entry.path).read_bytes() == entryfile.serialize(entry).encode()
