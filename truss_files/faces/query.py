"""What ``truss-files query`` does between parsing and printing, shared by both ways in: the
click command (``cli_read.query``) and the click-free path of a plain query (``cli.py``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..settings import Settings

__all__ = ["FLOORS", "MODES", "floor_note", "layered_settings", "run_query"]

# The choices of `query --min-trust` and `--mode` (tests/test_cli_startup.py checks them
# against recall.engine.RECALL_MODES and the click command).
FLOORS = ("verified", "stale", "unverified")
MODES = ("exact", "semantic", "hybrid")


def run_query(
    store: str,
    text: str,
    *,
    kind: str | None,
    key: str | None,
    min_trust: str,
    limit: int,
    mode: str | None,
    layer: str | None = None,
    agent: str | None = None,
    project: str | None = None,
    scope: str | None = None,
) -> tuple[dict[str, Any], Callable[[Any], str]]:
    """Run the query; return the JSON document and the function that renders it as text.

    ``agent``/``project``/``scope`` read as that agent under ``memory.scope`` (``scope``
    overrides the store's mode); with none of them, a person reads every scope. The recall
    mode and memory scope not given come from the layered settings, as ``config show`` prints
    them and the read tools use them."""
    from ..model import Kind, Layer, Trust
    from ..readgate import refusal
    from ..recall.engine import search
    from ..recall.pipeline import Filter
    from ..tools.storeprobe import require_store
    from ..views import entry_text, entry_view

    require_store(store)
    floor = Trust.floor(min_trust)
    settings = layered_settings(store, os.environ)
    if settings is not None and mode is None:
        mode = settings.recall_mode
    reader = None
    if agent is not None or project is not None or scope is not None:
        from ..scope import Reader

        if scope is None and settings is not None:
            scope = settings.memory_scope
        reader = Reader(scope, agent, project)  # mode None: the store's [memory] scope
    flt = Filter(
        min_trust=floor,
        kind=Kind(kind) if kind else None,
        key=key,
        layers=frozenset({Layer(layer)}) if layer else None,
        reader=reader,
    )
    result = search(store, text, flt, limit, gate=refusal, mode=mode)
    hits = result.hits
    data: dict[str, Any] = {
        "recall_mode": result.mode,
        "min_trust": floor.value,
        "entries": [entry_view(h.entry, h.score) for h in hits],
    }
    if result.withheld:
        data["withheld"] = result.withheld  # the history fails the audit: unverified only
    if result.below_floor:
        data["below_floor"] = result.below_floor
    if result.related_words:  # also looked for, at half weight (recall/related.py)
        data["related_words"] = list(result.related_words)
    # keep-both-flagged leaves two verified entries on one key: reads must say so.
    conflicts = []
    if result.related:
        from ..panel.conflicts import find_conflicts

        conflicts = find_conflicts([h.entry for h in hits], result.related)
    if conflicts:
        data["conflicts"] = [c.to_dict() for c in conflicts]
    flags = "".join(
        f"\n\nconflict: {c.kind}/{c.key} is held by verified {', '.join(i[:12] for i in c.ids)}"
        for c in conflicts
    )

    def render(_data: Any) -> str:
        found = "\n\n".join(entry_text(h.entry, h.score) for h in hits)
        note = f"\n\nwithheld: {result.withheld}" if result.withheld else ""
        return (found or f"nothing at or above {floor.value} matches") + flags + note

    return data, render


def layered_settings(store: str, environ: Mapping[str, str]) -> Settings | None:
    """truss.toml → user config → ``[agents.$TRUSS_AGENT]`` → ``$TRUSS_CONTRACT``, as the read
    tools load them; None when no layer above truss.toml is in play (the engine then reads
    truss.toml at the tip itself, and the settings module stays off the cold path)."""
    from ..tools.storeprobe import has_layers_above_store, user_config_file

    if not has_layers_above_store(environ):
        return None
    from ..settings import load_settings
    from ..tools.tipconfig import tip_config

    config = tip_config(store)
    if config is None:  # refs this reader cannot read: ask the store
        from ..store import MemoryStore

        raw: Mapping[str, Any] = MemoryStore(store).config().raw
    else:
        raw = config.raw
    return load_settings(raw, environ=environ, global_path=user_config_file(environ))


def floor_note(data: Mapping[str, Any]) -> str | None:
    """What a text answer adds on stderr when nothing at the floor matched but entries below
    it do: how many, and the option that shows them."""
    below = data.get("below_floor")
    if not below:
        return None
    floor = data.get("min_trust", "verified")
    noun = "entry" if below == 1 else "entries"
    return (
        f"note: {below} {noun} below the {floor} floor match; see them with --min-trust unverified"
    )
