"""``truss-files export``: the store's entries written out (``store.export``)."""

from __future__ import annotations

import sys
from typing import TextIO

import click

from ...errors import UsageError
from ...model import Trust
from ...store.export import (
    EXPORT_FORMATS,
    Exported,
    entries_to_export,
    write_create_commands,
    write_folder,
    write_jsonl,
    write_markdown,
)
from .app import Ctx, cli, handled, pass_ctx
from .query import FLOORS


@cli.command()
@click.option(
    "--format",
    "export_format",
    type=click.Choice(EXPORT_FORMATS),
    default="jsonl",
    show_default=True,
    help="jsonl: one entry a line, which `import` reads back with the same ids; markdown: a "
    "page for people; anthropic-memories: the memory tool's /memories files (with -o a "
    "folder, else its create commands as JSON lines).",
)
@click.option("--min-trust", type=click.Choice(FLOORS), default="verified", show_default=True)
@click.option(
    "--at",
    metavar="DATE|COMMIT",
    help="The store as it was then (a date: the last commit at or before it).",
)
@click.option(
    "-o",
    "--out",
    type=click.Path(),
    help="Write here instead of stdout (a folder for anthropic-memories).",
)
@pass_ctx
@handled
def export(obj: Ctx, export_format: str, min_trust: str, at: str | None, out: str | None) -> None:
    """Write the store's entries out: JSON lines that import back, markdown, /memories files.

    Reads through the read gate like every read: entries at or above --min-trust (never
    rejected ones), nothing above unverified from a history the audit rejects. Imported
    again, every entry lands unverified.

    \b
    Example:
      truss-files export --min-trust unverified > memory.jsonl
      truss-files export --format markdown -o memory.md
      truss-files export --format anthropic-memories -o ./memories
    """
    floor = Trust.floor(min_trust)
    exported = entries_to_export(obj.store(), floor, at=at)
    if exported.withheld:
        click.echo(f"note: {exported.withheld}", err=True)
    if export_format == "anthropic-memories" and out is not None:
        count = write_folder(exported.entries, out)
    elif out is None:
        count = _write(export_format, exported, sys.stdout, floor)
    else:
        try:
            with open(out, "w", encoding="utf-8", newline="") as handle:
                count = _write(export_format, exported, handle, floor)
        except OSError as exc:
            raise UsageError(f"{out}: cannot write it ({exc.strerror})") from exc
    if out is not None:
        click.echo(f"exported {count} entries to {out}", err=True)


def _write(fmt: str, exported: Exported, handle: TextIO, floor: Trust) -> int:
    if fmt == "jsonl":
        return write_jsonl(exported.entries, handle)
    if fmt == "markdown":
        return write_markdown(exported, handle, floor=floor)
    return write_create_commands(exported.entries, handle)
