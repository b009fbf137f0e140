"""A belief's life from the command line: salience update, evict, consolidate (``belief``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from .app import Ctx, cli, handled, pass_ctx
from .output import FORMAT_OPTION, emit

if TYPE_CHECKING:
    from ...store.belief import Done

DRY_RUN = click.option(
    "--dry-run", is_flag=True, help="List what would change; make no commit, change nothing."
)


def _show(fmt: str | None, done: Done, verb: str) -> None:
    def text(_data: Any) -> str:
        head = f"{'would ' if done.dry_run else ''}{verb} {len(done.changes)} entries" + (
            f" in commit {done.commit[:12]}" if done.commit else ""
        )
        lines = [
            f"{c.id[:12]} {c.kind}/{c.key}: {c.before} -> {c.after}"
            + (f" ({c.why})" if c.why else "")
            for c in done.changes
        ]
        return "\n".join([head, *lines])

    emit(fmt, done.to_dict(), text)


@cli.group()
def salience() -> None:
    """Fold use, age and verification into each entry's salience.

    Reads (CLI query, the memory tools, MCP, HTTP, MemoryStore.query) note in .git/truss/usage
    which entries they returned; `salience update` turns that into salience in one signed
    commit. With [policy] salience = "prior", queries rank by it.

    \b
    Example:
      truss-files salience update --dry-run
    """


@salience.command("update")
@DRY_RUN
@FORMAT_OPTION
@pass_ctx
@handled
def salience_update_cmd(obj: Ctx, dry_run: bool, fmt: str | None) -> None:
    """Recompute every live entry's salience from use, age and trust (one signed commit).

    salience = 0.45 * (1 - e^(-uses/4)) + 0.25 * e^(-days since last use or write / 30)
    + 0.30 * (1 verified, 0.5 unverified, 0.2 stale). Needs a panel or operator key.

    \b
    Examples:
      truss-files salience update --dry-run
      truss-files salience update
    """
    _show(fmt, obj.store().salience_update(dry_run=dry_run), "set salience of")


@cli.command("evict")
@DRY_RUN
@click.option("--agent", help="Read settings as this agent ([agents.NAME] layer).")
@click.option("--contract", type=click.Path(dir_okay=False), help="A contract settings file.")
@FORMAT_OPTION
@pass_ctx
@handled
def evict_cmd(
    obj: Ctx, dry_run: bool, agent: str | None, contract: str | None, fmt: str | None
) -> None:
    """Move verified entries over their kind's [policy.eviction] budget to stale.

    Budgets per kind (or `default`): max_entries, max_age_days, min_salience. One signed
    commit (Truss-Op: evict, reason evicted); no file is deleted, and `truss-files revert
    COMMIT` restores every entry it evicted.

    \b
    Examples:
      truss-files evict --dry-run
      truss-files evict
    """
    store = obj.store()
    settings = store.settings(agent=agent, contract=contract)
    _show(fmt, store.evict(dry_run=dry_run, settings=settings), "evict")


@cli.command("consolidate")
@DRY_RUN
@FORMAT_OPTION
@pass_ctx
@handled
def consolidate_cmd(obj: Ctx, dry_run: bool, fmt: str | None) -> None:
    """Merge the notes memory.train flagged consolidating: one unverified note per group.

    Each merged note names every note it merges in its sources (entry:<id>). Once the panel
    verifies it (`truss-files verify ID`), the verified notes it merged turn stale,
    superseded by it.

    \b
    Examples:
      truss-files consolidate --dry-run
      truss-files consolidate
    """
    _show(fmt, obj.store().consolidate(dry_run=dry_run), "write merged notes for")
