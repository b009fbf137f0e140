"""Measure a ranking function against a labelled relevance set (``tests/relevance``).

A *rank function* takes a query string and a depth and returns note ids, best first; it closes
over whatever index it needs, built from the same corpus passed to ``evaluate``. ``bm25_rank_fn``
is exact recall's ranking (``tokenize`` + a floor index in memory, ``MemoryIndex``: the
same documents, queries and BM25 as a store's); ``semantic_rank_fn``
and ``hybrid_rank_fn`` rank with an ``Embedder`` (cosine; score fusion with BM25), as the
``semantic`` and ``hybrid`` recall modes do; ``plain_bm25_rank_fn`` is the unanalysed baseline.

Metrics, averaged over queries:

* ``recall@k`` -- fraction of a query's relevant notes found in the first ``k`` results.
* ``mrr`` -- reciprocal rank of the first relevant note within the first ``MRR_DEPTH`` (10)
  results, 0 when none is there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tantivy

from truss_files.recall.acronyms import Glossary, definitions
from truss_files.recall.floors import SCHEMA, UPDATE_HEAP, body_query, ranked
from truss_files.recall.fusion import HYBRID_WEIGHTS, LEXICAL_DEPTH, fuse_scored_ids
from truss_files.recall.related import RELATED_WEIGHT, load_related
from truss_files.recall.tokenize import STOPWORDS, tokenize

if TYPE_CHECKING:
    from truss_files.recall.encoders.base import Embedder
    from truss_files.recall.related import RelatedWords

__all__ = [
    "MRR_DEPTH",
    "Note",
    "Query",
    "RankFn",
    "bm25_rank_fn",
    "evaluate",
    "hybrid_rank_fn",
    "semantic_rank_fn",
    "load_corpus",
    "widened_rank_fn",
    "load_queries",
    "plain_bm25_rank_fn",
    "plain_words",
]

MRR_DEPTH = 10

RankFn = Callable[[str, int], Sequence[str]]


class MemoryIndex:
    """A floor index in memory over ``(id, tokens)`` pairs, built and searched as a store's
    are (``floors.SCHEMA``, ``body_query``, ``ranked``): what exact recall ranks with."""

    def __init__(self, docs: Iterable[tuple[str, Sequence[str]]]) -> None:
        self.path = "(memory)"
        self.index = tantivy.Index(SCHEMA)
        writer = self.index.writer(heap_size=UPDATE_HEAP * 2, num_threads=1)
        self.names: list[str] = []
        for number, (name, tokens) in enumerate(docs):
            doc = tantivy.Document(id=name, body=" ".join(tokens))
            for field in ("hi", "tr"):
                doc.add_unsigned(field, 0)
            doc.add_unsigned("lo", number)
            writer.add_document(doc)
            self.names.append(name)
        writer.commit()
        writer.wait_merging_threads()
        self.index.config_reader(reload_policy="Manual")
        self.searcher = self.index.searcher()

    def search(self, query: Any, limit: int, *, count: bool = False) -> tuple[list[Any], int]:
        return self.hits(self.best(query, limit)), 0

    def best(self, query: Any, want: int) -> list[tuple[float, Any]]:
        hits: list[tuple[float, Any]] = self.searcher.search(query, want, count=False).hits
        return hits

    def hits(self, scored: Sequence[tuple[float, Any]]) -> list[Any]:
        addresses = [address for _score, address in scored]
        numbers = self.searcher.fast_field_values("lo", addresses)
        return [
            (score, self.names[int(n or 0)], 0, a)
            for (score, a), n in zip(scored, numbers, strict=True)
        ]

    def top(
        self, terms: Sequence[str], limit: int, added: Sequence[str] = (), weight: float = 1.0
    ) -> list[tuple[str, float]]:
        """The best ``limit`` documents holding one of ``terms`` (each scored once) or of
        ``added`` (at ``weight``)."""
        query = body_query(terms, added, weight)
        if query is None or limit <= 0:
            return []
        return [(hit[1], hit[0]) for hit in ranked(self, query, limit)]  # type: ignore[arg-type]


@dataclass(frozen=True)
class Note:
    id: str
    kind: str
    body: str


@dataclass(frozen=True)
class Query:
    query: str
    relevant: tuple[str, ...]
    type: str = ""  # the conversational set's: single-hop, multi-hop, temporal


def load_corpus(path: str | Path) -> list[Note]:
    """Read a corpus YAML file: a list of ``{id, kind, body}`` mappings."""
    return [
        Note(id=str(r["id"]), kind=str(r["kind"]), body=str(r["body"])) for r in _load_yaml(path)
    ]


def load_queries(path: str | Path) -> list[Query]:
    """Read a queries YAML file: a list of ``{query, relevant: [ids], type?}`` mappings."""
    return [
        Query(
            query=str(r["query"]),
            relevant=tuple(str(i) for i in r["relevant"]),
            type=str(r.get("type", "")),
        )
        for r in _load_yaml(path)
    ]


def _load_yaml(path: str | Path) -> list[dict[str, Any]]:
    # Imported here: only evaluation needs YAML, the query path must not pay for it.
    import yaml

    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of mappings")
    return data


ScoredFn = Callable[[str, int], list[tuple[str, float]]]


def bm25_rank_fn(corpus: Iterable[Note], *, acronyms: bool = True) -> RankFn:
    """Exact BM25 over every note's body, tokenized with ``tokenize``; with ``acronyms`` the
    query is widened by the acronyms the notes define (``acronyms.Glossary``), as exact mode
    does."""
    scored = _bm25_scored(corpus, acronyms=acronyms)
    return lambda query, depth: [doc_id for doc_id, _ in scored(query, depth)]


def _bm25_scored(
    corpus: Iterable[Note], *, acronyms: bool = True, related: RelatedWords | None = None
) -> ScoredFn:

    notes = list(corpus)
    index = MemoryIndex((note.id, tokenize(note.body)) for note in notes)
    glossary = Glossary(p for note in notes for p in definitions(note.body)) if acronyms else None

    def scored(query: str, depth: int) -> list[tuple[str, float]]:
        terms = tokenize(query)
        if glossary is not None:
            terms = glossary.expand(terms)
        added = related.widen(terms) if related is not None else []
        return index.top(terms, depth, added, RELATED_WEIGHT)

    return scored


def widened_rank_fn(corpus: Sequence[Note], related: RelatedWords | None) -> RankFn:
    """Exact mode's ranking: ``bm25_rank_fn`` plus the query's related words
    (``related.RelatedWords``) at ``RELATED_WEIGHT``; ``related=None`` is ``bm25_rank_fn``."""
    scored = _bm25_scored(corpus, related=related)
    return lambda query, depth: [doc_id for doc_id, _ in scored(query, depth)]


def plain_bm25_rank_fn(corpus: Iterable[Note]) -> RankFn:
    """The baseline without analysis: lowercase ASCII words minus stopwords, no stemming, no
    identifier splitting, no acronyms."""
    index = MemoryIndex((note.id, plain_words(note.body)) for note in corpus)

    def rank_fn(query: str, depth: int) -> list[str]:
        return [doc_id for doc_id, _ in index.top(plain_words(query), depth)]

    return rank_fn


def plain_words(text: str) -> list[str]:
    import re

    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOPWORDS]


def semantic_rank_fn(corpus: Sequence[Note], embedder: Embedder) -> RankFn:
    """Cosine similarity between the query's embedding and each note body's."""
    scored = _semantic_scored(corpus, embedder)
    return lambda query, depth: [doc_id for doc_id, _ in scored(query, depth)]


def _semantic_scored(corpus: Sequence[Note], embedder: Embedder) -> ScoredFn:
    import numpy as np

    ids = [note.id for note in corpus]
    matrix = embedder.embed_documents([note.body for note in corpus])

    def scored(query: str, depth: int) -> list[tuple[str, float]]:
        sims = matrix @ embedder.embed_query(query)
        order = sorted(range(len(ids)), key=lambda i: (-float(sims[i]), ids[i]))
        return [(ids[i], float(sims[i])) for i in order[:depth] if float(np.float32(sims[i])) > 0]

    return scored


def hybrid_rank_fn(corpus: Sequence[Note], embedder: Embedder, depth: int = 100) -> RankFn:
    """Score fusion of the exact (BM25 with acronyms and related words) and the semantic
    rankings (the lexical top ``LEXICAL_DEPTH``, the semantic top ``depth``), as ``hybrid``
    mode does (``fusion.hybrid_fusion``)."""

    lexical = _bm25_scored(corpus, related=load_related())
    semantic = _semantic_scored(corpus, embedder)

    def rank_fn(query: str, limit: int) -> list[str]:
        deep = max(limit, depth)
        # As hybrid_fusion: the lexical side's top max(limit, LEXICAL_DEPTH) only.
        shallow = lexical(query, max(limit, LEXICAL_DEPTH))
        return fuse_scored_ids([shallow, semantic(query, deep)], limit, HYBRID_WEIGHTS)

    return rank_fn


def evaluate(
    rank_fn: RankFn, corpus: Sequence[Note], queries: Sequence[Query], k: int = 5
) -> dict[str, Any]:
    """Recall@k and MRR of ``rank_fn`` over ``queries``.

    Returns ``{"recall@k": float, "mrr": float, "queries": int, "k": int, "per_query": [...]}``
    where each per-query entry has the query, its recall, reciprocal rank, the ids returned and
    the relevant ids missed in the top ``k`` -- enough to see which queries regress.
    Raises ``ValueError`` when a query names a relevant id missing from ``corpus`` (a typo there
    would otherwise read as a ranking failure) or when there are no queries.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not queries:
        raise ValueError("no queries to evaluate")
    ids: Mapping[str, Note] = {note.id: note for note in corpus}
    depth = max(k, MRR_DEPTH)
    recall_sum = 0.0
    rr_sum = 0.0
    per_query: list[dict[str, Any]] = []
    for q in queries:
        unknown = [r for r in q.relevant if r not in ids]
        if unknown or not q.relevant:
            raise ValueError(f"query {q.query!r}: relevant ids {unknown or '[]'} not usable")
        relevant = set(q.relevant)
        ranked = list(rank_fn(q.query, depth))[:depth]
        found = relevant.intersection(ranked[:k])
        recall = len(found) / len(relevant)
        rr = next((1.0 / (i + 1) for i, d in enumerate(ranked) if d in relevant), 0.0)
        recall_sum += recall
        rr_sum += rr
        per_query.append(
            {
                "query": q.query,
                "recall": recall,
                "rr": rr,
                "ranked": ranked[:k],
                "missed": sorted(relevant - found),
            }
        )
    n = len(queries)
    return {
        f"recall@{k}": recall_sum / n,
        "mrr": rr_sum / n,
        "queries": n,
        "k": k,
        "per_query": per_query,
    }
