"""``truss-files erase``: forget entries for good (``store.erase``; docs/forgetting.md)."""

from __future__ import annotations

import click

from ...errors import UsageError
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

    The erasure rewrites history so that no commit, ledger, cache or object holds the
    text, and records who, when, which ids and why (never the text), signed. Today only
    --dry-run is built: it lists the commits and refs a rewrite would replace, other
    entries that hold the text or link to the ids, run ledgers, attestations and caches.

    \b
    Example:
      truss-files erase 5b0c8f3e --reason "GDPR request 2026-114" --dry-run
      truss-files erase --member alice --reason "left the company" --dry-run
    """
    plan = obj.store().plan_erasure(entry_ids, reason, member=member)
    if not dry_run:
        raise UsageError(
            "erase can plan an erasure but not yet rewrite history (docs/forgetting.md says "
            "what is missing); nothing was changed. Run it with --dry-run to list every place "
            "the text lives"
        )
    emit(fmt, plan.to_dict(), lambda _d: plan.text())
