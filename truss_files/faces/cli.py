"""The ``truss-files`` console script: a plain ``query`` without click, everything else with it.

Importing click costs ~21 ms on the development machine (2 busy cores), a third of a cold
``truss-files query`` that must fit in 60 ms. So ``main`` first tries to read argv as nothing
but global ``--store``/``--key``/``--signer`` options, ``query``, its text and its own options,
each given at most once and each value one that click would accept unchanged. Such a command
runs here, through the same ``faces.query.run_query`` as the click command, and prints what
the click command would print. Anything else -- help, ``--version``, another command, a typo,
a repeated option, a value click would convert or refuse -- goes to the click group in
``cli_app.py``, which reports every usage error. ``tests/test_cli_startup.py`` runs both ways
over the same arguments and compares what they print and how they exit.

The click side (``cli``, ``Ctx``, ``handled``, ``pass_ctx``, ``KINDS``, ...) can still be
imported from here; it is loaded on first use.

Exit codes: 0 ok, 1 a user or tool error, 2 usage, 3 an unexpected bug.
"""

from __future__ import annotations

import gc
import os
import sys

# Not even typing at import (see main): the names below are for the type checker only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, Final

    from .cli_app import KINDS, LAYERS, TRUSTS, Ctx, LazyGroup, cli, handled, pass_ctx

__all__ = [
    "KINDS",
    "LAYERS",
    "TRUSTS",
    "Ctx",
    "LazyGroup",
    "cli",
    "handled",
    "main",
    "pass_ctx",
    "parse_plain_query",
]

# What the fast path accepts; a value None means any string. tests/test_cli_startup.py checks
# these against the click group and its `query` command.
GLOBAL_OPTIONS: Final[Mapping[str, tuple[str, ...] | None]] = {
    "--store": None,
    "--key": None,
    "--signer": ("builtin", "ssh-keygen"),
}
QUERY_OPTIONS: Final[Mapping[str, tuple[str, ...] | str | None]] = {
    "--kind": "kind",  # a Kind value
    "--key": None,
    "--min-trust": ("verified", "stale", "unverified"),
    "--limit": "limit",  # an integer 1..1000, digits only
    "--mode": ("exact", "semantic", "hybrid"),
    "--format": ("json", "text"),
    "--layer": ("task", "member", "role", "team", "enterprise"),
    "--agent": None,
    "--project": None,
    "--scope": ("per-agent", "per-project", "shared"),
}
ENVIRONMENT: Final = {"--store": "TRUSS_STORE", "--key": "TRUSS_KEY", "--signer": "TRUSS_SIGNER"}


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    from . import cli_app

    return getattr(cli_app, name)


def main() -> None:
    # A process that answers one query and exits: the cyclic collector has nothing worth its
    # passes over every imported module's objects, during the imports or -- the larger part
    # -- at exit, where freezing them spares the final collection (~10 ms of a ~60 ms query;
    # hence nothing heavy is imported before this line, not even by the package).
    gc.disable()
    plain = parse_plain_query(sys.argv[1:], os.environ)
    if plain is None:
        gc.enable()  # other commands may run long (mcp, verify)
        from .cli_app import cli

        cli(prog_name="truss-files")
        return
    code = run_plain_query(*plain)
    gc.freeze()
    if code:
        sys.exit(code)


def parse_plain_query(
    argv: Sequence[str], environ: Mapping[str, str]
) -> tuple[dict[str, str], str, dict[str, str]] | None:
    """``(global options, text, query options)`` of a plain query command, else None."""
    given: dict[str, str] = {}
    i, n = 0, len(argv)
    while i < n and argv[i] != "query":
        i = _option(argv, i, GLOBAL_OPTIONS, given)
        if i < 0:
            return None
    if i >= n:
        return None
    i += 1
    options: dict[str, str] = {}
    text: str | None = None
    while i < n:
        arg = argv[i]
        if arg == "--":
            if text is not None or n - i != 2:
                return None
            text = argv[i + 1]
            break
        if arg.startswith("-"):
            i = _option(argv, i, QUERY_OPTIONS, options)
            if i < 0:
                return None
        elif text is None:
            text = arg
            i += 1
        else:
            return None  # a second argument: click's error message
    if text is None:
        return None
    for name, variable in ENVIRONMENT.items():
        # click reads these from the environment (an empty value counts as unset), and
        # checks the value even for a command that does not use it.
        value = environ.get(variable)
        if name not in given and value:
            if not _valid(GLOBAL_OPTIONS[name], value):
                return None
            given[name] = value
    return given, text, options


def _option(
    argv: Sequence[str],
    i: int,
    table: Mapping[str, tuple[str, ...] | str | None],
    into: dict[str, str],
) -> int:
    """Read the option at ``argv[i]`` into ``into``; the next index, or -1 to leave it to click."""
    name, eq, value = argv[i].partition("=")
    if name not in table or name in into:
        return -1
    if eq:
        nxt = i + 1
    elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
        value, nxt = argv[i + 1], i + 2
    else:
        return -1
    if not _valid(table[name], value):
        return -1
    into[name] = value
    return nxt


def _valid(rule: tuple[str, ...] | str | None, value: str) -> bool:
    if rule is None:
        return True
    if rule == "limit":
        return value.isascii() and value.isdigit() and 1 <= int(value) <= 1000
    if rule == "kind":
        from ..model import Kind

        return value in Kind._value2member_map_
    return value in rule


def run_plain_query(given: dict[str, str], text: str, options: dict[str, str]) -> int:
    """Run a parsed plain query as the click command would: its output, its exit code."""
    fmt = options.get("--format")
    try:
        from ..errors import TrussError

        try:
            from .query import floor_note, run_query

            data, render = run_query(
                given.get("--store") or ".",
                text,
                kind=options.get("--kind"),
                key=options.get("--key"),
                min_trust=options.get("--min-trust", "verified"),
                limit=int(options.get("--limit", "10")),
                mode=options.get("--mode"),
                layer=options.get("--layer"),
                agent=options.get("--agent"),
                project=options.get("--project"),
                scope=options.get("--scope"),
            )
            _emit(fmt, data, render)
            note = None if _want_json(fmt) else floor_note(data)
            if note:
                _echo(note, err=True)
        except TrussError as exc:
            _fail(exc, fmt)
            return 1
        except Exception:  # noqa: BLE001 - the last line of defence, as cli_app.handled
            import traceback

            from ..gitdamage import damage_at

            damaged = damage_at(given.get("--store") or None)
            if damaged is not None:  # git's own files, not our bug
                _fail(damaged, fmt)
                return 1
            traceback.print_exc()
            _echo("error: an unexpected bug; please report the trace above", err=True)
            return 3
    except KeyboardInterrupt:
        _echo("", err=True)  # click's way: a newline, then "Aborted!"
        _echo("Aborted!", err=True)
        return 1
    return 0


# -- output exactly as faces/output.py prints it through click.echo ------------------------


def _want_json(fmt: str | None) -> bool:
    if fmt is not None:
        return fmt == "json"
    return not sys.stdout.isatty()


def _emit(fmt: str | None, data: Any, render: Callable[[Any], str]) -> None:
    if _want_json(fmt):
        import json

        _echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))
    else:
        _echo(render(data))


def _fail(exc: Any, fmt: str | None) -> None:
    if _want_json(fmt):
        import json

        payload = {"error": {"code": exc.code, "message": exc.message}}
        _echo(json.dumps(payload, ensure_ascii=False))
    else:
        _echo(f"error: {exc.message}", err=True)


def _echo(message: str, *, err: bool = False) -> None:
    """``click.echo(message, err=err)``: click itself only where it would change the text
    (escape sequences it strips when not on a terminal) or the stream (not UTF-8)."""
    stream = sys.stderr if err else sys.stdout
    encoding = getattr(stream, "encoding", None) or ""
    if stream is None or "\x1b" in message or encoding.lower().replace("_", "-") != "utf-8":
        import click

        click.echo(message, err=err)
        return
    stream.write(message + "\n")
    stream.flush()
