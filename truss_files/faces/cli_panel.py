"""Verification commands: `verify`, `recheck`, `config show`."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from typing import Any

import click

from .cli import Ctx, cli, handled, pass_ctx
from .output import AGENT_OPTION, CONTRACT_OPTION, FORMAT_OPTION, emit


class _Progress:
    """A progress bar on stderr when stderr is a terminal; nothing otherwise."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: Any = None

    def start(self, total: int) -> None:
        if total and sys.stderr.isatty():
            self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr)
            self.bar.__enter__()

    def done(self, _outcome: Any) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _run_panel(label: str) -> Iterator[_Progress]:
    """SIGTERM unwinds like ^C, so running checks are killed and the checkout is removed;
    commits already made stay made (each is atomic)."""
    progress = _Progress(label)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield progress
    finally:
        progress.close()
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

    Each entry is judged by its own checks: (commands run in a private checkout, whose exit
    status is the vote) and by the reviewers configured for its kind ([panel.reviewers]).
    On a quorum of PASS votes the panel key signs a verdict and the entry is promoted; on
    FAIL it is rejected — each in its own signed commit. An undecided panel (abstentions:
    a hang, a crash, a garbled judge) or an entry without reviewers stays unverified and is
    reported. Sign with a key holding the panel role (--key). With --pending under
    [identity] policy = "self_amend", pending identity proposals are judged against core
    too.

    \b
    Example:
      truss-files verify --pending
      truss-files verify 5b0c8f3e --contract ci-contract.toml --format json
    """
    from ..panel.runner import verify as run_verify
    from ..settings import settings_for

    store = obj.store()
    settings = settings_for(store, agent=agent, contract=contract)
    with _run_panel("verifying") as progress:
        report = run_verify(
            store,
            ids,
            pending=pending,
            settings=settings,
            on_start=progress.start,
            on_done=progress.done,
        )
    data = report.to_dict()
    lines = [report.text()]
    if pending:
        from ..context.judge import judge_pending

        # Under [identity] policy = "self_amend", pending identity proposals are judged
        # against core here too (lazy verification).
        judged, note = judge_pending(store, settings)
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

    Only check reviewers run (the entry's checks: and configured checks for its kind). On
    FAIL the entry is demoted to stale, and the signed FAIL verdict is recorded in the
    demote commit (trailer Truss-Verdict-Json); the entry keeps the PASS verdict that once
    verified it. A stale entry named by ID that passes again is verified again.

    \b
    Example:
      truss-files recheck --all
      truss-files recheck 5b0c8f3e
    """
    from ..panel.runner import recheck as run_recheck
    from ..settings import settings_for

    store = obj.store()
    settings = settings_for(store, agent=agent, contract=contract)
    with _run_panel("re-checking") as progress:
        report = run_recheck(
            store,
            ids,
            all_verified=all_,
            settings=settings,
            on_start=progress.start,
            on_done=progress.done,
        )
    emit(fmt, report.to_dict(), lambda _d: report.text())


@cli.group("config")
def config_group() -> None:
    """Layered settings: truss.toml → user config → [agents.NAME] → --contract FILE.

    \b
    Example:
      truss-files config show --agent build-bot
    """


@config_group.command("show")
@AGENT_OPTION
@CONTRACT_OPTION
@FORMAT_OPTION
@pass_ctx
@handled
def config_show(obj: Ctx, agent: str | None, contract: str | None, fmt: str | None) -> None:
    """Print the effective settings and the file each value came from.

    Layers, the later overriding the earlier: built-in defaults, the store's truss.toml,
    <user config dir>/config.toml, truss.toml's [agents.NAME] table, a contract file.
    Outside a store only the user config file and the contract apply.

    \b
    Example:
      truss-files config show --agent build-bot --contract contract.toml
    """
    from ..errors import StoreError
    from ..settings import load_settings

    raw = None
    # Outside a repository only the global and contract layers apply.
    with contextlib.suppress(StoreError):
        raw = obj.store().config().raw
    settings = load_settings(raw, agent=agent, contract=contract)
    emit(fmt, settings.to_dict(), lambda _d: settings.to_text())


__all__ = ["cli"]
