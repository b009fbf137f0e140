"""What a recall query asks for and gets: the ``Filter``, ``Area`` and ``Hit``.

The pipeline is always: filter by trust and fields, rank only what the filter admits, cut to
the limit. One engine runs it, ``truss_files.recall.engine`` (``search`` / ``Searcher``), over
the index cache under ``.git/truss/``: BM25 statistics come from the trust floor's own index
(``floors``), so text below the floor can never move a returned entry's score or rank.
``Filter.admits`` says the same of one ``Entry`` in hand (what tests and the memory tool's
views check against).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..model import Entry, Kind, Layer, Trust
from ..trust.authority import RunView, is_own, trainer_note
from .docs import MARKER_PREFIX, document_tokens

if TYPE_CHECKING:
    from ..format.scope import Reader  # made by the caller; a query with no reader never loads it

__all__ = ["Area", "Filter", "Hit", "document_tokens"]


@dataclass(frozen=True)
class Area:
    """One part of the store a reader may see: a layer, and scope fields that every entry of
    it must hold with these values. ``own``: the reader's own notes -- unverified entries of
    this area pass the trust floor (as a run's own writes do), marked by their trust."""

    layer: Layer
    scope: tuple[tuple[str, str], ...] = ()
    own: bool = False

    def holds(self, layer: Layer, scope: Mapping[str, str]) -> bool:
        return layer is self.layer and all(scope.get(k) == v for k, v in self.scope)


@dataclass(frozen=True)
class Filter:
    """Which entries may be candidates. Rejected entries never are, whatever the fields say.

    ``include_superseded``: None keeps superseded entries out at the verified floor and in below
    it (a stale entry is usually stale because it was superseded). ``visible_ids`` and
    ``visible_run`` let named entries, or a run's own unverified writes, through the trust
    floor -- every other condition still applies. A run's own write is one whose
    ``produced_by`` names ``visible_run`` (or one of ``shared_runs``: its parent, siblings and
    children) *and* whose file a commit signed by ``own_principal`` added (``authority``,
    "a run's own notes"); without ``own_principal`` no note is a run's own. An ``own``
    area's unverified entries pass only when a principal of ``area_writers`` signed the
    commit that added them (memory.ask: the trainers). Both proofs need the history, so
    the engine checks them (``Filter.admits``, with an entry alone, lets through only
    ``visible_ids``).
    ``skip_marked`` leaves out machine markers: entries whose body starts with
    ``<!-- truss:`` (the memory tool's tombstones). ``ceiling``, when set, keeps out every
    entry above it, named or not: the read gate's cap on a history the audit rejects.
    ``reader``, when set, applies ``memory.scope``: only entries whose scope stamp the
    reader may see (``scope.Reader``), named or not.
    ``hidden_ids`` are never candidates. ``run_deletes`` (with ``visible_run``): the run's own
    unverified tombstones hide, from that run only, the entries of their kind and key written
    before them -- what the memory tool's view of the run shows (``engine.run_deleted``).
    """

    min_trust: Trust = Trust.VERIFIED
    kind: Kind | None = None
    key: str | None = None
    layers: frozenset[Layer] | None = None
    scope: Mapping[str, str] = field(default_factory=dict)
    include_superseded: bool | None = None  # None: only below the verified floor
    visible_ids: frozenset[str] = frozenset()  # e.g. a run's own unverified writes
    visible_run: str | None = None
    own_principal: str | None = None
    shared_runs: frozenset[str] = frozenset()
    area_writers: frozenset[str] = frozenset()
    skip_marked: bool = False
    ceiling: Trust | None = None
    areas: tuple[Area, ...] | None = None
    reader: Reader | None = None
    hidden_ids: frozenset[str] = frozenset()
    run_deletes: bool = False

    @property
    def superseded_ok(self) -> bool:
        if self.include_superseded is None:
            return self.min_trust is not Trust.VERIFIED
        return self.include_superseded

    def admits(self, entry: Entry, writer_of: Callable[[str], str | None] | None = None) -> bool:
        """Whether ``entry`` is a candidate. ``writer_of`` (``writers.Writers.of``): who added
        each entry, what proves own notes below the floor; without it only ``visible_ids``
        pass below the floor."""
        if entry.trust is Trust.REJECTED or entry.id in self.hidden_ids:
            return False
        if self.ceiling is not None and entry.trust.rank > self.ceiling.rank:
            return False
        if not entry.trust.passes(self.min_trust) and not self._visible(entry, writer_of):
            return False
        if self.kind is not None and entry.kind is not self.kind:
            return False
        if self.key is not None and entry.key != self.key:
            return False
        if self.layers is not None and entry.layer not in self.layers:
            return False
        if any(entry.scope.get(k) != v for k, v in self.scope.items()):
            return False
        if self.reader is not None and not self.reader.sees(entry.scope):
            return False
        if self.skip_marked and entry.body.startswith(MARKER_PREFIX):
            return False
        if self.areas is not None and not self.in_areas(entry):
            return False
        return self.superseded_ok or entry.superseded_by is None

    def in_areas(self, entry: Entry) -> bool:
        return any(a.holds(entry.layer, entry.scope) for a in self.areas or ())

    def reader_sees(self, entry: Entry) -> bool:
        return self.reader is None or self.reader.sees(entry.scope)

    def run_view(self) -> RunView | None:
        """Whose notes ``visible_run`` takes as its own (``authority.RunView``)."""
        if self.visible_run is None:
            return None
        return RunView(self.visible_run, self.own_principal, self.shared_runs)

    def _visible(self, entry: Entry, writer_of: Callable[[str], str | None] | None) -> bool:
        # Own notes (a run's, an own area's) are proven by the signature on the commit that
        # added them, which an entry alone does not show (``authority``).
        if entry.id in self.visible_ids:
            return True
        if writer_of is None or entry.trust is not Trust.UNVERIFIED:
            return False
        writer = writer_of(entry.id)
        if (
            self.areas is not None
            and any(a.own and a.holds(entry.layer, entry.scope) for a in self.areas)
            and trainer_note(entry.trust, writer, self.area_writers)
        ):
            return True
        return is_own(self.run_view(), entry, writer)


@dataclass(frozen=True)
class Hit:
    entry: Entry
    score: float
