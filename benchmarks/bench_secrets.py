"""What the credential check costs a write: beside the same write with the check off.

The check (trust/secrets.py) runs on every write, so its budget is set against the writes it
guards: at most 1 ms more for a 10 KB note, at most 10% more for a 10k-note import. Each pair
runs in one process, alternating (``measure_pair``), with the check switched off for the
baseline by replacing the store's scanner with one that finds nothing -- the same
``MemoryStore.write`` and ``write_many`` otherwise, into fresh bare repositories.

Also here: the detector alone on 10 KB of prose (the part of a write that grows with the
text), what importing detect-secrets costs the first write of a process, and what masking
the stored text an output returns (format/secrets.py ``shown``) adds to a query: the same
query and JSON answer with ``shown`` replaced by the identity for the baseline, its per-id
cache emptied before every query (each hit scanned: the worst case).
"""

from __future__ import annotations

import functools
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from truss_files.format import secrets as format_secrets
from truss_files.format import views
from truss_files.recall.query import document
from truss_files.store import store as store_module
from truss_files.trust import secrets

from .common import (
    Figure,
    Synth,
    freeze_heap,
    label,
    measure_pair,
    new_store,
    progress,
    scaled,
    scratch,
    timed,
)


@contextmanager
def check_off() -> Iterator[None]:
    real = store_module.scan_fields
    store_module.scan_fields = lambda fields, allow=None: iter(())
    try:
        yield
    finally:
        store_module.scan_fields = real


def prose(size: int, seed: int = 7) -> str:
    """``size`` characters of Zipf-ish words, in sentences and lines as notes have them."""
    synth = Synth(seed=seed)
    parts: list[str] = []
    n = 0
    while sum(map(len, parts)) < size:
        parts.append(synth.entry(n).body + ("\n" if n % 3 == 2 else " "))
        n += 1
    return "".join(parts)[:size]


def bench_detector(quick: bool) -> Figure:
    text = prose(10 * 1024)
    secrets.find(text)  # load detect-secrets outside the timing
    runs = [timed(lambda: secrets.find(text)) for _ in range(15 if quick else 60)]
    return Figure(
        "detector on 10 KB of prose",
        statistics.median(runs) * 1000,
        "ms",
        "the 1 ms a write may spend",
        1.0,
        target=1.0,
    )


def bench_write(quick: bool, root: Path) -> Figure:
    body = prose(10 * 1024)
    store = new_store(root / "write.git")
    counter = iter(range(10**9))

    def write() -> None:
        store.write("fact", f"k-{next(counter)}", f"{body} ({next(counter)})")

    def write_off() -> None:
        with check_off():
            write()

    freeze_heap()
    on, off = measure_pair(write, write_off, 11 if quick else 41, warmup=2)
    added = (on.p50 - off.p50) * 1000
    return Figure(
        "10 KB write: added by the check",
        added,
        "ms",
        f"the write without it ({off.p50 * 1000:.1f} ms)",
        off.p50 * 1000,
        target=1.0,
        note=f"with {on.p50 * 1000:.1f} ms, without {off.p50 * 1000:.1f} ms (medians)",
    )


def bench_import(quick: bool, root: Path) -> Figure:
    n = scaled(1_000 if quick else 10_000, floor=200)
    synth = Synth(seed=3)
    secrets.find("warm")  # detect-secrets loads outside the timings (bench_import_cost has it)
    ons: list[float] = []
    offs: list[float] = []
    for trial in range(3 if quick else 5):
        for check in (True, False) if trial % 2 else (False, True):
            store = new_store(root / f"import-{trial}-{check}.git")
            entries = synth.entries(n, salt=f"-{trial}-{check}")
            freeze_heap()
            write = functools.partial(store.write_many, entries)
            if check:
                ons.append(timed(write))
            else:
                with check_off():
                    offs.append(timed(write))
            progress(f"import {label(n)} trial {trial} check={check}")
    on, off = statistics.median(ons), statistics.median(offs)
    return Figure(
        f"import of {label(n)} notes: with / without the check",
        on / off,
        "x",
        "the same import without it",
        1.0,
        target=1.10,
        note=f"with {on:.2f} s, without {off:.2f} s (medians)",
    )


def bench_import_cost(quick: bool) -> Figure:
    """detect-secrets' import (with requests under it), paid once by a process's first write,
    beside the interpreter's bare start."""
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


def scan_all(text: str) -> None:
    """What ``find`` did for every text before its cheap check: each detector's gate."""
    lowered = text.lower()
    gated: dict[str, object] = {}
    for detector in format_secrets._detectors():
        list(detector.matches(text, lowered, gated))  # type: ignore[arg-type]


@contextmanager
def masking_off() -> Iterator[None]:
    real = views.shown
    views.shown = lambda entry: entry
    try:
        yield
    finally:
        views.shown = real


def bench_output(quick: bool, root: Path) -> Figure:
    n = scaled(2_000 if quick else 20_000, floor=200)
    store = new_store(root / "output.git")
    store.write_many(Synth(seed=5).entries(n))
    words = [w for w in Synth(seed=5).words[:40] if len(w) > 3][:8]
    turn = iter(range(10**9))

    def query() -> None:
        format_secrets._SHOWN.clear()  # every hit scanned afresh
        word = words[next(turn) % len(words)]
        document(store.query(word, min_trust="unverified", limit=10))

    def query_off() -> None:
        with masking_off():
            query()

    query()  # the recall index is built outside the timings
    freeze_heap()
    on, off = measure_pair(query, query_off, 21 if quick else 81, warmup=3)
    return Figure(
        f"query of {label(n)} notes, 10 hits: with / without masking",
        on.p50 / off.p50,
        "x",
        "the same query and JSON answer without it",
        1.0,
        target=1.10,
        note=f"with {on.p50 * 1000:.2f} ms, without {off.p50 * 1000:.2f} ms (medians, cache cold)",
    )


def bench_shown(quick: bool) -> Figure:
    """``shown`` on a 10 KB note with nothing credential-shaped, its cache emptied (the cheap
    check that no detector could find anything), beside the detector's gates on that text."""
    from truss_files.model import Entry, Kind

    entry = Entry(Kind.FACT, "k", prose(10 * 1024, seed=11), created="2026-12-07T11:00:00Z")
    secrets.find("warm aws")  # the detector's load, outside the timings

    def once() -> None:
        format_secrets._SHOWN.clear()
        format_secrets.shown(entry)

    runs = [timed(once) for _ in range(15 if quick else 60)]
    gates = [timed(lambda: scan_all(entry.body)) for _ in range(15 if quick else 60)]
    return Figure(
        "mask check of a 10 KB note for output",
        statistics.median(runs) * 1000,
        "ms",
        "the detector on the same text",
        statistics.median(gates) * 1000,
        note="the detectors run only on a text that may hold a credential (prose: not)",
    )


def run(quick: bool) -> list[Figure]:
    with scratch("secrets") as root:
        return [
            bench_detector(quick),
            bench_write(quick, root),
            bench_import(quick, root),
            bench_import_cost(quick),
            bench_output(quick, root),
            bench_shown(quick),
        ]
