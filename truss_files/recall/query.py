"""One query, as every face asks it: settings, then the trust filter, then the search, then
the usage note.

``MemoryStore.query``, the CLI's ``query`` and the ``memory_query`` tool each come here, so a
policy of reading (which layered settings pick the recall mode and salience, what the filter
admits, that a read notes what it returned) is written once. The caller says where the store
is: a path for a cold read (the index at the branch tip, no pygit2: the hook-time query), or
an open store with a snapshot. ``document`` is the JSON shape the CLI and the tool share.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..config.storeprobe import has_layers_above_store, require_store, user_config_file
from ..format.scope import MEMORY_SCOPES, Reader
from ..format.views import entry_view
from ..git.usage import record
from ..model import Kind, Layer, Trust
from ..trust.readgate import refusal
from .engine import RECALL_MODES, RecallResult, search, search_snapshot
from .pipeline import Filter
from .related import shown_words

if TYPE_CHECKING:
    from ..config.settings import Settings
    from ..git.gitdir import GitDir
    from ..git.gitstore import Snapshot
    from ..store.store import Store

# RECALL_MODES and MEMORY_SCOPES: the choices a face offers for ``mode`` and ``scope``.
__all__ = [
    "MEMORY_SCOPES",
    "RECALL_MODES",
    "answer",
    "document",
    "query_at",
    "query_filter",
    "settings_at",
]


def query_filter(
    min_trust: Trust | str = Trust.VERIFIED,
    *,
    kind: Kind | str | None = None,
    key: str | None = None,
    layer: Layer | str | None = None,
    reader: Reader | None = None,
    scope: Mapping[str, str] | None = None,
) -> Filter:
    """The trust filter of a query: the floor (never rejected), and kind, key, layer,
    reader and scope fields every entry must hold when given (a string is parsed as the CLI
    and the tools give it)."""
    return Filter(
        scope=dict(scope or {}),
        min_trust=Trust.floor(min_trust),
        kind=Kind.parse(kind) if isinstance(kind, str) else kind,
        key=key,
        layers=None
        if layer is None
        else frozenset({Layer.parse(layer) if isinstance(layer, str) else layer}),
        reader=reader,
    )


def answer(
    text: str,
    flt: Filter,
    limit: int,
    *,
    at: str | os.PathLike[str] | tuple[Store, Snapshot],
    usage: str | os.PathLike[str] | GitDir,
    origin: str,
    mode: str | None = None,
    salience: str | None = None,
    settings: Callable[[], Settings] | None = None,
    environ: Mapping[str, str] | None = None,
    gate: Any = None,
) -> RecallResult:
    """Rank the entries ``flt`` admits for ``text`` and note them in the usage file.

    Settings: ``mode`` and ``salience`` not given come from ``settings()`` (the layered
    settings), asked only when given -- a caller passes it when a layer above truss.toml is
    in play; otherwise the engine reads truss.toml at the commit it reads. Search: ``at`` a
    path reads the index at the branch tip without opening the store, behind the read gate's
    ``refusal``; ``at`` a store and snapshot reads at that commit behind ``gate`` (default
    ``Store.gate``; a read as of a past commit passes the tip's judgement, ``asof.Judged``).
    Usage: the returned ids are noted under ``origin`` in the usage file of ``usage``."""
    if settings is not None and (mode is None or salience is None):
        layered = settings()
        mode = mode if mode is not None else layered.recall_mode
        salience = salience if salience is not None else layered.salience
    if isinstance(at, tuple):
        store, snap = at
        result = search_snapshot(
            store, snap, text, flt, limit, gate=gate or store.gate, mode=mode, salience=salience
        )
    else:
        result = search(at, text, flt, limit, gate=refusal, mode=mode, salience=salience)
    record(usage, [h.entry.id for h in result.hits], origin, environ=environ)
    return result


def document(result: RecallResult, *, related_words: bool = False) -> dict[str, Any]:
    """The JSON answer of a query (``memory_query``'s output schema; the CLI's ``--format
    json``): the mode, the floor, the entries; ``withheld``, ``below_floor`` and
    ``conflicts`` only when there is something to say. ``related_words``: also the words
    looked for at half weight that the entries shown hold (the CLI shows them)."""
    out: dict[str, Any] = {
        "recall_mode": result.mode,
        "min_trust": result.min_trust.value,
        "entries": [entry_view(h.entry, h.score) for h in result.hits],
    }
    if result.withheld:
        out["withheld"] = result.withheld  # the history fails the audit: unverified only
    if result.below_floor:
        out["below_floor"] = result.below_floor
    if related_words and result.related_words:  # also looked for, at half weight
        out["related_words"] = shown_words(
            result.related_words, [h.entry.body for h in result.hits]
        )
    # keep-both-flagged leaves two verified entries on one key: reads must say so.
    if result.conflicts:
        out["conflicts"] = [c.to_dict() for c in result.conflicts]
    return out


def query_at(
    path: str | os.PathLike[str],
    text: str,
    *,
    min_trust: Trust | str = Trust.VERIFIED,
    kind: Kind | str | None = None,
    key: str | None = None,
    layer: Layer | str | None = None,
    limit: int = 10,
    mode: str | None = None,
    agent: str | None = None,
    project: str | None = None,
    scope: str | None = None,
    origin: str,
    environ: Mapping[str, str] | None = None,
    at: str | None = None,
) -> RecallResult:
    """``answer`` for the store at ``path`` without opening it: the hook-time query.
    ``at`` (a date or a commit): the store as it was then, judged by the read gate of the
    tip (``Store.open_read``); only such a read opens the store.

    ``agent``/``project``/``scope`` read as that agent under ``memory.scope`` (``scope``
    overrides the store's mode); with none of them, a person reads every scope. The recall
    mode, salience and memory scope not given come from the layered settings when a layer
    above truss.toml is in play (loaded once, and only then), else from truss.toml at the
    tip. A repository that holds no store raises ``StoreError``."""
    env = os.environ if environ is None else environ
    require_store(path)
    layered: Settings | None = None

    def settings() -> Settings:
        nonlocal layered
        if layered is None:
            layered = settings_at(path, env)
        return layered

    above = has_layers_above_store(env)
    reader = None
    if agent is not None or project is not None or scope is not None:
        if scope is None and above:
            scope = settings().memory_scope
        reader = Reader(scope, agent, project)  # mode None: the store's [memory] scope
    where: str | os.PathLike[str] | tuple[Store, Snapshot] = path
    gate = None
    if at is not None:
        # pygit2 and the trust root: only a read into the past opens the store.
        from ..store.asof import Judged
        from ..store.store import Store

        store = Store(path)
        past = store.open_read(Trust.floor(min_trust), at=at)
        where, gate = (store, past.snap), Judged(past.withheld)
    result = answer(
        text,
        query_filter(min_trust, kind=kind, key=key, layer=layer, reader=reader),
        limit,
        at=where,
        gate=gate,
        usage=path,
        origin=origin,
        mode=mode,
        settings=settings if above else None,
        environ=environ,
    )
    if at is not None and isinstance(where, tuple):
        commit = where[1].commit
        result = dataclasses.replace(result, at=str(commit.id) if commit is not None else None)
    return result


def settings_at(path: str | os.PathLike[str], environ: Mapping[str, str]) -> Settings:
    """truss.toml at the tip of the store at ``path`` → user config → ``[agents.$TRUSS_AGENT]``
    → ``$TRUSS_CONTRACT``, as the read tools load them, without opening the store when the
    tip reader can read its refs."""
    # tomllib and the settings layers: only when a layer above truss.toml is in play.
    from ..config.settings import load_settings
    from ..config.tipconfig import tip_config

    config = tip_config(path)
    if config is None:  # refs this reader cannot read: ask the store
        from ..store.store import Store  # pygit2: only for refs the tip reader cannot read

        raw: Mapping[str, Any] = Store(path).config().raw
    else:
        raw = config.raw
    return load_settings(raw, environ=environ, global_path=user_config_file(environ))
