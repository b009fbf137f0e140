"""Verification commands: `verify`, `recheck`."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Any

import click

from .app import Ctx, cli, handled, pass_ctx
from .output import AGENT_OPTION, CONTRACT_OPTION, FORMAT_OPTION, emit
from .progress import Progress, enabled, interruptible

# Outcomes that are a commit (counted from the branch, ``MemoryStore.decisions_since``).
_COMMITS = frozenset({"promoted", "rejected", "demoted", "reverified"})


def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _run_panel(
    store: Any, command: str, fmt: str | None, again: str
) -> Iterator[Callable[..., Any]]:
    """Progress on a terminal; ^C (and SIGTERM, which unwinds like it, so running checks are
    killed and the checkout is removed) stops at once and says what was decided -- each
    decision is its own commit and stays made -- and the command that goes on. Yields the
    ``run(func, *args, **kwargs)`` that calls the runner with the progress callbacks."""
    progress = Progress(command, enabled(fmt == "json"))
    total = {"n": 0}
    tip = store.git.tip()
    start_tip = tip.id if tip is not None else None

    def start(n: int) -> None:
        total["n"] = n
        progress.phase("verifying" if command == "verify" else "re-checking", n)

    def done(outcome: Any) -> None:
        progress.advance(**{outcome.status: 1})

    def stopped() -> str:
        # Decisions are read from the branch, not from the callbacks: a commit that landed
        # just before the ^C is counted even if its callback never ran.
        found = store.decisions_since(start_tip)
        found.update((k, v) for k, v in progress.counts.items() if k not in _COMMITS and v)
        counts = ", ".join(f"{v} {k}" for k, v in found.items() if v)
        return (
            f"interrupted: {sum(found.values())} of {total['n']} entries done"
            + (f" ({counts})" if counts else "")
            + f", each in its own signed commit; the rest are as they were. Run `{again}` "
            "to go on"
        )

    def run(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        progress.phase("finding entries")
        return func(*args, on_start=start, on_done=done, **kwargs)

    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        with interruptible(progress, stopped):
            yield run
    finally:
        signal.signal(signal.SIGTERM, previous)


@cli.command()
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option("--pending", is_flag=True, help="Every unverified entry, oldest first.")
@AGENT_OPTION
@CONTRACT_OPTION
@FORMAT_OPTION
@pass_ctx
@handled
def verify(
    obj: Ctx,
    ids: tuple[str, ...],
    pending: bool,
    agent: str | None,
    contract: str | None,
    fmt: str | None,
) -> None:
    """Run the verification panel on unverified entries.

    Each entry is judged by the checks it names (checks:, each a command truss.toml defines
    in [panel.checks], run in a private checkout, whose exit status is the vote; a name not
    defined there runs nothing and abstains) and by the reviewers configured for its kind
    ([panel.reviewers]: checks, judge commands, and model judges named from truss.toml's
    [panel.judges], which ask the model with the key in ANTHROPIC_API_KEY or OPENAI_API_KEY).
    On a quorum of PASS votes the panel key signs a verdict and the entry is promoted; on
    FAIL it is rejected — each in its own signed commit. An undecided panel (abstentions:
    a hang, a crash, a garbled judge, a provider error or refusal) or an entry without
    reviewers stays unverified and is
    reported. Sign with a key holding the panel role (--key). With --pending under
    [identity] policy = "self_amend", pending identity proposals are judged against core
    too.

    \b
    Example:
      truss-files verify --pending
      truss-files verify 5b0c8f3e --contract ci-contract.toml --format json
    """
    store = obj.store()
    settings = store.settings(agent=agent, contract=contract)
    again = "truss-files verify " + ("--pending" if pending else " ".join(ids))
    with _run_panel(store, "verify", fmt, again) as run:
        report = run(store.verify, ids, pending=pending, settings=settings)
    data = report.to_dict()
    lines = [report.text()]
    if pending:
        # Under [identity] policy = "self_amend", pending identity proposals are judged
        # against core here too (lazy verification).
        judged, note = store.judge_identity(settings)
        if judged or note:
            data["identity"] = [j.to_dict() for j in judged]
            lines.extend(j.line() for j in judged)
        if note:
            data["identity_note"] = note
            lines.append(f"note: {note}")
    emit(fmt, data, lambda _d: "\n".join(lines))


@cli.command()
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option("--all", "all_", is_flag=True, help="Every verified entry.")
@AGENT_OPTION
@CONTRACT_OPTION
@FORMAT_OPTION
@pass_ctx
@handled
def recheck(
    obj: Ctx,
    ids: tuple[str, ...],
    all_: bool,
    agent: str | None,
    contract: str | None,
    fmt: str | None,
) -> None:
    """Re-run the checks of verified entries; a failure turns the entry stale.

    Only check reviewers run (the [panel.checks] the entry names, and configured checks for
    its kind). On
    FAIL the entry is demoted to stale, and the signed FAIL verdict is recorded in the
    demote commit (trailer Truss-Verdict-Json); the entry keeps the PASS verdict that once
    verified it. A stale entry named by ID that passes again is verified again.

    \b
    Example:
      truss-files recheck --all
      truss-files recheck 5b0c8f3e
    """
    store = obj.store()
    settings = store.settings(agent=agent, contract=contract)
    again = "truss-files recheck " + ("--all" if all_ else " ".join(ids))
    with _run_panel(store, "recheck", fmt, again) as run:
        report = run(store.recheck, ids, all_verified=all_, settings=settings)
    emit(fmt, report.to_dict(), lambda _d: report.text())


__all__ = ["cli"]
