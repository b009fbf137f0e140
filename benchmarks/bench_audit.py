"""Audit of ~1,000 real signed commits, beside what git itself does with the same history.

The store gets 1,000 ``MemoryStore.write`` commits and 100 promotions (panel verdicts, some
superseding an older verified entry of the same key), all signed in process. ``audit()`` then
re-checks every commit from the trust root (signature, roles, codec, path and id, legal
transitions, verdicts). Baselines over the same commits:

- ``git log --format=%H``: just walking the history, the floor for any audit;
- ``git verify-commit`` of every commit in one call, with ``gpg.format=ssh``: signature checks
  only, one ``ssh-keygen -Y verify`` process per commit. When that would take long it runs on
  a prefix of the commits and is scaled linearly (said in the note).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from truss_files.facade import MemoryStore
from truss_files.signing.trustpolicy import SIGNERS_PATH
from truss_files.trust.audit import audit

from .common import (
    Figure,
    command_runner,
    freeze_heap,
    measure,
    new_store,
    progress,
    scaled,
    scratch,
    timed,
)

AUDIT_TARGET_S = 10.0  # issue 2: audit of 1,000 commits <= 10 s on 2 cores
VERIFY_SAMPLE = 300  # commits given to `git verify-commit` before scaling up


def build_history(store: MemoryStore, writes: int, promotions: int) -> None:
    ids = []
    for i in range(writes):
        # 1 in 10 keys repeats, so some promotions supersede an older verified entry.
        entry = store.write("lesson", f"topic-{i % max(1, writes // 10)}", f"audited write {i}")
        ids.append(entry.id)
    step = max(1, writes // max(1, promotions))
    for entry_id in ids[::step][:promotions]:
        store.promote(entry_id, store.sign_verdict(entry_id, "PASS", note="bench"))


def run(quick: bool) -> list[Figure]:
    writes = scaled(200 if quick else 1_000)
    promotions = max(1, writes // 10)
    figures: list[Figure] = []
    with scratch("audit") as tmp:
        store = new_store(tmp / "store.git")
        took = timed(lambda: build_history(store, writes, promotions))
        progress(f"{writes} signed writes + {promotions} promotions in {took:.1f} s")
        freeze_heap()
        git_dir = str(store.git.git_dir)
        tip = store.git.tip()
        assert tip is not None
        commits = [str(c.id) for c in store.git.repo.walk(tip.id)]
        n = len(commits)

        def audit_once() -> None:
            report = audit(store.git, environ={})
            if not report.ok or report.checked != n:
                raise AssertionError(f"audit found {report.violations[:3]} ({report.checked})")

        repeats = 3 if quick else 5
        progress(f"audit of {n} commits x {repeats}")
        audit_t = measure(audit_once, repeats, warmup=0)
        log_t = measure(
            command_runner(["git", "--git-dir", git_dir, "log", "--format=%H", str(tip.id)]),
            7,
        )
        figures.append(
            Figure(
                name=f"audit() of {n} commits",
                value=audit_t.p50,
                unit="s",
                baseline_name="git log --format=%H",
                baseline_value=log_t.p50,
                target=AUDIT_TARGET_S if n >= scaled(1_000) else None,
                note=f"median of {repeats}; {audit_t.p50 / n * 1e3:.2f} ms per commit",
            )
        )
        if shutil.which("ssh-keygen") is None:
            progress("no ssh-keygen: skipping the git verify-commit baseline")
            return figures
        signers = tmp / "allowed_signers"
        signers.write_bytes(store.snapshot().read(SIGNERS_PATH) or b"")
        sample = commits[:VERIFY_SAMPLE]
        verify = command_runner(
            [
                "git",
                "--git-dir",
                git_dir,
                "-c",
                "gpg.format=ssh",
                "-c",
                f"gpg.ssh.allowedSignersFile={Path(signers)}",
                "verify-commit",
                *sample,
            ]
        )
        progress(f"git verify-commit of {len(sample)} commits")
        verify_t = measure(verify, 1, warmup=0)
        verify_s = verify_t.p50 * n / len(sample)
        scaled_note = "" if len(sample) == n else f", scaled from {len(sample)}"
        figures.append(
            Figure(
                name=f"audit() of {n} commits",
                value=audit_t.p50,
                unit="s",
                baseline_name="git verify-commit, every commit",
                baseline_value=verify_s,
                note=f"verify-commit: one ssh-keygen per commit{scaled_note}",
            )
        )
    return figures
