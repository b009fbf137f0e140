"""LoCoMo recall: the three modes on real conversations, beside the encoder alone and BM25 peers.

``python -m benchmarks locomo --data PATH [--conversations N]`` (``PATH``: LoCoMo's own JSON,
e.g. ``locomo10.json``; it is read where it lies, never copied into the repository). Every
dialog turn of a conversation is one note (``Speaker: text``, key ``<sample>-<dia_id>``) in
a store of its own; a question (categories 1-4; category 5's adversarial questions have no
answer in the conversation) is asked of its conversation's store, and its evidence turns are
the answer. ``recall@k`` is the share of a question's evidence turns in the top ``k``,
averaged over questions.

Systems, all over the same notes and questions:

* ``exact`` / ``semantic`` / ``hybrid``: truss-files' recall modes through a real store
  (``Searcher``, every note admitted);
* ``encoder alone``: the semantic mode's own encoder (minilm), cosine over the notes' texts,
  no store between -- the figure semantic mode must reach;
* ``tantivy en_stem``, ``SQLite FTS5`` (porter) and ``rank-bm25`` (BM25Okapi over lowercase
  words): lexical peers (``benchmarks.peers``).

Each recall figure is printed beside exact's (the ratio); each warm ms/query (the median over
the questions, in a process whose indexes and vectors are built) beside exact's. Per question
category, recall@5 of every system goes to a second table.

Beside them, in the same run: the embedding speed (``index`` over each conversation's turns,
notes per second against the 300 target; a warm query's encoding, ms against the 5 ms target)
and hybrid against exact on the project's own sets (``tests/relevance``: hybrid must never
fall below exact on any set).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import embedspeed
from .common import Figure, new_store, progress, scratch
from .embedspeed import ENCODE_TARGET_MS, INDEX_TARGET

DATA_ENV = "TRUSS_LOCOMO"
CONVERSATIONS_ENV = "TRUSS_LOCOMO_CONVERSATIONS"
DEFAULT_CONVERSATIONS = 1
# LoCoMo's question categories by number (papers name them differently); 5, adversarial, has
# no answer in the conversation.
CATEGORIES = (1, 2, 3, 4)
MODES = ("exact", "semantic", "hybrid")
TABLES: list[str] = []
# (notes, seconds, CPU seconds) of each store's index: on a machine shared with other work the
# CPU seconds say what one quiet core would take (one intra-op thread: ``encoders/ortrun.py``).
INDEXED: list[tuple[int, float, float]] = []
SPEED_NOTES = 300
SPEED_QUESTIONS = 100

RankFn = Callable[[str, int], Sequence[str]]


@dataclass(frozen=True)
class Conversation:
    sample: str
    turns: list[tuple[str, str]]  # (dia_id, "Speaker: text")
    questions: list[tuple[str, tuple[str, ...], int]]  # (question, evidence ids, category)


def load(path: Path, count: int) -> list[Conversation]:
    """The first ``count`` conversations of LoCoMo's JSON at ``path``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(
            f"{path}: not readable as LoCoMo's JSON ({exc}); pass --data PATH"
        ) from exc
    if not isinstance(data, list) or not data or "conversation" not in data[0]:
        raise SystemExit(f"{path}: expected LoCoMo's list of samples ('conversation', 'qa')")
    out: list[Conversation] = []
    for sample in data[:count]:
        talk = sample["conversation"]
        sessions = sorted(
            (k for k in talk if k.startswith("session_") and not k.endswith("date_time")),
            key=lambda k: int(k.split("_")[1]),
        )
        turns = [
            (t["dia_id"], f"{t['speaker']}: " + " ".join(str(t["text"]).split()))
            for k in sessions
            for t in talk[k]
        ]
        ids = {d for d, _ in turns}
        questions = []
        for qa in sample["qa"]:
            evidence = tuple(e for e in qa.get("evidence", []) if e in ids)
            if qa.get("category") in CATEGORIES and evidence:
                questions.append((str(qa["question"]), evidence, int(qa["category"])))
        out.append(Conversation(str(sample.get("sample_id", len(out))), turns, questions))
    return out


class SharedEmbedder:
    """The minilm embedder, each text embedded once: the store and the encoder-alone baseline
    ask for the same texts only if the store embeds exactly what the note says."""

    def __init__(self) -> None:
        from truss_files.recall.encoders.minilm import MiniLMEmbedder

        self.inner = MiniLMEmbedder()
        self.fingerprint = self.inner.fingerprint
        self.dim = self.inner.dim
        self.rows: dict[str, Any] = {}

    def embed_documents(self, texts: Sequence[str]) -> Any:
        import numpy as np

        missing = [t for t in dict.fromkeys(texts) if t not in self.rows]
        if missing:
            self.rows.update(zip(missing, self.inner.embed_documents(missing), strict=True))
        return np.stack([self.rows[t] for t in texts]) if texts else self.inner.embed_documents([])

    def embed_query(self, text: str) -> Any:
        return self.inner.embed_query(text)

    def query_vector(self, text: str) -> list[float]:
        # Never the embedder's cache of recent queries: each mode is asked the same questions,
        # and a mode asked second must pay for its query's forward pass as the first did.
        return [float(x) for x in self.inner.embed_query(text)]


def store_fns(conv: Conversation, where: Path, embedder: SharedEmbedder) -> dict[str, RankFn]:
    """exact / semantic / hybrid over a store holding the conversation's turns."""
    from truss_files.format import entryfile
    from truss_files.model import Entry, Kind, Layer, Provenance, Trust
    from truss_files.recall.engine import Searcher
    from truss_files.recall.pipeline import Filter
    from truss_files.trust.readgate import refusal

    from .common import commit_trusted

    store = new_store(where / "store.git")
    entries = [
        Entry(
            kind=Kind.FACT,
            key=f"{conv.sample}-{dia}",
            body=body,
            layer=Layer.TASK,
            author="agent:bench@example.test",
            created="2026-11-29T10:00:00Z",
            provenance=Provenance(produced_by="api:bench@example.test"),
        )
        for dia, body in conv.turns
    ]
    files = {e.path: entryfile.serialize(e).encode() for e in entries}
    commit_trusted(store, entries, files, f"bench: {conv.sample}")
    turn_of = {e.id: dia for e, (dia, _) in zip(entries, conv.turns, strict=True)}
    searcher = Searcher(store.git.git_dir, gate=refusal, embedder=embedder)
    started, cpu = time.perf_counter(), time.process_time()
    searcher.embed_missing()  # what `truss-files index` does: no query embeds the turns
    INDEXED.append((len(entries), time.perf_counter() - started, time.process_time() - cpu))
    every = Filter(min_trust=Trust.UNVERIFIED)

    def fn(mode: str) -> RankFn:
        def ranked(query: str, depth: int) -> list[str]:
            hits = searcher.query(query, every, depth, mode=mode).hits
            return [turn_of[h.entry.id] for h in hits]

        return ranked

    return {mode: fn(mode) for mode in MODES}


def encoder_fn(conv: Conversation, embedder: SharedEmbedder) -> RankFn:
    import numpy as np

    ids = [d for d, _ in conv.turns]
    matrix = embedder.embed_documents([body for _, body in conv.turns])

    def ranked(query: str, depth: int) -> list[str]:
        scores = matrix @ embedder.embed_query(query)
        return [ids[i] for i in np.argsort(-scores, kind="stable")[:depth]]

    return ranked


def rank_bm25_fn(conv: Conversation) -> RankFn | None:
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        return None
    from .evaluate import plain_words

    ids = [d for d, _ in conv.turns]
    engine = BM25Okapi([plain_words(body) or [""] for _, body in conv.turns])

    def ranked(query: str, depth: int) -> list[str]:
        scores = engine.get_scores(plain_words(query))
        order = sorted(range(len(ids)), key=lambda i: -scores[i])
        return [ids[i] for i in order[:depth] if scores[i] > 0]

    return ranked


def run(quick: bool) -> list[Figure]:
    path = os.environ.get(DATA_ENV)
    if not path:
        progress(f"locomo: no data set given (--data PATH or {DATA_ENV}); skipped")
        return []
    count = int(os.environ.get(CONVERSATIONS_ENV) or DEFAULT_CONVERSATIONS)
    convs = load(Path(path), 1 if quick else count)
    from . import peers

    embedder = SharedEmbedder()
    # system -> per question (recall@5, recall@10, ms, category)
    rows: dict[str, list[tuple[float, float, float, int]]] = {}
    cpu_ms: dict[str, list[float]] = defaultdict(list)  # per system, per question
    with scratch("locomo") as tmp:
        for number, conv in enumerate(convs):
            progress(f"locomo {conv.sample}: {len(conv.turns)} turns, {len(conv.questions)} Qs")
            here = tmp / str(number)
            here.mkdir()
            docs = list(conv.turns)
            fns: dict[str, RankFn] = store_fns(conv, here, embedder)
            fns["encoder alone"] = encoder_fn(conv, embedder)
            fns["tantivy en_stem"] = peers.rank_fn("tantivy-en_stem", docs, here / "tantivy")
            fns["SQLite FTS5"] = peers.rank_fn("fts5", docs, here / "fts5.db")
            bm25 = rank_bm25_fn(conv)
            if bm25 is not None:
                fns["rank-bm25"] = bm25
            for system, fn in fns.items():
                progress(f"locomo {conv.sample}: {system}")
                fn("warm up: what happened first", 10)  # builds indexes, embeds every turn
                for question, evidence, category in conv.questions:
                    started, begun = time.perf_counter(), time.process_time()
                    ranked = list(fn(question, 10))
                    ms = (time.perf_counter() - started) * 1000
                    cpu_ms[system].append((time.process_time() - begun) * 1000)
                    wanted = set(evidence)
                    rows.setdefault(system, []).append(
                        (
                            len(wanted & set(ranked[:5])) / len(wanted),
                            len(wanted & set(ranked[:10])) / len(wanted),
                            ms,
                            category,
                        )
                    )
        encoding, encoding_cpu = query_encoding(
            embedder, [q for c in convs for q, _, _ in c.questions]
        )
    out = figures(rows, sum(len(c.questions) for c in convs), len(convs))
    notes = sum(n for n, _, _ in INDEXED)
    for what, took in (
        ("", sum(s for _, s, _ in INDEXED)),
        (" per CPU second", sum(c for *_, c in INDEXED)),
    ):
        out.append(
            Figure(
                f"embedding: index, notes/s{what} (every turn, from nothing)",
                notes / took,
                "notes/s",
                "target",
                INDEX_TARGET,
                note=f"{notes} notes" if not what else "",
            )
        )
    for what, ms in (("", encoding), (" (CPU)", encoding_cpu)):
        out.append(
            Figure(
                f"embedding: warm query encoding p50{what}",
                ms,
                "ms",
                "target",
                ENCODE_TARGET_MS,
                target=ENCODE_TARGET_MS,
            )
        )
    # Warm hybrid against 3x warm exact plus the query's encoding: wall, and CPU (the
    # process's own time, steadier on a machine other work shares).
    for what, hybrid, exact, encoded in (
        ("", [r[2] for r in rows["hybrid"]], [r[2] for r in rows["exact"]], encoding),
        (" (CPU)", cpu_ms["hybrid"], cpu_ms["exact"], encoding_cpu),
    ):
        bound = 3 * statistics.median(exact) + encoded
        out.append(
            Figure(
                f"locomo hybrid: warm ms/query p50{what}, against 3x exact + encoding",
                statistics.median(hybrid),
                "ms",
                f"3x exact p50 + encoding p50{what}",
                bound,
                target=bound,
            )
        )
    # The runners side by side on the first conversation's turns (``embedspeed``).
    out += embedspeed.measure(
        [body for _, body in convs[0].turns][:SPEED_NOTES],
        [q for q, _, _ in convs[0].questions][:SPEED_QUESTIONS],
    )
    return out + ([] if quick else project_sets())  # --quick: LoCoMo alone


def query_encoding(embedder: SharedEmbedder, questions: Sequence[str]) -> tuple[float, float]:
    """Median ms (wall, CPU) to encode a question not asked before, in this warm process."""
    inner = embedder.inner
    times, cpu = [], []
    for question in questions[:200]:
        started, begun = time.perf_counter(), time.process_time()
        inner.embed_query(f"{question} (again)")
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - begun) * 1000)
    return statistics.median(times), statistics.median(cpu)


def project_sets() -> list[Figure]:
    """Hybrid beside exact, recall@5, on the project's own sets (``benchmarks.evaluate``)."""
    from truss_files.recall.encoders.minilm import MiniLMEmbedder
    from truss_files.recall.related import load_related

    from .bench_semantic import SETS
    from .evaluate import evaluate, hybrid_rank_fn, load_corpus, load_queries, widened_rank_fn

    embedder = MiniLMEmbedder()
    out = []
    for name, corpus_file, queries_file in SETS:
        progress(f"locomo: the project's set {name}")
        corpus, queries = load_corpus(corpus_file), load_queries(queries_file)
        exact = evaluate(widened_rank_fn(corpus, load_related()), corpus, queries)["recall@5"]
        hybrid = evaluate(hybrid_rank_fn(corpus, embedder), corpus, queries)["recall@5"]
        out.append(Figure(f"set {name}: hybrid recall@5", hybrid, "", "exact recall@5", exact))
    return out


def figures(
    rows: dict[str, list[tuple[float, float, float, int]]], questions: int, convs: int
) -> list[Figure]:
    def mean(xs: Sequence[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    exact = rows["exact"]
    out = []
    tag = f"{convs} conversation{'s' if convs > 1 else ''}, {questions} questions"
    for system, found in rows.items():
        for k, at in (("recall@5", 0), ("recall@10", 1)):
            out.append(
                Figure(
                    f"locomo {system}: {k}",
                    mean([r[at] for r in found]),
                    "",
                    f"exact {k}",
                    mean([r[at] for r in exact]),
                    note=tag if system == "exact" and at == 0 else "",
                )
            )
        out.append(
            Figure(
                f"locomo {system}: warm ms/query p50",
                statistics.median(r[2] for r in found),
                "ms",
                "exact warm p50",
                statistics.median(r[2] for r in exact),
            )
        )
    head = ["system", *(f"category {c}" for c in CATEGORIES)]
    lines = ["LoCoMo recall@5 per question category", " | ".join(head)]
    for system, found in rows.items():
        cells = [system]
        for c in CATEGORIES:
            mine = [r[0] for r in found if r[3] == c]
            cells.append(f"{mean(mine):.3f} (n={len(mine)})")
        lines.append(" | ".join(cells))
    TABLES.append("\n".join(lines))
    return out
