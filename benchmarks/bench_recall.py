"""Recall: the index cache against rank-bm25 over the same candidates, at 1k / 10k / 100k notes.

Corpus: ``benchmarks.corpus.generate`` (seeded; 20-200 words a note, 30% verified), committed
to a bare store in one signed commit. Queries: 2-4 Zipf-drawn words. Every figure sits beside
a baseline measured in the same run:

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
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from rank_bm25 import BM25Okapi

import truss_files
from truss_files.model import Trust
from truss_files.recall.bounds import MAX_QUERY_CHARS, MAX_QUERY_TERMS
from truss_files.recall.docs import document_tokens
from truss_files.recall.engine import Searcher
from truss_files.recall.gitread import GitDir
from truss_files.recall.index import Index
from truss_files.recall.pipeline import Filter
from truss_files.recall.tokenize import tokenize

from .bench_cli import console_script
from .common import (
    Figure,
    Timings,
    commit_trusted,
    label,
    measure,
    measure_pair,
    new_store,
    progress,
    scaled,
    scratch,
    timed,
    vocabulary,
)
from .corpus import VOCAB_SIZE, generate, queries

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000, 10_000)
TARGETS = {
    "cold": {10_000: 60.0, 100_000: 120.0},
    "warm": {10_000: 2.0, 100_000: 15.0},
    "update": {100_000: 20.0},
    "build": {100_000: 5.0},
}
RELEVANCE = Path(__file__).resolve().parent.parent / "tests" / "relevance"


def run(quick: bool) -> list[Figure]:
    compileall.compile_dir(Path(truss_files.__file__).parent, quiet=1)
    figures: list[Figure] = []
    with scratch("recall") as tmp:
        for size in QUICK_SIZES if quick else SIZES:
            figures += _size(tmp, scaled(size, floor=200), size, quick)
    figures += _relevance()
    return figures


def _okapi_query(okapi: BM25Okapi, query: str) -> list[int]:
    """What the engine does per query, rank-bm25's way: score every candidate, take 10."""
    scores = okapi.get_scores(tokenize(query))
    return sorted(range(len(scores)), key=lambda i: -scores[i])[:10]


def _size(tmp: Path, n: int, nominal: int, quick: bool) -> list[Figure]:
    tag = label(n)
    progress(f"{tag}: generating and committing {n} notes")
    corpus = generate(n, seed=n)
    store = new_store(tmp / f"store-{n}.git")
    commit_trusted(store, corpus.entries, corpus.files, f"bench: {n} notes")
    git_dir = store.git.git_dir
    candidates = [document_tokens(e) for e in corpus.entries if e.trust is Trust.VERIFIED]
    asked = queries(40 if n < 100_000 else 20, seed=n)
    figures: list[Figure] = []

    # -- full build ------------------------------------------------------------------------
    progress(f"{tag}: index build")
    cache = git_dir / "truss" / "recall"

    def build() -> None:
        for path in cache.glob("*"):
            path.unlink()
        Index(_gitdir(git_dir)).view()

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

    # -- warm queries ----------------------------------------------------------------------
    progress(f"{tag}: warm queries")
    searcher = Searcher(git_dir)
    searcher.query("warm up", Filter())
    flt = Filter()
    ours = [timed(partial(searcher.query, q, flt, 10, mode="exact")) for q in asked * 2]
    okapi = BM25Okapi(candidates)
    base_q = asked if n < 100_000 else asked[:8]
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

    figures += _worst_query(searcher, git_dir, asked, tag, quick)

    # -- cold CLI query --------------------------------------------------------------------
    progress(f"{tag}: cold CLI queries")
    env = dict(os.environ, TRUSS_CONFIG_DIR=str(tmp / "config"), HOME=str(tmp))
    env.pop("TRUSS_STORE", None)
    cli = [console_script(), "--store", str(git_dir), "query", asked[0]]
    python = [sys.executable, "-c", "pass"]
    runs = 5 if quick else 9
    cold, py = measure_pair(_runner(cli, env), _runner(python, env), runs)
    figures.append(
        Figure(
            f"{tag}: cold CLI query p50",
            cold.ms(),
            "ms",
            "python -c pass",
            py.ms(),
            target=TARGETS["cold"].get(nominal),
        )
    )
    cli_rss = _peak_rss(_CLI_PROCESS, cli[1:], env)
    py_rss = _peak_rss("pass", [], env)
    figures.append(
        Figure(f"{tag}: cold CLI query peak RSS", cli_rss, "MB", "python -c pass", py_rss)
    )

    # -- cold rank-bm25 (a process per query, no cache, tokens already there) --------------
    tokens_file = tmp / f"tokens-{n}.pickle"
    tokens_file.write_bytes(pickle.dumps(candidates, protocol=pickle.HIGHEST_PROTOCOL))
    okapi_cli = [sys.executable, "-c", _OKAPI_PROCESS, str(tokens_file), asked[0]]
    okapi_cold = measure(_runner(okapi_cli, env), 1 if n >= 100_000 else 3, warmup=0)
    figures.append(
        Figure(
            f"{tag}: cold CLI query p50 (vs rank-bm25)",
            cold.ms(),
            "ms",
            "rank-bm25 process: load tokens, build, query",
            okapi_cold.ms(),
        )
    )
    figures.append(
        Figure(
            f"{tag}: cold CLI query peak RSS (vs rank-bm25)",
            cli_rss,
            "MB",
            "rank-bm25 process peak RSS",
            _peak_rss(_OKAPI_PROCESS, okapi_cli[3:], env),
        )
    )

    # -- incremental update after one write ------------------------------------------------
    progress(f"{tag}: incremental updates")
    updates = []
    for i in range(7 if not quick else 3):
        store.write("lesson", f"bench-new-{i}", f"a new note {i} about {asked[i % len(asked)]}")
        updates.append(timed(lambda: searcher.index.view()))
        assert searcher.index.stats.get("op") == "update", searcher.index.stats
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

    if nominal == 10_000:
        figures += _semantic(tmp, git_dir, searcher, asked, env, runs)
    return figures


def worst_query() -> str:
    """The costliest query the bounds accept: ``MAX_QUERY_TERMS`` distinct words, the corpus's
    most common (each in most notes), repeated up to ``MAX_QUERY_CHARS`` characters."""
    common = vocabulary(VOCAB_SIZE, seed=7)[:MAX_QUERY_TERMS]  # Zipf rank order
    words = list(common)
    while len(" ".join([*words, common[len(words) % len(common)]])) <= MAX_QUERY_CHARS:
        words.append(common[len(words) % len(common)])
    return " ".join(words)


def _worst_query(
    searcher: Searcher, git_dir: Path, asked: Sequence[str], tag: str, quick: bool
) -> list[Figure]:
    """The bounded worst case beside an ordinary query, over every note (floor unverified:
    the most candidates), warm and in a fresh searcher (a new process's first query)."""
    progress(f"{tag}: worst-case accepted query")
    worst = worst_query()
    flt = Filter(min_trust=Trust.UNVERIFIED)
    runs = 5 if quick else 15
    searcher.query(worst, flt, 10, mode="exact")
    bad = Timings(
        tuple(timed(partial(searcher.query, worst, flt, 10, mode="exact")) for _ in range(runs))
    )
    good = Timings(
        tuple(timed(partial(searcher.query, q, flt, 10, mode="exact")) for q in asked[:runs])
    )
    fresh = Timings(
        tuple(
            timed(partial(Searcher(git_dir).query, worst, flt, 10, mode="exact"))
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
            note="a new process's first query: index opened, postings of the common words read",
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

    if importlib.util.find_spec("wordllama") is None:
        progress("semantic: wordllama not installed, skipped")
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
    cold, py = measure_pair(_runner(cli, env), _runner([sys.executable, "-c", "pass"], env), runs)
    figures.append(
        Figure(
            "10k: cold CLI semantic query p50",
            cold.ms(),
            "ms",
            "python -c pass",
            py.ms(),
            target=250.0,
        )  # fmt: skip
    )
    return figures


def _relevance() -> list[Figure]:
    from truss_files.recall.evaluate import (
        bm25_rank_fn,
        evaluate,
        hybrid_rank_fn,
        load_corpus,
        load_queries,
        semantic_rank_fn,
    )

    corpus = load_corpus(RELEVANCE / "corpus.yaml")
    asked = load_queries(RELEVANCE / "queries.yaml")
    exact = evaluate(bm25_rank_fn(corpus), corpus, asked, k=5)
    results = {"exact": exact}
    import importlib.util

    if importlib.util.find_spec("wordllama") is not None:
        from truss_files.recall.embed import WordLlamaEmbedder

        embedder = WordLlamaEmbedder()
        results["semantic"] = evaluate(semantic_rank_fn(corpus, embedder), corpus, asked, k=5)
        results["hybrid"] = evaluate(hybrid_rank_fn(corpus, embedder), corpus, asked, k=5)
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


def _runner(argv: Sequence[str], env: dict[str, str]) -> Callable[[], None]:
    def go() -> None:
        done = subprocess.run(list(argv), env=env, capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} exited {done.returncode}: {done.stderr[-400:]!r}")

    return go


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
from truss_files.faces.cli import main
sys.argv = ["truss-files", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    if exc.code:
        raise
"""
