"""One way to print: JSON when piped (or --format json), readable text on a terminal."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click

from ..errors import TrussError

AGENT_OPTION = click.option(
    "--agent",
    metavar="NAME",
    envvar="TRUSS_AGENT",
    help="Layer [agents.NAME] of truss.toml over the store's settings.",
)
CONTRACT_OPTION = click.option(
    "--contract",
    metavar="FILE",
    envvar="TRUSS_CONTRACT",
    type=click.Path(dir_okay=False),
    help="A TOML settings file layered last (it wins).",
)
FORMAT_OPTION = click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "text"]),
    default=None,
    help="Output format (default: text on a terminal, JSON otherwise).",
)


def want_json(fmt: str | None) -> bool:
    if fmt is not None:
        return fmt == "json"
    return not sys.stdout.isatty()


def emit(fmt: str | None, data: Any, text: Callable[[Any], str] | str | None = None) -> None:
    if want_json(fmt) or text is None:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))
        return
    click.echo(text(data) if callable(text) else text)


def fail(exc: TrussError, fmt: str | None) -> None:
    if want_json(fmt):
        payload = {"error": {"code": exc.code, "message": exc.message}}
        click.echo(json.dumps(payload, ensure_ascii=False))
    else:
        click.echo(f"error: {exc.message}", err=True)
