"""What every benchmark shares: figures, timing, peak RSS, the table, and big stores made fast.

A figure is never printed alone: each one sits beside a baseline measured in the same run on
the same machine, and the table shows their ratio (value / baseline). This machine class is
2 shared cores, so timings are medians of several runs, and paired measurements alternate
A and B so that a noisy neighbour hurts both sides alike.

Sizes go through ``scaled`` (``--scale`` / ``TRUSS_BENCH_SCALE``), so the smoke test can run a
benchmark at toy size without the benchmark knowing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pygit2

from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.format.trailers import trailers
from truss_files.git.gitstore import Plan, Snapshot
from truss_files.model import Entry, Kind, Layer, Provenance, Trust
from truss_files.signing import Ed25519Signer
from truss_files.store.initstore import init_store

SCALE_ENV = "TRUSS_BENCH_SCALE"
PRINCIPAL = "bench@example.test"

# -- figures -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One measured value beside its baseline from the same run; ``target`` is an upper bound."""

    name: str
    value: float
    unit: str
    baseline_name: str
    baseline_value: float
    target: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float:
        if self.baseline_value == 0:
            return math.inf
        return self.value / self.baseline_value

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.value <= self.target

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Figure:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


def fmt_value(value: float, unit: str) -> str:
    if math.isinf(value) or math.isnan(value):
        return f"{value} {unit}"
    size = abs(value)
    if 0 < size < 1:
        # Three significant digits: 0.0142 s, not 0.01 s.
        digits = 2 - math.floor(math.log10(size))
    else:
        digits = 2 if size < 10 else 1 if size < 1000 else 0
    return f"{value:,.{digits}f} {unit}"


def fmt_ratio(ratio: float) -> str:
    if math.isinf(ratio):
        return "inf"
    return f"{ratio:.3f}x" if ratio < 0.1 else f"{ratio:.2f}x"


def format_table(figures: Sequence[Figure]) -> str:
    """A plain-text table: figure, value, baseline, baseline value, ratio, target."""
    head = ("figure", "value", "baseline", "baseline value", "ratio", "target")
    rows = [head]
    for f in figures:
        target = ""
        if f.target is not None:
            target = f"<= {fmt_value(f.target, f.unit)} " + ("met" if f.met else "MISSED")
        rows.append(
            (
                f.name,
                fmt_value(f.value, f.unit),
                f.baseline_name,
                fmt_value(f.baseline_value, f.unit),
                fmt_ratio(f.ratio),
                target,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    right = {1, 3, 4}  # numbers line up on the right
    lines = []
    for n, row in enumerate(rows):
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    notes = [f"  [{f.name}] {f.note}" for f in figures if f.note]
    return "\n".join(lines + (["notes:", *notes] if notes else []))


def markdown_table(figures: Sequence[Figure]) -> str:
    """The same table as markdown, for the docs page ``--markdown`` writes."""
    lines = [
        "| figure | value | baseline | baseline value | ratio | target |",
        "|---|---:|---|---:|---:|---|",
    ]
    for f in figures:
        target = ""
        if f.target is not None:
            target = f"<= {fmt_value(f.target, f.unit)} " + ("met" if f.met else "MISSED")
        cells = (
            f.name,
            fmt_value(f.value, f.unit),
            f.baseline_name,
            fmt_value(f.baseline_value, f.unit),
            fmt_ratio(f.ratio),
            target,
        )
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    notes = [f"- {f.name}: {f.note}" for f in figures if f.note]
    return "\n".join(lines + ([""] + notes if notes else []))


def print_table(figures: Sequence[Figure], out: IO[str] | None = None) -> None:
    print(format_table(figures), file=out or sys.stdout, flush=True)


# -- timing --------------------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty sample."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    pos = (len(ordered) - 1) * q / 100
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class Timings:
    """Wall-clock samples in seconds; ``cpu``: the CPU seconds (this process and its children)
    of the same calls, where measured -- what a call costs when neighbours slow the wall clock."""

    samples: tuple[float, ...]
    cpu: tuple[float, ...] = ()

    @property
    def p50(self) -> float:
        return percentile(self.samples, 50)

    @property
    def p95(self) -> float:
        return percentile(self.samples, 95)

    @property
    def best(self) -> float:
        return min(self.samples)

    def ms(self, stat: str = "p50") -> float:
        return float(getattr(self, stat)) * 1e3


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call takes; the cyclic GC stays off so a collection lands on neither side."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    finally:
        if enabled:
            gc.enable()


def cpu_seconds() -> float:
    """CPU seconds this process and its waited-for children have used so far."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(fn: Callable[[], object], repeats: int, *, warmup: int = 1) -> Timings:
    for _ in range(warmup):
        fn()
    return Timings(tuple(timed(fn) for _ in range(repeats)))


def measure_pair(
    a: Callable[[], object], b: Callable[[], object], repeats: int, *, warmup: int = 1
) -> tuple[Timings, Timings]:
    """Time ``a`` and ``b`` alternately (ABBA...), so drift and neighbours hit both alike;
    their CPU seconds too (``Timings.cpu``)."""
    for _ in range(warmup):
        a()
        b()
    wall: dict[int, list[float]] = {0: [], 1: []}
    cpu: dict[int, list[float]] = {0: [], 1: []}
    for i in range(repeats):
        for side in (1, 0) if i % 2 else (0, 1):
            used = cpu_seconds()
            wall[side].append(timed((a, b)[side]))
            cpu[side].append(cpu_seconds() - used)
    return (
        Timings(tuple(wall[0]), tuple(cpu[0])),
        Timings(tuple(wall[1]), tuple(cpu[1])),
    )


def measure_pair_fresh(
    a: Callable[[int], Callable[[], object]],
    b: Callable[[int], Callable[[], object]],
    trials: int,
) -> tuple[Timings, Timings]:
    """``measure_pair`` for a call that needs its own set-up each time (a fresh store for an
    import): ``a(n)`` and ``b(n)`` set up trial ``n`` untimed and return the call to time;
    which side goes first alternates, and the heap is frozen before each timing. Both wall
    and CPU seconds are kept (``Timings.cpu``)."""
    wall: dict[int, list[float]] = {0: [], 1: []}
    cpu: dict[int, list[float]] = {0: [], 1: []}
    for n in range(trials):
        for side in (0, 1) if n % 2 == 0 else (1, 0):
            call = (a, b)[side](n)
            freeze_heap()
            used = cpu_seconds()
            wall[side].append(timed(call))
            cpu[side].append(cpu_seconds() - used)
    return (
        Timings(tuple(wall[0]), tuple(cpu[0])),
        Timings(tuple(wall[1]), tuple(cpu[1])),
    )


@contextlib.contextmanager
def replaced(owner: object, name: str, value: object) -> Iterator[None]:
    """``owner.name`` is ``value`` inside the block: a baseline's "the same code with this
    one part switched off" (a check, a mask), restored whatever happens."""
    real = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, real)


def command_runner(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Callable[[], None]:
    """A callable that runs a command to completion and fails loudly if it fails."""

    def run() -> None:
        done = subprocess.run(
            list(argv), env=dict(env) if env is not None else None, capture_output=True
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-500:]}"
            )

    return run


def peak_rss_mb() -> float:
    """This process's peak resident set size (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


# -- sizes and progress --------------------------------------------------------------------


def scale() -> float:
    try:
        return float(os.environ.get(SCALE_ENV, "1"))
    except ValueError:
        return 1.0


def scaled(n: int, floor: int = 10) -> int:
    """``n`` times the run's scale, at least ``floor`` (the smoke test runs at toy sizes)."""
    return max(floor, round(n * scale()))


def label(n: int) -> str:
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


def progress(message: str) -> None:
    """Progress goes to stderr, so stdout holds only the tables."""
    print(f"  .. {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def scratch(name: str) -> Iterator[Path]:
    """A temporary folder (under TRUSS_BENCH_TMP if set), removed afterwards."""
    base = os.environ.get("TRUSS_BENCH_TMP") or None
    path = Path(tempfile.mkdtemp(prefix=f"truss-bench-{name}-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- stores --------------------------------------------------------------------------------


class TickingClock:
    """Distinct, ordered ``created`` stamps without waiting for the wall clock."""

    def __init__(self) -> None:
        import datetime

        self.now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        self.step = datetime.timedelta(seconds=1)

    def __call__(self) -> Any:
        self.now += self.step
        return self.now


def new_store(path: Path, *, bare: bool = True, signer: Ed25519Signer | None = None) -> MemoryStore:
    """A freshly initialised store whose (generated) key holds every role (init grants them)."""
    signer = signer or Ed25519Signer.generate(PRINCIPAL)
    if bare:
        pygit2.init_repository(str(path), bare=True, initial_head="main")
    env = {k: v for k, v in os.environ.items() if k != "TRUSS_ROOT"}
    env.update(GIT_COMMITTER_NAME="Bench", GIT_COMMITTER_EMAIL=PRINCIPAL)
    init_store(path, signer, PRINCIPAL, environ=env)
    return MemoryStore(path, signer=signer, clock=TickingClock(), environ=env)


def signed_apply(
    store: MemoryStore,
    plan: Callable[[Snapshot], Plan],
    need: set[str],
    *,
    ref: str | None = None,
) -> pygit2.Commit:
    """``MemoryStore._apply`` on any ref: the same signer, identity and pre-swap check."""

    def check(commit: pygit2.Commit, parent: Snapshot) -> None:
        signature, payload = commit.gpg_signature
        if signature is None:
            raise RuntimeError("unsigned commit")
        store.policy(parent).check_signature(signature.decode(), payload, "git", need)

    identity = store.identity(store.principal())
    done = store.git.apply(plan, store.signer, identity, ref=ref, check=check)
    if done is None:
        raise RuntimeError("the plan changed nothing")
    return done[0]


def commit_files(
    store: MemoryStore, files: Mapping[str, bytes], message: str, *, ref: str | None = None
) -> pygit2.Commit:
    """One signed commit writing ``files`` (GitStore.write_tree builds only the new trees)."""
    body = f"{message}\n\n" + trailers(op="write", entries=str(len(files)))
    body += "\n" + trailers(trust="none -> unverified")
    return signed_apply(store, lambda _snap: Plan(files, body), {"agent", "operator"}, ref=ref)


def commit_trusted(
    store: MemoryStore, entries: Sequence[Entry], files: Mapping[str, bytes], message: str
) -> pygit2.Commit:
    """``files`` (the rendered ``entries``, verified or unverified) committed as the audit
    accepts, so the read gate serves them: every entry lands unverified in one signed commit,
    then one commit gives each verified entry a PASS verdict signed for its id."""
    from truss_files.trust.verdict import sign_verdict

    decided = [e for e in entries if e.trust is Trust.VERIFIED]
    landing = dict(files)
    for entry in decided:
        landing[entry.path] = entryfile.serialize(_trusted(entry, Trust.UNVERIFIED, None)).encode()
    tip = commit_files(store, landing, message)
    if not decided:
        return tip
    principal = store.principal()
    vote = {"reviewer": principal, "kind": "human", "vote": "PASS", "evidence": {}}
    promoted = {}
    for entry in decided:
        verdict = sign_verdict(
            entry.id, "PASS", [vote], signer=store.signer, principal=principal,
            quorum="1-of-1", policy="manual", now="2026-11-29T11:00:00Z",
        )  # fmt: skip
        promoted[entry.path] = entryfile.serialize(
            _trusted(entry, Trust.VERIFIED, verdict.to_dict())
        ).encode()
    body = f"{message}: verdicts\n\n" + trailers(op="promote", entries=str(len(promoted)))
    return signed_apply(store, lambda _snap: Plan(promoted, body), {"panel"})


def _trusted(entry: Entry, trust: Trust, verdict: Mapping[str, Any] | None) -> Entry:
    provenance = dataclasses.replace(entry.provenance, verified_by=verdict)
    return dataclasses.replace(entry, trust=trust, provenance=provenance)


def flat_path(entry: Entry) -> str:
    """The no-fan-out layout DESIGN.md §1.2 measures against: one folder per kind."""
    return f"memories/{entry.kind.value}/{entry.id}.md"


_SYLLABLES = (
    *("ka", "ri", "to", "ne", "mu", "sa", "lo", "ve", "di", "pa", "gre", "ston"),
    *("bel", "mar", "tik", "ul", "ox", "zen", "qua", "fi", "dra", "po", "li", "ce"),
    *("ber", "ant", "hel", "rom", "sul", "ven", "gor", "tas", "wim", "nel", "bro", "cus"),
)


def vocabulary(size: int = 3000, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


class Synth:
    """Deterministic synthetic entries (bodies of 20-60 Zipf-ish words) and their files.

    Entries of one Synth differ only in key and body, so each key's front matter is rendered
    by ``entryfile.serialize`` once and reused: 100k files in ~1 s instead of ~10 s. A sample
    is re-serialized the slow way and must match byte for byte.
    """

    def __init__(
        self,
        *,
        kind: Kind = Kind.LESSON,
        keys: int = 1000,
        seed: int = 1,
        created: str = "2026-01-01T00:00:00Z",
    ) -> None:
        self.kind = kind
        self.keys = keys
        self.created = created
        self.rng = random.Random(seed)
        self.words = vocabulary()
        self.weights = [1 / (rank + 1) for rank in range(len(self.words))]
        self._heads: dict[str, tuple[str, str]] = {}

    def entry(self, i: int, salt: str = "") -> Entry:
        count = self.rng.randint(20, 60)
        text = " ".join(self.rng.choices(self.words, self.weights, k=count))
        return Entry(
            kind=self.kind,
            key=f"topic-{i % self.keys}",
            body=f"{text}. (n{i}{salt})",
            layer=Layer.TASK,
            author=f"agent:{PRINCIPAL}",
            created=self.created,
            # Every entry names where it came from (truss.toml [policy] provenance).
            provenance=Provenance(produced_by=f"api:{PRINCIPAL}"),
        )

    def prose(self, size: int) -> str:
        """``size`` characters of this Synth's bodies, in sentences and lines as notes have
        them (a 10 KB note for a benchmark that grows with the text)."""
        parts: list[str] = []
        total = n = 0
        while total < size:
            parts.append(self.entry(n).body + ("\n" if n % 3 == 2 else " "))
            total += len(parts[-1])
            n += 1
        return "".join(parts)[:size]

    def entries(self, n: int, salt: str = "") -> list[Entry]:
        return [self.entry(i, salt) for i in range(n)]

    def text(self, entry: Entry) -> bytes:
        head = self._heads.get(entry.key)
        if head is None:
            probe = dataclasses.replace(entry, body="x")
            full = entryfile.serialize(probe)
            head = (full[: -len("x\n")], probe.id)
            self._heads[entry.key] = head
        template, probe_id = head
        return (template.replace(probe_id, entry.id, 1) + entry.body + "\n").encode()

    def files(
        self, entries: Sequence[Entry], path: Callable[[Entry], str] = lambda e: e.path
    ) -> dict[str, bytes]:
        out = {}
        for n, entry in enumerate(entries):
            data = self.text(entry)
            if n % 997 == 0 and data != entryfile.serialize(entry).encode():
                raise AssertionError(f"fast serialization drifted from entryfile for {entry.id}")
            out[path(entry)] = data
        return out


def freeze_heap() -> None:
    """After a big set-up, move survivors out of the GC's way so timings see no collections."""
    gc.collect()
    gc.freeze()
