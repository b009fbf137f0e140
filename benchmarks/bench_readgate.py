"""What the read gate costs: the first query after new commits, beside a warm query.

Before a read serves anything above unverified, the history up to the commit it reads must
audit clean (``truss_files.readgate``). The result is kept in ``.git/truss/audited`` by
commit id, so a warm query reads one small file more; after new commits only those are
audited. Figures, on a store with a few hundred signed commits (writes and promotions):

- the first ``search()`` after 1 and after 100 new commits (gate, index update and query)
  beside a warm ``search()`` (record and index current);
- the gate alone after 1 and after 100 new commits beside ``audit()`` of the whole history
  (what the gate would cost without its record);
- a ``truss-files query`` process after 1 new commit beside a warm one: the audit needs
  pygit2, which a warm query never imports.
"""

from __future__ import annotations

from pathlib import Path

from truss_files.audit import audit
from truss_files.readgate import refusal
from truss_files.recall.engine import search
from truss_files.recall.gitread import GitDir
from truss_files.recall.pipeline import Filter
from truss_files.store import MemoryStore

from .bench_cli import console_script
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

QUERY = "flaky network retry"


def grow(store: MemoryStore, n: int, tag: str) -> None:
    """``n`` new signed commits: writes, every tenth one promoted (a verdict commit)."""
    made = 0
    while made < n:
        entry = store.write("lesson", f"{tag}-{made}", f"flaky network note {tag} {made}")
        made += 1
        if made % 10 == 0 and made < n:
            store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="bench"))
            made += 1


def run(quick: bool) -> list[Figure]:
    base = scaled(100 if quick else 400)
    repeats = 3 if quick else 7
    figures: list[Figure] = []
    with scratch("readgate") as tmp:
        store = new_store(tmp / "store.git")
        path = Path(store.git.git_dir)
        took = timed(lambda: grow(store, base, "base"))
        progress(f"{base} signed commits in {took:.1f} s")
        git = GitDir.discover(path)
        flt = Filter()

        def query() -> None:
            if not search(path, QUERY, flt, 10).hits:
                raise AssertionError("the query found nothing")

        query()  # index and record current
        freeze_heap()
        warm = measure(query, 31, warmup=3)

        def first_after(n: int) -> tuple[list[float], list[float]]:
            queries, gates = [], []
            for i in range(repeats):
                grow(store, n, f"q{n}-{i}")
                queries.append(timed(query))
                grow(store, n, f"g{n}-{i}")
                tip = store.git.tip()
                assert tip is not None
                gates.append(timed(lambda tip=str(tip.id): _clean(refusal(git, tip))))
                query()  # the index follows too, so the next round starts warm
            return sorted(queries), sorted(gates)

        def full_audit() -> None:
            if not audit(store.git, environ={}).ok:
                raise AssertionError("the bench history must audit clean")

        for n in (1, 100):
            progress(f"first query after {n} new commit(s) x {repeats}")
            queries, gates = first_after(n)
            q50, g50 = queries[len(queries) // 2], gates[len(gates) // 2]
            total = len(list(store.git.repo.walk(store.git.tip().id)))  # type: ignore[union-attr]
            full = measure(full_audit, 3 if n == 1 else 1, warmup=0)
            figures.append(
                Figure(
                    name=f"first query after {n} new commit{'s' if n > 1 else ''}",
                    value=q50,
                    unit="s",
                    baseline_name="warm query (record and index current)",
                    baseline_value=warm.p50,
                    note=f"median of {repeats}; includes the index update",
                )
            )
            figures.append(
                Figure(
                    name=f"read gate after {n} new commit{'s' if n > 1 else ''}",
                    value=g50,
                    unit="s",
                    baseline_name=f"audit() of all {total} commits",
                    baseline_value=full.p50,
                    note=f"{g50 / n * 1e3:.2f} ms per new commit",
                )
            )
        exe = command_runner([console_script(), "--store", str(path), "query", QUERY])
        exe()
        warm_cli = measure(exe, repeats, warmup=1)
        cold: list[float] = []
        for i in range(repeats):
            grow(store, 1, f"cli-{i}")
            cold.append(timed(exe))
        cold.sort()
        figures.append(
            Figure(
                name="truss-files query after 1 new commit",
                value=cold[len(cold) // 2],
                unit="s",
                baseline_name="truss-files query, warm",
                baseline_value=warm_cli.p50,
                note="a new process: imports pygit2 to audit the new commit",
            )
        )
    return figures


def _clean(why: str | None) -> None:
    if why is not None:
        raise AssertionError(why)
