"""Attacks on the work tree beside the store, each performed for real.

- A folder of the store (``memories/``, ``memories/fact``, a fan-out folder) replaced by a
  symbolic link to a folder outside the repository: no write may land a byte outside.
- A writer killed (SIGKILL) exactly between moving the branch and syncing the work tree and
  index: the next operation must recover, ``repair`` must too, and a plain ``git commit`` in
  between must be refused instead of deleting the entry.
- Lock files left by a killed process (``refs/heads/main.lock``, ``index.lock``) must not
  block writes for ever; a lock a running git process holds must never be removed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import console
from truss_files.errors import ConflictError
from truss_files.facade import MemoryStore
from truss_files.faces.hooks import install_hooks
from truss_files.git.gitstore import Identity, Plan, Snapshot
from truss_files.signing import Ed25519Signer

WHO = Identity("Test Operator", "operator@example.test")


def _run(
    store: MemoryStore, key: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    work = store.git.workdir
    assert work is not None
    return console.run(
        [console.SCRIPT, "--store", str(work), "--key", str(key), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _write_fact(
    store: MemoryStore, tmp_path: Path, key: str, body: str
) -> subprocess.CompletedProcess[str]:
    """``truss-files write`` of a fact, as the operator, in JSON."""
    return _run(
        store, tmp_path / "operator_key", "write", "--kind", "fact", "--key", key, "--format",
        "json", body,
    )  # fmt: skip


def _git(work: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["git", *args], cwd=work, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {done.stderr}")
    return done


def _status(work: Path) -> list[str]:
    return [line for line in _git(work, "status", "--porcelain").stdout.splitlines() if line]


def _tree_listing(folder: Path) -> list[tuple[str, bytes]]:
    return sorted(
        (str(p.relative_to(folder)), p.read_bytes()) for p in folder.rglob("*") if p.is_file()
    )


# -- writes through symbolic links -------------------------------------------------------------


def _plant_link(work: Path, where: str, outside: Path) -> None:
    """Replace ``where`` (a folder of the store) by a link to ``outside``; for the fan-out
    case every one of the 256 ``memories/fact/<xx>`` folders becomes a link."""
    if where == "fan-out":
        (work / "memories" / "fact").mkdir(parents=True, exist_ok=True)
        for n in range(256):
            link = work / "memories" / "fact" / f"{n:02x}"
            if link.exists():
                shutil.rmtree(link)
            link.symlink_to(outside, target_is_directory=True)
        return
    target = work / where
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(outside, target_is_directory=True)


@pytest.mark.parametrize("where", ["memories", "memories/fact", "fan-out"])
@pytest.mark.parametrize("face", ["write", "tool memory create"])
def test_a_write_never_follows_a_symlink_out_of_the_repository(
    store: MemoryStore, tmp_path: Path, where: str, face: str
) -> None:
    work = store.git.workdir
    assert work is not None
    store.write("fact", "already-here", "An entry the link now hides.")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("someone else's file\n")
    before = _tree_listing(outside)
    head = store.git.tip()
    assert head is not None
    _plant_link(work, where, outside)

    if face == "write":
        done = _write_fact(store, tmp_path, "k", "Written through a link?")
        assert done.returncode == 1, done.stdout + done.stderr
        message = json.loads(done.stdout)["error"]["message"]
    else:
        request = {"command": "create", "path": "/memories/facts/k.md", "file_text": "x\n"}
        done = _run(
            store,
            tmp_path / "operator_key",
            "tool",
            "memory",
            "--memory-write",
            stdin=json.dumps(request),
        )
        assert done.returncode == 1, done.stdout + done.stderr
        message = json.loads(done.stdout)["error"]["message"]

    assert "symbolic link" in message and "truss-files repair" in message
    assert where.replace("fan-out", "memories/fact/") in message
    assert _tree_listing(outside) == before  # not one byte outside
    # Refused before anything moved: the branch and every stored entry are as they were.
    assert store.git.tip() is not None and store.git.tip().id == head.id  # type: ignore[union-attr]
    assert [e.key for e in store.list_entries()] == ["already-here"]


def test_a_link_planted_after_the_check_stops_the_sync_and_repair_restores(
    store: MemoryStore, operator_key: Ed25519Signer, tmp_path: Path
) -> None:
    """The race: the link appears between the work tree check and the sync. The commit has
    landed (the object database is the truth); the sync refuses the link; repair restores."""
    work = store.git.workdir
    assert work is not None
    store.write("fact", "first", "The folder exists now.")
    outside = tmp_path / "outside"
    outside.mkdir()
    path = "memories/fact/zz/raced.md"

    def plant(_commit: object, _snap: Snapshot) -> None:
        _plant_link(work, "memories/fact", outside)

    with pytest.raises(ConflictError) as caught:
        store.git.apply(
            lambda _s: Plan({path: b"raced\n"}, "x\n\nTruss-Op: write"),
            operator_key,
            WHO,
            check=plant,
        )

    assert "landed" in caught.value.message and "symbolic link" in caught.value.message
    assert list(outside.iterdir()) == []
    assert store.snapshot().read(path) == b"raced\n"
    (work / "memories" / "fact").unlink()
    repaired = _run(store, tmp_path / "operator_key", "repair", "--format", "json")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert (work / path).read_bytes() == b"raced\n"
    assert _status(work) == []


# -- a kill between moving the branch and syncing the work tree --------------------------------

_KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from truss_files.git.gitstore import GitStore
    from truss_files.signing import Ed25519Signer
    from truss_files.facade import MemoryStore

    def die(*_args, **_kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    # The kill lands exactly where the issue's 32 of 180 random kills landed.
    setattr(GitStore, sys.argv[3], die)
    store = MemoryStore(sys.argv[1], signer=Ed25519Signer.load(Path(sys.argv[2])))
    store.write("fact", sys.argv[4], sys.argv[5])
    """
)


def _killed_write(store: MemoryStore, key: Path, at: str, key_: str, body: str) -> None:
    work = store.git.workdir
    assert work is not None
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(work), str(key), at, key_, body],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -9, done.stderr


@pytest.mark.parametrize("at", ["_sync_worktree", "_stage"])
def test_a_kill_before_the_sync_is_recovered_by_the_next_write(
    store: MemoryStore, tmp_path: Path, at: str
) -> None:
    work = store.git.workdir
    assert work is not None
    key = tmp_path / "operator_key"
    _killed_write(store, key, at, "crash", "Written by a writer that was killed.")
    entries = [e for e in store.list_entries() if e.key == "crash"]
    assert len(entries) == 1  # the commit landed before the kill
    path = entries[0].path
    # The hazard is real: the index is one write behind, the entry looks deleted.
    assert f"D  {path}" in _status(work)

    done = _run(store, key, "write", "--kind", "fact", "--key", "next", "--format", "json", "x")

    assert done.returncode == 0, done.stderr
    assert "recovered from an interrupted write" in done.stderr
    assert _status(work) == []
    assert (work / path).read_bytes() == store.snapshot().read(path)
    assert not list((store.git.git_dir / "truss" / "pending").iterdir())


def test_a_plain_git_commit_after_a_kill_is_refused_naming_repair(
    store: MemoryStore, tmp_path: Path
) -> None:
    work = store.git.workdir
    assert work is not None
    install_hooks(work)
    key = tmp_path / "operator_key"
    _killed_write(store, key, "_sync_worktree", "crash", "This entry must survive.")
    head = store.git.tip()
    assert head is not None
    (work / "NOTES.txt").write_text("an unrelated change\n")
    _git(work, "add", "NOTES.txt")

    made = _git(work, "commit", "-q", "-m", "notes", check=False)

    assert made.returncode != 0
    assert "[no-delete]" in made.stderr and "truss-files repair" in made.stderr
    assert "[interrupted-write]" in made.stderr
    assert store.git.tip().id == head.id  # type: ignore[union-attr]

    fixed = _run(store, key, "repair", "--format", "json")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert _status(work) == ["A  NOTES.txt"]
    _git(work, "commit", "-q", "-m", "notes")
    assert [e.key for e in store.list_entries() if e.key == "crash"] == ["crash"]


def test_recovery_keeps_a_users_own_edit_and_repair_force_discards_it(
    store: MemoryStore, operator_key: Ed25519Signer, tmp_path: Path
) -> None:
    """A journaled path the user edited since the crash holds a version the store never
    wrote: recovery leaves it alone and says so; only ``repair --force`` discards it."""
    work = store.git.workdir
    assert work is not None
    key = tmp_path / "operator_key"
    _killed_write(store, key, "_sync_worktree", "crash", "Stored before the kill.")
    path = next(e.path for e in store.list_entries() if e.key == "crash")
    (work / path).parent.mkdir(parents=True, exist_ok=True)
    (work / path).write_text("the user's own words\n")

    other = store.write("fact", "next", "A write after the crash.")

    assert (work / path).read_text() == "the user's own words\n"
    assert store.snapshot().read(other.path) == (work / other.path).read_bytes()
    kept = _run(store, key, "repair", "--format", "json")
    assert kept.returncode == 1
    assert json.loads(kept.stdout)["kept"] == [path]
    forced = _run(store, key, "repair", "--force", "--format", "json")
    assert forced.returncode == 0, forced.stdout
    assert _status(work) == []


# -- lock files left by a kill -----------------------------------------------------------------

_KILLED_HOLDING_REF = textwrap.dedent(
    """
    import os, signal, sys
    import pygit2
    repo = pygit2.Repository(sys.argv[1])
    txn = repo.transaction().__enter__()
    txn.lock_ref("refs/heads/main")
    os.kill(os.getpid(), signal.SIGKILL)
    """
)
_KILLED_HOLDING_INDEX = textwrap.dedent(
    """
    import os, signal, sys
    fd = os.open(os.path.join(sys.argv[1], "index.lock"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.write(fd, open(os.path.join(sys.argv[1], "index"), "rb").read()[:100])
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize(
    ("script", "lock"),
    [(_KILLED_HOLDING_REF, "refs/heads/main.lock"), (_KILLED_HOLDING_INDEX, "index.lock")],
    ids=["ref-lock", "index-lock"],
)
def test_a_lock_left_by_a_killed_process_is_cleared_and_named(
    store: MemoryStore, tmp_path: Path, script: str, lock: str
) -> None:
    work = store.git.workdir
    assert work is not None
    git_dir = store.git.git_dir
    left = subprocess.run([sys.executable, "-c", script, str(git_dir)], timeout=60, check=False)
    assert left.returncode == -9 and (git_dir / lock).exists()

    done = _write_fact(store, tmp_path, "after", "Written after the kill.")

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"removed the stale lock {git_dir / lock}" in done.stderr
    assert not (git_dir / lock).exists()
    entry_id = json.loads(done.stdout)["id"]
    assert store.get(entry_id).key == "after"
    assert _status(work) == []


def test_a_running_git_process_keeps_its_ref_lock(store: MemoryStore, tmp_path: Path) -> None:
    work = store.git.workdir
    assert work is not None
    head = store.git.tip()
    assert head is not None
    lock = store.git.git_dir / "refs" / "heads" / "main.lock"
    holder = subprocess.Popen(
        ["git", "update-ref", "--stdin"], cwd=work, stdin=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdin is not None
        holder.stdin.write(f"start\nupdate refs/heads/main {head.id}\nprepare\n")
        holder.stdin.flush()
        deadline = time.monotonic() + 10
        while not lock.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lock.exists()
        time.sleep(2.2)  # older than the stale age: only the live process protects it

        done = _write_fact(store, tmp_path, "k", "Blocked by a live git.")

        assert done.returncode == 1
        message = json.loads(done.stdout)["error"]["message"]
        assert "main.lock" in message and "running git process" in message
        assert lock.exists() and holder.poll() is None
        assert store.git.tip().id == head.id  # type: ignore[union-attr]
    finally:
        assert holder.stdin is not None
        holder.stdin.write("abort\n")
        holder.stdin.close()
        holder.wait(timeout=30)
    assert not lock.exists()
    done = _write_fact(store, tmp_path, "k", "Now it goes through.")
    assert done.returncode == 0, done.stderr


def test_a_running_git_commit_keeps_its_index_lock(store: MemoryStore, tmp_path: Path) -> None:
    """``git commit -a`` holds index.lock while its editor runs: our write lands its commit,
    leaves the lock alone, says why the index lags, and the next write catches up."""
    work = store.git.workdir
    assert work is not None
    lock = store.git.git_dir / "index.lock"
    release = tmp_path / "release"
    editor = tmp_path / "editor.sh"
    editor.write_text(f'#!/bin/sh\nwhile [ ! -e "{release}" ]; do sleep 0.05; done\n: > "$1"\n')
    editor.chmod(0o755)
    (work / "NOTES.txt").write_text("staged by the user\n")
    _git(work, "add", "NOTES.txt")
    env = {**os.environ, "GIT_EDITOR": str(editor)}
    holder = subprocess.Popen(
        ["git", "commit", "-a"], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 10
        while not lock.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lock.exists()
        time.sleep(2.2)

        done = _write_fact(store, tmp_path, "k", "Lands while git commit waits.")

        assert done.returncode == 1
        message = json.loads(done.stdout)["error"]["message"]
        assert "landed" in message and "index.lock" in message and "running git process" in message
        assert lock.exists() and holder.poll() is None
        assert [e.key for e in store.list_entries()] == ["k"]
    finally:
        release.touch()
        holder.wait(timeout=30)
    assert not lock.exists()
    after = _write_fact(store, tmp_path, "k2", "The next write catches the index up.")
    assert after.returncode == 0, after.stderr
    assert "recovered from an interrupted write" in after.stderr
    assert _status(work) == ["A  NOTES.txt"]


def test_a_commit_that_puts_back_an_older_store_file_is_refused_naming_repair(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    """What the index looks like after a kill mid trust change (``MM``), made by hand: the
    staged file is its own older version, and committing it would roll the change back."""
    work = store.git.workdir
    assert work is not None
    install_hooks(work)
    old = (work / "truss.toml").read_bytes()
    signed_commit(store, {"truss.toml": old + b"\n# a signed operator change\n"})
    head = store.git.tip()
    assert head is not None
    _git(work, "checkout", "HEAD~1", "--", "truss.toml")

    made = _git(work, "commit", "-q", "-m", "x\n\nTruss-Op: config", check=False)

    assert made.returncode != 0
    assert "truss.toml: [older-version]" in made.stderr and "truss-files repair" in made.stderr
    assert store.git.tip().id == head.id  # type: ignore[union-attr]


def test_a_run_ledger_lock_left_by_a_kill_does_not_block_the_ledger(store: MemoryStore) -> None:
    git_dir = store.git.git_dir
    ref = "refs/truss/runs/R-killed"
    store.write("fact", "two-commits", "So the ledger has somewhere to move.")
    head = store.git.tip()
    assert head is not None
    store.git.repo.references.create(ref, head.id)
    script = _KILLED_HOLDING_REF.replace("refs/heads/main", ref)
    left = subprocess.run([sys.executable, "-c", script, str(git_dir)], timeout=60, check=False)
    assert left.returncode == -9 and (git_dir / f"{ref}.lock").exists()
    said: list[str] = []
    store.git.note = said.append

    moved = store.git.update_ref(ref, head.id, head.parents[0].id, "ledger call")

    assert moved and store.git.repo.references[ref].target == head.parents[0].id
    assert said and f"removed the stale lock {git_dir / ref}.lock" in said[0]
