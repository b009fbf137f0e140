"""``MemoryStore``: the store as agents and faces use it -- writes, trust transitions, reads.

The facade stands above every engine. It is the front door of every face (the CLI, the tools
and so MCP and HTTP, the SDK adapter, Python callers): what a face may not forget is decided
here once, not in each face --

- a write (``write``, ``write_entries``) is the store's one signed commit, landing
  unverified, and then the verification policy of the layered settings: where it is eager
  for the entry's kind, the panel runs at once (``panel.eager``);
- a promotion (``promote``) takes the conflict policy of the layered settings (truss.toml,
  user config, ``[agents.NAME]``, contract), as ``verify`` does; truss.toml's
  ``panel-arbitrated`` is the store's to enforce whatever is layered (``Store.promote``);
- a read (``query``, ``view``) notes the entries it returned in the usage file, under this
  store's face (``origin``).

Each read here opens one gated snapshot (``Store.open_read``) and hands it to the engine
that answers -- recall for ``query``, the run context for ``context`` and ``delta_since``,
the review engine (with the run ledger's resolver) for ``why``. It implements the ``Memory``
protocol that faces and tools depend on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .config.settings import Settings, load_settings, settings_for
from .config.storeprobe import has_layers_above_store
from .context.assemble import Prefix, build_context
from .context.compact import compact as _compact
from .context.delta import Delta
from .context.delta import delta_since as _delta_since
from .context.instruction import BUILT_IN, instruction_table, pick
from .errors import NotFound, StoreError
from .format.scope import Reader
from .git.gitdir import GitDir
from .git.usage import record
from .model import Entry, Kind, Layer, Trust
from .recall.engine import RecallResult
from .recall.pipeline import Filter
from .recall.query import answer, query_filter
from .review.why import explain
from .runs.ledger import resolve_call
from .runs.runcontext import RunContext
from .store import belief
from .store.store import Store
from .trust.verdict import Verdict

if TYPE_CHECKING:
    from .panel.eager import Written

__all__ = ["MemoryStore", "effective_settings"]


class MemoryStore(Store):
    """A store at a path: ``Store``'s writes and transitions under the layered policies, and
    the gated reads."""

    def settings(
        self, *, agent: str | None = None, contract: str | os.PathLike[str] | None = None
    ) -> Settings:
        """The layered settings a command runs under: truss.toml at the tip, the user config,
        ``[agents.agent]`` (default ``$TRUSS_AGENT``), the ``contract`` file (default
        ``$TRUSS_CONTRACT``) -- ``settings_for(self)``, as every face passes it on."""
        return settings_for(self, agent=agent, contract=contract)

    # -- writes and transitions: the policies every face gets ---------------------------

    def write(
        self,
        kind: Kind | str,
        key: str,
        body: str,
        *,
        settings: Settings | None = None,
        **fields: Any,
    ) -> Entry:
        """Store a new entry: one signed commit, landing unverified; then, where the
        verification policy is eager for its kind, the panel at once (``write_entries``).
        Returns the entry as it then stands -- verified or rejected when the panel decided.
        Writing the same content again changes nothing.

        Keyword fields are those of ``new_entry`` (layer, scope, author, produced_by, ...);
        ``settings``: the layered settings to write under (default ``settings_for(self)``:
        truss.toml, the user config, ``$TRUSS_AGENT``, ``$TRUSS_CONTRACT``)."""
        entry = self.new_entry(kind, key, body, **fields)
        return self.write_entries([entry], settings=settings).entries[0]

    def write_entries(
        self,
        entries: Iterable[Entry],
        *,
        settings: Settings | None = None,
        subject: str | None = None,
    ) -> Written:
        """The one way a face writes: ``entries`` (unverified, from ``new_entry``) in one
        signed commit (``Store.write_many``; ``subject`` is its first line), then the
        verification policy of ``settings`` (default ``settings_for(self)``) on the entries
        that commit added: where it is eager for their kind, the panel runs now, each PASS
        or FAIL a second, panel-signed commit (``panel.eager.verify_written``). An entry
        already stored keeps its own history.

        Returns each entry as it stands after both, the panel's outcomes, and why the
        panel could not run when it could not (say, this key lacks the panel role and no
        ``TRUSS_PANEL_KEY`` is set): the entries then stay unverified for ``verify``.
        ``truss-files write`` comes here; ``write_memory`` and the ``memory`` tool, below the
        facade, call the same ``panel.eager.write_and_verify``."""
        # The panel (its runner, reviewers, judges) loads only on a write, never on a read.
        from .panel.eager import write_and_verify

        return write_and_verify(self, entries, settings=settings, subject=subject)

    def promote(
        self,
        ref: str,
        verdict: Verdict,
        *,
        conflict: str | None = None,
        settings: Settings | None = None,
    ) -> Entry:
        """Unverified (or stale) -> verified, on a valid PASS ``verdict`` signed for exactly
        this entry by a panel key: one signed commit, which also applies the conflict
        policy to verified entries of the same kind and key. The policy is ``conflict``
        when given, else that of ``settings`` (default ``settings_for(self)``: truss.toml,
        the user config, ``$TRUSS_AGENT``, ``$TRUSS_CONTRACT``), as ``verify`` takes it;
        under ``keep-both-flagged`` both stay verified and every read names the conflict.
        truss.toml's ``panel-arbitrated`` holds whatever is layered (``Store.promote``)."""
        if conflict is None:
            conflict = (settings or settings_for(self)).conflict
        return super().promote(ref, verdict, conflict=conflict)

    # -- reads -----------------------------------------------------------------------------

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
    ) -> RecallResult:
        """Rank entries at or above ``min_trust`` at the branch tip (filter, then BM25 over
        the candidates, through the recall index and the read gate). ``reader`` applies
        ``memory.scope`` (``scope.Reader``); None reads every scope, as a reviewer does."""
        snap = self.snapshot()
        config = self.config(snap)
        if reader is not None and reader.mode is None:
            reader = dataclasses.replace(
                reader, mode=str(config.get("memory", "scope", "per-agent"))
            )
        layered = has_layers_above_store(self.environ)
        if salience is None and not layered:
            salience = str(config.get("policy", "salience", "off"))
        return answer(
            text,
            query_filter(min_trust, kind=kind, key=key, layer=layer, reader=reader),
            limit,
            at=(self, snap),
            usage=self._gitdir,
            origin=self.origin,
            mode=mode,
            salience=salience,
            # The layered settings, as the CLI's query and the read tools take them.
            settings=(lambda: settings_for(self, snap=snap)) if layered else None,
            environ=self.environ,
        )

    @functools.cached_property
    def _gitdir(self) -> GitDir:
        # Found once: every query records its use there (``usage``).
        return GitDir.discover(self.git.git_dir)

    def view(
        self,
        refs: Iterable[str],
        *,
        min_trust: Trust | str = Trust.VERIFIED,
        reader: Reader | None = None,
    ) -> list[Entry]:
        """The entries named by id (or unique 8+ hex prefix) at or above ``min_trust``, through
        the read gate; ids below the floor, rejected, out of scope or unknown are left out."""
        floor = Trust.floor(min_trust)
        snap, withheld = self.open_read(floor)
        flt = Filter(min_trust=floor, ceiling=Trust.UNVERIFIED if withheld else None, reader=reader)
        out: dict[str, Entry] = {}
        for ref in refs:
            try:
                entry = self.get(ref, snap)
            except NotFound:
                continue
            if flt.admits(entry):
                out.setdefault(entry.id, entry)
        record(self._gitdir, list(out), self.origin, environ=self.environ)
        return list(out.values())

    # -- a belief's life (store/belief.py): the same operations as the CLI's commands ----------

    def salience_update(self, *, dry_run: bool = False) -> belief.Done:
        """Fold use (``.git/truss/usage``), age and trust into each entry's salience, in one
        signed commit (``truss-files salience update``)."""
        return belief.salience_update(self, dry_run=dry_run)

    def evict(self, *, dry_run: bool = False, settings: Settings | None = None) -> belief.Done:
        """Move verified entries over ``[policy.eviction]`` to stale, in one signed commit
        (``truss-files evict``)."""
        return belief.evict(self, dry_run=dry_run, settings=settings)

    def consolidate(self, *, dry_run: bool = False) -> belief.Done:
        """One merged, unverified note per group train flagged (``truss-files consolidate``)."""
        return belief.consolidate(self, dry_run=dry_run)

    def delta_since(self, cursor: str, *, reader: Reader | None = None) -> Delta:
        """What changed in verified L2 since ``cursor`` (from ``context`` or an earlier
        delta), with a new cursor; a bad or unknown cursor raises ``BadCursor``."""
        return _delta_since(self, cursor, reader=reader)

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
        """The prefix of run ``run`` (tools, system, messages, cursor); the first call for a
        run starts it at the branch tip, and later calls keep its tools and system bytes.
        ``parent``: the run is a child of that run (they share their own notes). ``fmt``
        (anthropic, openai) and ``model`` pick the memory instruction of
        ``[context.instruction]`` (``context.instruction.pick``). ``run_context`` and
        ``purpose``: what a first context asks memory.ask under ``[enterprise]
        consult_at_start`` (``context.consult``)."""
        return build_context(
            self,
            run,
            principal=principal,
            agent=agent,
            project=project,
            gates=tuple(gates),
            parent=parent,
            fmt=fmt,
            model=model,
            run_context=run_context,
            purpose=purpose,
        )

    def why(self, ref: str) -> dict[str, Any]:
        """Why the store believes entry ``ref`` (an id or a unique 8+ hex prefix), for
        people: ``{"entry", "history", "produced_by", "sources"}`` (``review.why``), plus
        ``withheld`` when the read gate holds back what is above unverified. As ``show``:
        any trust, and refused (``UntrustedHistory``) for an entry above unverified while
        the branch's history fails the audit; an unknown id raises ``NotFound``."""
        snap = self.snapshot()
        entry = self.get(ref, snap)
        floor = entry.trust if entry.trust.rank > 0 else Trust.UNVERIFIED
        read = self.open_read(floor, snap)
        answer = explain(self, entry, read.snap, lambda run, seq: resolve_call(self, run, seq))
        if read.withheld:
            answer["withheld"] = read.withheld
        return answer

    def compact(self, run: str, summary: str) -> Entry:
        """Record ``summary`` (the harness's own) as run ``run``'s ``context_summary``: one
        unverified entry, the run's own, that stands in for the notes it covers in the run's
        L4 (they stay in the store); ``context`` shows it first."""
        return _compact(self, run, summary)


# -- what faces ask besides a store's own operations ------------------------------------------


def effective_settings(
    store: MemoryStore | None,
    *,
    agent: str | None = None,
    contract: str | None = None,
    provider: str | None = None,
    model: str | None = None,
) -> tuple[Settings, dict[str, Any]]:
    """The layered settings (built-in defaults, ``store``'s truss.toml, the user config,
    ``[agents.agent]``, ``contract``) and which ``[context.instruction]`` entry applies for
    ``provider`` and ``model``: ``{"applies", "provider", "model", "source"}``. Outside a
    store (None, or one whose truss.toml cannot be read) only the user config file and the
    contract apply (``truss-files config show``)."""
    raw = None
    if store is not None:
        with contextlib.suppress(StoreError):
            raw = store.config().raw
    settings = load_settings(raw, agent=agent, contract=contract)
    found = pick(instruction_table(settings), provider, model)
    name = found[0] if found is not None else BUILT_IN
    key = f"context.instruction.{name}"
    if key not in settings.values and name == "default":
        key = "context.instruction"
    source = settings.values[key].source if key in settings.values else "default"
    return settings, {"applies": name, "provider": provider, "model": model, "source": source}
