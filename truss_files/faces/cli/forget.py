"""``truss-files erase``: forget entries for good (``store.erase``; docs/forgetting.md)."""

from __future__ import annotations

import click

from .app import Ctx, cli, handled, pass_ctx
from .output import FORMAT_OPTION, emit


@cli.command()
@click.argument("entry_ids", nargs=-1)
@click.option("--member", help="Also every entry by or about this member (author or scope).")
@click.option("--reason", default="", help="Why (recorded; keep the erased text out of it).")
@click.option("--dry-run", is_flag=True, help="List every place the text lives; change nothing.")
@FORMAT_OPTION
@pass_ctx
@handled
def erase(
    obj: Ctx,
    entry_ids: tuple[str, ...],
    member: str | None,
    reason: str,
    dry_run: bool,
    fmt: str | None,
) -> None:
    """Erase entries for good (operator only); --dry-run lists every place their text lives.

    The erasure rewrites every branch and tag from the first commit holding an erased
    entry, re-signed by you, adds a signed record of who, when, which ids and why (never
    the text) in .truss/erasures/, rewrites the run ledgers that hold the text, drops
    caches and usage lines, then expires reflogs and runs git gc --prune=now. --dry-run
    lists the commits and refs a rewrite would replace, other entries that hold the text
    or link to the ids, run ledgers, attestations and caches. Run `truss-files sync` after
    it so that the remote and its clones adopt the erasure.

    \b
    Example:
      truss-files erase 5b0c8f3e --reason "GDPR request 2026-114" --dry-run
      truss-files erase 5b0c8f3e --reason "GDPR request 2026-114"
      truss-files erase --member alice --reason "left the company"
    """
    store = obj.store()
    if dry_run:
        plan = store.plan_erasure(entry_ids, reason, member=member)
        emit(fmt, plan.to_dict(), lambda _d: plan.text())
        return
    done = store.erase(entry_ids, reason, member=member)
    emit(fmt, done.to_dict(), lambda _d: done.text())
