"""Exact recall over an index view: the filter, then BM25 in the trust floor's tantivy index.

The filter runs first. Per segment, the class byte of every document goes through a 256-entry
table (``bytes.translate``), giving a 0/1 mask in C; the rarer conditions (layer, key, scope,
areas, ids a run may see or may not, deleted documents) adjust that mask (``candidates``).

Ranking reads the floor index of ``flt.min_trust`` (``floors``): tantivy's BM25 over the
floor's members, so ``N``, document frequencies and the average length are the floor's
statistics -- not the filtered candidates'. What the filter's class table and fields can say
(kind, key, layers, the trust ceiling, superseded, marked) goes into the tantivy query as
clauses of zero score, so tantivy only ever scores admitted documents. The rest of the filter
(areas, scope, the reader's scopes, hidden ids, deleted documents in a view of another tree)
comes from the mask: when the mask admits at most ``ID_SET_AT`` documents (200, measured),
their ids go into the query as one more clause (a term set); otherwise tantivy's hits are read
through the mask, asking for more (four times as many) until ``limit`` pass or none are left.

Documents a filter lets through a floor they are below -- ``visible_ids``, ``visible_run``,
an ``own`` area's unverified entries -- are not in the floor's index. They are scored in
Python with the floor's statistics joined by the admitted documents below the floor (their
count, lengths and document frequencies added: what tantivy would score them were they at
the floor, and above 0 even over an empty floor), by tantivy's own formula (``floors.bm25``:
its f32 steps and its quantised lengths), and merged into the ranking. Entries at the floor
are scored by tantivy without them: nothing below the floor moves their scores.

Order: score descending, then entry id ascending. tantivy orders equal scores arbitrarily, so
the search asks for more hits until the last one scores below the ``limit``-th.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, NamedTuple

from ..model import Kind, Layer, Trust
from .docs import KIND_CODE, LAYER_CODE, MARKED, SUPERSEDED, TRUST_CODE
from .floors import (
    MARKED_TAG,
    SUPERSEDED_TAG,
    Floor,
    bm25,
    body_query,
    group_tag,
    kind_tag,
    layer_tag,
    ranked,
    trust_tag,
)
from .index import IndexView
from .pipeline import Area, Filter
from .segment import Segment

__all__ = ["Candidates", "Match", "candidates", "below_floor", "lexical"]

_REJECTED: Final = TRUST_CODE[Trust.REJECTED]
_RANK_OF_CODE: Final = {code: trust.rank for trust, code in TRUST_CODE.items()}
# Admitted documents up to this many are handed to tantivy as a set of ids (one clause)
# rather than read back through the mask hit by hit. Measured at 10k notes (warm p50, a filter
# of hidden ids): admitting 50, the id set 2.3 ms against 9.3 ms through the mask (tantivy's
# hits are mostly refused, so it is asked again and again); 300, 4.7 against 3.3 ms; 1,000,
# 10.5 against 2.0 ms; ~3,000, 16.7 against 0.23 ms (building the set grows with it).
ID_SET_AT: Final = 200


class Match(NamedTuple):
    """One ranked document of a view: its segment, docno, id and score."""

    seg: int
    docno: int
    id: str
    score: float


class Candidates:
    """The admitted documents of a view: a 0/1 mask per segment and their count."""

    def __init__(
        self,
        view: IndexView,
        masks: list[bytearray],
        table: bytes | None = None,
        flt: Filter | None = None,
    ) -> None:
        self.view = view
        self.masks = masks
        # The class table when each mask is it applied to the class bytes, less the deleted
        # documents, and nothing else: the floor index's clauses then say it all.
        self.table = table
        self.flt = flt or Filter()
        self.n = sum(m.count(1) for m in masks)

    def docnos(self, seg: int) -> list[int]:
        return [d for d, keep in enumerate(self.masks[seg]) if keep]

    def admits(self, entry_id: str) -> bool:
        found = self.view.locate(entry_id)
        return found is not None and bool(self.masks[found[0]][found[1]])


def candidates(
    view: IndexView, flt: Filter, writer_of: Callable[[str], str | None] | None = None
) -> Candidates:
    """Apply ``flt`` to every document of ``view``, before anything is scored. ``writer_of``:
    the principal whose signature added an entry (``writers``), what proves a run's own
    notes and an own area's (``authority``); without it no note below the floor is one."""
    from ..authority import owns, trainer_note

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
    run_view = flt.run_view()
    masks: list[bytearray] = []
    for seg, gone in zip(view.segments, view.deleted, strict=True):
        cls = seg.cls
        mask = bytearray(cls.translate(main_table))
        visible: set[int] = set()
        for entry_id in flt.visible_ids:
            docno = seg.find(entry_id)
            if docno is not None:
                visible.add(docno)
        if run_view is not None and writer_of is not None:
            for run in sorted(run_view.runs):
                for d in seg.runs().get(run, ()):
                    if cls[d] & 3 == unverified and owns(
                        run_view, run, Trust.UNVERIFIED, writer_of(seg.doc_id(d))
                    ):
                        visible.add(d)
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

            def own_ok(docno: int, seg: Segment = seg) -> bool:
                if writer_of is None:
                    return False
                writer = writer_of(seg.doc_id(docno))
                return trainer_note(Trust.UNVERIFIED, writer, flt.area_writers)

            _within_areas(seg, mask, flt.areas, bypass, gone, own_ok)
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
    return Candidates(view, masks, main_table if by_class_only else None, flt)


def _within_areas(
    seg: Segment,
    mask: bytearray,
    areas: tuple[Area, ...],
    bypass: bytearray,
    gone: Any,
    own_ok: Callable[[int], bool],
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
        if kept:
            mask[docno] = any(a.holds(layer, scope) for a, _ in options)
        else:  # below the floor: only through an own area, on the writer's signature
            mask[docno] = any(a.holds(layer, scope) for a, _ in options) and own_ok(docno)


_LAYER_OF: Final = {x.value: x for x in Layer}


def _and(mask: bytearray, other: bytes | bytearray) -> None:
    both = int.from_bytes(mask, "little") & int.from_bytes(other, "little")
    mask[:] = both.to_bytes(len(mask), "little")


def lexical(
    cands: Candidates, query_tokens: Sequence[str], limit: int, added: Sequence[str] = ()
) -> list[Match]:
    """The best ``limit`` admitted documents holding a query token, or one of ``added`` (the
    query's related words, scored at ``related.RELATED_WEIGHT``): score desc, then id asc."""
    if limit <= 0 or not query_tokens or not cands.n:
        return []
    from .related import RELATED_WEIGHT

    view, flt = cands.view, cands.flt
    floor = view.floor(flt.min_trust)
    body = body_query(query_tokens, added, RELATED_WEIGHT)
    if body is None:
        return []
    clauses: list[Any] | None = _clauses(flt)
    admit: Callable[[str], bool] | None = None
    if cands.table is None:
        ids = _admitted_ids(cands, flt.min_trust) if cands.n <= ID_SET_AT else None
        if ids is not None:
            import tantivy

            from .floors import schema

            if not ids:
                clauses = None
            else:
                clauses = clauses or []
                clauses.append(tantivy.Query.term_set_query(schema(), "id", ids))
        else:
            admit = cands.admits
    found = ranked(floor, _query(body, clauses), limit, admit) if clauses is not None else []
    if cands.table is None and _may_bypass(flt):
        own = list(dict.fromkeys(query_tokens))
        more = [t for t in dict.fromkeys(added) if t not in own]
        boosts = [1.0] * len(own) + [RELATED_WEIGHT] * len(more)
        found += _bypass(cands, floor, own + more, boosts)
    found.sort(key=lambda hit: (-hit[0], hit[1]))
    out = []
    for score, entry_id in found[:limit]:
        at = view.locate(entry_id)
        if at is None:
            # The floor index holds a document the segments do not: they disagree.
            from .floors import FloorError

            raise FloorError(f"{entry_id} is in the floor index but not in the segments")
        out.append(Match(at[0], at[1], entry_id, score))
    return out


def below_floor(cands: Candidates, query_tokens: Sequence[str]) -> int:
    """How many entries below the filter's floor hold a query term, under the clauses the
    filter can say to tantivy: the unverified floor's matches less the floor's own."""
    flt = cands.flt
    body = body_query(query_tokens)
    if body is None or flt.min_trust is Trust.UNVERIFIED:
        return 0
    query = _query(body, _clauses(flt))
    wide = cands.view.floor(Trust.UNVERIFIED).search(query, 1, count=True)[1]
    here = cands.view.floor(flt.min_trust).search(query, 1, count=True)[1]
    return max(0, wide - here)


def _query(body: Any, clauses: list[Any] | None) -> Any:
    if not clauses:
        return body
    import tantivy

    return tantivy.Query.boolean_query([(tantivy.Occur.Must, body)] + [_clause(c) for c in clauses])


def _clause(clause: Any) -> tuple[Any, Any]:
    import tantivy

    if isinstance(clause, tuple):  # (Occur, query): a must-not
        return clause
    # A filter matches or not: it adds nothing to the score.
    return tantivy.Occur.Must, tantivy.Query.const_score_query(clause, 0.0)


def _clauses(flt: Filter) -> list[Any]:
    """The tantivy clauses for what ``flt``'s class table and fields say (kind, key, layers,
    the trust ceiling, superseded, marked); the floor index itself is the floor."""
    import tantivy

    from .floors import schema

    sch = schema()
    out: list[Any] = []

    def any_of(tags: list[str]) -> Any:
        if len(tags) == 1:
            return tantivy.Query.term_query(sch, "tag", tags[0])
        return tantivy.Query.term_set_query(sch, "tag", tags)

    if flt.ceiling is not None and flt.ceiling.rank < Trust.VERIFIED.rank:
        allowed = [
            trust_tag(t.value)
            for t in (Trust.VERIFIED, Trust.STALE, Trust.UNVERIFIED)
            if flt.min_trust.rank <= t.rank <= flt.ceiling.rank
        ]
        out.append(any_of(allowed) if allowed else tantivy.Query.empty_query())
    if flt.kind is not None:
        out.append(any_of([kind_tag(flt.kind.value)]))
    if flt.key is not None:
        kinds = [flt.kind] if flt.kind is not None else list(Kind)
        out.append(any_of([group_tag(k.value, flt.key) for k in kinds]))
    if flt.layers is not None:
        out.append(
            any_of([layer_tag(x.value) for x in sorted(flt.layers)])
            if flt.layers
            else tantivy.Query.empty_query()
        )
    if not flt.superseded_ok:
        out.append((tantivy.Occur.MustNot, tantivy.Query.term_query(sch, "tag", SUPERSEDED_TAG)))
    if flt.skip_marked:
        out.append((tantivy.Occur.MustNot, tantivy.Query.term_query(sch, "tag", MARKED_TAG)))
    return out


def _may_bypass(flt: Filter) -> bool:
    return bool(
        flt.visible_ids
        or flt.visible_run is not None
        or (flt.areas is not None and any(a.own for a in flt.areas))
    )


def _below_table(floor: Trust) -> bytes:
    return bytes(
        int((code & 3) != _REJECTED and _RANK_OF_CODE[code & 3] < floor.rank) for code in range(256)
    )


def _admitted_ids(cands: Candidates, floor: Trust) -> list[str]:
    """The ids of the admitted documents in the floor's index (the bypass ones are not)."""
    at_floor = bytes(1 - x for x in _below_table(floor))
    out = []
    for seg, mask in zip(cands.view.segments, cands.masks, strict=True):
        keep = bytearray(seg.cls.translate(at_floor))
        _and(keep, mask)
        out += [seg.doc_id(d) for d in _ones(keep)]
    return out


def _ones(mask: bytearray) -> Iterator[int]:
    """The positions of the 1s of a 0/1 mask (found in C, however sparse)."""
    at = mask.find(1)
    while at >= 0:
        yield at
        at = mask.find(1, at + 1)


def _bypass(
    cands: Candidates, floor: Floor, terms: list[str], boosts: list[float]
) -> list[tuple[float, str]]:
    """Admitted documents below the floor (not in its index) that hold a query term, scored
    with the floor's statistics joined by every admitted document below it (``floors.bm25``):
    what tantivy would score them were they at the floor, and above 0 even over an empty
    floor. Entries at the floor are scored by tantivy without them."""
    from collections import Counter

    below = _below_table(cands.flt.min_trust)
    joining: list[tuple[str, Counter[str], int]] = []
    for seg, mask in zip(cands.view.segments, cands.masks, strict=True):
        wanted = bytearray(seg.cls.translate(below))
        _and(wanted, mask)
        for docno in _ones(wanted):
            counts, length = _counts(seg, docno)
            joining.append((seg.doc_id(docno), counts, length))
    matching = [j for j in joining if any(term in j[1] for term in terms)]
    if not matching:
        return []
    dfs = [floor.doc_freq(t) + sum(1 for j in joining if t in j[1]) for t in terms]
    n_docs = floor.n_docs + len(joining)
    total = floor.total + sum(j[2] for j in joining)
    return [
        (bm25([counts.get(t, 0) for t in terms], dfs, length, n_docs, total, boosts), entry_id)
        for entry_id, counts, length in matching
    ]


def _counts(seg: Segment, docno: int) -> tuple[Any, int]:
    """A document's term frequencies and length, from its record (kept in the segment's
    memo: a run's own notes are scored on each of its queries)."""
    from collections import Counter

    from .docs import document_tokens, entry_of

    key = ("tokens", docno)
    found = seg.memo.get(key)
    if found is None:
        tokens = document_tokens(entry_of(seg.record(docno), seg.doc_id(docno)))
        found = (Counter(tokens), len(tokens))
        seg.remember(key, found)
    return found
