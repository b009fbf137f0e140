"""Write latency and bulk import, fan-out layout beside a flat layout (DESIGN.md §1.2).

For each size N, one bare repository holds the same N entries twice, each in ONE signed
commit: on ``main`` in the fan-out layout ``memories/<kind>/<id[:2]>/<id>.md`` (where
``MemoryStore`` writes), and on ``refs/heads/flat`` with every entry in one folder,
``memories/<kind>/<id>.md``. All entries share one kind, the worst case for both layouts.
Then single writes alternate between

- ``MemoryStore.write`` (validation, principal lookup, plan, write_tree, sign, pre-swap
  signature check, compare-and-swap), and
- the same steps through ``GitStore.apply`` with the plan at the flat path,

so the ratio isolates what the layout costs. A checkout at 10k shows the work-tree and index
sync cost beside the same write into a bare repository. Bulk import puts 10k new entries in
one commit, through ``MemoryStore.write_many`` and through a flat plan.

Concurrent writers: 8 writer processes on one checked-out store, each timing its own
``MemoryStore.write`` calls (waiting for the writer lock included), beside one writer process
doing the same number of writes alone; the p50 and p95 of each run, medians over several
runs alternating the two cases.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pygit2

from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.format.trailers import trailers
from truss_files.git.gitstore import Plan, Snapshot
from truss_files.model import Entry
from truss_files.signing import Ed25519Signer

from .common import (
    Figure,
    Synth,
    TickingClock,
    Timings,
    commit_files,
    flat_path,
    freeze_heap,
    label,
    measure_pair,
    new_store,
    progress,
    scaled,
    scratch,
    signed_apply,
    timed,
)

FLAT_REF = "refs/heads/flat"
WRITE_TARGET_MS = 10.0  # issue 2: one write <= 10 ms p50 at 100k entries, in process


class FlatWriter:
    """``MemoryStore.write`` with the entry at the flat path on ``refs/heads/flat``."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def write(self, kind: str, key: str, body: str) -> Entry:
        entry = self.store.new_entry(kind, key, body)
        path = flat_path(entry)

        def plan(snap: Snapshot) -> Plan:
            if snap.read(path) is not None:
                return Plan({}, "")
            message = f"truss: write {entry.kind.value} {key}\n\n" + trailers(
                op="write", entry=entry.id, trust="none -> unverified"
            )
            return Plan({path: entryfile.serialize(entry).encode()}, message)

        signed_apply(self.store, plan, {"agent", "operator"}, ref=FLAT_REF)
        return entry

    def write_many(self, entries: list[Entry]) -> None:
        """``MemoryStore.write_many``'s plan line for line, with the flat path."""
        batch = list(entries)
        stored: dict[str, Entry] = {}

        def plan(snap: Snapshot) -> Plan:
            stored.clear()
            changes: dict[str, bytes | None] = {}
            for entry in batch:
                data = snap.read(flat_path(entry))
                if data is not None:
                    stored[entry.id] = entryfile.parse(data, flat_path(entry), check_path=False)
                elif flat_path(entry) not in changes:
                    changes[flat_path(entry)] = entryfile.serialize(entry).encode()
                    stored[entry.id] = entry
            new_ids = [e.id for e in batch if flat_path(e) in changes]
            message = f"truss: write {len(changes)} entries\n\n" + trailers(op="write")
            message += "\n" + trailers(entries=str(len(new_ids)), trust="none -> unverified")
            return Plan(changes, message)

        signed_apply(self.store, plan, {"agent", "operator"}, ref=FLAT_REF)


def seeded(path: Path, n: int, *, bare: bool = True, flat: bool = True) -> MemoryStore:
    """A store with ``n`` entries on main (fan-out) and, if asked, on the flat ref."""
    store = new_store(path, bare=bare)
    synth = Synth(seed=n)
    entries = synth.entries(n, salt="seed")
    root = store.git.tip()
    assert root is not None
    if flat:
        # The flat branch starts at the same init commit, so both layouts share one object db.
        store.git.repo.references.create(FLAT_REF, root.id)
    _seed(store, synth.files(entries), None, f"{label(n)} fan-out")
    if flat:
        _seed(store, synth.files(entries, flat_path), FLAT_REF, f"{label(n)} flat")
    del entries
    freeze_heap()
    return store


def _seed(store: MemoryStore, files: dict[str, bytes], ref: str | None, what: str) -> None:
    took = timed(lambda: commit_files(store, files, f"seed {len(files)} entries", ref=ref))
    progress(f"seeded {what} entries in one commit: {took:.1f} s")


def writer(write: Callable[[str, str, str], object], tag: str) -> Callable[[], object]:
    """A zero-argument write of a new, unique entry per call."""
    count = iter(range(1_000_000))

    def one() -> object:
        i = next(count)
        return write("lesson", f"bench-{i % 50}", f"benchmark write {tag} {i}")

    return one


def write_figures(size: str, fan: Timings, flat: Timings, *, target: bool) -> list[Figure]:
    out = []
    for stat in ("p50", "p95"):
        out.append(
            Figure(
                name=f"write {stat} @ {size} (MemoryStore, fan-out)",
                value=fan.ms(stat),
                unit="ms",
                baseline_name=f"flat layout {stat}",
                baseline_value=flat.ms(stat),
                target=WRITE_TARGET_MS if target and stat == "p50" else None,
            )
        )
    return out


def bench_sizes(quick: bool, writes: int) -> list[Figure]:
    sizes = [1_000, 5_000] if quick else [1_000, 10_000, 100_000]
    figures: list[Figure] = []
    for n in (scaled(s) for s in sizes):
        # A flat write at 100k takes ~0.3 s: fewer pairs there keep the run short.
        pairs = writes if n < 50_000 else max(10, writes * 2 // 5)
        with scratch(f"write-{label(n)}") as tmp:
            store = seeded(tmp / "store.git", n)
            flat = FlatWriter(store)
            progress(f"{pairs} writes per layout at {label(n)}")
            fan_t, flat_t = measure_pair(
                writer(store.write, "fan"), writer(flat.write, "flat"), pairs, warmup=10
            )
            figures += write_figures(label(n), fan_t, flat_t, target=n >= scaled(100_000))
    return figures


def bench_checkout(quick: bool, writes: int) -> list[Figure]:
    n = scaled(2_000 if quick else 10_000)
    with scratch(f"checkout-{label(n)}") as tmp:
        progress(f"checkout with {label(n)} entries (work tree + index)")
        work = seeded(tmp / "work", n, bare=False, flat=False)
        bare = seeded(tmp / "bare.git", n, flat=False)
        work_t, bare_t = measure_pair(
            writer(work.write, "work"), writer(bare.write, "bare"), writes, warmup=3
        )
        status = work.git.repo.status()
        if status:
            raise AssertionError(f"work tree not clean after writes: {list(status)[:3]}")
    return [
        Figure(
            name=f"write p50 @ {label(n)}, checkout (work tree + index sync)",
            value=work_t.ms(),
            unit="ms",
            baseline_name="same write, bare repo",
            baseline_value=bare_t.ms(),
        )
    ]


def bench_bulk(quick: bool, repeats: int) -> list[Figure]:
    n = scaled(2_000 if quick else 10_000)
    with scratch(f"bulk-{label(n)}") as tmp:
        store = new_store(tmp / "store.git")
        base = store.git.tip()
        assert base is not None
        store.git.repo.references.create(FLAT_REF, base.id)
        flat = FlatWriter(store)
        synth = Synth(seed=3)
        rounds = iter(range(1_000))

        # Fresh entries per run and per layout: a blob already in the object db costs only
        # a freshen, which would flatter whichever side ran second.
        def fan_once() -> None:
            batch = synth.entries(n, salt=f"fan{next(rounds)}")

            fan_samples.append(timed(lambda: store.write_many(batch)))
            _rewind(store.git.repo, "refs/heads/main", base.id)

        def flat_once() -> None:
            batch = synth.entries(n, salt=f"flat{next(rounds)}")
            flat_samples.append(timed(lambda: flat.write_many(batch)))
            _rewind(store.git.repo, FLAT_REF, base.id)

        fan_samples: list[float] = []
        flat_samples: list[float] = []
        progress(f"bulk import of {label(n)} entries x {repeats} per layout")
        measure_pair(fan_once, flat_once, repeats, warmup=0)
    fan_t, flat_t = Timings(tuple(fan_samples)), Timings(tuple(flat_samples))
    return [
        Figure(
            name=f"bulk import {label(n)} entries, one commit (write_many, fan-out)",
            value=fan_t.p50,
            unit="s",
            baseline_name="flat layout",
            baseline_value=flat_t.p50,
            note=f"median of {len(fan_samples)}; per entry {fan_t.p50 / n * 1e6:.0f} us",
        )
    ]


def _rewind(repo: pygit2.Repository, ref: str, to: pygit2.Oid) -> None:
    """Put a ref back at the base so every bulk run starts from the same tree."""
    repo.references[ref].set_target(to, "bench: rewind")


WRITER_PROCESSES = 8
_REPO_ROOT = Path(__file__).resolve().parent.parent


def writer_process(store_path: str, key: str, tag: str, writes: str, go: str) -> None:
    """One writer process: set up, say ready, wait for ``go``, then time ``writes`` writes
    and print their latencies (seconds) as JSON on stdout."""
    store = MemoryStore(store_path, signer=Ed25519Signer.load(Path(key)), clock=TickingClock())
    store.principal()  # warm the policy cache outside the timed part, as a long-lived writer
    Path(f"{go}.{tag}.ready").touch()
    while not Path(go).exists():
        time.sleep(0.002)
    one = writer(store.write, tag)
    print(json.dumps([timed(one) for _ in range(int(writes))]), flush=True)


def _writers_run(store: Path, key: Path, count: int, writes: int, run_id: str) -> list[float]:
    """``count`` writer processes started together; every write's latency of all of them."""
    go = store.parent / f"go-{run_id}"
    code = "import sys; from benchmarks.bench_write import writer_process as w; w(*sys.argv[1:])"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                code,
                str(store),
                str(key),
                f"{run_id}-{n}",
                str(writes),
                str(go),
            ],
            cwd=_REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(count)
    ]
    deadline = time.monotonic() + 120
    while len(list(store.parent.glob(f"go-{run_id}.*.ready"))) < count:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise RuntimeError("a writer process failed to start")
        time.sleep(0.01)
    go.touch()
    samples: list[float] = []
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"a writer process exited {proc.returncode}")
        samples += json.loads(out)
    return samples


def bench_concurrent(quick: bool) -> list[Figure]:
    n = scaled(1_000)
    writes = scaled(6 if quick else 25, floor=3)
    runs = scaled(3 if quick else 5, floor=1)
    with scratch(f"concurrent-{label(n)}") as tmp:
        key = tmp / "key"
        signer = Ed25519Signer.generate("bench@example.test")
        signer.save(key)
        work = tmp / "work"
        seeded_store = new_store(work, bare=False, signer=signer)
        synth = Synth(seed=n)
        commit_files(seeded_store, synth.files(synth.entries(n, salt="seed")), "seed")
        progress(
            f"{WRITER_PROCESSES} writer processes x {writes} writes beside one writer, "
            f"{runs} runs each, checkout with {label(n)} entries"
        )
        many: list[Timings] = []
        one: list[Timings] = []
        for r in range(runs):
            order = [(1, one), (WRITER_PROCESSES, many)]
            for count, into in order if r % 2 == 0 else order[::-1]:
                found = _writers_run(work, key, count, writes, f"r{r}x{count}")
                into.append(Timings(tuple(found)))
        status = seeded_store.git.repo.status()
        if status:
            raise AssertionError(f"work tree not clean after writes: {list(status)[:3]}")
    figures = []
    for stat in ("p50", "p95"):
        figures.append(
            Figure(
                name=f"write {stat}, {WRITER_PROCESSES} concurrent writer processes @ {label(n)}",
                value=statistics.median(t.ms(stat) for t in many),
                unit="ms",
                baseline_name=f"single writer {stat}",
                baseline_value=statistics.median(t.ms(stat) for t in one),
                note=f"median over {runs} runs of {WRITER_PROCESSES} x {writes} writes each"
                if stat == "p50"
                else "",
            )
        )
    return figures


def run(quick: bool) -> list[Figure]:
    writes = 40 if quick else 150
    figures = bench_sizes(quick, writes)
    figures += bench_checkout(quick, writes // 2)
    figures += bench_bulk(quick, 3 if quick else 5)
    figures += bench_concurrent(quick)
    return figures
