"""Exact recall over an index view: the filter as tantivy clauses, then BM25 at the floor.

The filter runs first, inside tantivy: everything a ``Filter`` says -- kind, key, layers,
scope, the reader's scopes (``memory.scope``), areas, the trust ceiling, superseded, marked,
hidden ids -- is a zero-score clause over the documents' ``tag`` and ``id`` terms
(``clauses``), so tantivy only ever scores admitted documents. The floor itself is which
index is searched: the floor index of ``flt.min_trust`` holds exactly the entries at or above
it, so ``N``, document frequencies and the average length are the floor's statistics.

Documents a filter lets through a floor they are below -- ``visible_ids``, a run's own
unverified notes (``visible_run``), an ``own`` area's unverified notes -- are not in the
floor's index. They are searched for in the unverified floor's index (which holds them),
under the same clauses and the proof each needs (a signature, read through ``writer_of``),
scored there by tantivy, and merged into the ranking. Entries at the floor are scored by
tantivy in their floor's index alone: nothing below the floor moves their scores.

Order: score descending, then entry id ascending. tantivy orders equal scores arbitrarily, so
the search asks for more hits until the last one scores below the ``limit``-th.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import tantivy

from ..model import Entry, Kind, Trust
from ..trust.authority import RunView, owns, run_of, trainer_note
from .floors import SCHEMA, Floor, body_query, group_tag, ranked, run_tag, scope_tag
from .index import IndexView
from .pipeline import Area, Filter
from .related import RELATED_WEIGHT

__all__ = ["Match", "admitted", "below_floor", "clauses", "lexical"]

WriterOf = Callable[[str], "str | None"]
_MUST = tantivy.Occur.Must
_SHOULD = tantivy.Occur.Should
_NOT = tantivy.Occur.MustNot
_BELOW = (Trust.STALE, Trust.UNVERIFIED)


class Match(NamedTuple):
    """One ranked document: its id, score, and where to read its entry (``IndexView.entry``)."""

    id: str
    score: float
    floor: Floor
    hit: tuple[Any, ...]


def _tag(tag: str) -> Any:
    return tantivy.Query.term_query(SCHEMA, "tag", tag)


def _any(tags: Sequence[str]) -> Any:
    """Any of ``tags``, scoring nothing. A boolean of term queries: tantivy's term set query
    walks the whole term dictionary, which costs far more than these few lookups."""
    if not tags:
        return tantivy.Query.empty_query()
    if len(tags) == 1:
        return _tag(tags[0])
    either = tantivy.Query.boolean_query([(_SHOULD, _tag(t)) for t in tags])
    return tantivy.Query.const_score_query(either, 0.0)


def _all(queries: Sequence[tuple[Any, Any]]) -> Any:
    """A boolean query of ``queries``; one with no ``Must`` gets an all-documents one."""
    if not any(occur == _MUST for occur, _ in queries):
        queries = [(_MUST, tantivy.Query.all_query()), *queries]
    return tantivy.Query.boolean_query(list(queries))


def _area(area: Area) -> Any:
    parts = [(_MUST, _tag(f"l:{area.layer.value}"))]
    parts += [(_MUST, _tag(scope_tag(k, v))) for k, v in area.scope]
    return tantivy.Query.boolean_query(parts)


def _unset_or(name: str, value: str | None) -> Any:
    """Scope ``name`` absent, or equal to ``value``."""
    unset = _all([(_NOT, _tag(f"h:{name}"))])
    if value is None:
        return unset
    return tantivy.Query.boolean_query([(_SHOULD, unset), (_SHOULD, _tag(scope_tag(name, value)))])


def clauses(
    flt: Filter, trusts: Sequence[Trust], floor: Trust | None = None
) -> list[tuple[Any, Any]]:
    """The clauses of everything ``flt`` says but its floor and its own notes, for documents
    of one of ``trusts`` (``Filter.admits`` says the same of one entry in hand). ``floor``:
    the floor whose index is searched; a trust clause that admits every trust it holds is
    left out (it would only cost tantivy an intersection per matching document)."""
    allowed = [t for t in trusts if flt.ceiling is None or t.rank <= flt.ceiling.rank]
    out = []
    if floor is None or not set(_trusts_at(floor)) <= set(allowed):
        out.append((_MUST, _any([f"t:{t.value}" for t in allowed])))
    if flt.kind is not None:
        out.append((_MUST, _tag(f"k:{flt.kind.value}")))
    if flt.key is not None:
        kinds = [flt.kind] if flt.kind is not None else list(Kind)
        out.append((_MUST, _any([group_tag(k.value, flt.key) for k in kinds])))
    if flt.layers is not None:
        out.append((_MUST, _any([f"l:{x.value}" for x in sorted(flt.layers)])))
    out += [(_MUST, _tag(scope_tag(k, v))) for k, v in sorted(flt.scope.items())]
    reader = flt.reader
    if reader is not None and reader.mode != "shared":
        out.append((_MUST, _unset_or("project", reader.project)))
        if reader.mode != "per-project":
            out.append((_MUST, _unset_or("agent", reader.agent)))
    if flt.areas is not None:
        areas = [(_SHOULD, _area(a)) for a in flt.areas]
        out.append((_MUST, tantivy.Query.boolean_query(areas) if areas else _any([])))
    if not flt.superseded_ok:
        out.append((_NOT, _tag("s")))
    if flt.skip_marked:
        out.append((_NOT, _tag("m")))
    if flt.hidden_ids:
        ids = sorted(flt.hidden_ids)
        out.append((_NOT, tantivy.Query.term_set_query(SCHEMA, "id", ids)))
    return out


def _const(queries: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    # A filter matches or not: it adds nothing to the score.
    return [(o, tantivy.Query.const_score_query(q, 0.0) if o == _MUST else q) for o, q in queries]


def _trusts_at(floor: Trust) -> list[Trust]:
    return [t for t in (Trust.VERIFIED, *_BELOW) if t.passes(floor)]


def _own(flt: Filter) -> tuple[Any, Callable[..., bool]] | None:
    """What lets notes below ``flt``'s floor through (a clause), and the proof each hit must
    still pass; None when nothing does."""
    if flt.min_trust is Trust.UNVERIFIED:
        return None
    run_view = flt.run_view()
    own_areas = [a for a in flt.areas or () if a.own] if flt.area_writers else []
    ways = []
    if flt.visible_ids:
        ids = sorted(flt.visible_ids)
        ways.append((_SHOULD, tantivy.Query.term_set_query(SCHEMA, "id", ids)))
    if run_view is not None and run_view.principal is not None:
        runs = _any([run_tag(r) for r in sorted(run_view.runs)])
        ways.append((_SHOULD, _all([(_MUST, runs), (_MUST, _tag("t:unverified"))])))
    for area in own_areas:
        ways.append((_SHOULD, _all([(_MUST, _area(area)), (_MUST, _tag("t:unverified"))])))
    if not ways:
        return None

    def proven(view: IndexView, floor: Floor, hit: Any, writer_of: WriterOf | None) -> bool:
        if hit[1] in flt.visible_ids:
            return True
        entry = view.entry(floor, hit)
        writer = writer_of(entry.id) if writer_of is not None else None
        return _run_own(run_view, entry, writer) or (
            any(a.holds(entry.layer, entry.scope) for a in own_areas)
            and trainer_note(entry.trust, writer, flt.area_writers)
        )

    return tantivy.Query.boolean_query(ways), proven


def _run_own(run_view: RunView | None, entry: Entry, writer: str | None) -> bool:
    return owns(run_view, run_of(entry.provenance.produced_by), entry.trust, writer)


def _below(flt: Filter) -> list[Trust]:
    return [t for t in _BELOW if not t.passes(flt.min_trust)]


def lexical(
    view: IndexView,
    flt: Filter,
    terms: Sequence[str],
    limit: int,
    added: Sequence[str] = (),
    writer_of: WriterOf | None = None,
) -> list[Match]:
    """The best ``limit`` admitted documents holding a query term, or one of ``added`` (the
    query's related words, scored at ``related.RELATED_WEIGHT``): score desc, then id asc."""
    if limit <= 0:
        return []
    filters = _const(clauses(flt, _trusts_at(flt.min_trust), flt.min_trust))
    if all(occur == _NOT for occur, _ in filters):
        query = body_query(terms, added, RELATED_WEIGHT, filters)  # one flat boolean
    else:
        body = body_query(terms, added, RELATED_WEIGHT)
        query = None if body is None else tantivy.Query.boolean_query([(_MUST, body), *filters])
    if query is None:
        return []
    floor = view.floor(flt.min_trust)
    found = [Match(h[1], h[0], floor, h) for h in ranked(floor, query, limit)]
    own = _own(flt)
    if own is not None:
        way, proven = own
        wide = view.floor(Trust.UNVERIFIED)
        body = body_query(terms, added, RELATED_WEIGHT)
        more = [(_MUST, body), (_MUST, tantivy.Query.const_score_query(way, 0.0))]
        query = tantivy.Query.boolean_query(more + _const(clauses(flt, _below(flt))))
        hits = ranked(wide, query, limit, lambda h: proven(view, wide, h, writer_of))
        found += [Match(h[1], h[0], wide, h) for h in hits]
        found.sort(key=lambda m: (-m.score, m.id))
    return found[:limit]


def admitted(
    view: IndexView,
    flt: Filter,
    writer_of: WriterOf | None = None,
    must: Any = None,
) -> list[Match]:
    """Every document ``flt`` admits (that ``must`` also matches, when given), unscored:
    what semantic mode ranks and the acronyms a query may learn from."""
    extra = [(_MUST, must)] if must is not None else []
    floor = view.floor(flt.min_trust)
    query = _all(extra + clauses(flt, _trusts_at(flt.min_trust), flt.min_trust))
    hits, _ = floor.search(query, max(1, floor.num_docs))
    found = [Match(h[1], 0.0, floor, h) for h in hits]
    own = _own(flt)
    if own is not None:
        way, proven = own
        wide = view.floor(Trust.UNVERIFIED)
        query = _all([*extra, (_MUST, way), *clauses(flt, _below(flt))])
        hits, _ = wide.search(query, max(1, wide.num_docs))
        found += [Match(h[1], 0.0, wide, h) for h in hits if proven(view, wide, h, writer_of)]
    return found


def below_floor(view: IndexView, flt: Filter, terms: Sequence[str]) -> int:
    """How many entries below the filter's floor hold a query term, the filter's other
    conditions kept: the unverified floor's matches less the floor's own."""
    body = body_query(terms)
    if body is None or flt.min_trust is Trust.UNVERIFIED:
        return 0
    counts = []
    for trust in (Trust.UNVERIFIED, flt.min_trust):
        wide = clauses(flt, _trusts_at(Trust.UNVERIFIED), trust)
        query = tantivy.Query.boolean_query([(_MUST, body), *_const(wide)])
        counts.append(view.floor(trust).search(query, 1, count=True)[1])
    return max(0, counts[0] - counts[1])


def group(view: IndexView, trust: Trust, tags: Sequence[str], limit: int = 10_000) -> list[Match]:
    """Documents of the floor index of ``trust`` holding every tag of ``tags``, by id (kept
    with the opened floor: its commit never changes)."""
    floor = view.floor(trust)
    key = ("group", tuple(tags), limit)
    found: list[Match] | None = floor.memo.get(key)
    if found is None:
        hits, _ = floor.search(_all([(_MUST, _tag(t)) for t in tags]), limit)
        found = sorted((Match(h[1], 0.0, floor, h) for h in hits), key=lambda m: m.id)
        floor.memo[key] = found
    return found
