"""``serve`` (the HTTP API) and ``tokens`` (its bearer tokens).

``serve`` imports Starlette and uvicorn (extra [http]) when it runs and only then; ``tokens``
needs neither.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys

import click

from ...errors import ConfigError, NotFound
from ..server import tokens as token_file
from .app import Ctx, cli, handled, pass_ctx
from .output import FORMAT_OPTION, emit, want_json


@cli.command()
@click.option("--tasks", "tasks", metavar="FILE", help="The task registry (TOML; required).")
@click.option("--tokens", "tokens", metavar="FILE", help="The token file (TOML; required).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=8377,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on; 0 lets the system pick one (the start-up line names it).",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Server processes sharing the port (asks run in parallel in each one's threads).",
)
@click.option(
    "--sync",
    "sync_remote",
    metavar="REMOTE",
    help="Keep this clone in line with REMOTE: push writes by CAS, fetch others' through the "
    "audit.",
)
@click.option(
    "--sync-every",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0.05, 86400),
    metavar="S",
    help="Seconds between syncs (a write also starts one soon).",
)
@click.option(
    "--max-body",
    default=1024 * 1024,
    show_default=True,
    type=click.IntRange(1024, 64 * 1024 * 1024),
    help="Largest request body in bytes (413 beyond).",
)
@click.option(
    "--body-timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0.1, 600),
    help="Seconds a client has to send its whole body (408 after).",
)
@click.option(
    "--header-timeout",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0.1, 600),
    help="Seconds a client has to send a request's headers (the connection is closed after).",
)
@click.option(
    "--panel-key",
    envvar="TRUSS_PANEL_KEY",
    metavar="FILE",
    help="A key holding the panel role, to commit promotes and rejects sent with a panel "
    "member's verdict (scope tasks:panel); without one they answer 403.",
)
@click.option(
    "--openapi",
    "print_openapi",
    is_flag=True,
    help="Print the OpenAPI document (JSON) of every route and exit; needs no store or files.",
)
@FORMAT_OPTION
@pass_ctx
@handled
def serve(
    obj: Ctx,
    tasks: str | None,
    tokens: str | None,
    host: str,
    port: int,
    workers: int,
    sync_remote: str | None,
    sync_every: float,
    max_body: int,
    body_timeout: float,
    header_timeout: float,
    panel_key: str | None,
    print_openapi: bool,
    fmt: str | None,
) -> None:
    """Serve memory.ask, memory.train and the whole store over HTTP (needs the [http] extra).

    Each task of the registry (--tasks) is a run context; bearer tokens (--tokens) carry the
    scopes tasks:read (ask, query, view, why, export), tasks:write (train, write) and
    tasks:panel (the review queue, promote, reject) and act only for the tasks they are
    bound to (403 for any other); the store routes reach only the entries of the task's
    enterprise. A client slower than --header-timeout to send a request's
    headers is dropped; a key file others can read is warned of at start.
    The server signs its writes with its own
    key, which must hold the agent role and no other. Edits to either file take effect
    without a restart. Prints `listening on http://HOST:PORT` once it accepts connections;
    --format says how an error before that is printed (the server then logs as text).

    \b
    Example (with --store and --key, or TRUSS_STORE and TRUSS_KEY, naming the store and the
    server's own key):
      truss-files serve --tasks tasks.toml --tokens tokens.toml --port 0
      truss-files serve --openapi > openapi.json
    """
    try:
        # the [http] extra (Starlette, uvicorn): only for `serve`
        from ..http import app as http
    except ImportError as exc:
        raise ConfigError(
            "the HTTP API needs Starlette and uvicorn: pip install 'truss-files[http]'"
        ) from exc
    if print_openapi:
        # the [http] extra again, only when the document is asked for
        from ..http import openapi

        emit("json", openapi.document(max_body))
        return
    for value, name in ((tasks, "--tasks"), (tokens, "--tokens")):
        if not value:
            raise click.UsageError(f"Missing option '{name}' (or pass --openapi).")
    assert tasks is not None and tokens is not None
    options = http.ServeOptions(
        store=obj.store_path or ".",
        tasks=tasks,
        tokens=tokens,
        key=obj.key,
        signer=obj.signer_kind,
        max_body=max_body,
        body_timeout=body_timeout,
        header_timeout=header_timeout,
        panel_key=panel_key,
    )
    # Ctrl-C: uvicorn has shut down cleanly and hands the signal back; not an error.
    with contextlib.suppress(KeyboardInterrupt):
        http.serve(
            options,
            host=host,
            port=port,
            workers=workers,
            sync_remote=sync_remote,
            sync_every=sync_every,
            echo=_say,
        )


def _say(line: str) -> None:
    # Flushed at once: a supervisor (or a test) waits for this line on a pipe.
    click.echo(line)
    sys.stdout.flush()


@cli.group()
def tokens() -> None:
    """Bearer tokens of the HTTP API (only their hashes are stored), each bound to a tenant.

    \b
    Example:
      truss-files tokens new --file tokens.toml --scope tasks:read --enterprise acme --name dash
      truss-files tokens list --file tokens.toml --format text
      truss-files tokens revoke --file tokens.toml dash
    """


@tokens.command("new")
@click.option("--file", "path", required=True, metavar="FILE", help="The token file (TOML).")
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    required=True,
    type=click.Choice(list(token_file.SCOPES)),
    help="A scope the token carries (repeatable): tasks:read reads, tasks:write writes, "
    "tasks:panel lists the review queue and promotes or rejects on a verdict.",
)
@click.option(
    "--enterprise",
    "enterprises",
    multiple=True,
    metavar="E",
    help="Act only for tasks whose registry entry names enterprise E (repeat for several).",
)
@click.option(
    "--task",
    "task_ids",
    multiple=True,
    metavar="T",
    help="Act only for the task T (repeat for several).",
)
@click.option("--any-task", is_flag=True, help="Act for every task of the server's registry.")
@click.option("--name", help="A name for the token (default: token-N).")
@click.option("--expires", metavar="WHEN", help="An ISO time, or a span from now: 90s, 12h, 30d.")
@FORMAT_OPTION
@handled
def tokens_new(
    path: str,
    scopes: tuple[str, ...],
    enterprises: tuple[str, ...],
    task_ids: tuple[str, ...],
    any_task: bool,
    name: str | None,
    expires: str | None,
    fmt: str | None,
) -> None:
    """Add a token to FILE and print it, once: only its hash is kept.

    The token acts only for the tasks it is bound to, by exactly one of --enterprise,
    --task or --any-task; any other task answers 403.

    \b
    Example:
      truss-files tokens new --file tokens.toml --scope tasks:read --enterprise acme
    """
    if [bool(enterprises), bool(task_ids), any_task].count(True) != 1:
        raise click.UsageError(
            "bind the token to its tenant with exactly one of --enterprise E (repeatable), "
            "--task T (repeatable) or --any-task"
        )
    now = datetime.datetime.now(datetime.UTC)
    when = token_file.parse_expiry(expires, now) if expires else None
    token, record = token_file.new_token(
        path,
        scopes,
        name=name,
        expires=when,
        enterprises=enterprises,
        tasks=task_ids,
        any_task=any_task,
    )
    if fmt == "json":
        assert record.binding is not None
        emit(
            "json",
            {
                "token": token,
                "name": record.name,
                "scopes": sorted(record.scopes),
                "binding": record.binding.describe(),
            },
        )
    else:
        click.echo(token)


@tokens.command("list")
@click.option("--file", "path", required=True, metavar="FILE", help="The token file (TOML).")
@FORMAT_OPTION
@handled
def tokens_list(path: str, fmt: str | None) -> None:
    """Show each token's name, scopes, binding and times; never a token or its hash.

    \b
    Example:
      truss-files tokens list --file tokens.toml
    """
    if not os.path.exists(path):
        raise NotFound(
            f"no token file at {path}; `truss-files tokens new --file {path} ...` makes one"
        )
    loaded = token_file.load(path)
    if want_json(fmt):
        emit("json", {"tokens": token_file.describe(loaded)})
        return
    for t in loaded.tokens:
        binding = t.binding.text() if t.binding else token_file.UNBOUND
        expiry = f"\texpires {token_file.stamp(t.expires)}" if t.expires else ""
        click.echo(f"{t.name}\t{','.join(sorted(t.scopes))}\t{binding}{expiry}")
    if not loaded.tokens:
        click.echo("no tokens yet; add one with `truss-files tokens new`")


@tokens.command("revoke")
@click.option("--file", "path", required=True, metavar="FILE", help="The token file (TOML).")
@click.argument("name")
@FORMAT_OPTION
@handled
def tokens_revoke(path: str, name: str, fmt: str | None) -> None:
    """Remove the token NAME from FILE; a running server refuses it (401) from then on.

    \b
    Example:
      truss-files tokens revoke --file tokens.toml dashboard
    """
    token_file.revoke_token(path, name)
    if want_json(fmt):
        emit("json", {"revoked": name})
    else:
        click.echo(f"revoked {name}")
