"""Agent tool commands: `tool`, `tools schema`, `runs list|show`, `mcp`.

``tool`` is for harnesses, not people: stdin holds one JSON input, stdout gets exactly one
JSON object (exit 0 on success, 1 on a tool error, 2 on bad usage, 3 on a bug). The tool
registry and dispatcher load with this module; the store (pygit2) opens only when a call needs
it, and the MCP face only for ``mcp``.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from ...errors import StoreError, TrussError
from ...git.gitdamage import damage_at
from ...runs.runcontext import load_run_context
from ...tools.blocks import parse_tool_use, tool_result
from ...tools.dispatch import ToolSession
from ...tools.registry import Serving, lookup
from ...tools.schema import check_json, export
from .app import Ctx, cli, handled, pass_ctx
from .output import FORMAT_OPTION, emit
from .switches import gates, memory_switches

if TYPE_CHECKING:
    from ...tools.dispatch import ToolSession

F = TypeVar("F", bound=Callable[..., Any])


def _tool_switches(func: F) -> F:
    """--memory-tools / --memory-write and --store: the same on `tool`, `tools schema`, `mcp`."""
    return click.option(
        "--store",
        "store_path",
        metavar="PATH",
        help="The store (same as the global --store, accepted here too).",
    )(memory_switches(func))


def _run_options(func: F) -> F:
    func = click.option(
        "--run-context",
        "run_context",
        metavar="FILE",
        help="JSON file with the run's task/member/role/team/enterprise (or TRUSS_RUN_CONTEXT).",
    )(func)
    func = click.option(
        "--durable", is_flag=True, help="Record every call as a signed commit on the run's ledger."
    )(func)
    func = click.option(
        "--parent",
        "parent",
        metavar="RUN_ID",
        help="This run is a child of that run (recorded at its first call): they share their "
        "own notes.",
    )(func)
    return click.option(
        "--run", "run_id", metavar="RUN_ID", help="The agent run this call belongs to."
    )(func)


def _session(
    obj: Ctx,
    store_path: str | None,
    *,
    memory_tools: bool,
    memory_write: bool,
    run_id: str | None = None,
    durable: bool = False,
    replay: bool = False,
    run_context: str | None = None,
    parent: str | None = None,
) -> ToolSession:
    if store_path:
        obj.store_path = store_path
    # The store opens only when a call needs it: an indexed read never imports pygit2.
    return ToolSession(
        obj.store,
        path=obj.store_path or ".",
        flags=gates(memory_tools, memory_write),
        run_id=run_id,
        durable=durable,
        replay=replay,
        context=load_run_context(run_context),
        parent=parent,
    )


# More than any tool input needs (the largest field, a memory file's text, is far smaller);
# read no further, so a runaway pipe cannot fill memory.
MAX_STDIN = 8 * 1024 * 1024


def _out(data: Any, code: int, fmt: str | None = None) -> NoReturn:
    # text: the same object, indented for a person; never a different shape, so a script that
    # passes --format text still reads one JSON object.
    text = json.dumps(data, ensure_ascii=False, indent=2 if fmt == "text" else None)
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:  # an unpaired surrogate got into a message: escape it
        raw = json.dumps(data, indent=2 if fmt == "text" else None).encode("ascii")
    # Bytes, so the locale's encoding of stdout can neither refuse nor change a character.
    click.echo(raw)
    sys.exit(code)


def _usage(message: str) -> NoReturn:
    """Bad usage of `tool` itself (its options, its stdin): exit 2, one JSON object."""
    _out({"error": {"code": "invalid_input", "message": message}}, 2)


class _TooLarge(ValueError):
    pass


def _parse_int(text: str) -> int:
    # int() of thousands of digits is slow and Python refuses past 4,300; no tool takes more
    # than a few, and check_json bounds the value itself.
    if len(text) > 20:
        raise _TooLarge(f"a number in stdin has {len(text):,} digits; no tool takes that")
    return int(text)


def _parse_constant(text: str) -> Any:
    raise _TooLarge(f"stdin holds {text}, which is not a JSON number; send finite numbers")


def _read_stdin() -> Any:
    """The JSON value on stdin, or a usage error saying exactly what is wrong with it."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is not None:
        raw = stream.read(MAX_STDIN + 1)
    else:  # a text stream without bytes beneath (or none at all: stdin closed)
        raw = sys.stdin.read().encode("utf-8", "surrogatepass") if sys.stdin else b""
    if len(raw) > MAX_STDIN:
        _usage(f"stdin holds more than {MAX_STDIN:,} bytes; a tool input is one small object")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        _usage(
            f"stdin is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); send the "
            "tool's input as UTF-8 JSON"
        )
    try:
        return json.loads(text or "null", parse_int=_parse_int, parse_constant=_parse_constant)
    except _TooLarge as exc:
        _usage(str(exc))
    except RecursionError:
        _usage("stdin is nested too deeply to read; no tool takes nested input like that")
    except json.JSONDecodeError as exc:
        _usage(f"stdin is not JSON ({exc}); pipe the tool's input object")


class _JsonCommand(click.Command):
    """A command whose own usage errors (``tool -1``, an unknown option, an extra argument)
    are one JSON object on stdout, exit 2, like every other answer of ``tool``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            _usage(f"{exc.format_message()} (see: truss-files tool --help)")


@cli.command("tool", cls=_JsonCommand)
@click.argument("name", required=False)
@_run_options
@click.option("--replay", is_flag=True, help="Answer from the run's signed memos only.")
@_tool_switches
@click.option("--block", is_flag=True, help="stdin: a tool_use block; stdout: a tool_result.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "text"]),
    default="json",
    show_default=True,
    help="json: one object on one line, even on a terminal (a harness reads it); text: the "
    "same object indented, for a person.",
)
@pass_ctx
def tool_cmd(
    obj: Ctx,
    name: str | None,
    run_id: str | None,
    parent: str | None,
    durable: bool,
    run_context: str | None,
    replay: bool,
    store_path: str | None,
    memory_tools: bool,
    memory_write: bool,
    block: bool,
    fmt: str,
) -> None:
    """Call one agent tool: its JSON input on stdin, one JSON object on stdout.

    Exit 0 with the result; 1 with {"error": {"code", "message"}} when the tool refuses
    (the message is for the model to read); 2 on bad usage. With --block, stdin is an
    Anthropic tool_use block and stdout the matching tool_result block (exit 1 when
    is_error). With --run RUN_ID --durable every call is a signed commit on
    refs/truss/runs/RUN_ID, and a repeated read returns its signed memo (revalidate: true
    reads again); --replay answers every call from the ledger.

    \b
    Examples:
      echo '{"query": "flaky ci"}' | truss-files tool memory_query
      echo '{"command": "view", "path": "/memories"}' | truss-files tool memory --memory-write
      truss-files tool --block --run R-1 --durable --memory-write < tool_use.json
      echo '{"query": "flaky ci"}' | truss-files tool memory_query --run R-1a --parent R-1
    """
    if (durable or replay) and not run_id:
        _usage("--durable and --replay need --run RUN_ID")
    data = _read_stdin()
    use = None
    if block:
        try:
            check_json(data)  # the block's own fields (its id is echoed back) as well
            use = parse_tool_use(data)
        except TrussError as exc:
            _usage(exc.message)
        if name and lookup(name) is not lookup(use.name):
            _usage(f"the block calls {use.name}, not {name}")
        name, data = use.name, dict(use.input)
    if not name:
        _usage("name the tool: truss-files tool NAME (or pass --block with a tool_use block)")
    if not isinstance(data, dict):
        _usage('stdin must hold the tool\'s input as a JSON object, e.g. {"query": "..."}')
    try:
        session = _session(
            obj,
            store_path,
            memory_tools=memory_tools,
            memory_write=memory_write,
            run_id=run_id,
            durable=durable,
            replay=replay,
            run_context=run_context,
            parent=parent,
        )
        outcome = session.call(name, data, call_id=use.id if use is not None else None)
    except TrussError as exc:
        _out({"error": {"code": exc.code, "message": exc.message}}, 1, fmt)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: still one JSON object
        damaged = damage_at(obj.store_path)
        if damaged is not None:  # git's own files, not our bug
            _out({"error": {"code": damaged.code, "message": damaged.message}}, 1, fmt)
        traceback.print_exc()
        message = f"unexpected bug ({type(exc).__name__}); please report the trace on stderr"
        _out({"error": {"code": "bug", "message": message}}, 3, fmt)
    if outcome.note:
        click.echo(f"note: {outcome.note}", err=True)
    code = 0 if outcome.ok else 1
    if use is not None:
        _out(tool_result(use, outcome), code, fmt)
    _out(outcome.payload, code, fmt)


@cli.group("tools")
def tools_group() -> None:
    """The agent tools this store serves, for harness configuration.

    \b
    Example:
      truss-files tools schema --format openai --memory-tools
    """


@tools_group.command("schema")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["anthropic", "openai", "mcp"]),
    default="anthropic",
    show_default=True,
    help="Whose tool definition format.",
)
@_tool_switches
@pass_ctx
@handled
def tools_schema(
    obj: Ctx, fmt: str, store_path: str | None, memory_tools: bool, memory_write: bool
) -> None:
    """Print the definitions of every tool this store serves, as a JSON list.

    Served: the read tools when [tools] memory = true (or --memory-tools), the write binding
    when [tools] memory_write = true (or --memory-write), then filtered by [policy]
    allow_tools. Outside a store only the flags count.

    \b
    Examples:
      truss-files tools schema --format anthropic
      truss-files tools schema --format openai --memory-write
    """
    flags = gates(memory_tools, memory_write)
    if store_path:
        obj.store_path = store_path
    try:
        config = obj.store().config()
    except StoreError:
        if obj.store_path:
            raise
        config = None  # not in a store: the flags alone decide
    click.echo(json.dumps(export(Serving.resolve(config, flags).served(), fmt), indent=2))


@cli.group("runs")
def runs_group() -> None:
    """Durable runs: the signed tool-call ledgers under refs/truss/runs/.

    \b
    Example:
      truss-files runs list --format json
    """


@runs_group.command("list")
@click.option("--store", "store_path", metavar="PATH", help="The store (as the global --store).")
@FORMAT_OPTION
@pass_ctx
@handled
def runs_list(obj: Ctx, store_path: str | None, fmt: str | None) -> None:
    """List the durable runs recorded in this store, oldest first.

    \b
    Example:
      truss-files runs list
    """
    if store_path:
        obj.store_path = store_path
    runs = obj.store().runs()
    emit(
        fmt,
        [r.to_dict() for r in runs],
        lambda _d: (
            "\n".join(f"{r.run}\t{r.calls} calls\tupdated {r.updated}\t{r.tip[:12]}" for r in runs)
            or "no durable runs yet (record one with `truss-files tool ... --run ID --durable`)"
        ),
    )


@runs_group.command("show")
@click.argument("run_id")
@click.option("--store", "store_path", metavar="PATH", help="The store (as the global --store).")
@FORMAT_OPTION
@pass_ctx
@handled
def runs_show(obj: Ctx, run_id: str, store_path: str | None, fmt: str | None) -> None:
    """Every call of a durable run: tool, memo, hashes, signer, and whether its memo is current.

    The first line says whether a replay would trust the ledger: one principal's unbroken
    signed line of calls, never rolled back or forked (and if not, which rule it breaks).

    \b
    Example:
      truss-files runs show R-7f3a
    """
    if store_path:
        obj.store_path = store_path
    ledger = obj.store().run_ledger(run_id)
    records = ledger.records()
    status = ledger.status()

    def text(_d: Any) -> str:
        if status["ok"]:
            lines = [f"run {run_id}: verified ledger of {status['principal']}"]
        else:
            lines = [f"run {run_id}: NOT TRUSTED for replay: {status['problem']}"]
        for r in records:
            e = r.entry
            flags = (" error" if e.error else "") + (" revalidate" if e.revalidate else "")
            flags += f" (memo of #{e.replay_of})" if e.replay_of else ""
            flags += "" if r.memo_matches else " (memo since replaced)"
            lines.append(
                f"#{e.seq:<4} {e.tool:<13} memo {e.memo_key[:12]}  result {e.result_sha256[:12]}"
                f"  {r.commit[:12]} by {r.signer}{flags}"
            )
            if e.produced:
                lines.append("      wrote " + ", ".join(i[:12] for i in e.produced))
        return "\n".join(lines)

    emit(fmt, {"run": run_id, "ledger": status, "calls": [r.to_dict() for r in records]}, text)


@cli.command("mcp")
@_run_options
@_tool_switches
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="How an error before the server starts is printed, always on stderr (stdout carries "
    "only MCP messages): text for a person reading the client's log, json "
    '({"error": {"code", "message"}}) for a supervisor that parses it.',
)
@pass_ctx
@handled
def mcp_cmd(
    obj: Ctx,
    run_id: str | None,
    parent: str | None,
    durable: bool,
    run_context: str | None,
    store_path: str | None,
    memory_tools: bool,
    memory_write: bool,
    fmt: str,
) -> None:
    """Serve this store's agent tools over MCP on stdio (needs the [mcp] extra).

    The served tools follow truss.toml [tools] and [policy] allow_tools, like `tool`. The
    session is one run: its own unverified writes are visible to it. Without --run a fresh
    run id is made (printed on stderr). Once the server runs, errors are MCP tool errors.

    \b
    Examples:
      truss-files mcp --store /abs/path/to/store
      claude mcp add truss-files -- truss-files mcp --store /abs/path/to/store
    """
    # the MCP face and the context it serves: only for `mcp`, never a cold `tool`
    from ..mcp import build_server, new_run_id

    run = run_id or new_run_id()
    try:
        session = _session(
            obj,
            store_path,
            memory_tools=memory_tools,
            memory_write=memory_write,
            run_id=run,
            durable=durable,
            run_context=run_context,
            parent=parent,
        )
        server = build_server(session)
    except TrussError as exc:
        if fmt == "json":
            payload = {"error": {"code": exc.code, "message": exc.message}}
            click.echo(json.dumps(payload, ensure_ascii=False), err=True)
        else:
            click.echo(f"error: {exc.message}", err=True)
        sys.exit(1)
    click.echo(f"truss-files mcp: store {obj.store_path or '.'}, run {run}", err=True)
    server.run("stdio")


__all__ = ["cli"]
