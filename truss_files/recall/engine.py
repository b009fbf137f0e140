"""Recall over a store: the index cache, the three modes, entries out.

``search(store, query, flt, limit, mode=..., gate=...)`` is what the CLI's ``query`` calls; a
process that asks many questions keeps a ``Searcher`` (it re-checks the branch tip on every
query, so it never answers from an old tree). Modes (``RECALL_MODES``):

``exact``
    BM25 in the trust floor's tantivy index over the entries the filter admits (``lexical``,
    ``floors``): statistics from the floor's members.
``semantic``
    cosine similarity between the query's embedding and each admitted entry's (``embed``).
``hybrid``
    both rankings, fused by their min-max normalised scores, lexical 0.6 (``fusion``).

In every mode the query is widened by the acronyms the admitted entries define (``acronyms``);
in exact and hybrid mode its words' related words are also looked for at half weight
(``related``; ``RecallResult.related_words`` names them). In every mode the filter runs
first and nothing outside it is ranked. A query is bounded first (``bounds.query_terms``).
The mode comes from the caller, else from ``[recall] mode`` in the truss.toml of the branch
tip, else ``exact``.

The read gate is given, never looked up: every ``Searcher`` (and ``search``,
``search_snapshot``...) takes ``gate``, the check of whoever opens the read (``readgate.refusal``
for a store); there is no default, so no read path can forget it. A history it refuses serves
nothing above unverified (``capped``).

tantivy is the one engine (filters as indexed terms, records as stored fields, its own deletes
and merges, its BM25). What recall promises, stated for it:

* the filter runs first: everything a filter says is a zero-score clause of the tantivy query
  (``lexical.clauses``), and the floor is which index is searched;
* statistics are the **floor's**: ``N``, document frequencies and average length of the
  entries at or above ``min_trust`` (one tantivy index per floor), not those of the kind-,
  key-, layer- or scope-filtered candidates;
* adding, changing or removing entries below the floor never changes the score or order of
  entries at or above it, bit for bit: the floor's index is not written for them; rejected
  entries are in no floor's index (an index of their own lists them by key and run, for
  ``key_entries``, ``run_entries`` and ``run_deleted``; no query ranks in it);
* a run's own notes below the floor (``visible_ids``, ``visible_run``, an ``own`` area) are
  found and scored by tantivy in the **unverified floor's** index, which holds them -- with
  that floor's statistics (every non-rejected entry), not the floor's statistics joined by
  them as before tantivy did the whole job -- and merged by score; they never move a score
  at the floor;
* a matching entry scores above 0 (tantivy's idf is Lucene's, never negative).

tantivy scores in f32 over lengths quantised to a byte, with k1 1.2; a document deleted from a
floor's index (an entry demoted, rejected or changed) still counts in that floor's statistics
until tantivy merges its segment away, so an updated index can score a little unlike a rebuilt
one -- for entries at that floor, never from below it. Measured figures are in the README's
recall table (``python -m benchmarks recall``).
"""

from __future__ import annotations

import contextlib
import marshal
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ..errors import (
    ConfigError,
    FloorError,
    IndexUnavailable,
    UntrustedHistory,
    UsageError,
)
from ..git.gitdir import GitDir
from ..model import TOMBSTONE_MARK, Conflict, Entry, Kind, Trust
from ..trust.authority import RunView, own_delete, run_of
from .acronyms import Glossary, store_glossary
from .bounds import EMBED_IN_QUERY, query_terms
from .docs import MARKER_PREFIX, TRUST_CODE
from .floors import Floor, FloorMoved, group_code, group_tag, run_tag
from .fusion import FUSION_DEPTH, hybrid_fusion
from .index import Gate, Index, IndexView
from .lexical import _MUST, _NOT, Match, _all, _any, admitted, below_floor, group, lexical
from .lexical import _tag as tag_query
from .pipeline import Filter, Hit
from .related import load_related

if TYPE_CHECKING:
    from ..git.gitstore import Snapshot
    from ..store.store import Store
    from ..trust.writers import Writers
    from .encoders.base import Embedder

__all__ = [
    "RECALL_MODES",
    "Embedded",
    "RecallResult",
    "Searcher",
    "capped",
    "conflicts_snapshot",
    "embed_written",
    "run_deleted",
    "run_deleted_snapshot",
    "search",
    "search_snapshot",
]

RECALL_MODES: Final = ("exact", "semantic", "hybrid")
_T = TypeVar("_T")
# What reading a floor whose bytes changed in place raises: ``FloorError`` alone (the floor
# and the record decoder say so), so a bug of ours is a traceback, not a rebuilt index.
_DAMAGE: Final = (FloorError,)


@dataclass(frozen=True)
class RecallResult:
    """What a query found.

    ``conflicts`` names each (kind, key) of a returned live verified entry that holds two or
    more live verified entries, returned or not: what a read must report (``Searcher.conflicts``).
    ``related`` holds those entries. Both are worked out when first asked for, at the commit
    the query read (every face asks; a library caller that never looks never pays for them).
    ``skipped`` names entry files the index could not read (path -> reason); they are never
    candidates.
    """

    mode: str
    min_trust: Trust
    hits: list[Hit]
    _conflicts: Callable[[], list[Conflict]] = field(default=list, repr=False, compare=False)
    _related: Callable[[], list[Entry]] = field(default=list, repr=False, compare=False)
    skipped: dict[str, str] = field(default_factory=dict)
    tree: str | None = None
    withheld: str | None = None  # why entries above unverified were kept out (read gate)
    # Nothing at the floor matched: how many entries below it hold a query term (the
    # filter's other conditions kept), so an empty answer can say how to widen it.
    below_floor: int = 0
    # Words the query also looked for at a lower weight (``related``), in exact and hybrid.
    related_words: tuple[str, ...] = ()
    # A read as of a past commit (``at``): the commit it read.
    at: str | None = None

    def __iter__(self) -> Iterator[Hit]:
        """The hits, best first: ``for hit in store.query(...)`` reads ``hit.entry``."""
        return iter(self.hits)

    @cached_property
    def conflicts(self) -> list[Conflict]:
        return self._conflicts()

    @cached_property
    def related(self) -> list[Entry]:
        """Every live verified entry of the groups ``conflicts`` names."""
        return self._related()


def check_mode(mode: str, source: str = "--mode") -> str:
    if mode not in RECALL_MODES:
        message = f"unknown recall mode '{mode}'; use one of: {', '.join(RECALL_MODES)}"
        if source == "truss.toml":
            raise ConfigError(f"truss.toml: [recall] mode: {message}")
        raise UsageError(message)
    return mode


@dataclass(frozen=True)
class Embedded:
    """What ``Searcher.embed_missing`` did: notes embedded now, notes at the tip, embedder."""

    embedded: int
    notes: int
    embedder: str


class Searcher:
    """Queries one store through its index, behind the read gate it is given."""

    def __init__(
        self,
        store: str | os.PathLike[str] = ".",
        *,
        gate: Gate,
        embedder: Embedder | None = None,
        git: GitDir | None = None,
        repo: Any = None,
        embed_limit: int | None = EMBED_IN_QUERY,
    ) -> None:
        self.git = git or GitDir.discover(store)
        self.index = Index(self.git, repo)
        self.gate = gate
        self._embedder = embedder
        # The most vectors a query embeds itself (None: no bound).
        self.embed_limit = embed_limit
        self._glossary: dict[tuple[Any, str | None], tuple[Filter, Glossary]] = {}
        # The entries the last semantic or hybrid query's filter admitted, with its key, and
        # what semantic ranking keeps of them (their vectors' rows).
        self._admitted: tuple[tuple[Any, str | None], Filter, list[Match], dict[str, Any]] | None
        self._admitted = None

    def view(
        self, tree: str | None = None, *, at_tip: bool = True, commit: str | None = None
    ) -> IndexView:
        return self.index.view(tree, gate=self.gate, at_tip=at_tip, commit=commit)

    def writers(self, view: IndexView, commit: str | None) -> Writers:
        """Who added each entry in the history of the commit read (``writers``: a cache
        under .git/truss/; pygit2 only when it must grow)."""
        # Off the plain query's path (it starts a lock, and grows the cache with pygit2): only
        # a filter that lets own notes through needs it (tests/faces/cli/test_cli_startup.py).
        from ..trust.writers import writers

        if commit is None and view.tip is not None:
            commit = view.tip.tip
        return writers(self.git, commit, self.index.objects.repo_if_open)

    def expand(
        self, view: IndexView, flt: Filter, terms: list[str], found: Writers | None
    ) -> list[str]:
        """``terms`` and the other spelling of each acronym the admitted entries define
        (``acronyms``); the glossary is kept while the index and the filter are the same."""
        key = (view.state, found.tip if found is not None else None)
        known = self._glossary.get(key)
        # Filters compared by value (cheaper than a repr of every field as a key).
        glossary = known[1] if known is not None and known[0] == flt else None
        if glossary is None:
            writer_of = found.of if found is not None else None
            defining = admitted(view, flt, writer_of, tag_query("a"))
            rows = [_acronyms(m.floor, m.hit) for m in defining]
            glossary = store_glossary(rows)
            if len(self._glossary) > 16:
                self._glossary.clear()
            self._glossary[key] = (flt, glossary)
        return glossary.expand(terms)

    def related_words(self, view: IndexView, terms: list[str]) -> list[str]:
        """The related words to add to ``terms`` (``related``: a table shipped with the
        package); none when the tip's truss.toml says ``[recall] related_words = false``."""
        if view.tip is not None and view.tip.recall.get("related_words") is False:
            return []
        table = load_related()
        return table.widen(terms) if table is not None else []

    def mode_of(self, view: IndexView, mode: str | None) -> str:
        if mode is not None:
            return check_mode(mode)
        configured = view.tip.recall.get("mode", "exact") if view.tip is not None else "exact"
        return check_mode(str(configured), "truss.toml")

    def embedder(self, view: IndexView) -> Embedder:
        if self._embedder is None:
            # The semantic extra (numpy, wordllama): exact mode never imports it.
            from .encoders.base import load_embedder

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

        When the gate refuses the history of the commit read, a floor above unverified raises
        ``UntrustedHistory``; at unverified, nothing above it is a candidate and ``withheld``
        says why.

        A floor index damaged in place shows as a tantivy error or as a record that
        contradicts its tags: the index is dropped and the query answered once more from a
        rebuilt one. A second failure is raised."""
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
        found = self.writers(view, read) if needs_writers(flt) else None
        run_view = flt.run_view()
        if flt.run_deletes and run_view is not None:
            hidden = run_deleted(view, run_view, self.writers(view, read).of)
            if hidden:
                flt = replace(flt, hidden_ids=flt.hidden_ids | hidden)
        mode = self.mode_of(view, mode)
        terms = self.expand(view, flt, terms, found)
        added = self.related_words(view, terms) if mode != "semantic" else []
        if salience is None and view.tip is not None:
            salience = view.tip.recall.get("policy.salience")
        if salience in (None, "off"):
            depth = limit
        else:  # a policy that reorders: loaded only for a store that names one (cold path)
            from .salience import DEPTH

            depth = max(limit, DEPTH)
        writer_of = found.of if found is not None else None
        if mode == "exact":
            ranked = lexical(view, flt, terms, depth, added, writer_of)
        else:
            ranked = self._semantic_or_hybrid(view, flt, text, terms, added, depth, mode, found)
        hits = [Hit(view.entry(m.floor, m.hit), m.score) for m in ranked]
        if salience not in (None, "off"):
            from .salience import salience_policy  # as above: only for a store that names one

            hits = salience_policy(salience).order(hits, limit)
        below = 0
        if not hits and flt.min_trust is not Trust.UNVERIFIED and terms:
            below = below_floor(view, flt, terms)
        entries = [hit.entry for hit in hits]
        return RecallResult(
            mode=mode,
            min_trust=flt.min_trust,
            hits=hits,
            _conflicts=partial(self._conflicts_at, view, read, entries),
            _related=partial(self._related_at, view, read, entries),
            skipped=dict(view.invalid),
            tree=view.tree,
            withheld=view.refused,
            below_floor=below,
            related_words=tuple(added),
        )

    def _semantic_or_hybrid(
        self,
        view: IndexView,
        flt: Filter,
        text: str,
        terms: list[str],
        added: list[str],
        limit: int,
        mode: str,
        found: Writers | None,
    ) -> list[Match]:
        from .embed import semantic_rank  # the semantic extra: numpy, wordllama

        embedder = self.embedder(view)
        writer_of = found.of if found is not None else None
        cands, memo = self.admitted(view, flt, found)
        bound = self.embed_limit
        if mode == "semantic":
            return semantic_rank(view, self.git, embedder, cands, text, limit, memo, bound)
        depth = max(limit, FUSION_DEPTH)
        exact = lexical(view, flt, terms, depth, added, writer_of)
        close = semantic_rank(view, self.git, embedder, cands, text, depth, memo, bound)
        return hybrid_fusion(exact, close, limit)

    @property
    def embedder_loaded(self) -> bool:
        """Whether this searcher has its embedder (a semantic query ran, or one was given)."""
        return self._embedder is not None

    def embed_missing(
        self, progress: Callable[[int, int], None] | None = None, most: int | None = None
    ) -> Embedded:
        """Embed every note at the tip that has no cached vector yet (at most ``most``),
        whatever its trust (``embed.embed_missing``; ``progress(done, missing)``): what
        ``truss-files index`` and a long-lived process after a write or a sync run, so no
        query embeds many."""
        from .embed import embed_missing  # numpy and the encoders: never on an exact query

        def work() -> Embedded:
            view = self.view()
            embedder = self.embedder(view)
            cands = admitted(view, Filter(min_trust=Trust.UNVERIFIED), None)
            made = embed_missing(view, self.git, embedder, cands, progress, most)
            return Embedded(embedded=made, notes=len(cands), embedder=embedder.fingerprint)

        return _once_more(self, work)

    def admitted(
        self, view: IndexView, flt: Filter, found: Writers | None
    ) -> tuple[list[Match], dict[str, Any]]:
        """Every entry ``flt`` admits (what semantic mode ranks), and a memo for what is
        derived from them, kept while the index, the writers read and the filter are the
        same: a long-lived process asking many questions lists them once, not per query."""
        key = (view.state, found.tip if found is not None else None)
        known = self._admitted
        if known is not None and known[0] == key and known[1] == flt:
            return known[2], known[3]
        cands = admitted(view, flt, found.of if found is not None else None)
        self._admitted = (key, flt, cands, {})
        return cands, self._admitted[3]

    @staticmethod
    def members(view: IndexView, entries: Iterable[Entry]) -> dict[tuple[str, str], Members]:
        """The live members (verified, not superseded) of the (kind, key) group of each live
        verified entry of ``entries``, oldest first, read from the verified floor's fast
        fields: no entry is decoded. Kept with the opened verified floor (its commit never
        changes), so a group is searched once."""
        slots: dict[tuple[str, str], None] = {}
        for entry in entries:
            if entry.trust is Trust.VERIFIED and entry.superseded_by is None:
                slots.setdefault((entry.kind.value, entry.key))
        if not slots:
            return {}
        floor = view.floor(Trust.VERIFIED)
        memo = floor.memo
        members: dict[tuple[str, str], Members] = {}
        missing = []
        for slot in slots:
            kept = memo.get(("live", slot))
            if kept is None:
                missing.append(slot)
            else:
                members[slot] = kept
        if missing:
            by_code = {group_code(*slot): slot for slot in missing}
            # Two asked groups with one code cannot be told apart by it: search them apart.
            if len(by_code) == len(missing):
                batches = [by_code]
            else:
                batches = [{group_code(*slot): slot} for slot in missing]
            if len(memo) > 8192:
                memo.clear()
            for batch in batches:
                for slot, rows in _live_members(floor, batch).items():
                    members[slot] = memo[("live", slot)] = rows
        return members

    def conflicts(self, view: IndexView, entries: Iterable[Entry]) -> list[Conflict]:
        """What a read must report of ``entries``: each group of a live verified one that holds
        two or more live verified entries, by kind and key, each group's ids oldest first --
        also those ``entries`` does not hold. ``keep-both-flagged`` leaves an older verified
        entry beside a newer one (``panel-arbitrated`` can too, while an arbitration runs);
        reads never pick a winner silently, and a reader shown one side learns the other
        exists. Every face reports this answer (``RecallResult.conflicts``, or
        ``conflicts_snapshot`` for entries fetched by id)."""
        return [
            Conflict(kind, key, tuple(row[1] for row in rows))
            for (kind, key), rows in sorted(self.members(view, entries).items())
            if len(rows) > 1
        ]

    def _conflicts_at(
        self, view: IndexView, commit: str | None, entries: Sequence[Entry]
    ) -> list[Conflict]:
        """``conflicts`` for a result, asked after its query returned: from ``view``, or -- when
        its floors turn out damaged -- from a rebuilt index at the same commit."""
        views = [view]

        def work() -> list[Conflict]:
            opened = views.pop() if views else self.view(view.tree, at_tip=False, commit=commit)
            return self.conflicts(opened, entries)

        return _once_more(self, work)

    def _related_at(
        self, view: IndexView, commit: str | None, entries: Sequence[Entry]
    ) -> list[Entry]:
        """``related`` for a result, as ``_conflicts_at``: from ``view``, or from a rebuilt
        index at the same commit when its floors turn out damaged or moved on."""
        views = [view]

        def work() -> list[Entry]:
            opened = views.pop() if views else self.view(view.tree, at_tip=False, commit=commit)
            return self.related(opened, entries)

        return _once_more(self, work)

    def related(self, view: IndexView, entries: Sequence[Entry]) -> list[Entry]:
        """The entries of the groups ``conflicts`` reports (``RecallResult.related``)."""
        floor = view.floor(Trust.VERIFIED)
        known = {entry.id: entry for entry in entries}
        code = TRUST_CODE[Trust.VERIFIED]
        return [
            known.get(row[1]) or view.entry(floor, (0.0, row[1], code, row[2]))
            for rows in self.members(view, entries).values()
            if len(rows) > 1
            for row in rows
        ]

    def run_entries(self, view: IndexView, run: str) -> list[Entry]:
        """Every entry ``run`` produced, whatever its trust (rejected ones included)."""
        return [view.entry(m.floor, m.hit) for m in every(view, [run_tag(run)])]

    def key_entries(self, view: IndexView, key: str) -> list[Entry]:
        """Every entry of ``key``, whatever its kind and trust (rejected ones included)."""
        return [
            view.entry(m.floor, m.hit)
            for kind in Kind
            for m in every(view, [group_tag(kind.value, key)])
        ]


def _acronyms(floor: Floor, hit: Sequence[Any]) -> Any:
    """The acronyms a document defines, as stored (``store_glossary`` ignores bad rows)."""
    raw = floor.stored(hit[3], "acr")
    try:
        return marshal.loads(raw) if raw is not None else []
    except (EOFError, ValueError, TypeError) as exc:
        raise FloorError(f"{floor.path}: {hit[1]}'s acronyms are damaged ({exc!r})") from exc


# A group's live members: (created code, id, document address), oldest first.
Members = tuple[tuple[int, str, Any], ...]


def _live_members(
    floor: Floor, by_code: dict[int, tuple[str, str]]
) -> dict[tuple[str, str], Members]:
    """The live members of each group of ``by_code`` (its groups by their codes, which no two
    share) in the verified ``floor``, in one search, told apart by their codes."""
    slots = list(by_code.values())
    query = _all([(_MUST, _any([group_tag(*slot) for slot in slots])), (_NOT, tag_query("s"))])
    # A small first ask (tantivy's collector is sized by it); all when it fills.
    want = 4 * len(slots) + 16
    scored = floor.best(query, want)
    if len(scored) >= want:
        scored = floor.best(query, max(1, floor.num_docs))
    # Only the fast fields a report needs: no stored document, no trust code.
    addresses = [address for _score, address in scored]
    his, los = floor.fast("hi", addresses), floor.fast("lo", addresses)
    codes, created = floor.fast("gk", addresses), floor.fast("ts", addresses)
    rows: dict[tuple[str, str], list[tuple[int, str, Any]]] = {slot: [] for slot in slots}
    for hi, lo, code, when, address in zip(his, los, codes, created, addresses, strict=True):
        slot = by_code.get(code)
        entry_id = f"{hi:016x}{lo:016x}"
        if slot is None:  # a document whose tags and fast fields disagree: damaged files
            raise FloorError(f"{floor.path}: {entry_id} is in a group its code does not name")
        rows[slot].append((when, entry_id, address))
    return {slot: tuple(sorted(group, key=lambda r: r[:2])) for slot, group in rows.items()}


def every(view: IndexView, tags: Sequence[str]) -> list[Match]:
    """The entries holding every tag of ``tags``, whatever their trust: the unverified
    floor's index (every entry not rejected) and the rejected entries' index -- a listing,
    never a ranking, so rejected entries still move no floor's statistics."""
    return group(view, Trust.UNVERIFIED, tags) + group(view, Trust.REJECTED, tags)


def _once_more(searcher: Searcher, work: Callable[[], _T]) -> _T:
    """``work()``; when it meets a floor index damaged in place (a tantivy error, a record
    that contradicts its tags; files that are not the ones its commit left), the index is
    dropped and ``work()`` runs once more on a rebuilt one. A second failure is
    ``IndexUnavailable`` (the next call tries again), never a crash nor an answer from
    damaged files. A floor index an updater moved on since the view was read is not damage:
    ``work()`` just runs again."""
    for _attempt in range(3):
        try:
            return work()
        except FloorMoved:
            continue  # an updater committed between the view and the search: ask again
        except (*_DAMAGE, OSError):
            with contextlib.suppress(OSError):
                searcher.index.discard()
            searcher._glossary.clear()
            searcher._admitted = None
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
    what the memory tool's view shows it."""
    run_id = run_view.run
    if run_view.principal is None:
        return frozenset()
    prefix = f"run:{run_id}/"

    def order(entry: Entry) -> tuple[str, int]:
        produced = entry.provenance.produced_by or ""
        tail = produced[len(prefix) :] if produced.startswith(prefix) else ""
        return entry.created, int(tail) if tail.isdigit() else 0

    stones: dict[tuple[str, str], tuple[str, int]] = {}
    for m in group(view, Trust.UNVERIFIED, [run_tag(run_id), "t:unverified", "m"]):
        if not own_delete(run_view, run_id, writer_of(m.id)):
            continue  # someone else's tombstone under this run's name hides nothing
        entry = view.entry(m.floor, m.hit)
        if run_of(entry.provenance.produced_by) != run_id:
            continue
        if entry.body.startswith(TOMBSTONE_MARK):
            slot = (entry.kind.value, entry.key)
            stones[slot] = max(stones.get(slot, ("", 0)), order(entry))
    hidden: set[str] = set()
    for (kind, key), when in stones.items():
        for m in every(view, [group_tag(kind, key)]):
            entry = view.entry(m.floor, m.hit)
            if not entry.body.startswith(MARKER_PREFIX) and order(entry) < when:
                hidden.add(m.id)
    return frozenset(hidden)


def capped(view: IndexView, flt: Filter) -> Filter:
    """``flt`` under the read gate: unchanged when the gate passes the view's history; else a
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
    gate: Gate,
    mode: str | None = None,
    embedder: Embedder | None = None,
    salience: str | None = None,
) -> RecallResult:
    """One query against the store at (or above) ``store``, at its branch tip, behind
    ``gate``. Reads no entry file when the index is current (the warm path imports neither
    pygit2 nor YAML); brings the index up to date first when the branch moved."""
    searcher = Searcher(store, gate=gate, embedder=embedder)
    return searcher.query(text, flt, limit, mode=mode, salience=salience)


EMBED_AT_WRITE: Final = 1024  # notes a write, import or sync embeds at most (embed_written)

# One Searcher per store object and gate (and embedder), kept on the store while it lives:
# its index keeps the head it read and the floors it checked, its glossary the acronyms, so
# a process that queries through ``MemoryStore`` pays what a kept ``Searcher`` pays. Each
# query still reads the branch tip and asks the gate (``Index.view``).
_KEPT: Final = "_recall_searchers"


def _snapshot_searcher(store: Store, gate: Gate, embedder: Any = None) -> Searcher:
    kept: list[tuple[Gate, Any, Searcher]] = vars(store).setdefault(_KEPT, [])
    for known_gate, known_embedder, searcher in kept:
        if known_gate == gate and known_embedder is embedder:
            return searcher
    git = GitDir.discover(store.git.git_dir)
    searcher = Searcher(gate=gate, embedder=embedder, git=git, repo=store.git.repo)
    if len(kept) >= 4:
        kept.clear()
    kept.append((gate, embedder, searcher))
    return searcher


def embed_written(store: Store) -> None:
    """After a write or a sync in a long-lived process: embed the new notes for every kept
    searcher whose embedder is loaded (a semantic or hybrid query ran here), so the next
    query finds their vectors. A process that never asked such a query loads nothing. At
    most ``EMBED_AT_WRITE`` notes per call: a store that was never indexed is left to
    ``truss-files index`` rather than held inside a write for minutes. A failure here costs
    the next query the embedding, never the write (it has landed)."""
    for _, _, searcher in vars(store).get(_KEPT, []):
        if searcher.embedder_loaded:
            try:
                searcher.embed_missing(most=EMBED_AT_WRITE)
            except Exception:  # noqa: BLE001 - the runtime's own errors too: the write stands
                continue


def search_snapshot(
    store: Store,
    snap: Snapshot,
    text: str,
    flt: Filter | None = None,
    limit: int = 10,
    *,
    gate: Gate,
    mode: str | None = None,
    embedder: Embedder | None = None,
    salience: str | None = None,
) -> RecallResult:
    """A query at the commit of ``snap`` (e.g. a tool call's snapshot), through the index."""
    searcher = _snapshot_searcher(store, gate, embedder)
    tree = snap.tree_id("memories")
    return searcher.query(
        text, flt, limit, mode=mode, tree=tree, at_tip=False, commit=snap.oid, salience=salience
    )


def run_deleted_snapshot(
    store: Store, snap: Snapshot, run_view: RunView, *, gate: Gate
) -> frozenset[str]:
    """``run_deleted`` at the commit of ``snap``, for entries fetched by id."""
    searcher = _snapshot_searcher(store, gate)
    tree = snap.tree_id("memories")

    def deleted() -> frozenset[str]:
        view = searcher.view(tree, at_tip=False, commit=snap.oid)
        return run_deleted(view, run_view, searcher.writers(view, snap.oid).of)

    return _once_more(searcher, deleted)


def conflicts_snapshot(
    store: Store, snap: Snapshot, entries: Sequence[Entry], *, gate: Gate
) -> list[Conflict]:
    """``RecallResult.conflicts`` for entries fetched some other way (by id), at the commit
    of ``snap``: from the index's group terms and fast fields, not a scan."""
    searcher = _snapshot_searcher(store, gate)
    tree = snap.tree_id("memories")

    def conflicts() -> list[Conflict]:
        view = searcher.view(tree, at_tip=False, commit=snap.oid)
        if view.refused is not None:
            return []  # verified entries only: the gate has refused or capped them
        return searcher.conflicts(view, entries)

    return _once_more(searcher, conflicts)
