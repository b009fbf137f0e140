"""``truss-files query``: rank entries at or above a trust floor, from the recall index.

The command every agent hook runs cold, so this module is the whole of what it loads beside
the group: the recall engine, the views, and nothing of the store's write side. The settings
layers and the store itself load only when a query needs them (a user config file, refs the
tip reader cannot read); ``tests/faces/cli/test_cli_startup.py`` holds that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import click

from ...format.views import entry_text
from ...model import Trust
from ...recall.query import MEMORY_SCOPES, RECALL_MODES, document, query_at
from .app import KINDS, LAYERS, Ctx, cli, handled, pass_ctx
from .output import FORMAT_OPTION, emit, want_json

# The floors a query may ask for, highest first (rejected is never one).
FLOORS = tuple(t.value for t in sorted(Trust, key=lambda t: -t.rank) if t is not Trust.REJECTED)


@cli.command()
@click.argument("text")
@click.option("--kind", type=click.Choice(KINDS))
@click.option("--key", "key_")
@click.option("--min-trust", type=click.Choice(FLOORS), default="verified", show_default=True)
@click.option("--limit", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option(
    "--mode",
    type=click.Choice(RECALL_MODES),
    help="exact: BM25; semantic: embeddings; hybrid: both, fused by rank "
    "(default: [recall] mode of the layered settings, as `config show` prints it).",
)
@click.option("--layer", type=click.Choice(LAYERS), help="Only entries of this layer.")
@click.option("--agent", help="Read as this agent under [memory] scope (default: every scope).")
@click.option("--project", help="Read as an agent of this project under [memory] scope.")
@click.option(
    "--scope",
    type=click.Choice(MEMORY_SCOPES),
    help="The memory scope to read under (default: [memory] scope in truss.toml).",
)
@click.option(
    "--at",
    metavar="DATE|COMMIT",
    help="Answer from the store as it was then: its entries, trust labels and truss.toml "
    "(a date: the last commit at or before it, e.g. 2026-11-01).",
)
@FORMAT_OPTION
@pass_ctx
@handled
def query(
    obj: Ctx,
    text: str,
    kind: str | None,
    key_: str | None,
    min_trust: str,
    limit: int,
    mode: str | None,
    layer: str | None,
    agent: str | None,
    project: str | None,
    scope: str | None,
    at: str | None,
    fmt: str | None,
) -> None:
    """Rank entries at or above a trust floor (BM25 statistics from those entries only).

    Runs on the recall index cached under .git/truss/ (updated from the tree diff after
    every write). semantic and hybrid need the semantic extra (`pip install '.[semantic]'` in a
    checkout).

    \b
    Example:
      truss-files query "borrow checker await" --kind lesson
      truss-files query "why are builds slow" --mode hybrid
      truss-files query "release steps" --agent build-bot   # what build-bot may read
      truss-files query "deploy day" --at 2026-11-01        # what we believed then
    """
    if not text.strip():  # as memory_query refuses it: an empty answer would read as "none"
        raise click.UsageError('give words to look for, e.g. truss-files query "flaky ci"')
    data, text_of = run_query(
        obj.store_path or ".",
        text,
        kind=kind,
        key=key_,
        min_trust=min_trust,
        limit=limit,
        mode=mode,
        layer=layer,
        agent=agent,
        project=project,
        scope=scope,
        at=at,
    )
    emit(fmt, data, text_of)
    note = None if want_json(fmt) else floor_note(data)
    if note:
        click.echo(note, err=True)


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
    at: str | None = None,
) -> tuple[dict[str, Any], Callable[[Any], str]]:
    """Run the query; return the JSON document and the function that renders it as text.

    ``agent``/``project``/``scope`` read as that agent under ``memory.scope`` (``scope``
    overrides the store's mode); with none of them, a person reads every scope. The recall
    mode and memory scope not given come from the layered settings, as ``config show`` prints
    them and the read tools use them (``recall.query.query_at``)."""
    result = query_at(
        store,
        text,
        min_trust=min_trust,
        kind=kind,
        key=key,
        layer=layer,
        limit=limit,
        mode=mode,
        agent=agent,
        project=project,
        scope=scope,
        origin="cli",
        at=at,
    )
    hits = result.hits
    data = document(result, related_words=True)
    if result.at is not None:
        data["at"] = result.at
    flags = "".join(
        f"\n\nconflict: {c.kind}/{c.key} is held by verified {', '.join(i[:12] for i in c.ids)}"
        for c in result.conflicts
    )

    def render(_data: Any) -> str:
        found = "\n\n".join(entry_text(h.entry, h.score) for h in hits)
        note = f"\n\nwithheld: {result.withheld}" if result.withheld else ""
        when = f"as of commit {result.at[:12]}\n\n" if result.at else ""
        return (
            when + (found or f"nothing at or above {result.min_trust.value} matches") + flags + note
        )

    return data, render


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
