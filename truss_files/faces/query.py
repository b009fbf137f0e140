"""What ``truss-files query`` does between parsing and printing, shared by both ways in: the
click command (``cli_read.query``) and the click-free path of a plain query (``cli.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FLOORS", "MODES", "run_query"]

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
    overrides the store's mode); with none of them, a person reads every scope."""
    from ..model import Kind, Layer, Trust
    from ..recall.engine import search
    from ..recall.pipeline import Filter
    from ..scope import Reader
    from ..views import entry_text, entry_view

    floor = Trust.floor(min_trust)
    reader = None
    if agent is not None or project is not None or scope is not None:
        reader = Reader(scope, agent, project)  # mode None: the store's [memory] scope
    flt = Filter(
        min_trust=floor,
        kind=Kind(kind) if kind else None,
        key=key,
        layers=frozenset({Layer(layer)}) if layer else None,
        reader=reader,
    )
    result = search(store, text, flt, limit, mode=mode)
    hits = result.hits
    data: dict[str, Any] = {
        "recall_mode": result.mode,
        "min_trust": floor.value,
        "entries": [entry_view(h.entry, h.score) for h in hits],
    }
    if result.withheld:
        data["withheld"] = result.withheld  # the history fails the audit: unverified only
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
