"""The encoder's speed, each runner beside the others in one run: notes per second and query
encoding, on the texts the caller passes (LoCoMo's turns and questions in ``bench_locomo``).

Runners, all over the same token lists (the tokenizer is timed apart):

* ``numpy pass``: ``minilm.Encoder``, what a cold query runs (the integer arithmetic of the
  chosen runner, each note alone);
* ``onnxruntime, plain``: the model file as it ships, in onnxruntime with its default graph
  optimisations, one intra-op thread, notes sorted by length in batches of 16 (what ran
  before: float products over the dequantized weights);
* ``onnxruntime, integer`` (chosen): ``ortrun.OrtEncoder``, the rewritten graph
  (``onnxproto.integer_graph``), each note alone, one worker -- and with ``WORKERS`` workers,
  as ``truss-files index`` runs it.

Each notes/s figure is the median of ``runs`` passes over the texts, as wall time and as
CPU seconds of the process (``time.process_time``: on a machine shared with other work, what
one quiet core would take). Query encoding: p50 and p95 over the questions, each encoded
once per runner, wall and CPU.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from .common import Figure, progress

INDEX_TARGET = 300.0  # notes/s
ENCODE_TARGET_MS = 5.0
PLAIN_BATCH = 16


def plain_runner(model_file: Any) -> Callable[[Sequence[Sequence[int]]], Any]:
    """The model file in onnxruntime as it ships: float products, sorted batches of 16."""
    import numpy as np
    import onnxruntime as ort

    from truss_files.recall.encoders.ortrun import session_options

    session = ort.InferenceSession(
        str(model_file), session_options(), providers=["CPUExecutionProvider"]
    )

    def batch(rows: Sequence[Sequence[int]]) -> Any:
        n, width = len(rows), max(len(r) for r in rows)
        ids = np.zeros((n, width), dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.int64)
        for at, tokens in enumerate(rows):
            ids[at, : len(tokens)] = tokens
            mask[at, : len(tokens)] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, feed)[0]
        weights = mask.astype(np.float32)
        pooled = np.einsum("nwd,nw->nd", hidden, weights) / weights.sum(axis=1)[:, None]
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    def encode(rows: Sequence[Sequence[int]]) -> Any:
        out = np.zeros((len(rows), 384), dtype=np.float32)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        for start in range(0, len(order), PLAIN_BATCH):
            chunk = order[start : start + PLAIN_BATCH]
            out[chunk] = batch([rows[i] for i in chunk])
        return out

    return encode


def _pass(encode: Callable[[Sequence[Sequence[int]]], Any], rows: Sequence[Sequence[int]]) -> Any:
    started, cpu = time.perf_counter(), time.process_time()
    out = encode(rows)
    return out, time.perf_counter() - started, time.process_time() - cpu


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def _p95(xs: list[float]) -> float:
    import numpy as np

    return float(np.percentile(xs, 95))


def measure(texts: Sequence[str], questions: Sequence[str], runs: int = 3) -> list[Figure]:
    """Every runner's notes/s and query encoding over ``texts`` and ``questions``."""

    from truss_files.recall.encoders.minilm import MiniLMEmbedder
    from truss_files.recall.encoders.ortrun import WORKERS, OrtEncoder

    embedder = MiniLMEmbedder()
    tokenizer = embedder.tokenizer()
    started = time.process_time()
    rows = [tokenizer.encode(t) for t in texts]
    tokenize_ms = (time.process_time() - started) * 1000 / len(texts)
    asked = [tokenizer.encode(q) for q in questions]
    integer = OrtEncoder(embedder.model_file, workers=1)
    pooled = OrtEncoder(embedder.model_file, workers=WORKERS)
    runners: dict[str, Callable[[Sequence[Sequence[int]]], Any]] = {
        "numpy pass": embedder.encoder().encode,
        "onnxruntime, plain": plain_runner(embedder.model_file),
        "onnxruntime, integer (chosen)": integer.encode,
        f"onnxruntime, integer, {WORKERS} workers": pooled.encode,
    }
    for encode in runners.values():
        encode(rows[:8])  # sessions built, weights mapped: warm runners are compared
    speed: dict[str, tuple[float, float]] = {}
    vectors: dict[str, Any] = {}
    for name, encode in runners.items():
        progress(f"embedding speed: {name}, {len(rows)} notes x {runs}")
        walls, cpus = [], []
        for _ in range(runs):
            vectors[name], wall, cpu = _pass(encode, rows)
            walls.append(wall)
            cpus.append(cpu)
        speed[name] = (len(rows) / statistics.median(walls), len(rows) / statistics.median(cpus))
    query: dict[str, tuple[list[float], list[float]]] = {}
    for name, encode in list(runners.items())[:3]:
        walls, cpus = [], []
        for tokens in asked:
            _, wall, cpu = _pass(encode, [tokens])
            walls.append(wall * 1000)
            cpus.append(cpu * 1000)
        query[name] = (walls, cpus)

    chosen, plain, numpy_pass = "onnxruntime, integer (chosen)", "onnxruntime, plain", "numpy pass"
    tag = f"{len(rows)} notes, median of {runs} passes"
    out = []
    for name, (wall, cpu) in speed.items():
        if name == plain:
            continue
        for what, value, base, by_numpy in (
            ("", wall, speed[plain][0], speed[numpy_pass][0]),
            (" per CPU second", cpu, speed[plain][1], speed[numpy_pass][1]),
        ):
            out.append(
                Figure(
                    f"embedding: {name}, notes/s{what}",
                    value,
                    "notes/s",
                    f"{plain}{what}",
                    base,
                    note=f"target {INDEX_TARGET:g}; numpy pass {by_numpy:.0f}; {tag}",
                )
            )
    for name, (walls, cpus) in query.items():
        if name == plain:
            continue
        pairs = (("", walls, query[plain][0]), (" (CPU)", cpus, query[plain][1]))
        for what, xs, reference in pairs:
            for label, stat in (("p50", _median), ("p95", _p95)):
                out.append(
                    Figure(
                        f"embedding: {name}, query encoding {label}{what}",
                        stat(xs),
                        "ms",
                        f"{plain} {label}",
                        stat(reference),
                        target=ENCODE_TARGET_MS if name == chosen else None,
                        note=f"{len(asked)} questions",
                    )
                )
    agreement = (vectors[chosen] * vectors[numpy_pass]).sum(axis=1)
    against_float = (vectors[chosen] * vectors[plain]).sum(axis=1)
    out.append(
        Figure(
            "embedding: cosine, chosen runner vs numpy pass, min",
            float(agreement.min()),
            "",
            "vs the float model, min",
            float(against_float.min()),
            note=f"means {agreement.mean():.5f} / {against_float.mean():.5f}",
        )
    )
    out.append(Figure("embedding: tokenizer, ms per note", tokenize_ms, "ms", "", 0.0, note="CPU"))
    return out
