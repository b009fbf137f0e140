"""Recall over a store: the index cache, the three modes, entries out.

``search(store, query, flt, limit, mode=...)`` is what the CLI's ``query`` calls; a process
that asks many questions keeps a ``Searcher`` (it re-checks the branch tip on every query, so
it never answers from an old tree). Modes (``RECALL_MODES``):

``exact``
    BM25 in the trust floor's tantivy index over the entries the filter admits (``lexical``,
    ``floors``): statistics from the floor's members.
``semantic``
    cosine similarity between the query's embedding and each admitted entry's (``embed``).
``hybrid``
    both rankings, fused by their min-max normalised scores (``fusion``).

In every mode the query is widened by the acronyms the admitted entries define (``acronyms``);
in exact and hybrid mode its words' related words are also looked for at half weight
(``related``; ``RecallResult.related_words`` names them).

In every mode the filter runs first and nothing outside it is ranked. A query is bounded
first (``bounds.query_terms``: length and distinct terms, each term scored once). The mode
comes from the caller, else from ``[recall] mode`` in the truss.toml of the branch tip, else
``exact``.

Why tantivy. The engine this replaced was our own BM25 over memory-mapped segments, which
took its statistics from the filtered candidates and matched an in-memory pipeline bit for
bit. Measured beside tantivy fed our tokens (``python -m benchmarks recall``, 100k notes, 30%
verified, 2 shared cores): warm p50 2.22 ms against 0.122 ms (18x), p95 56x, a full rebuild
4.3x, the index 32x its size; only its cold query (1.21x) and its update after a write (3.3
ms) were on target. tantivy is ahead, so it is the one lexical engine. What recall promises,
restated for it:

* the filter runs first: what a filter's class table and fields say (kind, key, layers, the
  trust ceiling, superseded, marked) are zero-score clauses of the tantivy query, the rest
  (areas, scope, reader scopes, hidden ids) is read through the candidates' mask;
* statistics are the **floor's**: ``N``, document frequencies and average length of the
  entries at or above ``min_trust`` (one tantivy index per floor), no longer those of the
  kind-, key-, layer- or scope-filtered candidates;
* adding, changing or removing entries below the floor never changes the score or order of
  entries at or above it, bit for bit: the floor's index is not written for them;
  rejected entries are in no index;
* a run's own notes below the floor are scored by tantivy's formula (``floors.bm25``) with
  the floor's statistics joined by the admitted notes below it: what tantivy gives them once
  at the floor, to f32 rounding -- and they never move a score at the floor;
* a matching entry scores above 0 (tantivy's idf is Lucene's, never negative).

What tantivy changes: scores are f32 over lengths quantised to a byte (``floors.fieldnorm``),
k1 is 1.2 (it was 1.5); its top 10 agree with exact BM25's (rank-bm25, k1 1.2) at a mean
overlap of 0.997 on ``tests/relevance`` and 0.977 on a synthetic corpus; recall@5 there went
from 0.850 to 0.843. A document deleted from a floor's index (an entry demoted, rejected or
changed) still counts in that floor's statistics until tantivy merges its segment, so an
updated index can score a little unlike a rebuilt one -- for entries at that floor, never
from below it.

Measured now (same benchmark, medians; 10k notes without related words, 100k with them, as
exact mode runs): warm exact query p50 0.32 / 0.91 ms, p95 0.69 / 2.1 ms (tantivy alone 0.05 /
0.12 ms and 0.07 / 0.33 ms: 6.4x / 7.5x at p50, 9.9x / 6.4x at p95; a query asked again at
100k ~0.35-0.6 ms -- the first time, the entries out and ``_related`` decode their records;
the rest is the read gate and the view, in Python); a cold ``truss-files query`` process 52
/ 58-65 ms, 1.12-1.19x / 1.30-1.39x tantivy's own cold script; the update after one write 15
/ 14 ms (tantivy's own 12 / 7.4 ms: both commit to disk); a full rebuild 1.1 / 8-11 s
(tantivy over the verified notes, our tokens, 0.20 / 1.6 s); the index 24 / 224 MB with every
note's record (tantivy 1.1 / 7.6 MB). The cold query is mostly imports. Semantic at 10k
(``python -m benchmarks semantic``): ~2.5 ms warm, a cold process ~2.2-2.5x ``python -c
pass``.

Every view passes the read gate (``readgate``): ~30 us on a warm query (one small file);
after new commits it audits just those (``python -m benchmarks readgate``, ~400-1,800
commits: ~20 ms for one new commit -- mostly ``audit()``'s ancestry check from the root --
and ~1.3 ms per commit for 100). A new ``truss-files query`` process after a write pays the
pygit2 import for it: 0.26 s beside 0.07 s warm.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ..errors import ConfigError, IndexUnavailable, UntrustedHistory, UsageError
from ..gitdir import GitDir
from ..model import Entry, Trust
from .bounds import query_terms
from .docs import KIND_CODE, MARKED, SUPERSEDED, TRUST_CODE, entry_of
from .floors import FloorError, FloorMoved
from .index import Index, IndexView
from .lexical import Candidates, Match, below_floor, candidates, lexical
from .pipeline import Filter, Hit
from .segment import Segment, SegmentError

if TYPE_CHECKING:
    from ..authority import RunView
    from ..gitstore import Snapshot
    from ..store import Store
    from ..writers import Writers
    from .acronyms import Glossary
    from .embed import Embedder

__all__ = [
    "RECALL_MODES",
    "RecallResult",
    "Searcher",
    "capped",
    "related_snapshot",
    "run_deleted",
    "run_deleted_snapshot",
    "search",
    "search_snapshot",
]

RECALL_MODES: Final = ("exact", "semantic", "hybrid")
FUSION_DEPTH: Final = 100  # each ranking contributes its top 100 to a hybrid fusion
_VERIFIED: Final = TRUST_CODE[Trust.VERIFIED]
_UNVERIFIED: Final = TRUST_CODE[Trust.UNVERIFIED]
_T = TypeVar("_T")
# What reading a segment whose bytes changed in place raises (marshal, struct, an index past
# the end, a code no table holds).
_DAMAGE: Final = (
    SegmentError,
    FloorError,
    IndexError,
    ValueError,
    EOFError,
    TypeError,
    KeyError,
    struct.error,
)


@dataclass(frozen=True)
class RecallResult:
    """What a query found.

    ``related`` holds every live verified entry that shares its kind and key with a returned
    live verified entry, when there are two or more of them: what a conflict report needs
    (``panel.conflicts.find_conflicts(hits, related)``). ``skipped`` names entry files the
    index could not read (path -> reason); they are never candidates.
    """

    mode: str
    min_trust: Trust
    hits: list[Hit]
    related: list[Entry] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    tree: str | None = None
    withheld: str | None = None  # why entries above unverified were kept out (read gate)
    # Nothing at the floor matched: how many entries below it hold a query term (the
    # filter's other conditions kept), so an empty answer can say how to widen it.
    below_floor: int = 0
    # Words the query also looked for at a lower weight (``related``), in exact and hybrid.
    related_words: tuple[str, ...] = ()


def check_mode(mode: str, source: str = "--mode") -> str:
    if mode not in RECALL_MODES:
        message = f"unknown recall mode '{mode}'; use one of: {', '.join(RECALL_MODES)}"
        if source == "truss.toml":
            raise ConfigError(f"truss.toml: [recall] mode: {message}")
        raise UsageError(message)
    return mode


class Searcher:
    """Queries one store through its index; keeps segments open between queries."""

    def __init__(
        self,
        store: str | os.PathLike[str] = ".",
        *,
        embedder: Embedder | None = None,
        git: GitDir | None = None,
        repo: Any = None,
    ) -> None:
        self.git = git or GitDir.discover(store)
        self.index = Index(self.git, repo)
        self._embedder = embedder
        self._candidates: dict[tuple[str, str, str | None], Candidates] = {}
        self._glossary: tuple[Candidates, Glossary] | None = None

    def view(
        self, tree: str | None = None, *, at_tip: bool = True, commit: str | None = None
    ) -> IndexView:
        return self.index.view(tree, at_tip=at_tip, commit=commit)

    def candidates(self, view: IndexView, flt: Filter, commit: str | None = None) -> Candidates:
        """The filter's candidates, kept while the index holds the same documents: repeated
        queries skip the O(N) mask and length sums (~3 ms at 100k). ``commit``: the commit
        read, whose history proves a run's own notes (``writers``), when the filter asks."""
        writer_of = None
        stamp = None
        if needs_writers(flt):
            found_writers = self.writers(view, commit)
            writer_of, stamp = found_writers.of, found_writers.tip
        key = (view.state, repr(flt), stamp)
        found = self._candidates.get(key)
        if found is None or found.view.segments != view.segments:
            found = candidates(view, flt, writer_of)
            if len(self._candidates) > 16:
                self._candidates.clear()
            self._candidates[key] = found
        return found

    def writers(self, view: IndexView, commit: str | None) -> Writers:
        """Who added each entry in the history of the commit read (``writers``: a cache
        under .git/truss/; pygit2 only when it must grow)."""
        from ..writers import writers

        if commit is None and view.tip is not None:
            commit = view.tip.tip
        return writers(self.git, commit, self.index.objects.repo_if_open)

    def expand(self, cands: Candidates, terms: list[str]) -> list[str]:
        """``terms`` and the other spelling of each acronym the admitted entries define
        (``acronyms``); the glossary is kept while the candidates are."""
        from .acronyms import store_glossary

        if self._glossary is None or self._glossary[0] is not cands:
            self._glossary = (cands, store_glossary(self.git, cands))
        return self._glossary[1].expand(terms)

    def related_words(self, view: IndexView, terms: list[str]) -> list[str]:
        """The related words to add to ``terms`` (``related``: a table shipped with the
        package); none when the tip's truss.toml says ``[recall] related_words = false``."""
        if view.tip is not None and view.tip.recall.get("related_words") is False:
            return []
        from .related import load_related

        table = load_related()
        return table.widen(terms) if table is not None else []

    def mode_of(self, view: IndexView, mode: str | None) -> str:
        if mode is not None:
            return check_mode(mode)
        configured = view.tip.recall.get("mode", "exact") if view.tip is not None else "exact"
        return check_mode(str(configured), "truss.toml")

    def embedder(self, view: IndexView) -> Embedder:
        if self._embedder is None:
            from .embed import load_embedder

            spec = view.tip.recall.get("embedder") if view.tip is not None else None
            self._embedder = load_embedder(str(spec) if spec else None)
        return self._embedder

    def query(
        self,
        text: str,
        flt: Filter | None = None,
        limit: int = 10,
        *,
        mode: str | None = None,
        tree: str | None = None,
        at_tip: bool = True,
        commit: str | None = None,
        salience: str | None = None,
    ) -> RecallResult:
        """Rank the entries ``flt`` admits; ``at_tip=False`` queries ``tree`` (of ``commit``)
        instead of the branch tip's ``memories/`` (None: a commit without one). ``salience``
        names the SaliencePolicy (``salience.py``); None: ``[policy] salience`` at the tip.

        When the history of the commit read fails the audit, a floor above unverified raises
        ``UntrustedHistory``; at unverified, nothing above it is a candidate and ``withheld``
        says why.

        A segment damaged in place (bytes changed, length and header intact) shows as a
        decoding error or as a record that contradicts its class byte: the index is dropped
        and the query answered once more from a rebuilt one. A second failure is raised."""
        args = (text, flt, limit, mode, tree, at_tip, commit, salience)
        return _once_more(self, lambda: self._query(*args))

    def _query(
        self,
        text: str,
        flt: Filter | None,
        limit: int,
        mode: str | None,
        tree: str | None,
        at_tip: bool,
        commit: str | None,
        salience: str | None,
    ) -> RecallResult:
        flt = flt or Filter()
        if limit < 1:
            raise UsageError(f"limit must be at least 1, got {limit}")
        if mode is not None:
            check_mode(mode)
        # Bounded before anything is read: a query's cost must not grow with its length.
        terms = query_terms(text)
        view = self.view(tree, at_tip=at_tip, commit=commit)
        flt = capped(view, flt)
        if flt.reader is not None and flt.reader.mode is None:
            scope = view.tip.recall.get("memory.scope") if view.tip is not None else None
            flt = replace(flt, reader=replace(flt.reader, mode=str(scope or "per-agent")))
        read = commit if not at_tip else (view.tip.tip if view.tip is not None else None)
        run_view = flt.run_view()
        if flt.run_deletes and run_view is not None:
            hidden = run_deleted(view, run_view, self.writers(view, read).of)
            if hidden:
                flt = replace(flt, hidden_ids=flt.hidden_ids | hidden)
        mode = self.mode_of(view, mode)
        cands = self.candidates(view, flt, read)
        terms = self.expand(cands, terms)
        added = self.related_words(view, terms) if mode != "semantic" else []
        if salience is None and view.tip is not None:
            salience = view.tip.recall.get("policy.salience")
        if salience in (None, "off"):
            depth = limit
        else:  # a policy that reorders: loaded only for a store that names one
            from .salience import DEPTH

            depth = max(limit, DEPTH)
        if mode == "exact":
            ranked = lexical(cands, terms, depth, added)
        else:
            ranked = self._semantic_or_hybrid(view, cands, text, terms, added, depth, mode)
        hits = [Hit(self._entry(view, m), m.score) for m in ranked]
        if salience not in (None, "off"):
            from .salience import salience_policy

            hits = salience_policy(salience).order(hits, limit)
        below = 0
        if not hits and flt.min_trust is not Trust.UNVERIFIED and terms:
            below = below_floor(cands, terms)
        return RecallResult(
            mode=mode,
            min_trust=flt.min_trust,
            hits=hits,
            related=self._related(view, hits),
            skipped=dict(view.invalid),
            tree=view.tree,
            withheld=view.refused,
            below_floor=below,
            related_words=tuple(added),
        )

    def _semantic_or_hybrid(
        self,
        view: IndexView,
        cands: Candidates,
        text: str,
        terms: list[str],
        added: list[str],
        limit: int,
        mode: str,
    ) -> list[Match]:
        from .embed import semantic_rank
        from .fusion import score_fusion

        embedder = self.embedder(view)
        if mode == "semantic":
            return semantic_rank(self.git, embedder, cands, text, limit)
        depth = max(limit, FUSION_DEPTH)
        exact = lexical(cands, terms, depth, added)
        close = semantic_rank(self.git, embedder, cands, text, depth)
        return score_fusion([exact, close], limit)

    @staticmethod
    def _entry(view: IndexView, match: Match) -> Entry:
        return _entry_at(view.segments[match.seg], match.docno)

    @staticmethod
    def _related(view: IndexView, hits: Sequence[Hit]) -> list[Entry]:
        """Live verified entries of the hits' kind and key, where more than one exists."""
        out: dict[tuple[int, int], Entry] = {}
        seen: set[tuple[str, str]] = set()
        for hit in hits:
            entry = hit.entry
            slot = (entry.kind.value, entry.key)
            if entry.trust is not Trust.VERIFIED or entry.superseded_by or slot in seen:
                continue
            seen.add(slot)
            live = [
                (number, docno)
                for number, (seg, gone) in enumerate(zip(view.segments, view.deleted, strict=True))
                for docno in _verified_in_group(seg, slot)
                if docno not in gone
            ]
            if len(live) > 1:  # records are read only for an actual conflict
                for number, docno in live:
                    out[(number, docno)] = _entry_at(view.segments[number], docno)
        return list(out.values())


def _verified_in_group(seg: Segment, slot: tuple[str, str]) -> tuple[int, ...]:
    """The docnos of a segment's verified, not superseded documents of one (kind, key), kept
    in the segment's memo (segments never change): a warm query's conflict check is then a
    lookup per segment, not a walk of its class bytes."""
    key = ("verified-group", *slot)
    found: tuple[int, ...] | None = seg.memo.get(key)
    if found is None:
        cls = seg.cls
        found = tuple(
            docno
            for docno in seg.group(*slot)
            if cls[docno] & 3 == _VERIFIED and not cls[docno] & SUPERSEDED
        )
        seg.remember(key, found)
    return found


def _entry_at(seg: Segment, docno: int) -> Entry:
    """The entry of a segment's document, kept in the segment's memo (entries are frozen)."""
    found: Entry | None = seg.memo.get(docno)
    if found is not None:
        return found
    entry = entry_of(seg.record(docno), seg.doc_id(docno))
    code = seg.cls[docno]
    # The filter read the class byte, the caller gets the record: they must agree, or a
    # flipped byte could pass an unverified entry off at the verified floor.
    if code & 3 != TRUST_CODE[entry.trust] or code >> 4 != KIND_CODE[entry.kind]:
        raise SegmentError(f"{seg.path.name}: document {docno} contradicts its record")
    seg.remember(docno, entry)
    return entry


def _once_more(searcher: Searcher, work: Callable[[], _T]) -> _T:
    """``work()``; when it meets a segment damaged in place (bytes changed, length and header
    intact: a failed check, a decoding error, a record that contradicts its class byte; a
    floor index whose files are not the ones its commit left), the index is dropped and
    ``work()`` runs once more on a rebuilt one. A second failure is ``IndexUnavailable``
    (the next call tries again), never a crash nor an answer from damaged files. A floor
    index an updater moved on since the view was read is not damage: ``work()`` just runs
    again."""
    for _attempt in range(3):
        try:
            return work()
        except FloorMoved:
            continue  # an updater committed between the view and the search: ask again
        except (*_DAMAGE, OSError):
            with contextlib.suppress(OSError):
                searcher.index.discard()
            searcher._candidates.clear()
            break
    try:
        return work()
    except (*_DAMAGE, FloorMoved, OSError) as exc:
        where = searcher.index.dir_str
        raise IndexUnavailable(
            f"the recall index in {where} is damaged and could not be rebuilt ({exc}); "
            f"the next call tries again; if this persists, remove {where} (a cache: it is "
            "rebuilt from git)"
        ) from exc


def needs_writers(flt: Filter) -> bool:
    """Whether ``flt`` lets notes below its floor through on a writer's signature."""
    return (flt.visible_run is not None and flt.own_principal is not None) or (
        flt.areas is not None and bool(flt.area_writers) and any(a.own for a in flt.areas)
    )


def run_deleted(
    view: IndexView, run_view: RunView, writer_of: Callable[[str], str | None]
) -> frozenset[str]:
    """Ids of the entries a run has deleted for itself: for each of its own unverified
    tombstones (proven by the signature that added it: ``authority.own_delete``), the
    entries of the same kind and key written before it (by ``created``, then by the run's
    own call order). Others keep seeing them until the tombstone is verified; the run sees
    what the memory tool's view shows it. Read from the index: the run's own documents, then
    the (kind, key) groups of its tombstones."""
    from ..authority import own_delete
    from ..model import TOMBSTONE_MARK

    run_id = run_view.run
    if run_view.principal is None:
        return frozenset()
    prefix = f"run:{run_id}/"

    def order(record: tuple[Any, ...]) -> tuple[str, int]:
        produced = record[9] or ""
        tail = produced[len(prefix) :] if produced.startswith(prefix) else ""
        return record[7], int(tail) if tail.isdigit() else 0

    stones: dict[tuple[str, str], tuple[str, int]] = {}
    for seg, gone in zip(view.segments, view.deleted, strict=True):
        cls = seg.cls
        for docno in seg.runs().get(run_id, ()):
            if docno in gone or cls[docno] & 3 != _UNVERIFIED or not cls[docno] & MARKED:
                continue
            if not own_delete(run_view, run_id, writer_of(seg.doc_id(docno))):
                continue  # someone else's tombstone under this run's name hides nothing
            record = seg.record(docno)
            if not str(record[2]).startswith(TOMBSTONE_MARK):
                continue
            slot = (record[0], record[1])
            stones[slot] = max(stones.get(slot, ("", 0)), order(record))
    hidden: set[str] = set()
    for (kind, key), when in stones.items():
        for seg, gone in zip(view.segments, view.deleted, strict=True):
            for docno in seg.group(kind, key):
                live = docno not in gone and not seg.cls[docno] & MARKED
                if live and order(seg.record(docno)) < when:
                    hidden.add(seg.doc_id(docno))
    return frozenset(hidden)


def capped(view: IndexView, flt: Filter) -> Filter:
    """``flt`` under the read gate: unchanged when the view's history audits clean; else a
    floor above unverified is refused and an unverified floor serves nothing above it."""
    if view.refused is None:
        return flt
    if flt.min_trust is not Trust.UNVERIFIED:
        raise UntrustedHistory(view.refused)
    return replace(flt, ceiling=Trust.UNVERIFIED)


def search(
    store: str | os.PathLike[str],
    text: str,
    flt: Filter | None = None,
    limit: int = 10,
    *,
    mode: str | None = None,
    embedder: Embedder | None = None,
    salience: str | None = None,
) -> RecallResult:
    """One query against the store at (or above) ``store``, at its branch tip.

    Reads no entry file when the index is current (the warm path imports neither pygit2 nor
    YAML); brings the index up to date first when the branch moved.
    """
    return Searcher(store, embedder=embedder).query(text, flt, limit, mode=mode, salience=salience)


def search_snapshot(
    store: Store,
    snap: Snapshot,
    text: str,
    flt: Filter | None = None,
    limit: int = 10,
    *,
    mode: str | None = None,
    embedder: Embedder | None = None,
    salience: str | None = None,
) -> RecallResult:
    """A query at the commit of ``snap`` (e.g. a tool call's snapshot), through the index."""
    searcher = Searcher(
        embedder=embedder,
        git=GitDir.discover(store.git.git_dir),
        repo=store.git.repo,
    )
    tree = snap.tree_id("memories")
    return searcher.query(
        text, flt, limit, mode=mode, tree=tree, at_tip=False, commit=snap.oid, salience=salience
    )


def run_deleted_snapshot(store: Store, snap: Snapshot, run_view: RunView) -> frozenset[str]:
    """``run_deleted`` at the commit of ``snap``, for entries fetched by id."""
    searcher = Searcher(git=GitDir.discover(store.git.git_dir), repo=store.git.repo)
    tree = snap.tree_id("memories")

    def deleted() -> frozenset[str]:
        view = searcher.view(tree, at_tip=False, commit=snap.oid)
        return run_deleted(view, run_view, searcher.writers(view, snap.oid).of)

    return _once_more(searcher, deleted)


def related_snapshot(store: Store, snap: Snapshot, entries: Sequence[Entry]) -> list[Entry]:
    """``RecallResult.related`` for entries fetched some other way (by id): every live verified
    entry at the commit of ``snap`` sharing its kind and key with a live verified one of
    ``entries``, where two or more exist -- from the index's (kind, key) groups, not a scan."""
    searcher = Searcher(git=GitDir.discover(store.git.git_dir), repo=store.git.repo)
    tree = snap.tree_id("memories")

    def related() -> list[Entry]:
        view = searcher.view(tree, at_tip=False, commit=snap.oid)
        if view.refused is not None:
            return []  # verified entries only: the caller's own gate has refused or capped them
        return searcher._related(view, [Hit(e, 0.0) for e in entries])

    return _once_more(searcher, related)
