"""Commands that hand a run its context: ``context`` (and ``context repin``) and ``delta``.

Every output is JSON (``--format json|anthropic|openai`` picks the shapes inside); so is every
error: ``{"error": {"code", "message"}}`` on stdout, exit 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ...context.assemble import repin
from ...errors import UsageError
from ...runs.runcontext import RunContext, load_run_context
from .app import Ctx, cli, handled, pass_ctx
from .switches import gates, memory_switches

F = TypeVar("F", bound=Callable[..., Any])

# A harness injects this output as it is, so there is one shape; the option is there so that
# every command takes --format, and it says so.
JSON_ONLY_FORMAT = click.option(
    "--format",
    "fmt",
    type=click.Choice(["json"]),
    default="json",
    show_default=True,
    help="Always JSON: a harness injects this output as it is.",
)


def _json_errors(func: F) -> F:
    """As ``cli.handled``, but a library error is always the JSON error object."""
    return handled(func, error_format="json")


def _print(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _who(
    agent: str | None, run_context: str | None
) -> tuple[str | None, str | None, RunContext | None]:
    """The run's agent and project (--agent, else the run context: file or environment),
    and the run context itself."""
    found = load_run_context(run_context)
    project = found.project if found is not None else None
    if agent is None and found is not None:
        agent = found.agent
    return agent, project, found


@cli.group(invoke_without_command=True)
@click.option("--run", "run_id", metavar="RUN", help="The run whose prefix to print.")
@click.option(
    "--parent",
    "parent",
    metavar="RUN",
    help="Start the run as a child of this run: they share their own notes.",
)
@click.option("--principal", metavar="P", help="Whom the run serves: principals/<P>.md is L1.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "anthropic", "openai"]),
    default="json",
    show_default=True,
    help="json: every layer named, with token estimates; anthropic / openai: API shapes.",
)
@click.option(
    "--model",
    metavar="MODEL",
    help="The model the prefix is for: picks [context.instruction]'s most specific entry.",
)
@click.option("--agent", envvar="TRUSS_AGENT", help="The agent the run reads as (memory.scope).")
@click.option(
    "--run-context",
    "run_context",
    metavar="FILE",
    help="JSON file with the run's agent and project (or TRUSS_RUN_CONTEXT).",
)
@click.option(
    "--purpose",
    metavar="TEXT",
    help="What the run is for: asked of memory.ask at its start ([enterprise] consult_at_start).",
)
@memory_switches
@click.pass_context
@_json_errors
def context(
    click_ctx: click.Context,
    run_id: str | None,
    parent: str | None,
    principal: str | None,
    fmt: str,
    model: str | None,
    agent: str | None,
    run_context: str | None,
    purpose: str | None,
    memory_tools: bool,
    memory_write: bool,
) -> None:
    """Print a run's prefix in cache order: tools, system (L0, L1), messages (L3, L4).

    The first `context` for a run starts it: tools and system come from that commit for the
    rest of the run (an identity amendment takes effect at the next run). Cache breakpoints
    sit after the tools and after the system block. Prints a cursor for `delta --since`.

    \b
    Examples:
      truss-files context --run R-7f3a --principal alice --format anthropic
      truss-files context --run R-7f3a --format anthropic --model claude-sonnet-4-5
      truss-files context --run R-7f3a-1 --parent R-7f3a
      truss-files context repin --run R-7f3a --turn 20
      truss-files context compact --run R-7f3a --summary summary.md
    """
    if click_ctx.invoked_subcommand is not None:
        return
    if run_id is None:
        raise click.UsageError("give --run RUN (or a subcommand: repin, compact)")
    obj: Ctx = click_ctx.find_object(Ctx)  # type: ignore[assignment]
    agent, project, found = _who(agent, run_context)
    prefix = obj.store().context(
        run_id,
        principal=principal,
        agent=agent,
        project=project,
        gates=gates(memory_tools, memory_write),
        parent=parent,
        fmt=fmt,
        model=model,
        run_context=found,
        purpose=purpose,
    )
    _print(prefix.render(fmt))


@context.command("repin")
@click.option("--run", "run_id", required=True, metavar="RUN", help="A started run.")
@click.option("--turn", required=True, type=click.IntRange(0), help="The run's turn number.")
@JSON_ONLY_FORMAT
@pass_ctx
@_json_errors
def context_repin(obj: Ctx, run_id: str, turn: int, fmt: str) -> None:
    """Say whether to re-inject the goal ledger at turn T ([context] repin_every), with it.

    \b
    Example:
      truss-files context repin --run R-7f3a --turn 10
    """
    _print(repin(obj.store(), run_id, turn))


@context.command("compact")
@click.option("--run", "run_id", required=True, metavar="RUN", help="A started run.")
@click.option(
    "--summary",
    "source",
    required=True,
    metavar="FILE|-",
    help="The summary the harness wrote (UTF-8 text; - reads stdin).",
)
@JSON_ONLY_FORMAT
@pass_ctx
@_json_errors
def context_compact(obj: Ctx, run_id: str, source: str, fmt: str) -> None:
    """Record a summary of a run's notes; its L4 then shows the summary first, without them.

    Writes one context_summary entry for the run (unverified, the run's own); the notes it
    replaces in the run's L4 tail stay in the store. Prints {"id", "kind", "key", "trust",
    "replaces"}.

    \b
    Example:
      echo "Tried A and B; B works; next: C." | truss-files context compact --run R-7f3a --summary -
    """
    if source == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(source).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(
                f"cannot read {source}: {exc}; give a UTF-8 file or - for stdin"
            ) from exc
    entry = obj.store().compact(run_id, text)
    _print(
        {
            "id": entry.id,
            "kind": entry.kind.value,
            "key": entry.key,
            "trust": entry.trust.value,
            "replaces": list(entry.provenance.sources),
        }
    )


@cli.command()
@click.option("--since", "cursor", required=True, metavar="CURSOR", help="A printed cursor.")
@click.option("--agent", envvar="TRUSS_AGENT", help="Only what this agent may read.")
@JSON_ONLY_FORMAT
@pass_ctx
@_json_errors
def delta(obj: Ctx, cursor: str, agent: str | None, fmt: str) -> None:
    """What changed in verified memory since CURSOR: newly verified, stale, superseded or
    rejected entries, with a new cursor. Inject this on resume, not the store.

    \b
    Example:
      truss-files delta --since "$CURSOR"
    """
    reader = None
    if agent is not None:
        reader = obj.store().reader_for(agent)
    _print(obj.store().delta_since(cursor, reader=reader).to_dict())
