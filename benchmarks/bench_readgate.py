"""What the read gate costs: the first query after new commits, beside a warm query.

Before a read serves anything above unverified, the history up to the commit it reads must
audit clean (``truss_files.trust.readgate``). The result is kept in ``.git/truss/audited`` by
commit id, so a warm query reads one small file more; after new commits only those are
audited. Figures, on a store with a few hundred signed commits (writes and promotions);
new commits are made as by another client (the record left behind) unless a figure says
they are writes through the store, which advance the record themselves:

- the first ``search()`` after 1 and after 100 new commits (gate, index update and query)
  beside a warm ``search()`` (record and index current);
- the gate alone after 1 and after 100 new commits beside ``audit()`` of the whole history
  (what the gate would cost without its record);
- a ``truss-files query`` process after 1 new commit beside a warm one: a write through the
  store advances the record itself (``readgate.advance``), so the query imports no pygit2;
  beside it, the same after 1 commit the record was not advanced for (another client's);
- the audit of a 1-commit range whose start the record vouches for (``start_audited``: only
  the range is walked to the root) beside the same range with its ancestry walked whole;
- a write that advances the record beside the same write with no record to advance.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from truss_files.facade import MemoryStore
from truss_files.git.gitdir import GitDir
from truss_files.recall.engine import search
from truss_files.recall.pipeline import Filter
from truss_files.trust.audit import audit
from truss_files.trust.readgate import CACHE_NAME, refusal

from .bench_cli import console_script
from .common import (
    Figure,
    command_runner,
    freeze_heap,
    measure,
    measure_pair,
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


def grow_foreign(store: MemoryStore, n: int, tag: str) -> None:
    """``grow``, as if another client made the commits: the read gate's record is put back
    as it was, so the next read audits them (a write through the store advances it)."""
    record = store.git.git_dir / "truss" / CACHE_NAME
    saved = record.read_bytes() if record.exists() else None
    grow(store, n, tag)
    if saved is None:
        record.unlink(missing_ok=True)
    else:
        record.write_bytes(saved)


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
            if not search(path, QUERY, flt, 10, gate=refusal).hits:
                raise AssertionError("the query found nothing")

        query()  # index and record current
        freeze_heap()
        warm = measure(query, 31, warmup=3)

        def first_after(n: int) -> tuple[list[float], list[float]]:
            queries, gates = [], []
            for i in range(repeats):
                grow_foreign(store, n, f"q{n}-{i}")
                queries.append(timed(query))
                grow_foreign(store, n, f"g{n}-{i}")
                tip = store.git.tip()
                assert tip is not None
                gates.append(timed(partial(_gate, git, str(tip.id))))
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
        figures.append(range_audit(store, repeats))
        exe = command_runner([console_script(), "--store", str(path), "query", QUERY])
        exe()
        warm_cli = measure(exe, repeats, warmup=1)
        cold: list[float] = []
        foreign: list[float] = []
        record = path / "truss" / CACHE_NAME
        for i in range(repeats):
            grow(store, 1, f"cli-{i}")
            cold.append(timed(exe))
            grow_foreign(store, 1, f"cli-other-{i}")
            foreign.append(timed(exe))
        cold.sort()
        foreign.sort()
        figures.append(
            Figure(
                name="truss-files query after 1 write",
                value=cold[len(cold) // 2],
                unit="s",
                baseline_name="truss-files query, warm",
                baseline_value=warm_cli.p50,
                note="the write advanced the record: a new process, no pygit2 import",
            )
        )
        figures.append(
            Figure(
                name="truss-files query after 1 commit of another client",
                value=foreign[len(foreign) // 2],
                unit="s",
                baseline_name="truss-files query, warm",
                baseline_value=warm_cli.p50,
                note="the record is behind: imports pygit2 to audit the new commit",
            )
        )
        figures.append(write_cost(store, record, repeats))
    return figures


def range_audit(store: MemoryStore, repeats: int) -> Figure:
    """``audit(A..B)`` of one new commit: walked to the root through the range alone (the
    read gate vouches for A) beside walking the whole ancestry (``descendant_of``)."""
    tip = store.git.tip()
    assert tip is not None and tip.parents
    rev = f"{tip.parents[0].id}..{tip.id}"

    def vouched() -> None:
        _ok(audit(store.git, rev, environ={}, start_audited=True).ok)

    def whole() -> None:
        _ok(audit(store.git, rev, environ={}).ok)

    fast, slow = measure_pair(vouched, whole, max(repeats, 9))
    total = len(list(store.git.repo.walk(tip.id)))
    return Figure(
        name="audit of a 1-commit range, start audited",
        value=fast.p50,
        unit="s",
        baseline_name=f"the same range, ancestry walked ({total} commits)",
        baseline_value=slow.p50,
        note="the read gate's audit after a commit it did not make",
    )


def write_cost(store: MemoryStore, record: Path, repeats: int) -> Figure:
    """A write that advances the record (the audit's one-commit check) beside the same
    write with no record to advance."""
    git = GitDir.discover(record.parent.parent)
    count = [0]

    def write() -> None:
        count[0] += 1
        store.write("lesson", f"cost-{count[0]}", f"flaky network cost note {count[0]}")

    with_record: list[float] = []
    without: list[float] = []
    for i in range(max(repeats, 9) * 2):
        # Alternate the two sides; what sets each up (an audit, a removal) is not timed.
        if i % 2:
            _clean(refusal(git, _tip(store)))
            with_record.append(timed(write))
            if _tip(store) not in record.read_text():
                raise AssertionError("the write did not advance the read gate's record")
        else:
            record.unlink(missing_ok=True)
            without.append(timed(write))
    with_record.sort()
    without.sort()
    return Figure(
        name="write that advances the read gate's record",
        value=with_record[len(with_record) // 2],
        unit="s",
        baseline_name="the same write, no record to advance",
        baseline_value=without[len(without) // 2],
        note="the audit's check of the one new commit, on the write path",
    )


def _tip(store: MemoryStore) -> str:
    tip = store.git.tip()
    assert tip is not None
    return str(tip.id)


def _ok(ok: bool) -> None:
    if not ok:
        raise AssertionError("the bench history must audit clean")


def _gate(git: GitDir, tip: str) -> None:
    _clean(refusal(git, tip))


def _clean(why: str | None) -> None:
    if why is not None:
        raise AssertionError(why)
