"""Crash injection: real ``truss-files write`` processes killed with SIGKILL at random moments.

Each trial starts two writers on one checked-out store, kills one of them (sometimes both) at
a random moment of its life, lets the others finish, then runs the next ordinary operation (a
write) and checks what a crashing machine must never break:

- ``git fsck`` is clean and HEAD is readable;
- ``truss-files audit`` is ok from the trust root;
- ``git status --porcelain`` shows nothing at all (the index and work tree are in step with
  HEAD for every store path, and no temporary file is left behind);
- every acknowledged write (the writer printed its id and exited 0) is in HEAD.

A dozen trials by default (a bounded sample), four times as many with ``TRUSS_SLOW=1``;
``TRUSS_CRASH_TRIALS=N`` runs N, e.g. 300 before a release. ``TRUSS_CRASH_SEED`` replays one
sequence of kill times.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from truss_files.facade import MemoryStore
from truss_files.git.gitstore import GitStore
from truss_files.trust.audit import audit

TRIALS = int(os.environ.get("TRUSS_CRASH_TRIALS", "48" if os.environ.get("TRUSS_SLOW") else "12"))
WRITERS = 2


def _cli() -> list[str]:
    found = Path(sys.executable).parent / "truss-files"
    return [str(found)] if found.exists() else [sys.executable, "-m", "truss_files"]


def _writer(work: Path, key: Path, name: str) -> subprocess.Popen[str]:
    argv = [*_cli(), "--store", str(work), "--key", str(key), "write", "--kind", "fact"]
    argv += ["--key", name, "--format", "json", f"Written by crash writer {name}."]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _git(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=work, capture_output=True, text=True, timeout=60)


def _lifetime(work: Path, key: Path) -> float:
    """How long one writer process takes from start to exit on this machine, now."""
    start = time.monotonic()
    proc = _writer(work, key, "calibration")
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return time.monotonic() - start


def _check(store: MemoryStore, work: Path, acked: dict[str, str], trial: int) -> None:
    where = f"trial {trial}"
    fsck = _git(work, "fsck", "--no-progress", "--no-dangling")
    assert fsck.returncode == 0, f"{where}: git fsck: {fsck.stdout}{fsck.stderr}"
    head = _git(work, "cat-file", "-p", "HEAD")
    assert head.returncode == 0 and head.stdout.startswith("tree "), f"{where}: HEAD unreadable"
    report = audit(GitStore(work))
    assert report.ok, f"{where}: audit: {[str(v) for v in report.violations]}"
    status = _git(work, "status", "--porcelain", "--untracked-files=all").stdout
    assert status == "", f"{where}: work tree or index out of step with HEAD:\n{status}"
    snap = store.snapshot()
    for entry_id, name in acked.items():
        found = store.get(entry_id, snap)
        assert found.key == name, f"{where}: acknowledged write {name} ({entry_id}) lost"


def test_kill_9_at_random_moments_loses_nothing_acknowledged(
    store: MemoryStore, tmp_path: Path
) -> None:
    work = store.git.workdir
    assert work is not None
    key = tmp_path / "operator_key"
    seed = int(os.environ.get("TRUSS_CRASH_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    life = _lifetime(work, key)
    recovered: list[str] = []
    store.git.note = recovered.append  # what the next write says it recovered, for the summary
    acked: dict[str, str] = {}
    killed = 0
    for trial in range(TRIALS):
        procs = {f"t{trial}-w{n}": _writer(work, key, f"t{trial}-w{n}") for n in range(WRITERS)}
        victims = rng.sample(sorted(procs), k=rng.choice((1, 1, WRITERS)))
        # Most of a writer's life is start-up; aim the kills at its second half, where it
        # plans, commits, moves the branch and syncs the work tree.
        time.sleep(rng.uniform(0.35, 1.1) * life)
        for name in victims:
            if procs[name].poll() is None:
                os.kill(procs[name].pid, signal.SIGKILL)
                killed += 1
        for name, proc in procs.items():
            out, _err = proc.communicate(timeout=120)
            if proc.returncode == 0:
                acked[json.loads(out)["id"]] = name
            else:
                # Only a killed writer may fail; a survivor must finish its write.
                assert name in victims, f"seed {seed} trial {trial}: {name} failed: {_err}"

        # The next ordinary operation recovers whatever the kill left behind.
        after = store.write("fact", f"t{trial}-next", f"The write after trial {trial}.")
        acked[after.id] = after.key
        _check(store, work, acked, trial)
    assert killed > 0, f"seed {seed}: no writer was ever killed; the trials tested nothing"
    print(
        f"\ncrash suite (seed {seed}): {TRIALS} trials, {killed} writers killed, "
        f"{len(acked)} acknowledged writes all present; the next write recovered: "
        f"{sum('interrupted write' in n for n in recovered)} interrupted syncs, "
        f"{sum('stale lock' in n for n in recovered)} stale locks"
    )
