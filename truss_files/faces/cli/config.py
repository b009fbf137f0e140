"""``truss-files config``: the layered settings and where each value came from."""

from __future__ import annotations

import click

from ...facade import effective_settings
from .app import Ctx, cli, handled, pass_ctx
from .output import AGENT_OPTION, CONTRACT_OPTION, FORMAT_OPTION, emit


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
@click.option(
    "--provider",
    type=click.Choice(["anthropic", "openai"]),
    help="Name the [context.instruction] entry that applies for this provider.",
)
@click.option("--model", metavar="MODEL", help="... and for this model (its patterns).")
@FORMAT_OPTION
@pass_ctx
@handled
def config_show(
    obj: Ctx,
    agent: str | None,
    contract: str | None,
    provider: str | None,
    model: str | None,
    fmt: str | None,
) -> None:
    """Print the effective settings and the file each value came from.

    Layers, the later overriding the earlier: built-in defaults, the store's truss.toml,
    <user config dir>/config.toml, truss.toml's [agents.NAME] table, a contract file.
    Outside a store only the user config file and the contract apply.

    \b
    Example:
      truss-files config show --agent build-bot --contract contract.toml
      truss-files config show --provider anthropic --model claude-sonnet-4-5
    """
    settings, said = effective_settings(
        obj.store_or_none(), agent=agent, contract=contract, provider=provider, model=model
    )
    data = settings.to_dict()
    data["instruction"] = said
    line = f"instruction in force: {said['applies']} (# {said['source']})"
    emit(fmt, data, lambda _d: settings.to_text() + "\n" + line)


__all__ = ["cli"]
