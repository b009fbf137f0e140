"""Bulk writes at scale: ``truss-files import`` beside git's own floor for the same files.

A store is written with the real console script from a JSON-lines file of synthetic notes
(sentences of LoCoMo's conversations when ``TRUSS_LOCOMO`` or shared/data/locomo-dev.json beside
the checkout is there, else the synthetic vocabulary), then the very entry files that import
wrote are fed to ``git fast-import`` and checked out (``git reset --hard``) in a fresh
repository: the floor.
Figures: import wall and CPU time (user + system, which a busy machine disturbs less),
``.git`` disk used (as ``du`` counts) and object files, the peak RSS of the import; each
a median of ``--runs`` runs beside the floor's median in the same run.

``python -m benchmarks scale`` runs the modest default (5k notes, 3 runs; ``--quick``: 1k, 1
run); ``python -m benchmarks.bench_scale --notes 100000 --runs 3`` measures one size.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from .common import Figure, label, progress, scaled, scratch, vocabulary

LOCOMO = Path(
    os.environ.get(
        "TRUSS_LOCOMO",
        Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json",
    )
)
KINDS = ("fact", "lesson", "decision", "preference")


def sentences() -> list[str]:
    """Every turn of LoCoMo's conversations (read in place), else synthetic sentences."""
    if LOCOMO.exists():
        found = []
        for sample in json.loads(LOCOMO.read_text()):
            for name, turns in sample.get("conversation", {}).items():
                if name.startswith("session_") and isinstance(turns, list):
                    found += [t["text"] for t in turns if isinstance(t, dict) and t.get("text")]
        if found:
            return found
    rng = random.Random(3)
    words = vocabulary()
    return [" ".join(rng.choices(words, k=rng.randint(6, 18))) + "." for _ in range(5000)]


def notes(n: int, seed: int = 0) -> Iterator[str]:
    """``n`` JSON lines for ``truss-files import``: 2-6 sentences each, distinct bodies."""
    rng = random.Random(seed)
    pool = sentences()
    for i in range(n):
        body = " ".join(rng.choices(pool, k=rng.randint(2, 6)))
        yield json.dumps(
            {"kind": KINDS[i % len(KINDS)], "key": f"note-{i % 5000}", "body": f"{body} (#{i})"}
        )


def write_notes(path: Path, n: int) -> None:
    with path.open("w") as out:
        for line in notes(n):
            out.write(line + "\n")


def console_script() -> str:
    beside = Path(sys.executable).with_name("truss-files")
    return str(beside) if beside.exists() else "truss-files"


def disk(path: Path) -> tuple[int, int]:
    """(bytes used as ``du`` counts, object files) of a ``.git`` folder."""
    used = (
        int(
            subprocess.run(
                ["du", "-sk", str(path)], capture_output=True, text=True, check=True
            ).stdout.split()[0]
        )
        * 1024
    )
    objects = sum(len(files) for _, _, files in os.walk(path / "objects"))
    return used, objects


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRUSS_", "GIT_"))}
    env.update(
        HOME=str(home),
        TRUSS_CONFIG_DIR=str(home / "config"),
        GIT_AUTHOR_NAME="Bench",
        GIT_AUTHOR_EMAIL="bench@example.test",
        GIT_COMMITTER_NAME="Bench",
        GIT_COMMITTER_EMAIL="bench@example.test",
    )
    return env


def truss_import(tmp: Path, source: Path) -> dict[str, float]:
    """One import into a new store, timed as a user runs it: one process, wall clock."""
    store = tmp / "store"
    env = _env(tmp)
    exe = console_script()
    subprocess.run([exe, "init", str(store)], env=env, check=True, capture_output=True)
    argv = ["/usr/bin/time", "-f", "%M %U %S", exe, "--store", str(store), "import", str(source)]
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"import exited {done.returncode}: {done.stderr[-2000:]}")
    rss_kb, user, system = (float(x) for x in done.stderr.strip().splitlines()[-1].split())
    used, objects = disk(store / ".git")
    # Each figure as it comes: a long run stopped early still says something.
    progress(
        f"import: {took:.1f} s wall, {user + system:.1f} s CPU, peak RSS {rss_kb / 1024:.0f} MB, "
        f".git {used / 1e6:.1f} MB in {objects} object files"
    )
    return {
        "seconds": took,
        "cpu": user + system,
        "disk": used,
        "objects": objects,
        "rss": rss_kb / 1024,
    }


def after_import(tmp: Path) -> dict[str, float]:
    """What reading the imported store costs, each beside its baseline: the first query, the
    audit of the import commit, a rebuild, the index, warm queries."""
    store = tmp / "store"
    env = _env(tmp)
    exe = console_script()
    # Disk figures first: the queries below add the recall index under .git/truss.
    progress("first query, then git fsck, truss-files audit of the import commit, a rebuild")
    first, first_cpu = _timed([exe, "--store", str(store), "query", "dinner plans"], env)
    fsck, fsck_cpu = _timed(["git", "-C", str(store), "fsck", "--no-dangling"], env)
    progress(
        f"first query {first:.1f} s ({first_cpu:.1f} s CPU); fsck {fsck:.1f} s CPU {fsck_cpu:.1f} s"
    )
    audit, audit_cpu = _timed([exe, "--store", str(store), "audit", "HEAD~1..HEAD"], env)
    progress(f"audit of the import commit {audit:.1f} s ({audit_cpu:.1f} s CPU)")
    recall = store / ".git" / "truss" / "recall"
    subprocess.run(["rm", "-rf", str(recall)], check=True)
    rebuild, rebuild_cpu = _timed([exe, "--store", str(store), "query", "dinner plans"], env)
    index_used, _ = disk(recall)
    progress(f"rebuild {rebuild:.1f} s ({rebuild_cpu:.1f} s CPU), index {index_used / 1e6:.1f} MB")
    progress("the fair rebuild: every blob read with pygit2, tantivy storing the bodies")
    fair = tmp / "fair-index"
    fair_wall, fair_cpu = fair_rebuild(store, fair)
    fair_used, _ = disk(fair)
    progress(
        f"fair rebuild {fair_wall:.1f} s ({fair_cpu:.1f} s CPU), index {fair_used / 1e6:.1f} MB"
    )
    progress("warm queries: MemoryStore.query against tantivy's own searcher")
    warm, warm_p95, tantivy_warm, tantivy_p95 = warm_queries(store, fair, env)
    return {
        "first": first,
        "first_cpu": first_cpu,
        "floor_first": fsck + rebuild,
        "floor_first_cpu": fsck_cpu + rebuild_cpu,
        "audit": audit,
        "audit_cpu": audit_cpu,
        "fsck": fsck,
        "fsck_cpu": fsck_cpu,
        "rebuild": rebuild,
        "rebuild_cpu": rebuild_cpu,
        "fair": fair_wall,
        "fair_cpu": fair_cpu,
        "index": index_used,
        "fair_index": fair_used,
        "warm": warm,
        "warm_p95": warm_p95,
        "tantivy": tantivy_warm,
        "tantivy_p95": tantivy_p95,
    }


def fair_rebuild(store: Path, where: Path) -> tuple[float, float]:
    """The fair baseline of an index rebuild: every entry file of the tip read with pygit2
    (a tree walk, each blob once), its body tokenized as ours are and put in tantivy with the
    file stored, as our index stores each record. Streamed: no file is held longer than its
    document. Wall and CPU seconds (this process, tantivy's threads included)."""
    import pygit2
    import tantivy

    from .peers import WRITER_HEAP, _our_text, _schema

    start, cpu = time.perf_counter(), time.process_time()
    repo = pygit2.Repository(str(store))
    schema = _schema("ours", notes=True)
    where.mkdir(parents=True, exist_ok=True)
    index = tantivy.Index(schema, path=str(where))
    writer = index.writer(heap_size=WRITER_HEAP)
    stack: list[Any] = [repo.head.peel(pygit2.Tree)["memories"]]
    while stack:
        tree = stack.pop()
        for item in tree:
            if isinstance(item, pygit2.Tree):
                stack.append(item)
                continue
            data = item.data
            body = data.split(b"\n---\n", 1)[-1].decode()
            doc = tantivy.Document(id=str(item.name), body=_our_text(body))
            doc.add_bytes("note", data)
            writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()
    return time.perf_counter() - start, time.process_time() - cpu


def warm_queries(store: Path, fair: Path, env: dict[str, str]) -> tuple[float, ...]:
    """Median and p95 (ms) of warm ``MemoryStore.query`` calls, each beside tantivy's own
    searcher on the fair index answering the same words with the stored notes."""
    from truss_files import MemoryStore

    from .peers import open_tantivy, query_tantivy

    rng = random.Random(11)
    asked = [" ".join(rng.sample(s.split(), min(3, len(s.split())))) for s in sentences()]
    asked = rng.sample(asked, 40)
    ours = MemoryStore(store, environ=env)
    ours.query(asked[0])  # warm: the index is open and the gate's record read
    mine = [_ms(partial(ours.query, q, limit=10)) for q in asked]
    tantivy = open_tantivy(fair, "ours", notes=True)
    query_tantivy(tantivy, asked[0])
    theirs = [_ms(partial(query_tantivy, tantivy, q)) for q in asked]
    return _p(mine, 50), _p(mine, 95), _p(theirs, 50), _p(theirs, 95)


def _ms(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def _p(samples: list[float], pct: int) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, children included) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def fast_import_stream(store: Path, out: Path) -> None:
    """A ``git fast-import`` stream of one commit holding the import's files, byte for byte."""
    git = ["git", "-C", str(store)]
    listing = subprocess.run(
        [*git, "ls-tree", "-r", "-z", "HEAD"], capture_output=True, check=True
    ).stdout
    rows = [r.split(b"\t", 1) for r in listing.split(b"\0") if r]
    ids = out.with_suffix(".ids")
    ids.write_bytes(b"".join(meta.split()[2] + b"\n" for meta, _ in rows))
    # Ids from a file, not a pipe we write while it writes to us: 100k ids fill both pipes.
    with ids.open("rb") as feed:
        batch = subprocess.Popen([*git, "cat-file", "--batch"], stdin=feed, stdout=subprocess.PIPE)
    assert batch.stdout is not None
    with out.open("wb") as stream:
        stream.write(b"commit refs/heads/main\ncommitter Bench <b@example.test> 0 +0000\n")
        stream.write(b"data 6\nfloor\n")
        for _, path in rows:
            header = batch.stdout.readline().split()
            data = batch.stdout.read(int(header[2]) + 1)[:-1]
            stream.write(b"M 100644 inline " + path + b"\ndata %d\n" % len(data) + data + b"\n")
        stream.write(b"done\n")
    batch.wait()


def floor(tmp: Path, stream: Path) -> dict[str, float]:
    """git's own: fast-import the same files, then check them out."""
    repo = tmp / "floor"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    peaks = []
    # Each under /usr/bin/time for its peak RSS: this process's children's maximum is a
    # maximum over every child it ever had.
    rss = ["/usr/bin/time", "-f", "%M"]
    with stream.open("rb") as feed:
        done = subprocess.run(
            [*rss, "git", "-C", str(repo), "fast-import", "--quiet", "--done"],
            stdin=feed,
            check=True,
            capture_output=True,
            text=True,
        )
    peaks.append(float(done.stderr.strip().splitlines()[-1]))
    done = subprocess.run(
        [*rss, "git", "-C", str(repo), "reset", "-q", "--hard"],
        check=True,
        capture_output=True,
        text=True,
    )
    peaks.append(float(done.stderr.strip().splitlines()[-1]))
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    used, objects = disk(repo / ".git")
    return {"seconds": took, "cpu": cpu, "disk": used, "objects": objects, "rss": max(peaks) / 1024}


def measure(n: int, runs: int) -> list[Figure]:
    ours: list[dict[str, float]] = []
    git: list[dict[str, float]] = []
    with scratch("scale") as tmp:
        source = tmp / "notes.jsonl"
        write_notes(source, n)
        stream = tmp / "floor.fi"
        for run in range(runs):
            progress(f"{label(n)} notes: run {run + 1}/{runs}: truss-files import")
            here = tmp / f"run{run}"
            here.mkdir()
            mine = truss_import(here, source)
            # The floor right after the import (the figure the import is judged by), then what
            # reading the new store costs.
            if not stream.exists():
                fast_import_stream(here / "store", stream)
            progress(f"{label(n)} notes: run {run + 1}/{runs}: git fast-import + reset --hard")
            git.append(floor(here, stream))
            base = git[-1]
            progress(
                f"floor: {base['seconds']:.1f} s wall, {base['cpu']:.1f} s CPU, .git "
                f"{base['disk'] / 1e6:.1f} MB, peak RSS {base['rss']:.0f} MB; import/floor CPU "
                f"{mine['cpu'] / base['cpu']:.2f}x"
            )
            subprocess.run(["rm", "-rf", str(here / "floor")], check=True)
            mine.update(after_import(here))
            ours.append(mine)
            # Each run's figures as they come: a long run stopped early still says something.
            mine, base = ours[-1], git[-1]
            progress(
                f"{label(n)} notes: run {run + 1}/{runs}: import {mine['seconds']:.1f} s wall, "
                f"{mine['cpu']:.1f} s CPU, {mine['rss']:.0f} MB peak RSS, .git "
                f"{mine['disk'] / 1e6:.1f} MB; floor {base['seconds']:.1f} s wall, "
                f"{base['cpu']:.1f} s CPU, .git {base['disk'] / 1e6:.1f} MB; first query "
                f"{mine['first']:.1f} s ({mine['first_cpu']:.1f} s CPU) against fsck + rebuild "
                f"{mine['floor_first']:.1f} s ({mine['floor_first_cpu']:.1f} s CPU); audit "
                f"{mine['audit_cpu']:.1f} s CPU against fsck {mine['fsck_cpu']:.1f} s; rebuild "
                f"{mine['rebuild']:.1f} s against the fair {mine['fair']:.1f} s; index "
                f"{mine['index'] / 1e6:.1f} MB against {mine['fair_index'] / 1e6:.1f} MB; warm "
                f"query {mine['warm']:.2f} ms against tantivy {mine['tantivy']:.2f} ms"
            )
            subprocess.run(["rm", "-rf", str(here)], check=True)

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    size = label(n)
    seconds, floor_seconds = med(ours, "seconds"), med(git, "seconds")
    used, floor_used = med(ours, "disk") / 1e6, med(git, "disk") / 1e6
    return [
        Figure(
            f"import {size} notes (median of {runs})",
            seconds,
            "s",
            "git fast-import + reset --hard",
            floor_seconds,
            target=2.0 * floor_seconds,
            note="target: 2x the floor",
        ),
        Figure(
            f"import {size} notes, CPU time (median of {runs})",
            med(ours, "cpu"),
            "s",
            "git fast-import + reset --hard",
            med(git, "cpu"),
            target=2.0 * med(git, "cpu"),
            note="user + system: fair on a busy machine",
        ),
        Figure(
            f".git after {size} notes (du)",
            used,
            "MB",
            "the floor's .git",
            floor_used,
            target=1.5 * floor_used,
            note="target: 1.5x the floor",
        ),
        Figure(
            f"object files after {size} notes",
            med(ours, "objects"),
            "files",
            "the floor's",
            med(git, "objects"),
        ),
        Figure(
            f"first query after the {size} import (median of {runs})",
            med(ours, "first"),
            "s",
            "git fsck of the store + an index rebuild query",
            med(ours, "floor_first"),
            target=2.0 * med(ours, "floor_first"),
            note="the audit floor plus the rebuild: the import's own commit is not audited again",
        ),
        Figure(
            f"first query after the {size} import, CPU time (median of {runs})",
            med(ours, "first_cpu"),
            "s",
            "git fsck + an index rebuild query",
            med(ours, "floor_first_cpu"),
            target=2.0 * med(ours, "floor_first_cpu"),
        ),
        Figure(
            f"audit of the {size} import commit, CPU time (median of {runs})",
            med(ours, "audit_cpu"),
            "s",
            "git fsck of the store",
            med(ours, "fsck_cpu"),
            note="truss-files audit HEAD~1..HEAD reads and checks every file the commit adds",
        ),
        Figure(
            f"index rebuild after the {size} import (median of {runs})",
            med(ours, "rebuild"),
            "s",
            "every blob read with pygit2 + tantivy storing the files",
            med(ours, "fair"),
            target=1.5 * med(ours, "fair"),
            note="a CLI query with the index deleted (its process start included)",
        ),
        Figure(
            f"index rebuild after the {size} import, CPU time (median of {runs})",
            med(ours, "rebuild_cpu"),
            "s",
            "every blob read with pygit2 + tantivy storing the files",
            med(ours, "fair_cpu"),
            target=1.5 * med(ours, "fair_cpu"),
        ),
        Figure(
            f"index on disk at {size} notes",
            med(ours, "index") / 1e6,
            "MB",
            "the fair rebuild's tantivy index",
            med(ours, "fair_index") / 1e6,
            target=1.3 * med(ours, "fair_index") / 1e6,
        ),
        Figure(
            f"warm MemoryStore.query p50 at {size} notes",
            med(ours, "warm"),
            "ms",
            "tantivy's own searcher, stored notes out",
            med(ours, "tantivy"),
            target=1.5 * med(ours, "tantivy"),
            note="40 queries of three words from the notes' sentences, top 10",
        ),
        Figure(
            f"warm MemoryStore.query p95 at {size} notes",
            med(ours, "warm_p95"),
            "ms",
            "tantivy's own searcher, stored notes out",
            med(ours, "tantivy_p95"),
        ),
        Figure(
            f"peak RSS of the {size} import (its largest process)",
            med(ours, "rss"),
            "MB",
            "1 GB (the 1M target)",
            1024.0,
            target=1024.0,
        ),
        Figure(
            f"peak RSS of the {size} import beside the floor's",
            med(ours, "rss"),
            "MB",
            "git fast-import or reset --hard of the same files",
            med(git, "rss"),
        ),
    ]


def run(quick: bool) -> list[Figure]:
    return measure(scaled(1000 if quick else 5000), 1 if quick else 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_scale")
    parser.add_argument("--notes", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write", metavar="PATH", help="only write the notes file and exit")
    parser.add_argument("--markdown", metavar="PATH", help="also write the table as markdown")
    args = parser.parse_args(argv)
    if args.write:
        write_notes(Path(args.write), args.notes)
        return 0
    from .common import markdown_table, print_table

    figures = measure(args.notes, args.runs)
    print_table(figures)
    if args.markdown:
        Path(args.markdown).write_text(markdown_table(figures) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
