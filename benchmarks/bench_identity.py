"""What identity under policy costs, each figure beside the memory operation it mirrors.

- an amendment (``amend.propose`` then ``identity.approve``: two signed commits) beside an
  entry's ``write`` then ``promote`` (two signed commits);
- ``audit()`` of a history of such amendments (the identity rule parses proposal files and
  reads the parent's policy) beside ``audit()`` of as many writes and promotions;
- a ``truss-files identity show`` process (through the read gate) beside a ``truss-files
  query`` process on the same store.
"""

from __future__ import annotations

from pathlib import Path

from truss_files.facade import MemoryStore
from truss_files.identity import changes as ident
from truss_files.identity.amend import propose
from truss_files.trust.audit import audit

from .bench_cli import console_script
from .common import (
    Figure,
    command_runner,
    measure,
    measure_pair,
    new_store,
    progress,
    scaled,
    scratch,
    timed,
)


def amend(store: MemoryStore, n: int) -> None:
    done = propose(store, f"# Self\n\nAmendment number {n}: terse, cites commits.\n")
    ident.approve(store, done.proposal.id)


def remember(store: MemoryStore, n: int) -> None:
    entry = store.write("lesson", f"bench-{n}", f"Lesson number {n}: retry flaky tests once.")
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="bench"))


def run(quick: bool) -> list[Figure]:
    count = scaled(50 if quick else 200)
    repeats = 5 if quick else 9
    figures: list[Figure] = []
    with scratch("identity") as tmp:
        amended = new_store(tmp / "amended.git")
        remembered = new_store(tmp / "remembered.git")
        counter = iter(range(10**9))
        pair_amend, pair_write = measure_pair(
            lambda: amend(amended, next(counter)),
            lambda: remember(remembered, next(counter)),
            count,
            warmup=1,
        )
        figures.append(
            Figure(
                name="identity propose + approve (2 signed commits)",
                value=pair_amend.p50,
                unit="s",
                baseline_name="write + promote an entry (2 signed commits)",
                baseline_value=pair_write.p50,
                note=f"median of {count}",
            )
        )
        progress(f"{count + 1} amendments and {count + 1} promotions")

        def audit_clean(store: MemoryStore) -> None:
            if not audit(store.git, environ={}).ok:
                raise AssertionError("the bench history must audit clean")

        a = measure(lambda: audit_clean(amended), 3, warmup=1)
        b = measure(lambda: audit_clean(remembered), 3, warmup=1)
        commits = 2 * (count + 1)
        figures.append(
            Figure(
                name=f"audit() of {commits} amendment commits",
                value=a.p50,
                unit="s",
                baseline_name=f"audit() of {commits} write/promote commits",
                baseline_value=b.p50,
                note=f"{a.p50 / commits * 1e3:.2f} ms per amendment commit",
            )
        )

        path = str(Path(amended.git.git_dir))
        show = command_runner([console_script(), "--store", path, "identity", "show"])
        query = command_runner([console_script(), "--store", path, "query", "flaky"])
        show()
        query()
        took = timed(show)
        progress(f"first identity show {took * 1e3:.0f} ms")
        cli_show, cli_query = measure_pair(show, query, repeats, warmup=1)
        figures.append(
            Figure(
                name="truss-files identity show (process)",
                value=cli_show.p50,
                unit="s",
                baseline_name="truss-files query (process)",
                baseline_value=cli_query.p50,
                note=f"median of {repeats}",
            )
        )
    return figures
