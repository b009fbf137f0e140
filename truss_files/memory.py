"""The memory store as a seam: what faces and tools may ask of any backing.

``Memory`` names the nine operations of a belief's life -- write, promote, reject, demote,
supersede, query, view, delta_since, context -- typed exactly as the git store
(``store.MemoryStore``) implements them. Faces and tools that depend on ``Memory`` instead
of the concrete class can be handed another substrate later without changing them; the
conformance suite (``pytest tests/conformance``) is what such a substrate must pass, the
git store included.

It is a values-level module on purpose: at run time it imports only ``typing``, the errors
and the model, so depending on the seam never pulls in git, recall or the context engine.
The result types (``Verdict``, ``RecallResult``, ``Delta``, ``Prefix``, ``Reader``) are
named for the type checker only. No property is part of it: what faces read off the git
store besides these calls (its repository, snapshots, trust policy) is git-shaped, and a
seam that exposed it would bind every backing to git.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .model import Entry, Kind, Layer, Trust

if TYPE_CHECKING:
    from .config.settings import Settings
    from .context.assemble import Prefix
    from .context.delta import Delta
    from .format.scope import Reader
    from .recall.engine import RecallResult
    from .runs.runcontext import RunContext
    from .trust.verdict import Verdict

__all__ = ["Memory"]


@runtime_checkable
class Memory(Protocol):
    """A memory store: every write lands unverified; only a valid signed verdict moves
    trust; reads never show what is below the floor they ask for.

    ``isinstance(x, Memory)`` checks only that the nine methods exist; the conformance
    suite checks what they do.
    """

    def write(
        self,
        kind: Kind | str,
        key: str,
        body: str,
        *,
        settings: Settings | None = None,
        **fields: Any,
    ) -> Entry:
        """Store a new entry, unverified (the same content again changes nothing); where
        the verification policy of ``settings`` (default: the store's layered settings) is
        eager for its kind, the panel decides it at once and the entry comes back as it
        then stands. Bad input raises ``UsageError`` and stores nothing."""
        ...

    def promote(
        self,
        ref: str,
        verdict: Verdict,
        *,
        conflict: str | None = None,
        settings: Settings | None = None,
        scope: Mapping[str, str] | None = None,
    ) -> Entry:
        """Unverified (or stale) -> verified, on a valid PASS verdict signed for exactly
        this entry by a panel key, under the conflict policy ``conflict`` (default: that of
        ``settings``, else of the store's layered settings); anything else raises
        ``VerdictError`` or ``TransitionError`` and changes nothing. ``scope``: the fields
        the entry must hold (a tenant's), else ``NotFound``; rivals outside it are kept."""
        ...

    def reject(
        self, ref: str, verdict: Verdict, *, scope: Mapping[str, str] | None = None
    ) -> Entry:
        """Unverified -> rejected, on a valid FAIL verdict for this entry (``scope`` as for
        ``promote``)."""
        ...

    def demote(self, ref: str, reason: str, *, verdict: Verdict | None = None) -> Entry:
        """Verified -> stale, with a reason (an empty one raises ``UsageError``)."""
        ...

    def supersede(self, old_ref: str, new_ref: str) -> tuple[Entry, Entry]:
        """Link a verified entry over an older one, which leaves default queries."""
        ...

    def query(
        self,
        text: str,
        *,
        kind: Kind | str | None = None,
        key: str | None = None,
        layer: Layer | str | None = None,
        min_trust: Trust | str = Trust.VERIFIED,
        limit: int = 10,
        mode: str | None = None,
        reader: Reader | None = None,
        salience: str | None = None,
        at: str | None = None,
        scope: Mapping[str, str] | None = None,
    ) -> RecallResult:
        """Entries at or above ``min_trust`` ranked for ``text``; scores of entries at the
        floor are computed from entries at the floor only. ``salience`` ("prior" or "off"; None
        for the layered ``policy.salience``) says whether the entries' salience reorders."""
        ...

    def view(
        self,
        refs: Iterable[str],
        *,
        min_trust: Trust | str = Trust.VERIFIED,
        reader: Reader | None = None,
        at: str | None = None,
        scope: Mapping[str, str] | None = None,
    ) -> list[Entry]:
        """The entries named by id (or unique prefix) at or above ``min_trust`` (and within
        ``scope``, a tenant's fields, where given)."""
        ...

    def delta_since(self, cursor: str, *, reader: Reader | None = None) -> Delta:
        """What changed in verified memory since ``cursor``, with a new cursor; a bad
        cursor raises ``BadCursor``."""
        ...

    def context(
        self,
        run: str,
        *,
        principal: str | None = None,
        agent: str | None = None,
        project: str | None = None,
        gates: Iterable[str] = (),
        parent: str | None = None,
        fmt: str | None = None,
        model: str | None = None,
        run_context: RunContext | None = None,
        purpose: str | None = None,
    ) -> Prefix:
        """The prefix of run ``run`` (tools, system layers, goals, the delta since its last
        context, the run's own notes) and a cursor for ``delta_since``."""
        ...
