"""`review`: the queue of pending entries, on a terminal, as JSON, or as a page in a browser.

The terminal queue asks about one entry at a time; each pass or fail is one signed commit
made at once, so quitting (``q``, ^C, the end of the answers) keeps every decision made and
leaves the rest pending. The page (``--web``) is ``review_web``'s server.
"""

from __future__ import annotations

import signal
import sys
import unicodedata
from collections.abc import Iterator
from contextlib import ExitStack
from typing import IO, Any

import click

from ...errors import TransitionError, UsageError
from ...format.quorum import FAIL, PASS
from ...format.views import shown
from ...model import Kind
from ...review.queue import Pending, Queue, decide, pending, reviewer
from ..review_web import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    HOST,
    MAX_TIMEOUT,
    ReviewServer,
)
from .app import KINDS, Ctx, cli, handled, pass_ctx
from .output import FORMAT_OPTION, emit

_ANSWERS = {"p": "pass", "pass": "pass", "f": "fail", "fail": "fail"}
_ANSWERS |= {"s": "skip", "skip": "skip", "q": "quit", "quit": "quit"}
_PROMPT = "p pass, f fail, s skip, q quit (a note may follow: f not reproduced)?"
# On a terminal one key decides, no Enter; n first writes the verdict's note on a line.
_KEYS = {"p": "pass", "f": "fail", "s": "skip", "q": "quit"}
_KEY_PROMPT = "p pass, f fail, s skip, q quit (n: a note first)?"
_IGNORED = frozenset("\r\n \t")

_NOT_A_TERMINAL = (
    "review asks about each entry on a terminal, and stdin here is not one. For a tool: "
    "`truss-files review --format json` lists the queue and changes nothing; to decide from "
    "a file or a pipe: `--answers FILE` (or `--answers -` for stdin), one line per entry: "
    "p, f, s or q, a note may follow (`f not reproduced`); in a browser: "
    "`truss-files review --web`"
)


@cli.command()
@click.option("--kind", type=click.Choice(KINDS), help="Only entries of this kind.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    metavar="N",
    help="At most N entries (from the newest session).",
)
@click.option(
    "--answers",
    metavar="FILE|-",
    help="Read the answers from FILE (- for stdin) instead of a terminal: one line per "
    "entry, p, f, s or q, a note may follow.",
)
@click.option("--web", is_flag=True, help="Serve the review page on 127.0.0.1 instead.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="With --web: the port (0: any free one).",
)
@click.option(
    "--host",
    default=HOST,
    show_default=True,
    help="With --web: only 127.0.0.1 is accepted (the page signs with your key).",
)
@click.option(
    "--header-timeout",
    default=DEFAULT_HEADER_TIMEOUT,
    show_default=True,
    type=click.FloatRange(0.1, MAX_TIMEOUT),
    metavar="S",
    help="With --web: seconds a client has to send a request's headers (the connection is "
    "closed after).",
)
@click.option(
    "--body-timeout",
    default=DEFAULT_BODY_TIMEOUT,
    show_default=True,
    type=click.FloatRange(0.1, MAX_TIMEOUT),
    metavar="S",
    help="With --web: seconds a client has to send a request's body (408 after).",
)
@FORMAT_OPTION
@pass_ctx
@handled
def review(
    obj: Ctx,
    kind: str | None,
    limit: int | None,
    answers: str | None,
    web: bool,
    port: int,
    host: str,
    header_timeout: float,
    body_timeout: float,
    fmt: str | None,
) -> None:
    """Review pending entries: pass, fail or skip each, newest session first.

    Entries come grouped by the session (run) that wrote them, the newest session first and
    oldest first within it; entries written outside a run form one group. Each is shown with
    its body, where it came from, what a pass would turn stale
    (under the store's conflict policy) and the votes recorded on it so far. On a terminal
    one key decides, no Enter: p (pass), f (fail), s (skip) or q (quit); n first asks for
    the verdict's note. With --answers, one line per entry: the letter, a note may follow.
    A pass or fail signs a verdict with your panel key and promotes or rejects the entry in one
    signed commit, at once. --format json lists the queue for a tool and changes nothing.
    --web serves the same queue as a page on 127.0.0.1, with each entry's belief timeline
    and provenance chain, at the one URL it prints (the token in it is new each start). A
    client slower than --header-timeout to send a request's headers is disconnected, one
    slower than --body-timeout to send its body gets 408; a Content-Length that is not a
    number is 400, one past 64 KiB 413, and at most 64 connections are open at once.

    \b
    Examples:
      truss-files review                          # ask, on a terminal
      truss-files review --kind lesson --format json
      printf 'p\\nf not reproduced\\n' | truss-files review --answers -
      truss-files review --web --port 8765        # then open the printed URL
    """
    store = obj.store()
    folder = Kind(kind) if kind else None
    if fmt == "json":
        if answers is not None or web:
            raise UsageError(
                "--format json lists the queue and changes nothing; drop --answers/--web, "
                "or drop --format json to decide"
            )
        emit(fmt, pending(store, kind=folder, limit=limit).to_dict())
        return
    if web:
        if answers is not None:
            raise UsageError("--answers is for the terminal queue; the page has its buttons")
        _serve(store, host, port, folder, limit, (header_timeout, body_timeout))
        return
    if host != HOST:
        raise UsageError(f"--host {host} goes with --web (and only {HOST} is served)")
    with ExitStack() as stack:
        if answers is None:
            if not sys.stdin.isatty():
                raise UsageError(_NOT_A_TERMINAL)
            stream: IO[str] = sys.stdin
        elif answers == "-":
            stream = sys.stdin
        else:
            try:
                stream = stack.enter_context(open(answers, encoding="utf-8"))  # noqa: SIM115
            except OSError as exc:
                raise UsageError(f"--answers {answers}: {exc.strerror}") from exc
        _ask(store, pending(store, kind=folder, limit=limit), stream, answers is None)


def _serve(
    store: Any,
    host: str,
    port: int,
    kind: Kind | None,
    limit: int | None,
    timeouts: tuple[float, float],
) -> None:
    reviewer(store)
    header_timeout, body_timeout = timeouts
    server = ReviewServer(
        store,
        host=host,
        port=port,
        kind=kind,
        limit=limit,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
    )
    click.echo(f"review at {server.url}")
    sys.stdout.flush()

    def stop(signum: int, _frame: Any) -> None:
        server.stop()  # ^C and SIGTERM end the loop between requests, not inside one

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass  # a ^C before the handlers were in place
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.shutdown()
    click.echo("review page stopped", err=True)


# -- the terminal queue ----------------------------------------------------------------------


def _ask(store: Any, queue: Queue, stream: IO[str], terminal: bool) -> None:
    if not queue.items:
        click.echo("nothing is waiting for review")
        return
    who = reviewer(store)
    click.echo(
        f"{len(queue.items)} pending"
        + (f" (of {queue.total})" if queue.total > len(queue.items) else "")
        + f", newest session first; deciding as {who}"
    )
    if queue.withheld:
        click.echo(f"note: verified bodies withheld: {queue.withheld}", err=True)
    for path in queue.skipped:
        click.echo(f"note: {path} does not parse and is not in the queue", err=True)
    counts = {"promoted": 0, "rejected": 0, "skipped": 0}
    lines = _lines(stream)
    gone = 0  # decided by someone else meanwhile: no longer pending, though not by us
    heads = {id(items[0]): (session, len(items)) for session, items in queue.sessions()}
    try:
        for n, item in enumerate(queue.items, 1):
            click.echo("")
            if id(item) in heads:
                click.echo(_session_line(*heads[id(item)]))
            click.echo(_show(item, n, len(queue.items)))
            answer, note = _keypress() if terminal else _answer(lines, terminal)
            if answer == "quit":
                break
            if answer == "skip":
                counts["skipped"] += 1
                continue
            try:
                done = decide(store, item.entry.id, PASS if answer == "pass" else FAIL, note=note)
            except TransitionError as exc:
                click.echo(f"  skipped: decided elsewhere: {exc.message}")
                counts["skipped"] += 1
                gone += 1
                continue
            counts["promoted" if answer == "pass" else "rejected"] += 1
            click.echo(f"  {done.line()}")
    except KeyboardInterrupt:
        click.echo("")
        click.echo(_summary(counts, queue.total - gone, stopped=True))
        sys.exit(130)
    click.echo("")
    click.echo(_summary(counts, queue.total - gone))


def _session_line(session: str | None, count: int) -> str:
    notes = f"{count} note" + ("" if count == 1 else "s")
    if session is None:
        return f"== written outside a run: {notes} =="
    return f"== session {_safe(session)}: {notes} =="


def _summary(counts: dict[str, int], total: int, *, stopped: bool = False) -> str:
    said = ", ".join(f"{v} {k}" for k, v in counts.items())
    left = total - counts["promoted"] - counts["rejected"]
    head = "stopped" if stopped else "done"
    tail = f"; {left} still pending" + (" (`truss-files review` goes on)" if left else "")
    decided = counts["promoted"] + counts["rejected"]
    each = ", each in its own signed commit" if decided else ""
    return f"{head}: {said}{each}{tail}"


def _lines(stream: IO[str]) -> Iterator[tuple[int, str | None]]:
    number = 0
    while True:
        line = stream.readline()
        number += 1
        yield number, (line if line else None)


def _keypress() -> tuple[str, str]:
    """One key on the terminal: p, f, s or q decides at once; n asks for a note first."""
    note = ""
    click.echo(f"  {_KEY_PROMPT} ", nl=False)
    while True:
        sys.stdout.flush()
        try:
            # ^C arrives as KeyboardInterrupt, ^D as EOFError; keys typed quickly come
            # together ("p" and the Enter a habit adds after it): the first one counts.
            typed = click.getchar()
        except EOFError:
            click.echo("")
            return "quit", ""
        key = typed.lstrip("".join(_IGNORED))[:1]
        if not key:
            continue
        answer = _KEYS.get(key.lower())
        if answer is not None:
            click.echo(key)
            return answer, note
        if key.lower() == "n":
            click.echo(key)
            note = click.prompt("  note", default="", show_default=False).strip()
            click.echo(f"  {_KEY_PROMPT} ", nl=False)
            continue
        click.echo("")
        click.echo(f"  {_safe(key)!r}? press p, f, s, q or n")
        click.echo(f"  {_KEY_PROMPT} ", nl=False)


def _answer(lines: Iterator[tuple[int, str | None]], terminal: bool) -> tuple[str, str]:
    while True:
        click.echo(f"  {_PROMPT} ", nl=False)
        sys.stdout.flush()
        number, line = next(lines)
        if line is None:  # the end of the answers (or ^D): stop here, keep what was decided
            click.echo("")
            return "quit", ""
        if not terminal:
            click.echo(line.rstrip("\n"))
        word, _, note = line.strip().partition(" ")
        answer = _ANSWERS.get(word.lower())
        if answer is not None:
            return answer, note.strip()
        if not terminal:
            raise UsageError(
                f"--answers line {number}: {word!r} is not an answer; give p, f, s or q"
            )
        click.echo(f"  {word!r}? answer p, f, s or q")


def _show(item: Pending, n: int, total: int) -> str:
    e = shown(item.entry)
    lines = [f"[{n}/{total}] {_safe(e.kind.value)}/{_safe(e.key)}  {e.id[:12]}  (unverified)"]
    lines.append(f"  written by {_safe(e.author)} at {e.created}")
    if e.provenance.produced_by:
        lines.append(f"  produced by {_safe(e.provenance.produced_by)}")
    for source in e.provenance.sources:
        lines.append(f"  source {_safe(source)}")
    lines.extend("  | " + _safe(line) for line in (e.body.splitlines() or [""]))
    for rival in item.supersedes:
        said = f"  {_safe(_first(rival.body))!s}" if rival.body is not None else " (withheld)"
        lines.append(f"  a pass turns stale: {rival.id[:12]}{said}")
    if not item.votes:
        lines.append("  votes so far: none recorded")
    for v in item.votes:
        note = f' "{_safe(v.note)}"' if v.note else ""
        lines.append(
            f"  vote so far: {_safe(v.reviewer)} ({_safe(v.kind)}) {v.vote}{note}, in verdict "
            f"{v.verdict[:12]} ({v.outcome} by {_safe(v.signer)}, commit {v.commit[:12]}, "
            "since undone)"
        )
    return "\n".join(lines)


def _first(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 100 else line[:99] + "…"


def _safe(text: str) -> str:
    """``text`` with control characters shown as escapes: an entry body is someone else's
    text, and an escape sequence in it must not drive the reviewer's terminal."""
    return "".join(repr(ch)[1:-1] if _control(ch) else ch for ch in text)


# Bidirectional overrides and isolates reorder what a terminal shows (CVE-2021-42574).
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _control(ch: str) -> bool:
    return ch != "\t" and (unicodedata.category(ch) == "Cc" or ch in _BIDI)


__all__ = ["review"]
