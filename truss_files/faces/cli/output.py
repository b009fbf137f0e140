"""One way to print: JSON when piped (or --format json), readable text on a terminal."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import IO, Any, NoReturn

import click

from ...errors import TrussError, UsageError

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


# Text for people is coloured only on a terminal, and never when NO_COLOR is set
# (https://no-color.org) or the terminal is dumb: JSON, pipes and files stay plain bytes.
TRUST_COLOURS: Mapping[str, str] = {
    "verified": "green",
    "stale": "yellow",
    "unverified": "cyan",
    "rejected": "red",
}
_MARK = re.compile(r"\[(verified|stale|unverified|rejected)\]")
_LEAD = re.compile(r"^(ok|error|warning|note):", re.M)
_LEAD_COLOURS = {"ok": "green", "error": "red", "warning": "yellow", "note": "blue"}


def colour_on(stream: IO[str] | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether text for ``stream`` (stdout by default) may carry colour."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    target = sys.stdout if stream is None else stream
    return bool(getattr(target, "isatty", lambda: False)())


def paint(text: str) -> str:
    """Trust marks (``[verified]``, ...) in their colour, and a leading ``ok:``/``error:``/
    ``warning:``/``note:`` in its own; the words themselves stay, so nothing depends on it."""
    text = _MARK.sub(lambda m: click.style(m.group(0), fg=TRUST_COLOURS[m.group(1)]), text)
    return _LEAD.sub(
        lambda m: click.style(m.group(0), fg=_LEAD_COLOURS[m.group(1)], bold=True), text
    )


def emit(fmt: str | None, data: Any, text: Callable[[Any], str] | str | None = None) -> None:
    if want_json(fmt) or text is None:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))
        return
    out = text(data) if callable(text) else text
    click.echo(paint(out) if colour_on() else out)


def fail(exc: TrussError, fmt: str | None) -> None:
    if want_json(fmt):
        payload = {"error": {"code": exc.code, "message": exc.message}}
        click.echo(json.dumps(payload, ensure_ascii=False))
    else:
        line = f"error: {exc.message}"
        click.echo(paint(line) if colour_on(sys.stderr) else line, err=True)


# What a command ends with when the reader of its output went away (``| head``, ``| true``,
# a closed socket): git's status when SIGPIPE ends it, 128 + 13, in a shell as in a script.
EXIT_PIPE = 141


def reader_gone() -> NoReturn:
    """End the command because the reader of its output left (``BrokenPipeError`` on stdout or
    stderr), as git ends on SIGPIPE: exit ``EXIT_PIPE``, and nothing on stderr -- neither a
    traceback nor exit 3, which say a bug. Python ignores SIGPIPE, so the write failed with
    EPIPE instead of ending the process; what is still buffered for the closed pipe goes to
    /dev/null, so the interpreter's last flush cannot print a second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            try:
                os.dup2(devnull, stream.fileno())
            except (AttributeError, OSError, ValueError):
                continue  # not a file (a test runner's capture): nothing left to flush there
        os.close(devnull)
    except OSError:
        pass
    sys.exit(EXIT_PIPE)


def write_out(path: str, text: str, what: str) -> None:
    """``text`` into the file ``path`` (``~`` expanded) given by an option such as ``-o``; a
    folder that is not there or a file that cannot be written is said, not a traceback."""
    try:
        with open(os.path.expanduser(path), "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise UsageError(
            f"cannot write {what} to {path}: {exc.strerror or exc}; make its folder first or "
            "give another path"
        ) from None
