"""Hosts: ``setup`` (a host's MCP entry and hooks), ``learn`` (notes from a transcript) and
``doctor`` (is everything in place). The host hooks themselves run under ``hook``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from ...config.settings import settings_for
from ...errors import UsageError
from ...runs.links import key_principal, link_run
from ..host import doctor as _doctor
from ..host.learn import learn as _learn
from ..host.learn import learn_model, run_of
from ..host.setup import HOSTS, SCOPES, SERVER_NAME, plan
from ..host.state import host_dir
from ..host.transcript import FORMATS, read_transcript
from .app import Ctx, cli, handled, pass_ctx
from .output import FORMAT_OPTION, emit


@cli.command("setup")
@click.argument("host", type=click.Choice(HOSTS))
@click.option(
    "--project",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="The project folder the host works in (claude-code).",
)
@click.option(
    "--scope",
    type=click.Choice(SCOPES),
    default="project",
    show_default=True,
    help="claude-code: the project's .mcp.json and .claude/settings.json, or your own "
    "~/.claude.json and ~/.claude/settings.json.",
)
@click.option("--name", default=SERVER_NAME, show_default=True, help="The MCP server's name.")
@click.option(
    "--config",
    "config",
    type=click.Path(dir_okay=False),
    help="Write the server entry to this JSON file instead of the host's usual one.",
)
@click.option("--print", "print_only", is_flag=True, help="Print what would change; write nothing.")
@click.option("--remove", is_flag=True, help="Take out exactly what setup puts in.")
@FORMAT_OPTION
@pass_ctx
@handled
def setup_cmd(
    obj: Ctx,
    host: str,
    project: str,
    scope: str,
    name: str,
    config: str | None,
    print_only: bool,
    remove: bool,
    fmt: str | None,
) -> None:
    """Set a host up to use this store: its MCP server entry and, for Claude Code, hooks.

    Every command written is an absolute path (a host started with its own PATH finds it);
    the server names the store by absolute path and turns the write tool on. Existing
    servers, hooks and settings are kept; running it again changes nothing. mcp-json prints
    the entry for any other MCP client.

    \b
    Examples:
      truss-files setup claude-code                # in the project folder
      truss-files setup claude-code --print        # show what would change
      truss-files setup claude-desktop
      truss-files setup mcp-json
      truss-files setup claude-code --remove
    """
    store = obj.store()  # the store must exist: a host pointed at nothing fails later
    where = Path(store.git.workdir or store.git.git_dir)
    done = plan(
        host,
        store=where,
        project=Path(project),
        remove=remove,
        scope=scope,
        name=name,
        config=Path(config) if config else None,
    )
    if not print_only:
        done.apply()
    data = done.to_dict()
    data["written"] = not print_only and done.printed is None and done.changed

    def text(_d: object) -> str:
        if done.printed is not None:
            return json.dumps(done.printed, indent=2)
        lines = [e.line() for e in done.edits]
        if print_only:
            lines.append("(--print: nothing written)")
        elif not done.changed:
            lines.append("nothing to change")
        if not remove and host == "claude-code" and done.changed and not print_only:
            lines.append("restart Claude Code in this folder; `truss-files doctor` checks it all")
        return "\n".join(lines)

    emit(fmt, data, text)


@cli.command("learn")
@click.option(
    "--transcript",
    "transcript_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="The transcript file.",
)
@click.option(
    "--transcript-format",
    "tformat",
    type=click.Choice(FORMATS),
    default="claude-code",
    show_default=True,
    help="claude-code: a session's JSON lines; messages: a JSON list of {role, content}.",
)
@click.option("--run", "run_id", metavar="RUN", help="The run the notes are produced by.")
@click.option(
    "--agent",
    metavar="RUN",
    help="The project's agent run (setup prints it as agent_run): the notes are this agent's "
    "own, shown to its next session while they await review.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "text", *FORMATS]),
    default=None,
    help="Output format (json, text); claude-code or messages name the transcript's format.",
)
@pass_ctx
@handled
def learn_cmd(
    obj: Ctx,
    transcript_path: str,
    tformat: str,
    run_id: str | None,
    agent: str | None,
    fmt: str | None,
) -> None:
    """Learn from a transcript: a model's lessons, decisions and facts, as unverified notes.

    The [learn] model reads what the run said and did (never what a memory read returned to
    it, nor <private> text) and proposes notes; each is written as an unverified entry whose
    produced_by names the message it came from (run:RUN/SEQ), and the panel decides as for
    any write. Learning the same transcript twice stores nothing new.

    \b
    Examples:
      truss-files learn --transcript ~/.claude/projects/-home-me-app/SESSION.jsonl
      truss-files learn --transcript run.json --format messages
    """
    if fmt in FORMATS:  # `--format claude-code|messages` names the transcript, as documented
        tformat, fmt = fmt, None
    store = obj.store()
    settings = settings_for(store)
    transcript = read_transcript(Path(transcript_path), tformat)
    if not transcript.messages:
        raise UsageError(
            f"{transcript_path} holds no user or assistant messages in the {tformat} format; "
            "check --format"
        )
    run = run_of(transcript, run_id)
    if agent:
        learn_model(settings)  # unconfigured: say so before anything is recorded
        link_run(store, run, agent, key_principal(store))  # refused if the run has another
    done = _learn(
        store,
        transcript,
        settings=settings,
        run=run,
        state=host_dir(store.git.git_dir, store.environ),
    )
    emit(fmt, done.to_dict(), lambda _d: done.text())


@cli.command("doctor")
@click.option(
    "--project",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="The project folder whose host configs to check.",
)
@FORMAT_OPTION
@pass_ctx
@handled
def doctor_cmd(obj: Ctx, project: str, fmt: str | None) -> None:
    """Check the install, the store, keys and roles, host configs and the hooks' last runs.

    Each problem comes with what to do; exit 1 when something is wrong.

    \b
    Example:
      truss-files doctor
    """

    def open_store(_path: str) -> object:
        return obj.store()

    report = _doctor.diagnose(obj.store_path, Path(project), os.environ, open_store=open_store)
    emit(fmt, report.to_dict(), lambda _d: report.text())
    if not report.ok:
        sys.exit(1)
