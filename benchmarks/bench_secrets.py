"""What the credential check costs a write: beside the same write with the check off.

The check (format/secrets.py) runs on every write, so its budget is set against the writes it
guards: at most 1 ms more for a 10 KB note, at most 10% more for importing 10k notes. Each
pair runs in one process, alternating (``measure_pair``, ``measure_pair_fresh``), with the
check switched off for the baseline by replacing the store's scanner with one that finds
nothing -- the same ``MemoryStore.write``, ``write_many`` and ``import_entries`` otherwise,
into fresh bare repositories. On the check's side the scanner is wrapped to count the time
spent in it (``Charged``): that is the figure, the baseline the run without it. The pair's
wall-clock medians stay in the notes; with neighbours on 2 cores their difference swings by
ten times what the check costs (a 10 KB write: -3 to +24 ms for a check of ~0.4 ms).

Also here: the detector alone on 10 KB (the part of a write that grows with the text), on
prose and on a developer's note (URLs, commit ids, paths: the places its prefilter must look
at), what importing detect-secrets costs the first write of a process, and what masking the
stored text an output returns (format/secrets.py ``shown``) adds to a query: the same query
and JSON answer with ``shown`` replaced by the identity for the baseline, its per-id cache
emptied before every query (each hit scanned: the worst case).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from truss_files.format import secrets, views
from truss_files.model import Entry
from truss_files.recall.query import document
from truss_files.store import store as store_module

from .common import (
    Figure,
    Synth,
    Timings,
    freeze_heap,
    label,
    measure,
    measure_pair,
    measure_pair_fresh,
    new_store,
    progress,
    replaced,
    scaled,
    scratch,
    timed,
)


def check_off() -> contextlib.AbstractContextManager[None]:
    return replaced(store_module, "scan_fields", lambda fields, allow=None: iter(()))


class Charged:
    """The store's scanner, counting the seconds spent in it: the check's own cost, read
    inside the very run it is part of (no baseline to subtract, so less of a neighbour's
    noise). A wall clock: on this machine class a thread-CPU clock read costs ~18 us, more
    than the check of a small note."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def per_call(self) -> float:
        """The median call: a neighbour preempting a few calls moves the mean, not this."""
        return statistics.median(self.calls)

    def __call__(
        self, fields: Iterable[tuple[str, str]], allow: secrets.Allow | None = None
    ) -> Iterator[str]:
        start = time.perf_counter()
        found = list(secrets.scan_fields(fields, allow or secrets.Allow()))
        self.calls.append(time.perf_counter() - start)
        return iter(found)


def masking_off() -> contextlib.AbstractContextManager[None]:
    return replaced(views, "shown", lambda entry: entry)


def prose(size: int, seed: int = 7) -> str:
    return Synth(seed=seed).prose(size)


def dev_note(size: int) -> str:
    """``size`` characters of prose with what a developer's note holds every few lines: a
    URL, a commit id, a path, a UUID, a digest (each one a place the detectors must scan)."""
    things = [
        "see https://example.com/docs/deploy?step=3#rollback",
        "fixed in 3f786850e387550fdab836ed7e6dc881de23001b",
        "log at /var/log/truss-files/server-2026-12-07.log",
        "run 123e4567-e89b-12d3-a456-426614174000 passed",
        "image@sha256:" + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    ]
    text = prose(size)
    parts = [text[i : i + 700] for i in range(0, len(text), 700)]
    return " ".join(f"{part} {things[n % len(things)]}" for n, part in enumerate(parts))[:size]


def spread(t: Timings, scale: float = 1000) -> str:
    return f"p50 {t.p50 * scale:.2f}, p95 {t.p95 * scale:.2f}"


def bench_detector(quick: bool, name: str, text: str) -> Figure:
    """The detector alone on 10 KB, beside what every detector costs over the whole text
    (``_find``: the scan before its prefilter)."""
    secrets._detectors()  # load detect-secrets outside the timing
    assert secrets.find(text) == [], "a benchmark text must hold no credential"
    runs = measure(lambda: secrets.find(text), 21 if quick else 101, warmup=3)
    whole = measure(lambda: secrets._find(text, secrets.Allow()), 7 if quick else 21)
    return Figure(
        f"detector on 10 KB of {name}",
        runs.p50 * 1000,
        "ms",
        "every detector over the whole text",
        whole.p50 * 1000,
        target=1.0,
        note=f"ms {spread(runs)}; whole text {spread(whole)}",
    )


def bench_write(quick: bool, root: Path) -> Figure:
    body = dev_note(10 * 1024)
    store = new_store(root / "write.git")
    counter = iter(range(10**9))

    charged = Charged()

    def write() -> None:
        store.write("fact", f"k-{next(counter)}", f"{body} ({next(counter)})")

    def write_on() -> None:
        _with(charged, write)

    def write_off() -> None:
        with check_off():
            write()

    freeze_heap()
    repeats, warmup = (11, 2) if quick else (41, 2)
    on, off = measure_pair(write_on, write_off, repeats, warmup=warmup)
    own = charged.per_call() * 1000  # one scan a write
    # The figure is the check's own time, read inside the paired run; the pair's wall medians
    # (with, without) are in the note: on 2 shared cores their difference swings by more
    # than the check costs.
    return Figure(
        "10 KB write: added by the check (its own time)",
        own,
        "ms",
        f"the write without it ({off.p50 * 1000:.1f} ms)",
        off.p50 * 1000,
        target=1.0,
        note=(
            f"wall ms with {spread(on)}; without {spread(off)}; CPU ms with p50 "
            f"{statistics.median(on.cpu) * 1000:.2f}, "
            f"without {statistics.median(off.cpu) * 1000:.2f}"
        ),
    )


def bench_import(quick: bool, root: Path, how: str, url: bool = False) -> Figure:
    """``how``: ``import_entries`` (what ``truss-files import`` runs) or ``write_many``.
    ``url``: each note ends with a URL, a place the detectors must scan."""
    n = scaled(1_000 if quick else 10_000, floor=200)
    synth = Synth(seed=3)
    secrets._detectors()  # detect-secrets loads outside the timings (bench_import_cost)

    charged = Charged()

    def side(check: bool) -> Callable[[int], Callable[[], object]]:
        def setup(trial: int) -> Callable[[], object]:
            store = new_store(root / f"{how}-{url}-{trial}-{check}.git")
            entries = synth.entries(n, salt=f"-{trial}-{check}")
            if url:
                link = " (see https://example.com/docs/deploy?step=3#rollback)"
                entries = [dataclasses.replace(e, body=e.body + link) for e in entries]
            write = functools.partial(getattr(store, how), entries)
            progress(f"{how} {label(n)} trial {trial} check={check}")
            if check:
                return lambda: _with(charged, write)
            return lambda: _with(lambda fields, allow=None: iter(()), write)

        return setup

    trials = 3 if quick else 5
    on, off = measure_pair_fresh(side(True), side(False), trials)
    own = charged.per_call() * n  # one scan a note, each alike
    total = sum(charged.calls) / trials  # the same, preempted calls and all
    base = statistics.median(off.samples)
    return Figure(
        f"{how} of {label(n)} notes{', a URL each' if url else ''}: with / without the check "
        "(its own time added)",
        (base + own) / base,
        "x",
        f"the same import without it ({base:.2f} s)",
        1.0,
        target=1.10,
        note=(
            f"the check's own time {own:.3f} s per import (summed: {total:.3f}); wall s with "
            f"{spread(on, 1)}, without "
            f"{spread(off, 1)} ({on.p50 / off.p50:.2f}x); CPU s with p50 "
            f"{statistics.median(on.cpu):.2f}, without {statistics.median(off.cpu):.2f}"
        ),
    )


def _with(scan: Callable[..., Iterator[str]], call: Callable[[], object]) -> None:
    with replaced(store_module, "scan_fields", scan):
        call()


def bench_import_cost(quick: bool) -> Figure:
    """detect-secrets' import (with requests under it), paid once by a process's first write
    that holds a place to scan, beside the interpreter's bare start."""
    code = "import truss_files.format.secrets as s; s._detectors()"
    with_ds: list[float] = []
    bare: list[float] = []
    for _ in range(3 if quick else 9):
        with_ds.append(timed(lambda: subprocess.run([sys.executable, "-c", code], check=True)))
        bare.append(timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True)))
    return Figure(
        "first write's detector load (process)",
        (statistics.median(with_ds) - statistics.median(bare)) * 1000,
        "ms",
        "python -c pass",
        statistics.median(bare) * 1000,
        note="once per process, on its first write; a read never loads it",
    )


def bench_output(quick: bool, root: Path) -> Figure:
    n = scaled(2_000 if quick else 20_000, floor=200)
    store = new_store(root / "output.git")
    store.write_many(Synth(seed=5).entries(n))
    words = [w for w in Synth(seed=5).words[:40] if len(w) > 3][:8]
    turn = iter(range(10**9))

    spent: list[float] = []

    def charged(entry: Entry) -> Entry:
        start = time.perf_counter()
        try:
            return secrets.shown(entry)
        finally:
            spent.append(time.perf_counter() - start)

    def query() -> None:
        secrets._SHOWN.clear()  # every hit scanned afresh
        word = words[next(turn) % len(words)]
        document(store.query(word, min_trust="unverified", limit=10))

    def query_on() -> None:
        with replaced(views, "shown", charged):
            query()

    def query_off() -> None:
        with masking_off():
            query()

    query()  # the recall index is built outside the timings
    freeze_heap()
    repeats, warmup = (21, 3) if quick else (81, 3)
    on, off = measure_pair(query_on, query_off, repeats, warmup=warmup)
    own = statistics.median(spent) * len(spent) / (repeats + warmup)  # the median hit
    return Figure(
        f"query of {label(n)} notes, 10 hits: with / without masking (its own time added)",
        (off.p50 + own) / off.p50,
        "x",
        f"the same query and JSON answer without it ({off.p50 * 1000:.2f} ms)",
        1.0,
        target=1.10,
        note=(
            f"masking's own time {own * 1000:.3f} ms per query (cache cold: every hit scanned); "
            f"wall ms with {spread(on)}, without {spread(off)}"
        ),
    )


def bench_shown(quick: bool) -> Figure:
    """``shown`` on a 10 KB developer's note with nothing credential-shaped, its cache
    emptied, beside every detector over the same text."""
    from truss_files.model import Kind

    entry = Entry(Kind.FACT, "k", dev_note(10 * 1024), created="2026-12-07T11:00:00Z")
    secrets._detectors()  # the detector's load, outside the timings

    def once() -> None:
        secrets._SHOWN.clear()
        secrets.shown(entry)

    runs = measure(once, 21 if quick else 101, warmup=3)
    whole = measure(lambda: secrets._find(entry.body, secrets.Allow()), 7 if quick else 21)
    return Figure(
        "mask check of a 10 KB note for output",
        runs.p50 * 1000,
        "ms",
        "every detector over the same text",
        whole.p50 * 1000,
        note=f"ms {spread(runs)}",
    )


def run(quick: bool) -> list[Figure]:
    with scratch("secrets") as root:
        return [
            bench_detector(quick, "prose", prose(10 * 1024)),
            bench_detector(quick, "a developer's note", dev_note(10 * 1024)),
            bench_write(quick, root),
            bench_import(quick, root, "import_entries"),
            bench_import(quick, root, "import_entries", url=True),
            bench_import(quick, root, "write_many"),
            bench_import_cost(quick),
            bench_output(quick, root),
            bench_shown(quick),
        ]
