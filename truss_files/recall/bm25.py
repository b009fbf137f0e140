"""Okapi BM25 over a candidate set, with corpus statistics taken from the candidates alone.

Recall filters first (trust, kind, key, layer) and ranks second. The statistics BM25 needs --
number of documents ``N``, average document length ``avgdl`` and per-term document frequency
``n`` -- are computed over the candidate set only, so text outside it (an unverified note
stuffed with the query's words) cannot move a candidate's score or rank. ``tests/test_bm25.py``
checks that property directly.

The formula (defaults k1=1.5, b=0.75)::

    idf(t)   = ln(1 + (N - n + 0.5) / (n + 0.5))
    score(d) = sum over query tokens t, repeats included, of
               idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avgdl))

The idf is Lucene's (and tantivy's): it is positive for every n <= N, so a document holding a
query term always scores above 0 -- callers may keep ``score > 0``. rank-bm25's ``BM25Okapi``
uses ``ln((N - n + 0.5) / (n + 0.5))`` instead, which goes negative for a term in more than half
the candidates (a single correct hit scored -0.67, an exact one 0.0) and is patched there with
a mean idf over the whole vocabulary -- a cost on every cold query with a common word. The two
rank the same documents first almost always (``tests/test_bm25.py`` measures the top-10
overlap on the relevance set and a synthetic corpus); the scores differ.

Pieces:

``Postings``
    An inverted index (term -> {doc_id: tf}) plus doc lengths, built incrementally with
    ``add_doc`` / ``add_term_freqs`` / ``remove_doc``. This is the seam for a persistent cache:
    store each doc's term frequencies and length, rebuild with ``add_term_freqs``, never
    re-tokenize.
``Candidates``
    Statistics of one candidate subset of a ``Postings`` (``N``, ``avgdl``, lazily the mean
    idf), computed once per subset and reusable across queries; ``scores`` / ``top`` rank.
``score_subset``
    One-shot: candidates + query -> top ``limit``.
``BM25`` / ``rank``
    The convenience API over a plain ``doc_id -> tokens`` mapping.

What ``top`` returns: exactly the candidates containing at least one query token (by exact
term), sorted by score descending, ties by doc_id ascending, at most ``limit``; every one scores
above 0. Candidates sharing no query token (score exactly 0) are never returned.

Cost, with ``S`` the candidate set, ``q`` the distinct query terms and ``P_t`` the postings of
term t:

* ``Candidates(...)`` over all docs: O(1) (the total length is kept up to date). Over a subset:
  O(|S|) to check the ids and sum their lengths -- done once per subset, not per query.
* a query: O(sum over t of min(|P_t|, 4|S|)) to find each term's postings among the candidates,
  plus O(matching postings) Python arithmetic, plus O(matches * log limit) for the top-k heap.
  Candidates without a query term cost nothing.

numpy is not used (and not imported: cold CLI start matters). Scoring touches only matching
postings; vectorizing them means copying dict entries into arrays and back. Measured on 100k
postings of one term: pure Python 33-41 ms, numpy 29 ms including the conversions -- not worth
numpy's ~60 ms import, and typical queries touch far fewer postings.

Measured (10k synthetic notes of ~100 words, Zipf vocabulary, 21 queries of 2-5 terms; medians of
5 runs): ``BM25.top(q, 10)`` 0.08 ms vs ``BM25Okapi.get_scores(q)`` 7.3 ms. Building: 0.39 s vs
0.23 s for BM25Okapi (an inverted index costs more to build; a cache avoids rebuilding it). 100k
docs, 30% candidates: ``score_subset`` 12 ms, almost all of it the one-off O(|S|) candidate
statistics (random dict lookups); queries on a reused ``Candidates`` 0.3 ms.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter

__all__ = ["BM25", "Candidates", "Postings", "Scored", "rank", "score_subset"]

DEFAULT_K1 = 1.5
DEFAULT_B = 0.75


@dataclass(frozen=True)
class Scored:
    """One ranked candidate."""

    doc_id: str
    score: float


class Postings:
    """An inverted index over documents: term -> {doc_id: tf}, doc lengths, per-doc terms.

    Mutations bump ``version``; a ``Candidates`` built earlier refuses to score afterwards,
    because its cached ``N``/``avgdl`` would be stale.

    Memory is one dict entry per (term, doc) pair plus one tuple slot per (doc, term) pair (the
    latter makes ``remove_doc`` and subset vocabularies cheap).
    """

    __slots__ = ("_post", "_len", "_terms", "_total_len", "_version")

    def __init__(self) -> None:
        self._post: dict[str, dict[str, int]] = {}
        self._len: dict[str, int] = {}
        self._terms: dict[str, tuple[str, ...]] = {}
        self._total_len = 0
        self._version = 0

    # -- building -------------------------------------------------------------------------------

    def add_doc(self, doc_id: str, tokens: Sequence[str]) -> None:
        """Index ``tokens`` as ``doc_id``, replacing any document already under that id."""
        if isinstance(tokens, str):
            # A str is a Sequence[str] of characters: almost certainly a missing tokenize().
            raise TypeError(f"tokens for {doc_id!r} must be a sequence of tokens, not a str")
        self._insert(doc_id, Counter(tokens), len(tokens))

    def add_term_freqs(
        self, doc_id: str, term_freqs: Mapping[str, int], length: int | None = None
    ) -> None:
        """Index precomputed term frequencies, replacing any document already under ``doc_id``.

        ``length`` defaults to ``sum(term_freqs.values())``, which is what BM25Okapi uses (the
        token count). Terms with frequency 0 are ignored.
        """
        tf: dict[str, int] = {}
        for term, freq in term_freqs.items():
            if freq < 0 or freq != int(freq):
                raise ValueError(f"term frequency of {term!r} in {doc_id!r} is {freq!r}")
            if freq:
                tf[term] = int(freq)
        total = sum(tf.values())
        if length is None:
            length = total
        elif length < 0:
            raise ValueError(f"length of {doc_id!r} is {length!r}")
        self._insert(doc_id, tf, length)

    def _insert(self, doc_id: str, tf: Mapping[str, int], length: int) -> None:
        if doc_id in self._len:
            self.remove_doc(doc_id)
        post = self._post
        for term, freq in tf.items():
            plist = post.get(term)
            if plist is None:
                post[term] = {doc_id: freq}
            else:
                plist[doc_id] = freq
        self._terms[doc_id] = tuple(tf)
        self._len[doc_id] = length
        self._total_len += length
        self._version += 1

    def remove_doc(self, doc_id: str) -> None:
        """Drop ``doc_id``; raises ``KeyError`` when it is not indexed. O(terms of the doc)."""
        terms = self._terms.pop(doc_id)
        post = self._post
        for term in terms:
            plist = post[term]
            del plist[doc_id]
            if not plist:
                del post[term]
        self._total_len -= self._len.pop(doc_id)
        self._version += 1

    # -- reading --------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """Incremented by every mutation."""
        return self._version

    def __len__(self) -> int:
        return len(self._len)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._len

    def doc_ids(self) -> list[str]:
        """Indexed ids, in insertion order."""
        return list(self._len)

    def doc_length(self, doc_id: str) -> int:
        return self._len[doc_id]

    def term_freqs(self, doc_id: str) -> dict[str, int]:
        """The stored term frequencies of one document (what a cache would persist)."""
        post = self._post
        return {term: post[term][doc_id] for term in self._terms[doc_id]}

    def doc_freq(self, term: str) -> int:
        """Documents containing ``term`` among all indexed documents."""
        plist = self._post.get(term)
        return len(plist) if plist else 0

    def vocabulary_size(self) -> int:
        return len(self._post)

    def candidates(self, candidate_ids: Iterable[str] | None = None) -> Candidates:
        """Statistics for ranking within ``candidate_ids`` (``None``: every indexed doc)."""
        return Candidates(self, candidate_ids)


class Candidates:
    """BM25 statistics of one candidate subset of a ``Postings``; ranks queries within it.

    Build once per candidate set and reuse for several queries: ``N`` and ``avgdl`` are computed
    here (O(|S|); O(1) for all docs).
    """

    __slots__ = ("postings", "ids", "n", "avgdl", "_version")

    def __init__(self, postings: Postings, candidate_ids: Iterable[str] | None = None) -> None:
        self.postings = postings
        self._version = postings.version
        lengths = postings._len
        ids: frozenset[str] | None = None
        if candidate_ids is None:
            total = postings._total_len
        else:
            ids = (
                candidate_ids if isinstance(candidate_ids, frozenset) else frozenset(candidate_ids)
            )
            try:
                total = sum(map(lengths.__getitem__, ids))
            except KeyError as exc:
                raise KeyError(f"candidate {exc.args[0]!r} is not in the postings") from None
            if len(ids) == len(lengths):
                # Every indexed doc: take the cheap whole-index paths below.
                ids = None
        self.ids = ids
        self.n = len(lengths) if ids is None else len(ids)
        # int / int, exactly as BM25Okapi computes it; 0.0 for an empty or all-empty set.
        self.avgdl = total / self.n if self.n and total else 0.0

    def scores(
        self,
        query_tokens: Sequence[str],
        *,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
    ) -> dict[str, float]:
        """Scores of the candidates that contain at least one query token (others score 0)."""
        self._check_fresh()
        if self.n == 0 or self.avgdl == 0.0:
            # No candidate has a single token, so none can match (BM25Okapi divides by zero).
            return {}
        post = self.postings._post
        lengths = self.postings._len
        ids = self.ids
        n_docs = self.n
        avgdl = self.avgdl
        k1p1 = k1 + 1
        one_minus_b = 1 - b
        # Per distinct term: its matching (doc_id, tf) pairs and its idf, computed once even when
        # the query repeats the term.
        term_info: dict[str, tuple[list[tuple[str, int]], float] | None] = {}
        acc: dict[str, float] = {}
        for term in query_tokens:
            if term in term_info:
                info = term_info[term]
            else:
                info = term_info[term] = self._term_info(term, post, ids, n_docs)
            if info is None:
                continue
            matches, idf = info
            # lexical.scores does the same operations in the same order: they agree bit for bit.
            if not acc:
                # First contribution to every doc (0.0 + x == x): a comprehension, ~25% faster.
                acc = {
                    doc_id: idf
                    * (tf * k1p1 / (tf + k1 * (one_minus_b + b * lengths[doc_id] / avgdl)))
                    for doc_id, tf in matches
                }
                continue
            for doc_id, tf in matches:
                acc[doc_id] = acc.get(doc_id, 0.0) + idf * (
                    tf * k1p1 / (tf + k1 * (one_minus_b + b * lengths[doc_id] / avgdl))
                )
        return acc

    def _term_info(
        self,
        term: str,
        post: dict[str, dict[str, int]],
        ids: frozenset[str] | None,
        n_docs: int,
    ) -> tuple[list[tuple[str, int]], float] | None:
        plist = post.get(term)
        if not plist:
            return None
        if ids is None:
            matches = list(plist.items())
        elif len(plist) <= 4 * len(ids):
            # Walk the posting list in its own (insertion) order: sequential memory access makes
            # this, and the scoring loop after it, 2-3x faster than going through a set
            # intersection, whose hash order scatters the dict lookups.
            matches = [(d, tf) for d, tf in plist.items() if d in ids]
        else:
            # Few candidates, long posting list: probe the list for each candidate instead (C).
            matches = [(d, plist[d]) for d in plist.keys() & ids]
        if not matches:
            return None
        df = len(matches)
        return matches, term_idf(n_docs, df)

    def top(
        self,
        query_tokens: Sequence[str],
        limit: int,
        *,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
    ) -> list[Scored]:
        """The best ``limit`` candidates containing a query token: score desc, then doc_id asc."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        if limit == 0:
            self._check_fresh()
            return []
        acc = self.scores(query_tokens, k1=k1, b=b)
        return _top_k(acc, limit)

    def _check_fresh(self) -> None:
        if self.postings.version != self._version:
            raise RuntimeError("the postings changed after these candidates were computed")


def score_subset(
    postings: Postings,
    candidate_ids: Iterable[str] | None,
    query_tokens: Sequence[str],
    limit: int,
    *,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
) -> list[Scored]:
    """Top ``limit`` of ``candidate_ids`` (``None``: all) for the query, statistics over them only.

    Equivalent to ``BM25({d: tokens(d) for d in candidate_ids}).top(query_tokens, limit)`` without
    rebuilding anything. To run several queries over one candidate set, use
    ``postings.candidates(ids)`` once and call ``top`` on it.
    """
    return Candidates(postings, candidate_ids).top(query_tokens, limit, k1=k1, b=b)


class BM25:
    """BM25 over a fixed set of documents -- pass the filtered candidates only.

    ``docs`` maps doc_id -> tokens (or is an iterable of ``(doc_id, tokens)`` pairs; a repeated
    id is an error). Construction is O(total tokens).
    """

    k1: float = DEFAULT_K1
    b: float = DEFAULT_B

    def __init__(
        self,
        docs: Mapping[str, Sequence[str]] | Iterable[tuple[str, Sequence[str]]],
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
    ) -> None:
        self.k1 = k1
        self.b = b
        postings = Postings()
        pairs = docs.items() if isinstance(docs, Mapping) else docs
        for doc_id, tokens in pairs:
            if doc_id in postings:
                raise ValueError(f"duplicate doc_id {doc_id!r}")
            postings.add_doc(doc_id, tokens)
        self._init_from(postings)

    @classmethod
    def from_term_freqs(
        cls,
        term_freqs: Mapping[str, Mapping[str, int]],
        lengths: Mapping[str, int] | None = None,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
    ) -> BM25:
        """Build from per-doc term frequencies (lengths default to the sum of frequencies)."""
        postings = Postings()
        for doc_id, tf in term_freqs.items():
            postings.add_term_freqs(doc_id, tf, None if lengths is None else lengths[doc_id])
        return cls.from_postings(postings, k1=k1, b=b)

    @classmethod
    def from_postings(
        cls,
        postings: Postings,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
    ) -> BM25:
        """Rank over every doc of ``postings`` (which must not be mutated afterwards)."""
        self = cls.__new__(cls)
        self.k1 = k1
        self.b = b
        self._init_from(postings)
        return self

    def _init_from(self, postings: Postings) -> None:
        self.postings = postings
        self._candidates = Candidates(postings)

    def __len__(self) -> int:
        return len(self.postings)

    def scores(self, query_tokens: Sequence[str]) -> dict[str, float]:
        """Every doc's score, in insertion order (0.0 for a doc without a query term)."""
        matched = self._candidates.scores(query_tokens, k1=self.k1, b=self.b)
        return {doc_id: matched.get(doc_id, 0.0) for doc_id in self.postings._len}

    def top(self, query_tokens: Sequence[str], limit: int) -> list[Scored]:
        """See the module docstring: docs containing a query token, score desc, doc_id asc."""
        return self._candidates.top(query_tokens, limit, k1=self.k1, b=self.b)


def term_idf(n_docs: int, df: int) -> float:
    """Lucene's idf: above 0 for every ``0 < df <= n_docs``, so a match never scores <= 0."""
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


def rank(
    candidates: Mapping[str, Sequence[str]], query_tokens: Sequence[str], limit: int
) -> list[Scored]:
    """``BM25(candidates).top(query_tokens, limit)``."""
    return BM25(candidates).top(query_tokens, limit)


def _top_k(acc: Mapping[str, float], limit: int) -> list[Scored]:
    if len(acc) <= limit:
        best = sorted(acc.items(), key=itemgetter(0))
        best.sort(key=itemgetter(1), reverse=True)
    else:
        best = heapq.nsmallest(limit, acc.items(), key=_rank_key)
    return [Scored(doc_id, score) for doc_id, score in best]


def _rank_key(item: tuple[str, float]) -> tuple[float, str]:
    return (-item[1], item[0])
