"""Semantic recall: cold start of ``query --mode semantic`` at 10k notes, relevance per mode.

* **cold CLI semantic query p50** at 10k notes (vectors already cached, as after the first
  semantic query): ``truss-files --store S query Q --mode semantic`` as a new process beside
  ``python -c pass``, alternated run by run (``measure_pair``); target: under 3x.
* **relevance** (``benchmarks.evaluate``): recall@5 and MRR@10 of plain BM25 (no
  stemming, no analysis), BM25 with acronyms, exact (that and related words), semantic and
  hybrid, on ``tests/relevance`` and on
  ``tests/relevance/hard`` -- its dev questions (the ones methods were chosen on) and its
  held-out test questions, each beside exact on the same questions.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import truss_files
from truss_files.recall.pipeline import Filter

from .bench_cli import console_script
from .common import (
    Figure,
    command_runner,
    commit_trusted,
    label,
    measure_pair,
    new_store,
    progress,
    scaled,
)
from .common import scratch as scratch_dir
from .corpus import generate, realistic_queries

RELEVANCE = Path(__file__).resolve().parent.parent / "tests" / "relevance"
SETS = (
    ("old", RELEVANCE / "corpus.yaml", RELEVANCE / "queries.yaml"),
    ("hard dev", RELEVANCE / "hard" / "corpus.yaml", RELEVANCE / "hard" / "queries-dev.yaml"),
    ("hard test", RELEVANCE / "hard" / "corpus.yaml", RELEVANCE / "hard" / "queries-test.yaml"),
)
COLD_TARGET_RATIO = 3.0


def run(quick: bool) -> list[Figure]:
    compileall.compile_dir(Path(truss_files.__file__).parent, quiet=1)
    figures = relevance()
    if importlib.util.find_spec("wordllama") is None:
        progress("semantic: wordllama not installed, cold start skipped")
        return figures
    with scratch_dir("semantic") as tmp:
        figures += cold_start(tmp, scaled(10_000, floor=200), 5 if quick else 9)
    return figures


def cold_start(tmp: Path, n: int, runs: int) -> list[Figure]:
    from truss_files.readgate import refusal
    from truss_files.recall.engine import Searcher

    tag = label(n)
    progress(f"{tag}: generating and committing {n} notes")
    corpus = generate(n, seed=n)
    store = new_store(tmp / f"store-{n}.git")
    commit_trusted(store, corpus.entries, corpus.files, f"bench: {n} notes")
    git_dir = store.git.git_dir
    asked = realistic_queries(4, seed=n)
    progress(f"{tag}: embedding every note once")
    Searcher(git_dir, gate=refusal).query(asked[0], Filter(), 10, mode="semantic")
    env = dict(os.environ, TRUSS_CONFIG_DIR=str(tmp / "config"), HOME=str(tmp))
    env["HF_HUB_OFFLINE"] = "1"
    env.pop("TRUSS_STORE", None)
    progress(f"{tag}: cold CLI semantic queries")
    figures = []
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
                target=py.ms() * COLD_TARGET_RATIO if mode == "semantic" else None,
                note=f"{runs} runs each, alternated"
                + (f"; target {COLD_TARGET_RATIO:g}x" if mode == "semantic" else ""),
            )
        )
    return figures


def relevance() -> list[Figure]:
    """recall@5 and MRR per mode and set, each beside exact on the same questions."""
    figures = []
    for name, result in measure_relevance().items():
        exact = result["exact"]
        for mode, found in result.items():
            for metric in ("recall@5", "mrr"):
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
    from truss_files.recall.related import load_related

    embedder = None
    if importlib.util.find_spec("wordllama") is not None:
        from truss_files.recall.embed import load_embedder

        embedder = load_embedder()
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
            if embedder is not None:
                made["semantic"] = semantic_rank_fn(corpus, embedder)
                made["hybrid"] = hybrid_rank_fn(corpus, embedder)
            fns[corpus_file] = made
        asked = load_queries(queries_file)
        out[name] = {
            mode: evaluate(fn, corpus, asked, k=5) for mode, fn in fns[corpus_file].items()
        }
    return out
