"""A belief's life at 100k entries: ``salience update`` and ``evict --dry-run`` beside a plain
``audit()`` of the same store, and the query path with usage recording on beside off.

The store holds ``corpus.generate`` notes (about a third verified) committed as the audit
accepts (``commit_trusted``), and a usage file in which a tenth of them were returned a few
times. Figures:

- ``salience_update(dry_run=True)``: read every entry and the usage file, fold each one's
  salience (what the command does before it commits), median of 3; beside ``audit()``;
- one real ``salience_update`` (the signed commit of every entry whose value moved), once;
  beside the same audit;
- ``evict(dry_run=True)`` under ``default = {max_entries = n/40, min_salience = 0.2}``,
  median of 3; beside the audit;
- ``MemoryStore.query`` with usage recording on (one O_APPEND line per answer) beside the
  same queries with ``TRUSS_USAGE=off``, median over the query set.
"""

from __future__ import annotations

import datetime
import random

from truss_files.config.settings import load_settings
from truss_files.git.usage import record
from truss_files.store.belief import evict, salience_update
from truss_files.trust.audit import audit

from .common import (
    Figure,
    commit_trusted,
    freeze_heap,
    measure,
    measure_pair,
    new_store,
    progress,
    scaled,
    scratch,
    timed,
)
from .corpus import generate, realistic_queries

QUERIES = 30
NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)


def run(quick: bool) -> list[Figure]:
    n = scaled(10_000 if quick else 100_000)
    figures: list[Figure] = []
    with scratch("belief") as tmp:
        progress(f"generating and committing {n} notes")
        corpus = generate(n, seed=24)
        store = new_store(tmp / "store.git")
        commit_trusted(store, corpus.entries, corpus.files, f"bench: {n} notes")
        rng = random.Random(24)
        used = rng.sample([e.id for e in corpus.entries], max(1, n // 10))
        for start in range(0, len(used), 100):
            for _ in range(3):
                record(store.git.git_dir, used[start : start + 100], "bench", now=NOW.timestamp())
        freeze_heap()

        def audit_once() -> None:
            report = audit(store.git, environ={})
            if not report.ok:
                raise AssertionError(f"audit found {report.violations[:3]}")

        progress("audit() of the store x 3")
        audit_t = measure(audit_once, 3, warmup=0)
        progress("salience update --dry-run x 3")
        dry_t = measure(lambda: salience_update(store, dry_run=True, now=NOW), 3, warmup=0)
        figures.append(
            Figure(
                name=f"salience update --dry-run, {n} entries",
                value=dry_t.p50,
                unit="s",
                baseline_name="audit() of the same store",
                baseline_value=audit_t.p50,
                note="median of 3: read every entry and the usage file, fold each salience",
            )
        )
        progress("salience update (one signed commit)")
        moved: list[int] = []
        real = timed(lambda: moved.append(len(salience_update(store, now=NOW).changes)))
        figures.append(
            Figure(
                name=f"salience update, {n} entries",
                value=real,
                unit="s",
                baseline_name="audit() of the same store",
                baseline_value=audit_t.p50,
                note=f"once; one signed commit rewriting {moved[0]} entry files",
            )
        )
        budget = {"max_entries": max(1, n // 40), "min_salience": 0.2}
        settings = load_settings({"policy": {"eviction": {"default": budget}}})
        progress("evict --dry-run x 3")
        found: list[int] = []
        evict_t = measure(
            lambda: found.append(
                len(evict(store, dry_run=True, settings=settings, now=NOW).changes)
            ),
            3,
            warmup=0,
        )
        figures.append(
            Figure(
                name=f"evict --dry-run, {n} entries",
                value=evict_t.p50,
                unit="s",
                baseline_name="audit() of the same store",
                baseline_value=audit_t.p50,
                note=f"median of 3; {found[-1]} entries over budget",
            )
        )
        asked = realistic_queries(QUERIES, seed=24)
        on_env = {k: v for k, v in store.environ.items() if k != "TRUSS_USAGE"}
        off_env = {**on_env, "TRUSS_USAGE": "off"}

        def queries(env: dict[str, str]) -> None:
            store.environ = env
            for text in asked:
                store.query(text, min_trust="unverified", limit=10)

        progress(f"{QUERIES} queries, usage recording on and off, x 7")
        # Alternately (ABBA), after warming both: the first passes build the floors' views.
        on_t, off_t = measure_pair(lambda: queries(on_env), lambda: queries(off_env), 7, warmup=3)
        figures.append(
            Figure(
                name=f"{QUERIES} MemoryStore.query, usage recording on",
                value=on_t.p50,
                unit="s",
                baseline_name="the same with TRUSS_USAGE=off",
                baseline_value=off_t.p50,
                note=f"median of 7, alternating; {on_t.p50 / QUERIES * 1e3:.2f} ms per query on, "
                f"{off_t.p50 / QUERIES * 1e3:.2f} off",
            )
        )
    return figures
