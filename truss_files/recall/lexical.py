"""The filter and exact BM25 over an index view -- the same numbers as ``bm25.Candidates``.

Filtering is per segment: the class byte of every document goes through a 256-entry table
(``bytes.translate``), giving a 0/1 mask in C; the rarer conditions (layer, key, scope, ids a
run may see, deleted documents) adjust that mask. The candidate statistics follow from the
masks alone -- ``N`` is their count, the total length ``sum(compress(lengths, mask))`` -- and a
query term's postings are filtered with ``compress(docnos, map(mask.__getitem__, docnos))``,
so no Python code runs per non-matching document.

Scores repeat ``bm25.Candidates.scores`` operation for operation, so they are bit-identical to
ranking the admitted entries' tokens with it. The idf is Lucene's never-negative one (see
``bm25``): it needs each query term's document frequency among the candidates and nothing else.

A query holding a common word (a word of half the notes) need not cost its postings. Its
document frequency comes from the counts per class byte a segment keeps for each term of 512
documents or more (under a filter of classes alone), and when the documents of the query's
rarer words decide the top (``_pruned``: the ``limit``-th of their scores above what the
common words could add to any other document) the common word's postings are only probed by
bisection for those documents. At 100k notes, 30% verified, a warm query with one of the 20
commonest words went from 14.6 ms to 2.7 ms p50 (the same answers, bit for bit).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Sequence
from itertools import compress
from typing import Any, Final, NamedTuple

from ..model import Kind, Layer, Trust
from .docs import KIND_CODE, LAYER_CODE, MARKED, SUPERSEDED, TRUST_CODE
from .index import IndexView
from .pipeline import Area, Filter
from .segment import Segment

__all__ = ["Candidates", "Match", "candidates", "lexical"]

# bm25.DEFAULT_* (a test checks they agree); not imported, to keep bm25 off the query path.
DEFAULT_K1: Final = 1.5
DEFAULT_B: Final = 0.75
_REJECTED: Final = TRUST_CODE[Trust.REJECTED]
_Postings = tuple[int, list[int], list[int]]  # (segment number, docnos, term frequencies)
_RANK_OF_CODE: Final = {code: trust.rank for trust, code in TRUST_CODE.items()}
# One probe (a bisection and a sum for one document) costs about this many postings walked
# by ``scores``; a query of common words only (the worst the bounds accept: 32 of them) would
# otherwise probe each for every document of the rarest.
PROBE_COST: Final = 4
# A query term held by more than 1 in COMMON_SHARE candidates is "common": its postings are
# walked only when the rarer terms' documents cannot decide the top (``_pruned``).
COMMON_SHARE: Final = 20


class Match(NamedTuple):
    """One ranked document of a view: its segment, docno, id and score."""

    seg: int
    docno: int
    id: str
    score: float


class Candidates:
    """The admitted documents of a view: a 0/1 mask per segment, their count and length."""

    def __init__(self, view: IndexView, masks: list[bytearray], table: bytes | None = None) -> None:
        self.view = view
        self.masks = masks
        # The class table when each mask is it applied to the class bytes, less the deleted
        # documents, and nothing else: a common term's stored counts per class then give
        # its document frequency (``_masked_count``).
        self.table = table
        counts = [m.count(1) for m in masks]
        self.n = sum(counts)
        # Segments whose every document is admitted: their postings need no mask.
        self.whole = [c == len(m) for c, m in zip(counts, masks, strict=True)]
        if table is not None:
            total = sum(
                _class_length(seg, table, gone)
                for seg, gone in zip(view.segments, view.deleted, strict=True)
            )
        else:
            total = sum(
                sum(compress(seg.lengths, mask))
                for seg, mask in zip(view.segments, masks, strict=True)
            )
        # int / int, exactly as BM25Okapi computes it.
        self.avgdl = total / self.n if self.n and total else 0.0

    def docnos(self, seg: int) -> list[int]:
        return [d for d, keep in enumerate(self.masks[seg]) if keep]


def _class_length(seg: Segment, table: bytes, gone: set[int]) -> int:
    """The total length of a segment's documents whose class ``table`` admits, less the
    deleted ones: from the segment's stored sums per class, not its length column."""
    total = sum(length for code, (_n, length) in seg.class_stats().items() if table[code])
    if gone:
        cls, lengths = seg.cls, seg.lengths
        total -= sum(lengths[d] for d in gone if table[cls[d]])
    return total


def candidates(view: IndexView, flt: Filter) -> Candidates:
    """Apply ``flt`` to every document of ``view``, before anything is scored."""
    floor = flt.min_trust.rank
    ceiling = 3 if flt.ceiling is None else flt.ceiling.rank
    superseded_ok = flt.superseded_ok
    kind_code = None if flt.kind is None else KIND_CODE[flt.kind]
    main = bytearray(256)
    bypass = bytearray(256)  # every condition but the trust floor
    for code in range(256):
        trust = code & 3
        ok = trust != _REJECTED and _RANK_OF_CODE[trust] <= ceiling
        ok = ok and (superseded_ok or not code & SUPERSEDED)
        ok = ok and not (flt.skip_marked and code & MARKED)
        ok = ok and (kind_code is None or code >> 4 == kind_code)
        bypass[code] = ok
        main[code] = ok and _RANK_OF_CODE[trust] >= floor
    main_table = bytes(main)
    layer_table = None
    if flt.layers is not None:
        layer_table = bytes(int(any(LAYER_CODE[x] == n for x in flt.layers)) for n in range(256))
    unverified = TRUST_CODE[Trust.UNVERIFIED]
    masks: list[bytearray] = []
    for seg, gone in zip(view.segments, view.deleted, strict=True):
        cls = seg.cls
        mask = bytearray(cls.translate(main_table))
        visible: set[int] = set()
        for entry_id in flt.visible_ids:
            docno = seg.find(entry_id)
            if docno is not None:
                visible.add(docno)
        if flt.visible_run is not None:
            members = seg.runs().get(flt.visible_run, ())
            visible.update(d for d in members if cls[d] & 3 == unverified)
        for docno in visible:
            mask[docno] = bypass[cls[docno]]
        if layer_table is not None:
            _and(mask, seg.layer.translate(layer_table))
        if flt.key is not None:
            kinds = [flt.kind] if flt.kind is not None else list(Kind)
            in_key = bytearray(seg.n)
            for kind in kinds:
                for docno in seg.group(kind.value, flt.key):
                    in_key[docno] = 1
            _and(mask, in_key)
        for docno in gone:
            mask[docno] = 0
        if flt.areas is not None:
            _within_areas(seg, mask, flt.areas, bypass, gone)
        for entry_id in flt.hidden_ids:
            docno = seg.find(entry_id)
            if docno is not None:
                mask[docno] = 0
        if flt.scope or flt.reader is not None:
            wanted = tuple(flt.scope.items())
            reader = flt.reader
            for docno in [d for d, keep in enumerate(mask) if keep]:
                scope = dict(seg.record(docno)[5])
                if any(scope.get(k) != v for k, v in wanted) or (
                    reader is not None and not reader.sees(scope)
                ):
                    mask[docno] = 0
        masks.append(mask)
    by_class_only = not (
        flt.visible_ids
        or flt.visible_run is not None
        or flt.layers is not None
        or flt.key is not None
        or flt.areas is not None
        or flt.hidden_ids
        or flt.scope
        or flt.reader is not None
    )
    return Candidates(view, masks, main_table if by_class_only else None)


def _within_areas(
    seg: Segment, mask: bytearray, areas: tuple[Area, ...], bypass: bytearray, gone: Any
) -> None:
    """Keep only documents inside one of ``areas``; let an ``own`` area's unverified documents
    through the trust floor. A record is loaded only for a document of an area's layer whose
    stored bytes hold every scope value the area asks for (most of a layer's documents belong
    to other tasks or teams, and loading each record cost ~15 us)."""
    by_code: dict[int, list[tuple[Area, list[bytes]]]] = {}
    for area in areas:
        wanted = [value.encode() for _, value in area.scope]
        by_code.setdefault(LAYER_CODE[area.layer], []).append((area, wanted))
    own_codes = {LAYER_CODE[a.layer] for a in areas if a.own}
    unverified = TRUST_CODE[Trust.UNVERIFIED]
    cls, layers = seg.cls, seg.layer
    for docno in range(seg.n):
        code = layers[docno]
        kept = mask[docno]
        maybe_own = (
            not kept
            and code in own_codes
            and cls[docno] & 3 == unverified
            and bypass[cls[docno]]
            and docno not in gone
        )
        if not kept and not maybe_own:
            continue
        mask[docno] = 0
        options = by_code.get(code)
        if not options:
            continue
        raw = seg.record_bytes(docno)
        options = [(a, w) for a, w in options if (kept or a.own) and all(v in raw for v in w)]
        if not options:
            continue
        record = seg.record(docno)
        layer, scope = _LAYER_OF[record[4]], dict(record[5])
        mask[docno] = any(a.holds(layer, scope) for a, _ in options)


_LAYER_OF: Final = {x.value: x for x in Layer}


def _and(mask: bytearray, other: bytes | bytearray) -> None:
    both = int.from_bytes(mask, "little") & int.from_bytes(other, "little")
    mask[:] = both.to_bytes(len(mask), "little")


def scores(
    cands: Candidates,
    query_tokens: Sequence[str],
    *,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
) -> dict[int, float]:
    """``{(segment << 32) | docno: score}`` of the candidates holding a query token."""
    if cands.n == 0 or cands.avgdl == 0.0:
        return {}
    view = cands.view
    n_docs = cands.n
    avgdl = cands.avgdl
    k1p1 = k1 + 1
    one_minus_b = 1 - b
    term_info = {term: _term_info(cands, term, n_docs) for term in query_tokens}
    # A query of common words touches most documents once per term: their length norm is
    # then computed once per document, not once per posting (the same expression, so the
    # same floats).
    touched = [0] * len(view.segments)
    for info in term_info.values():
        for number, docnos, _tfs in info[0] if info is not None else ():
            touched[number] += len(docnos)
    norms = [
        [k1 * (one_minus_b + b * length / avgdl) for length in seg.lengths]
        if touched[number] > seg.n // 2
        else None
        for number, seg in enumerate(view.segments)
    ]
    acc: dict[int, float] = {}
    for term in query_tokens:
        info = term_info[term]
        if info is None:
            continue
        matches, idf = info
        first = not acc
        for number, docnos, tfs in matches:
            lengths = view.segments[number].lengths
            base = number << 32
            norm = norms[number]
            if first:
                # First contribution to every doc (0.0 + x == x): a comprehension, faster.
                acc.update(
                    {
                        base | docno: idf
                        * (tf * k1p1 / (tf + k1 * (one_minus_b + b * lengths[docno] / avgdl)))
                        for docno, tf in zip(docnos, tfs, strict=True)
                    }
                )
                continue
            get = acc.get
            # Same operation order as bm25.Candidates.scores, so the floats come out identical.
            if norm is not None:
                for docno, tf in zip(docnos, tfs, strict=True):
                    key = base | docno
                    acc[key] = get(key, 0.0) + idf * (tf * k1p1 / (tf + norm[docno]))
                continue
            for docno, tf in zip(docnos, tfs, strict=True):
                key = base | docno
                acc[key] = get(key, 0.0) + idf * (
                    tf * k1p1 / (tf + k1 * (one_minus_b + b * lengths[docno] / avgdl))
                )
    return acc


def _term_info(cands: Candidates, term: str, n_docs: int) -> tuple[list[_Postings], float] | None:
    matches: list[_Postings] = []
    df = 0
    for number, (seg, mask) in enumerate(zip(cands.view.segments, cands.masks, strict=True)):
        found = seg.postings(term)
        if found is None:
            continue
        docnos, tfs = found
        if cands.whole[number]:
            matches.append((number, list(docnos), list(tfs)))
            df += len(docnos)
            continue
        keep = list(map(mask.__getitem__, docnos))
        kept = list(compress(docnos, keep))
        if kept:
            matches.append((number, kept, list(compress(tfs, keep))))
            df += len(kept)
    if not df:
        return None
    return matches, lexical_idf(n_docs, df)


def lexical_idf(n_docs: int, df: int) -> float:
    """``bm25.term_idf``, repeated to keep bm25 off the query path (a test checks they agree)."""
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


def lexical(cands: Candidates, query_tokens: Sequence[str], limit: int) -> list[Match]:
    """The best ``limit`` candidates holding a query token: score desc, then entry id asc."""
    if limit <= 0 or not query_tokens:
        return []
    acc = _pruned(cands, query_tokens, limit)
    if acc is None:
        acc = scores(cands, query_tokens)
    return top(cands.view, acc, limit)


def _pruned(cands: Candidates, query_tokens: Sequence[str], limit: int) -> dict[int, float] | None:
    """The scores of the documents holding one of the query's rarer terms, when those alone
    decide the top ``limit``; None when they may not (the caller then scores every match).

    A word in most notes has a small idf, and a document holding only such words scores below
    the sum of their bounds (``idf * (k1 + 1)``, which no term frequency reaches). So the
    documents of the rare terms are scored in full (every term, in query order: the same
    floats as ``scores``), the common terms' frequencies looked up by bisection in their
    postings; when the ``limit``-th best of them beats that sum, no document holding only
    common words can place, and their postings are never walked. A query holding a word of
    half the notes then costs about what its rare words cost (the common-word cliff)."""
    n_docs = cands.n
    if n_docs == 0 or cands.avgdl == 0.0:
        return {}
    distinct = list(dict.fromkeys(query_tokens))
    if len(distinct) < 2:
        return None
    found = {term: _postings(cands, term) for term in distinct}
    df = {term: _masked_count(cands, found[term]) for term in distinct}
    by_df = sorted((t for t in distinct if df[t]), key=lambda t: (df[t], t))
    common = {t for t in by_df[1:] if df[t] * COMMON_SHARE > n_docs}
    if not common:
        return None
    k1, b = DEFAULT_K1, DEFAULT_B
    k1p1 = k1 + 1
    one_minus_b = 1 - b
    avgdl = cands.avgdl
    idf = {t: lexical_idf(n_docs, df[t]) for t in by_df}
    bound = sum(idf[t] * k1p1 for t in query_tokens if t in common)
    rare = {t: _term_info(cands, t, n_docs) for t in by_df if t not in common}
    union: list[set[int]] = [set() for _ in cands.view.segments]
    for info in rare.values():
        for number, docnos, _tfs in info[0] if info is not None else ():
            union[number].update(docnos)
    size = sum(map(len, union))
    probes = size * sum(1 for t in query_tokens if t in common)
    if size < limit or probes * PROBE_COST > sum(df[t] for t in common):
        return None  # too few to decide, or probing would cost more than walking
    ordered = [(number, sorted(docs)) for number, docs in enumerate(union) if docs]
    acc: dict[int, float] = {}
    get = acc.get
    for term in query_tokens:
        weight = idf.get(term)
        if weight is None:
            continue
        info = rare.get(term)
        if info is not None:
            for number, docnos, tfs in info[0]:
                lengths = cands.view.segments[number].lengths
                base = number << 32
                for docno, tf in zip(docnos, tfs, strict=True):
                    key = base | docno
                    acc[key] = get(key, 0.0) + weight * (
                        tf * k1p1 / (tf + k1 * (one_minus_b + b * lengths[docno] / avgdl))
                    )
            continue
        postings = {number: held for number, held, _counts in found[term]}
        for number, docnos in ordered:
            held = postings.get(number)
            if held is None:
                continue
            post_docs, post_tfs = held
            lengths = cands.view.segments[number].lengths
            base = number << 32
            end = len(post_docs)
            at = 0
            for docno in docnos:
                at = bisect_left(post_docs, docno, at, end)
                if at == end:
                    break
                if post_docs[at] != docno:
                    continue
                tf = post_tfs[at]
                key = base | docno
                acc[key] = get(key, 0.0) + weight * (
                    tf * k1p1 / (tf + k1 * (one_minus_b + b * lengths[docno] / avgdl))
                )
    cut = heapq.nlargest(limit, acc.values())[-1]
    # Strictly above, with room for rounding: an equal score could still win on its id.
    if cut > bound * (1 + 1e-9):
        return acc
    return None


_Held = tuple[int, tuple[Any, Any], Any]  # segment number, (docnos, tfs), class counts


def _postings(cands: Candidates, term: str) -> list[_Held]:
    """``(segment number, (docnos, tfs), counts)`` of each segment holding ``term``, unmasked."""
    out = []
    for number, seg in enumerate(cands.view.segments):
        held = seg.counted_postings(term)
        if held is not None:
            out.append((number, held[:2], held[2]))
    return out


def _masked_count(cands: Candidates, found: list[_Held]) -> int:
    """How many candidates hold the term: its document frequency. From the segment's counts
    per class when the filter is one of classes (less the deleted documents that hold it),
    else by walking its postings through the mask (in C, ~60 ns a posting)."""
    total = 0
    table = cands.table
    for number, (docnos, _tfs), counts in found:
        if cands.whole[number]:
            total += len(docnos)
        elif counts is not None and table is not None:
            total += sum(n for code, n in counts if table[code])
            cls = cands.view.segments[number].cls
            end = len(docnos)
            for docno in cands.view.deleted[number]:
                if table[cls[docno]]:
                    at = bisect_left(docnos, docno, 0, end)
                    total -= at < end and docnos[at] == docno
        else:
            total += sum(map(cands.masks[number].__getitem__, docnos))
    return total


def top(view: IndexView, acc: dict[int, float], limit: int) -> list[Match]:
    """Sort by score, ties by entry id; ids are read only for the scores that can place."""
    if not acc:
        return []
    if len(acc) > limit:
        cut = heapq.nlargest(limit, acc.values())[-1]
        acc = {k: s for k, s in acc.items() if s >= cut}
    ranked = []
    for key, score in acc.items():
        number, docno = key >> 32, key & 0xFFFFFFFF
        ranked.append((-score, view.segments[number].doc_id(docno), number, docno))
    ranked.sort()
    return [Match(number, docno, doc_id, -neg) for neg, doc_id, number, docno in ranked[:limit]]
