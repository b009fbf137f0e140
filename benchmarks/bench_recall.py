"""Recall: the index cache against tantivy, SQLite FTS5 and rank-bm25, at 1k / 10k / 100k notes.

Corpus: ``benchmarks.corpus.generate`` (seeded; 20-200 words of prose and code identifiers a
note, 30% verified), committed to a bare store in one signed commit. Queries: 60 from
``corpus.realistic_queries`` -- questions with common words, identifiers, plain words -- each
classed by measurement (``corpus.classify``). ``TRUSS_BENCH_RECALL_SIZES`` (e.g. ``100000``)
picks the sizes. Every figure sits beside a baseline measured in the same run:

* **peers** (``benchmarks.peers``), built from the same verified notes our default trust
  floor serves: tantivy with its ``en_stem`` tokenizer, tantivy fed our tokens (the
  like-for-like peer, and the reference of every target), SQLite FTS5 (``porter``). Each has
  full build (median of 3), index on disk, warm p50 / p95 overall and per query class, a cold
  process per query (a different query each run) beside ``python -c pass`` over all queries
  and over the common-word ones, the cold process's peak RSS, update after one write, and
  recall@5 on ``tests/relevance``. The run ends with the side-by-side table and each
  of its targets as our ratio to tantivy fed our tokens, met or not (``recall_table``).

* **index build** (read, parse and tokenize every file from git; write the segments) beside
  ``rank_bm25.BM25Okapi(candidate tokens)`` -- building rank-bm25 over the verified candidates
  alone, tokens already in hand.
* **warm query p50 / p95** (a ``Searcher`` kept open: tip check, filter, BM25, top 10,
  entries out) beside ``BM25Okapi.get_scores`` + top 10 over the same candidates.
* **cold CLI query p50** (``truss-files --store S query ...`` as a new process, index warm)
  beside ``python -c pass``, alternated run by run. Modules are byte-compiled first, as an
  installed package is (this sandbox sets PYTHONDONTWRITEBYTECODE).
* **cold rank-bm25** -- a process that loads the candidates' tokens (pickle), builds BM25Okapi
  and answers one query: what a cache-less engine pays per CLI call, without even parsing.
* **incremental update after one write** (the first query after ``MemoryStore.write`` brings
  the index forward from the tree diff) beside rebuilding BM25Okapi over the candidates.
* **peak RSS** of the cold CLI query process and of the cold rank-bm25 process, beside
  ``python -c pass``.
* at 10k: **semantic** cold CLI query (vectors cached) and warm semantic / hybrid queries.
* **worst accepted query p50 / p95** (``recall.bounds``: the longest query of the most distinct
  terms, all among the corpus's most common words, over every note) beside an ordinary query;
  and the same in a fresh ``Searcher``, a new process's first query.
* **relevance** over ``tests/relevance``: recall@5 and MRR per mode beside exact BM25.
"""

from __future__ import annotations

import compileall
import os
import pickle
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from rank_bm25 import BM25Okapi

import truss_files
from truss_files.format import entryfile
from truss_files.git.gitdir import GitDir
from truss_files.model import Entry, Trust
from truss_files.recall import index as index_module
from truss_files.recall.bounds import MAX_QUERY_CHARS, MAX_QUERY_TERMS
from truss_files.recall.docs import document_tokens
from truss_files.recall.engine import Searcher
from truss_files.recall.index import Index
from truss_files.recall.pipeline import Filter
from truss_files.recall.tokenize import tokenize
from truss_files.trust.readgate import refusal

from .bench_cli import console_script
from .common import (
    Figure,
    Timings,
    command_runner,
    commit_trusted,
    label,
    measure,
    measure_pair,
    new_store,
    progress,
    scaled,
    scratch,
    timed,
)
from .corpus import QUERY_CLASSES, classify, document_frequency, generate, realistic_queries, words
from .peers import (
    COLD_QUERY,
    ENGINES,
    add_fts5,
    add_tantivy,
    build_fts5,
    build_tantivy,
    disk_size,
    open_fts5,
    open_tantivy,
    query_fts5,
    query_tantivy,
    rank_fn,
)
from .recall_table import SideBySide

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000, 10_000)
SIZES_ENV = "TRUSS_BENCH_RECALL_SIZES"  # e.g. "100000": only these sizes, quick or not
QUERIES = 60
TARGETS = {
    "cold": {10_000: 60.0, 100_000: 120.0},
    "warm": {10_000: 2.0, 100_000: 15.0},
    "update": {100_000: 20.0},
    "build": {100_000: 5.0},
}


# The issue-shaped side-by-side tables, filled by ``run``; the runner prints them after the
# figures (``__main__.run_child`` picks up a module's ``TABLES``).
TABLES: list[str] = []


def sizes(quick: bool) -> tuple[int, ...]:
    chosen = os.environ.get(SIZES_ENV, "").strip()
    if not chosen:
        return QUICK_SIZES if quick else SIZES
    parts = chosen.replace(",", " ").split()
    if not all(part.isdigit() and int(part) > 0 for part in parts):
        raise SystemExit(f"{SIZES_ENV}={chosen!r}: give note counts, e.g. 100000 or 1000,10000")
    return tuple(int(part) for part in parts)


def run(quick: bool) -> list[Figure]:
    compileall.compile_dir(Path(truss_files.__file__).parent, quiet=1)
    compileall.compile_dir(Path(__file__).parent, quiet=1)
    figures: list[Figure] = []
    tables: list[SideBySide] = []
    with scratch("recall") as tmp:
        for size in sizes(quick):
            table = SideBySide(label(scaled(size, floor=200)))
            figures += _size(tmp, scaled(size, floor=200), size, quick, table)
            tables.append(table)
        figures += _relevance(tmp, tables)
    TABLES[:] = [t.render() for t in tables]
    return figures


def _as_the_cli_asks(searcher: Searcher, text: str, flt: Filter) -> object:
    """A warm query as ``truss-files query`` answers it: the hits and the conflicts it prints
    (worked out when first read)."""
    return searcher.query(text, flt, 10, mode="exact").conflicts


def _okapi_query(okapi: BM25Okapi, query: str) -> list[int]:
    """What the engine does per query, rank-bm25's way: score every candidate, take 10."""
    scores = okapi.get_scores(tokenize(query))
    return sorted(range(len(scores)), key=lambda i: -scores[i])[:10]


def _size(tmp: Path, n: int, nominal: int, quick: bool, table: SideBySide) -> list[Figure]:
    tag = label(n)
    progress(f"{tag}: generating and committing {n} notes")
    corpus = generate(n, seed=n)
    store = new_store(tmp / f"store-{n}.git")
    commit_trusted(store, corpus.entries, corpus.files, f"bench: {n} notes")
    # The kernel writes the new objects back to disk for a while; a build timed during that
    # measures the disk (the first of three builds at 100k took 5-17x the others without it).
    os.sync()
    git_dir = store.git.git_dir
    verified = corpus.verified
    candidates = [document_tokens(e) for e in verified]
    asked = realistic_queries(QUERIES, seed=n)
    df, docs = document_frequency(candidates)
    classes = [classify(q, df, docs) for q in asked]
    figures: list[Figure] = []
    table.notes.append(
        f"{len(asked)} queries: "
        + ", ".join(f"{classes.count(c)} {c}" for c in QUERY_CLASSES)
        + f" (common-word: a token in more than half of the {docs} verified notes)"
    )

    # -- full build ------------------------------------------------------------------------
    progress(f"{tag}: index build")
    cache = git_dir / "truss" / "recall"

    def build() -> None:
        for path in cache.glob("*"):
            if path.is_dir():
                shutil.rmtree(path)  # a floor index
            else:
                path.unlink()
        Index(_gitdir(git_dir)).view(gate=refusal)

    # The median of three at every size: the first build after committing 100k files runs
    # while the kernel is still writing those files back to disk.
    build_t = Timings(tuple(timed(build) for _ in range(3)))
    okapi_t = Timings(tuple(timed(lambda: BM25Okapi(candidates)) for _ in range(3)))
    figures.append(
        Figure(
            f"{tag}: index build from git (p50)",
            build_t.p50,
            "s",
            f"BM25Okapi build over {len(candidates)} candidates",
            okapi_t.p50,
            target=TARGETS["build"].get(nominal),
            note="read, parse and tokenize every file; worker processes (one per core) above "
            f"5k; runs: {', '.join(f'{t:.2f}' for t in build_t.samples)} s",
        )
    )
    build_row = f"full index build, {tag} (median of 3)"
    table.put(build_row, "truss-files", f"{build_t.p50:.2f} s", build=build_t.p50)
    table.put(build_row, "rank-bm25", f"{okapi_t.p50:.2f} s")
    our_disk = disk_size(cache) / 1e6
    table.put(f"index on disk, {tag}", "truss-files", f"{our_disk:.1f} MB", disk=our_disk)

    # -- warm queries ----------------------------------------------------------------------
    progress(f"{tag}: warm queries")
    searcher = Searcher(git_dir, gate=refusal)
    searcher.query("warm up", Filter())
    flt = Filter()
    ours = [timed(partial(_as_the_cli_asks, searcher, q, flt)) for q in asked * 2]
    okapi = BM25Okapi(candidates)
    base_q = asked if n < 100_000 else asked[::6]
    theirs = [timed(partial(_okapi_query, okapi, q)) for q in base_q]
    warm, okapi_warm = Timings(tuple(ours)), Timings(tuple(theirs))
    for stat in ("p50", "p95"):
        figures.append(
            Figure(
                f"{tag}: warm query {stat}",
                warm.ms(stat),
                "ms",
                "BM25Okapi.get_scores + top 10",
                okapi_warm.ms(stat),
                target=TARGETS["warm"].get(nominal) if stat == "p50" else None,
            )
        )
    _warm_rows(table, "truss-files", tag, ours, classes * 2)
    table.put(
        f"warm query p50 / p95, {tag}",
        "rank-bm25",
        f"{okapi_warm.ms():.2f} / {okapi_warm.ms('p95'):.2f} ms",
    )

    # The same queries through the library's facade in one process (the gate, the snapshot,
    # the filter and the entries out): what an agent embedding truss-files pays.
    # As a new process starts: no floor opened, nothing decoded (the searcher above left the
    # entries and groups of these very questions decoded in the floors it opened).
    index_module._OPEN_FLOORS.clear()
    store.query(asked[0])
    via_store = Timings(tuple(timed(partial(store.query, q, limit=10)) for q in asked * 2))
    table.put(
        f"warm MemoryStore.query p50 / p95, {tag}",
        "truss-files",
        f"{via_store.ms():.2f} / {via_store.ms('p95'):.2f} ms",
        store_p50=via_store.ms(),
        store_p95=via_store.ms("p95"),
    )

    # A caller that also reads the conflicts (worked out when first read): what every face pays.
    def with_conflicts(text: str) -> object:
        return store.query(text, limit=10).conflicts

    index_module._OPEN_FLOORS.clear()
    with_conflicts(asked[0])
    reading = Timings(tuple(timed(partial(with_conflicts, q)) for q in asked * 2))
    table.put(
        f"warm MemoryStore.query p50 / p95 with its conflicts read, {tag}",
        "truss-files",
        f"{reading.ms():.2f} / {reading.ms('p95'):.2f} ms",
    )

    figures += _worst_query(searcher, git_dir, asked, tag, quick)

    # -- cold CLI query --------------------------------------------------------------------
    progress(f"{tag}: cold CLI queries")
    env = dict(os.environ, TRUSS_CONFIG_DIR=str(tmp / "config"), HOME=str(tmp))
    env.pop("TRUSS_STORE", None)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    runs = 5 if quick else 9
    common = [q for q, c in zip(asked, classes, strict=True) if c == "common-word"] or asked

    def our_cli(query: str) -> list[str]:
        return [console_script(), "--store", str(git_dir), "query", query]

    cold, py = _cold_rows(table, "truss-files", tag, our_cli, asked, common, env, runs)
    figures.append(
        Figure(
            f"{tag}: cold CLI query p50",
            cold.ms(),
            "ms",
            "python -c pass",
            py.ms(),
            target=TARGETS["cold"].get(nominal),
            note="each run a different query of the 60",
        )
    )
    cli = our_cli(asked[0])
    cli_rss = _peak_rss(_CLI_PROCESS, cli[1:], env)
    py_rss = _peak_rss("pass", [], env)
    figures.append(
        Figure(f"{tag}: cold CLI query peak RSS", cli_rss, "MB", "python -c pass", py_rss)
    )
    table.put(f"peak RSS, cold query process, {tag}", "truss-files", f"{cli_rss:.0f} MB")

    # -- cold rank-bm25 (a process per query, no cache, tokens already there) --------------
    tokens_file = tmp / f"tokens-{n}.pickle"
    tokens_file.write_bytes(pickle.dumps(candidates, protocol=pickle.HIGHEST_PROTOCOL))
    okapi_cli = [sys.executable, "-c", _OKAPI_PROCESS, str(tokens_file), asked[0]]
    okapi_cold = measure(command_runner(okapi_cli, env), 1 if n >= 100_000 else 3, warmup=0)
    figures.append(
        Figure(
            f"{tag}: cold CLI query p50 (vs rank-bm25)",
            cold.ms(),
            "ms",
            "rank-bm25 process: load tokens, build, query",
            okapi_cold.ms(),
        )
    )
    okapi_rss = _peak_rss(_OKAPI_PROCESS, okapi_cli[3:], env)
    figures.append(
        Figure(
            f"{tag}: cold CLI query peak RSS (vs rank-bm25)",
            cli_rss,
            "MB",
            "rank-bm25 process peak RSS",
            okapi_rss,
        )
    )
    table.put(
        f"cold CLI query, {tag} (vs `python -c pass`)",
        "rank-bm25",
        f"{okapi_cold.ms() / py.ms():.1f}x ({okapi_cold.ms():.0f} ms)",
    )
    table.put(f"peak RSS, cold query process, {tag}", "rank-bm25", f"{okapi_rss:.0f} MB")

    # -- incremental update after one write ------------------------------------------------
    progress(f"{tag}: incremental updates")
    written = iter(range(10**9))

    def one_update() -> float:
        """One write (not timed), then the index brought up to it (timed)."""
        i = next(written)
        store.write("lesson", f"bench-new-{i}", f"a new note {i} about {asked[i % len(asked)]}")
        took = timed(lambda: searcher.index.view(gate=refusal))
        assert searcher.index.stats.get("op") == "update", searcher.index.stats
        return took

    updates = [one_update() for _ in range(7 if not quick else 3)]
    rebuild = measure(lambda: BM25Okapi(candidates), 1 if n >= 100_000 else 3, warmup=0)
    upd = Timings(tuple(updates))
    figures.append(
        Figure(
            f"{tag}: incremental update after one write p50",
            upd.ms(),
            "ms",
            "rebuild BM25Okapi over candidates",
            rebuild.ms(),
            target=TARGETS["update"].get(nominal),
            note=f"slowest of {len(updates)}: {max(updates) * 1e3:.1f} ms (when segments merge)",
        )
    )
    table.put(
        f"update after one write p50, {tag}", "truss-files", f"{upd.ms():.1f} ms", update=upd.ms()
    )
    # What an agent that writes and then reads its notes waits for: the update, the changed
    # (unverified) floor opened again -- its files copied, only the new ones where kept copies
    # can be reopened (``floors._private_copy``) -- and the query.
    wide = Filter(min_trust=Trust.UNVERIFIED)
    searcher.query(asked[0], wide)
    after = []
    for i in range(7 if not quick else 3):
        store.write("lesson", f"bench-read-{i}", f"a note {i} read back about {asked[i]}")
        after.append(timed(partial(_as_the_cli_asks, searcher, asked[i], wide)))
    table.put(
        f"first query at the unverified floor after one write p50, {tag}",
        "truss-files",
        f"{Timings(tuple(after)).ms():.1f} ms",
    )

    figures += _peers(
        tmp, n, corpus.entries, asked, classes, common, our_cli, one_update, env, runs, table
    )
    figures += table.targets()
    table.notes.append(
        "what each index holds: ours one tantivy index per trust floor (verified; stale and "
        "above; every note but the rejected) with each entry's record stored once, in the "
        "floor of its own trust, so a query answers entries without reading git; the query "
        "peers the verified notes' terms and frequencies (no positions) and the id; rebuild "
        "and disk are measured against tantivy fed every note, as ours is"
    )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    table.notes.append(
        f"load average (1, 5, 15 min) at the end: {load} on {os.cpu_count()} cores: other "
        "processes share this machine, so compare ratios within the run, not across runs"
    )

    if nominal == 10_000:
        figures += _semantic(tmp, git_dir, searcher, asked, env, runs)
    return figures


def _warm_rows(
    table: SideBySide, column: str, tag: str, samples: Sequence[float], classes: Sequence[str]
) -> Timings:
    """Overall and per-class warm p50 / p95 of one engine into the table."""
    overall = Timings(tuple(samples))
    table.put(
        f"warm query p50 / p95, {tag}",
        column,
        f"{overall.ms():.2f} / {overall.ms('p95'):.2f} ms",
        warm_p50=overall.ms(),
        warm_p95=overall.ms("p95"),
    )
    for cls in QUERY_CLASSES:
        some = tuple(t for t, c in zip(samples, classes, strict=True) if c == cls)
        if some:
            part = Timings(some)
            table.put(
                f"warm p50 / p95, {cls} queries",
                column,
                f"{part.ms():.2f} / {part.ms('p95'):.2f} ms",
            )
    return overall


def _cold_rows(
    table: SideBySide,
    column: str,
    tag: str,
    argv_of: Callable[[str], list[str]],
    asked: Sequence[str],
    common: Sequence[str],
    env: dict[str, str],
    runs: int,
) -> tuple[Timings, Timings]:
    """Cold query processes, each run a different query, alternated with ``python -c pass``:
    over all queries and over the common-word ones. Returns the all-queries timings and their
    ``python -c pass``."""
    python = command_runner([sys.executable, "-c", "pass"], env)
    result: tuple[Timings, Timings] | None = None
    for which, pool, measure_name in (
        ("", asked, "cold_all"),
        (" with a word in >50% of notes", common, "cold_common"),
    ):
        cold, py = measure_pair(_cycling(argv_of, pool, env), python, runs)
        table.put(
            f"cold CLI query{which}, {tag} (vs `python -c pass`)",
            column,
            f"{cold.ms() / py.ms():.1f}x ({cold.ms():.0f} ms)",
            **{measure_name: cold.ms()},
        )
        result = result or (cold, py)
    assert result is not None
    return result


def _cold_head_to_head(
    table: SideBySide,
    ours: Callable[[str], list[str]],
    theirs: Callable[[str], list[str]],
    asked: Sequence[str],
    common: Sequence[str],
    env: dict[str, str],
    runs: int,
) -> None:
    """Our cold CLI query and the peer's cold script alternated run by run, the same query on
    both sides: the ratio the cold targets use, free of the drift between separate rows."""
    for pool, measure_name in ((asked, "cold_all"), (common, "cold_common")):
        a, b = measure_pair(_cycling(ours, pool, env), _cycling(theirs, pool, env), runs)
        table.paired[measure_name] = (a.ms(), b.ms())


def _update_head_to_head(
    table: SideBySide,
    ours: Callable[[], float],
    add: Callable[[str, str], None],
    asked: Sequence[str],
    pairs: int = 15,
) -> None:
    """Our update after one write (``ours``: write, then time the index catching up) and the
    peer's one-document commit, taken in turn: the ratio the update target uses, free of the
    drift between rows measured minutes apart (14.8 and 10.8 ms for the same peer commit in
    one run)."""
    a: list[float] = []
    b: list[float] = []
    for i in range(pairs):
        peer = partial(add, f"bench-pair-{i}", f"a paired note {i} about {asked[i % len(asked)]}")
        if i % 2:
            b.append(timed(peer))
            a.append(ours())
        else:
            a.append(ours())
            b.append(timed(peer))
    table.paired["update"] = (Timings(tuple(a)).ms(), Timings(tuple(b)).ms())


def _cycling(
    argv_of: Callable[[str], list[str]], pool: Sequence[str], env: dict[str, str]
) -> Callable[[], None]:
    """A process run that asks the next query of ``pool`` each time it is called."""
    turn = iter(range(10**9))
    return lambda: command_runner(argv_of(pool[next(turn) % len(pool)]), env)()


def _peers(
    tmp: Path,
    n: int,
    entries: Sequence[Entry],
    asked: Sequence[str],
    classes: Sequence[str],
    common: Sequence[str],
    our_cli: Callable[[str], list[str]],
    our_update: Callable[[], float],
    env: dict[str, str],
    runs: int,
    table: SideBySide,
) -> list[Figure]:
    """tantivy (en_stem; fed our tokens) and SQLite FTS5 over the same verified notes: build,
    size, warm p50 / p95 per class, cold process per query vs ``python -c pass``, peak RSS."""
    tag = label(n)
    docs = [(e.id, f"{e.key}\n{e.body}") for e in entries if e.trust is Trust.VERIFIED]
    figures: list[Figure] = []
    for engine in ENGINES:
        progress(f"{tag}: peer {engine}")
        where = tmp / f"{engine}-{n}" if engine != "fts5" else tmp / f"fts5-{n}.sqlite"

        def build(engine: str = engine, where: Path = where) -> None:
            if engine == "fts5":
                build_fts5(docs, where)
            else:
                shutil.rmtree(where, ignore_errors=True)
                build_tantivy(docs, where, engine.removeprefix("tantivy-"))

        built = Timings(tuple(timed(build) for _ in range(3)))
        size = disk_size(where) / 1e6
        table.put(
            f"full index build, {tag} (median of 3)", engine, f"{built.p50:.2f} s", build=built.p50
        )
        table.put(f"index on disk, {tag}", engine, f"{size:.1f} MB", disk=size)

        if engine == "fts5":
            conn = open_fts5(where, writable=True)
            answer: Callable[[str], list[str]] = partial(query_fts5, conn)
            add: Callable[[str, str], None] = partial(add_fts5, conn)
        else:
            opened = open_tantivy(where, engine.removeprefix("tantivy-"))
            answer = partial(query_tantivy, opened)
            add = partial(add_tantivy, opened)
        for q in asked[:5]:
            answer(q)
        samples = [timed(partial(answer, q)) for q in list(asked) * 2]
        warm = _warm_rows(table, engine, tag, samples, list(classes) * 2)
        ours = table.values[("warm_p50", "truss-files")]
        figures.append(Figure(f"{tag}: warm query p50 vs {engine}", ours, "ms", engine, warm.ms()))

        def argv_of(query: str, engine: str = engine, where: Path = where) -> list[str]:
            return [sys.executable, "-c", COLD_QUERY, engine, str(where), query]

        _cold_rows(table, engine, tag, argv_of, asked, common, env, runs)
        rss = _peak_rss(COLD_QUERY, [engine, str(where), asked[0]], env)
        table.put(f"peak RSS, cold query process, {tag}", engine, f"{rss:.0f} MB")

        # Last, so the figures above saw the notes as built.
        writes = [
            timed(partial(add, f"bench-new-{i}", f"a new note {i} about {asked[i]}"))
            for i in range(7)
        ]
        done = Timings(tuple(writes)).ms()
        table.put(f"update after one write p50, {tag}", engine, f"{done:.1f} ms", update=done)

        if engine == "tantivy-ours":
            _update_head_to_head(table, our_update, add, asked)
            _cold_head_to_head(table, our_cli, argv_of, asked, common, env, runs)
            _handing_out_notes(tmp / f"tantivy-notes-{n}", entries, docs, asked, table, tag)

    # Our index holds every trust class (the floor is a filter), the peers the verified notes
    # only: the same peer over every note says what that costs.
    progress(f"{tag}: tantivy-ours over every note")
    every = tmp / f"tantivy-all-{n}"
    all_docs = [(e.id, f"{e.key}\n{e.body}") for e in entries]
    took = Timings(tuple(timed(partial(_fresh_build, all_docs, every)) for _ in range(3))).p50
    every_disk = disk_size(every) / 1e6
    row = f"full build / index on disk over all {n} notes (every trust class)"
    table.put(
        row,
        "tantivy-ours",
        f"{took:.2f} s / {every_disk:.1f} MB",
        build_all=took,
        disk_all=every_disk,
    )
    ours_build = table.values[("build", "truss-files")]
    ours_disk = table.values[("disk", "truss-files")]
    table.put(row, "truss-files", f"{ours_build:.2f} s / {ours_disk:.1f} MB")
    shutil.rmtree(every, ignore_errors=True)
    return figures


def _handing_out_notes(
    where: Path,
    entries: Sequence[Entry],
    docs: Sequence[tuple[str, str]],
    asked: Sequence[str],
    table: SideBySide,
    tag: str,
) -> None:
    """tantivy fed our tokens that also stores each verified note's file and returns the top
    notes' texts: the peer doing a query's whole job as ours does (entries out, not ids).
    Beside it, our Searcher's warm figures (which always hand entries out)."""
    progress(f"{tag}: peer tantivy-ours handing out the notes")
    notes = [entryfile.serialize(e) for e in entries if e.trust is Trust.VERIFIED]
    shutil.rmtree(where, ignore_errors=True)
    build_tantivy(docs, where, "ours", notes)
    opened = open_tantivy(where, "ours", notes=True)
    for q in asked[:5]:
        query_tantivy(opened, q)
    samples = Timings(tuple(timed(partial(query_tantivy, opened, q)) for q in list(asked) * 2))
    row = f"warm query p50 / p95 handing out the notes, {tag}"
    table.put(row, "tantivy-ours", f"{samples.ms():.2f} / {samples.ms('p95'):.2f} ms")
    ours = (table.values[("warm_p50", "truss-files")], table.values[("warm_p95", "truss-files")])
    table.put(row, "truss-files", f"{ours[0]:.2f} / {ours[1]:.2f} ms")
    size = disk_size(where) / 1e6
    table.put(f"index on disk storing the verified notes, {tag}", "tantivy-ours", f"{size:.1f} MB")
    table.notes.append(
        "handing out the notes: tantivy fed our tokens also stores each verified note's file and "
        f"a query returns the top 10 files' texts; our warm p50 is {ours[0] / samples.ms():.2f}x "
        f"its ({ours[0]:.2f} against {samples.ms():.2f} ms)"
    )
    shutil.rmtree(where, ignore_errors=True)


def _fresh_build(docs: Sequence[tuple[str, str]], where: Path) -> None:
    shutil.rmtree(where, ignore_errors=True)
    build_tantivy(docs, where, "ours")


def worst_query() -> str:
    """The costliest query the bounds accept: ``MAX_QUERY_TERMS`` distinct words, the corpus's
    most common (each in most notes), repeated up to ``MAX_QUERY_CHARS`` characters."""
    common = [w for w in words() if tokenize(w)][:MAX_QUERY_TERMS]  # Zipf rank order
    chosen = list(common)
    while len(" ".join([*chosen, common[len(chosen) % len(common)]])) <= MAX_QUERY_CHARS:
        chosen.append(common[len(chosen) % len(common)])
    return " ".join(chosen)


def _worst_query(
    searcher: Searcher, git_dir: Path, asked: Sequence[str], tag: str, quick: bool
) -> list[Figure]:
    """The bounded worst case beside an ordinary query, over every note (floor unverified:
    the most candidates), warm and in a fresh searcher (a new process's first query)."""
    progress(f"{tag}: worst-case accepted query")
    worst = worst_query()
    flt = Filter(min_trust=Trust.UNVERIFIED)
    runs = 5 if quick else 15
    _as_the_cli_asks(searcher, worst, flt)
    bad = Timings(
        tuple(timed(partial(_as_the_cli_asks, searcher, worst, flt)) for _ in range(runs))
    )
    good = Timings(tuple(timed(partial(_as_the_cli_asks, searcher, q, flt)) for q in asked[:runs]))
    fresh = Timings(
        tuple(
            timed(partial(_as_the_cli_asks, Searcher(git_dir, gate=refusal), worst, flt))
            for _ in range(3 if quick else 5)
        )
    )
    note = (
        f"{len(worst)} characters, {MAX_QUERY_TERMS} distinct words of the corpus's most "
        "common; floor unverified"
    )
    figures = [
        Figure(
            f"{tag}: worst accepted query {stat}",
            bad.ms(stat),
            "ms",
            f"ordinary query {stat}",
            good.ms(stat),
            target=1000.0,
            note=note if stat == "p50" else "",
        )
        for stat in ("p50", "p95")
    ]
    figures.append(
        Figure(
            f"{tag}: worst accepted query, fresh searcher p50",
            fresh.ms(),
            "ms",
            "same, warm p50",
            bad.ms(),
            target=1000.0,
            note="a new process's first query: segments and the floor index opened",
        )
    )
    return figures


def _semantic(
    tmp: Path,
    git_dir: Path,
    searcher: Searcher,
    asked: Sequence[str],
    env: dict[str, str],
    runs: int,
) -> list[Figure]:
    import importlib.util

    from truss_files.recall.encoders.modelfiles import MINILM_PACKAGE

    if importlib.util.find_spec(MINILM_PACKAGE) is None:
        progress("semantic: the semantic extra's model is not installed, skipped")
        return []
    progress("10k: semantic (embedding every note once)")
    started = time.perf_counter()
    searcher.query(asked[0], Filter(), 10, mode="semantic")
    embed_all = time.perf_counter() - started
    exact = Timings(tuple(timed(partial(searcher.query, q, Filter(), 10)) for q in asked))
    figures = [
        Figure(
            "10k: first semantic query (embeds the candidates)",
            embed_all,
            "s",
            "exact warm query p50",
            exact.p50,
        )
    ]
    for mode in ("semantic", "hybrid"):
        warm = Timings(
            tuple(timed(partial(searcher.query, q, Filter(), 10, mode=mode)) for q in asked)
        )
        figures.append(
            Figure(f"10k: warm {mode} query p50", warm.ms(), "ms", "exact warm p50", exact.ms())
        )
    cli = [console_script(), "--store", str(git_dir), "query", asked[1], "--mode", "semantic"]
    cold, py = measure_pair(
        command_runner(cli, env), command_runner([sys.executable, "-c", "pass"], env), runs
    )
    figures.append(
        Figure(
            "10k: cold CLI semantic query p50",
            cold.ms(),
            "ms",
            "python -c pass",
            py.ms(),
            target=400.0,
        )  # fmt: skip
    )
    return figures


def _relevance(tmp: Path, tables: Sequence[SideBySide]) -> list[Figure]:
    from benchmarks.evaluate import evaluate, load_corpus, load_queries

    from .bench_semantic import SETS, measure_relevance

    name, corpus_file, queries_file = SETS[0]  # tests/relevance
    corpus, asked = load_corpus(corpus_file), load_queries(queries_file)
    # Exact mode as it runs (acronyms and related words), and the other modes, measured as
    # bench_semantic measures them.
    results = measure_relevance([SETS[0]])[name]
    exact = results["exact"]
    notes = [(note.id, note.body) for note in corpus]
    for engine in ENGINES:
        built_in = tmp / f"relevance-{engine}"
        results[engine] = evaluate(rank_fn(engine, notes, built_in), corpus, asked, k=5)
    row = "recall@5 on tests/relevance (with stemming)"
    for table in tables:
        table.put(row, "truss-files", f"{exact['recall@5']:.3f}", recall5=exact["recall@5"])
        for engine in ENGINES:
            table.put(row, engine, f"{results[engine]['recall@5']:.3f}")
    figures = []
    where = f"tests/relevance ({len(corpus)} notes, {len(asked)} queries)"
    for mode, result in results.items():
        for metric in ("recall@5", "mrr"):
            figures.append(
                Figure(
                    f"relevance {mode}: {metric}",
                    result[metric],
                    "",
                    f"exact {metric}",
                    exact[metric],
                    note=where if mode == "exact" else "",
                )  # fmt: skip
            )
    return figures


_OKAPI_PROCESS = """\
import pickle, sys
from rank_bm25 import BM25Okapi
from truss_files.recall.tokenize import tokenize
docs = pickle.load(open(sys.argv[1], "rb"))
scores = BM25Okapi(docs).get_scores(tokenize(sys.argv[2]))
sorted(range(len(scores)), key=lambda i: -scores[i])[:10]
"""


def _gitdir(path: Path) -> GitDir:
    return GitDir.discover(path)


_HWM = """\
import atexit, sys
def _report():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            sys.stderr.write("VmHWM " + line.split()[1] + "\\n")
atexit.register(_report)
"""


def _peak_rss(code: str, args: Sequence[str], env: dict[str, str]) -> float:
    """Peak RSS (MB) of a Python process running ``code``: the kernel's high-water mark of its
    own memory (``VmHWM``; ``ru_maxrss`` of a child also counts the forked parent's pages)."""
    done = subprocess.run(
        [sys.executable, "-c", _HWM + code, *args], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"peak RSS probe exited {done.returncode}: {done.stderr[-400:]}")
    marks = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("VmHWM ")]
    return int(marks[-1]) / 1024


_CLI_PROCESS = """\
import sys
from truss_files.faces.cli.main import main
sys.argv = ["truss-files", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    if exc.code:
        raise
"""
