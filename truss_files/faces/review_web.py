"""The review page's server: one asyncio loop on 127.0.0.1 that reads each request whole, and a
few threads that answer it with the standard library's ``BaseHTTPRequestHandler``.

It signs verdicts with the panel key of whoever started it, so it is built to be reached by
that person's browser and nothing else:

- it binds 127.0.0.1 only (any other host is refused before a socket opens);
- every request must carry the token made for this start (``secrets.token_urlsafe``), in
  the query string of a GET, in the form body (or an ``X-Truss-Token`` header) of a POST --
  never a cookie, which a forged cross-site form would carry too -- and it is compared in
  constant time; without it: 403;
- the ``Host`` header must name 127.0.0.1 and this port (a DNS-rebound name is refused), and
  a POST's ``Origin``, when the browser sends one, must be this server;
- responses forbid scripts and framing (``page.CSP``), send no referrer off this origin (with
  ``no-referrer`` a browser sends ``Origin: null``, which the check above must refuse), and
  are never cached.

What a client may hold, whatever it sends (``http.server`` alone gave each connection a thread
for as long as the client liked, and a traceback for ``Content-Length: abc``):

- a connection costs a file descriptor and a buffer in the loop, never a thread, until its
  request has arrived whole; at most ``max_connections`` are open, and one more evicts the
  oldest of those still sending (a flood of idle sockets cannot lock the browser out);
- a request's head must arrive within ``header_timeout`` seconds of the connection opening
  (the clock is not reset by each byte, so a trickle is dropped too), else the connection is
  closed -- the deadline ``serve`` keeps with ``--header-timeout`` (``http_deadline``), here
  without uvicorn, which the plain install lacks; a head past 64 KiB is 431;
- ``Content-Length`` must be one plain number of bytes (400 otherwise: ``abc``, ``-1``, two
  of them), at most ``max_body`` (413), and its body must arrive within ``body_timeout``
  seconds of the head (408; 400 when the client ends it short); a ``Transfer-Encoding`` is
  411 (the page's forms always send a length);
- each answer is written within ``body_timeout`` seconds, then the connection is closed (one
  request per connection, as before);
- nothing a client sends prints a traceback: a failure in a route is a 500 and one line on
  stderr.

The timeouts are ``review --web --header-timeout/--body-timeout`` (30 s at most, so the
contract's 30 s always holds). Requests are served one store operation at a time (a lock):
pygit2 objects are not shared across threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import http.client
import io
import re
import secrets
import socket
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from ..errors import NotFound, TransitionError, TrussError, UsageError
from ..model import Kind, Trust
from ..review.history import provenance, timeline
from ..review.page import CSP, entry_page, error_page, index_page
from ..review.queue import Queue, decide, pending

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "HOST",
    "MAX_TIMEOUT",
    "ReviewServer",
    "check_host",
]

HOST = "127.0.0.1"
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 10.0
MAX_TIMEOUT = 30.0  # the contract: a bad request is answered, a silent one closed, within 30 s
DEFAULT_MAX_CONNECTIONS = 64
_MAX_BODY = 64 * 1024
_MAX_HEAD = 64 * 1024  # the request line and every header line together
_MAX_HEADER_LINES = 100  # as http.client's own limit
_WORKERS = 4  # threads answering whole requests (store work is one at a time anyway)
_LINGER = 1.0  # after an early answer: how long unread input is drained before closing
_DIGITS = re.compile(r"[0-9]{1,18}", re.ASCII)

# Sent with every answer, the handler's and the loop's own refusals alike.
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def check_host(host: str) -> str:
    if host != HOST:
        raise UsageError(
            f"--host {host}: the review page serves on {HOST} only, since it signs verdicts "
            "with your panel key. To reach it from another machine, forward a port over "
            f"SSH (ssh -L PORT:{HOST}:PORT this-host) and open the printed URL there"
        )
    return host


def _check_timeout(flag: str, seconds: float) -> float:
    if not 0 < seconds <= MAX_TIMEOUT:
        raise UsageError(f"{flag} {seconds:g}: give more than 0 and at most {MAX_TIMEOUT:g} s")
    return float(seconds)


class ReviewServer:
    """The page over ``store`` (a ``MemoryStore`` signing with a panel key).

    ``header_timeout``: seconds from a connection's opening to its request's blank line (the
    connection is closed after); ``body_timeout``: seconds for the body after that (408), and
    for writing an answer; ``max_connections``: connections open at once; ``max_body``: the
    largest ``Content-Length`` (413 past it)."""

    def __init__(
        self,
        store: Any,
        *,
        host: str = HOST,
        port: int = 0,
        kind: Kind | None = None,
        limit: int | None = None,
        token: str | None = None,
        header_timeout: float = DEFAULT_HEADER_TIMEOUT,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_body: int = _MAX_BODY,
    ) -> None:
        check_host(host)
        self.header_timeout = _check_timeout("--header-timeout", header_timeout)
        self.body_timeout = _check_timeout("--body-timeout", body_timeout)
        if max_connections < 1 or max_body < 0:
            raise UsageError("the review page needs max_connections >= 1 and max_body >= 0")
        self.max_connections = max_connections
        self.max_body = max_body
        self.store = store
        self.kind = kind
        self.limit = limit
        self.token = token or secrets.token_urlsafe(32)
        self.lock = threading.Lock()
        try:
            self._sock = socket.create_server((host, port), backlog=128)
        except OSError as exc:
            raise UsageError(
                f"cannot serve on {host}:{port}: {exc.strerror}; pick another --port "
                "(or 0 for any free one)"
            ) from exc
        self.port = int(self._sock.getsockname()[1])
        self._exchange = _handler(self)
        self._pool = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="review-page")
        # Each open connection, oldest first -> True while it may be evicted (still sending
        # its request, or being drained after an early answer), False while it is answered.
        self._open: dict[asyncio.StreamWriter, bool] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._closed = False
        self._done = threading.Event()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/?token={quote(self.token, safe='')}"

    def serve_forever(self) -> None:
        """Serve until ``stop`` (from a signal handler) or ``shutdown`` (from another
        thread)."""
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(_quiet)
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            try:
                _cancel_all(loop)
            finally:
                loop.close()
                self._done.set()

    def stop(self) -> None:
        """Make ``serve_forever`` return soon; safe in a signal handler (it only wakes the
        loop: a KeyboardInterrupt raised inside it would end a connection's task midway)."""
        self._closed = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(self._stop_soon)

    def shutdown(self) -> None:
        """Stop serving (waiting for ``serve_forever`` in another thread) and close."""
        self.stop()
        if self._loop is not None:
            self._done.wait(MAX_TIMEOUT)
        self._sock.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- what the routes do, under the lock --------------------------------------------

    def queue(self) -> Queue:
        return pending(self.store, kind=self.kind, limit=self.limit)

    def store_name(self) -> str:
        return str(self.store.git.workdir or self.store.git.git_dir)

    # -- the connections, in the loop --------------------------------------------------

    def _stop_soon(self) -> None:
        if self._stop is not None:
            self._stop.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        if self._closed:
            return
        server = await asyncio.start_server(
            self._connection, sock=self._sock, limit=_MAX_HEAD, backlog=128
        )
        try:
            await self._stop.wait()
        finally:
            server.close()

    def _evict(self) -> bool:
        """Close the oldest connection still sending; False when every one is being
        answered."""
        for writer, evictable in self._open.items():
            if evictable:
                del self._open[writer]
                writer.transport.abort()
                return True
        return False

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if len(self._open) >= self.max_connections and not self._evict():
                writer.write(_response(503, "too many connections at once; try again shortly"))
                return
            self._open[writer] = True
            await self._one_request(reader, writer)
        except (ConnectionError, TimeoutError):
            pass  # the client went away, or would not read its answer
        except asyncio.CancelledError:
            pass  # shutting down (ended quietly: 3.11's streams log a cancelled callback task)
        except Exception as exc:  # never a traceback from what a client sends
            _note(f"review page: {type(exc).__name__}: {exc}")
        finally:
            self._open.pop(writer, None)
            if writer.transport.get_write_buffer_size():
                writer.transport.abort()  # an answer it would not read
            else:
                writer.close()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            head = await asyncio.wait_for(_read_head(reader), self.header_timeout)
            if head is None:
                return  # closed before its head ended
            length = _content_length(head, self.max_body)
        except TimeoutError:
            return  # its head did not arrive in time: closed without a word
        except _Refused as refused:
            await self._refuse(reader, writer, refused)
            return
        body = b""
        if length:
            try:
                body = await asyncio.wait_for(reader.readexactly(length), self.body_timeout)
            except TimeoutError:
                why = f"the body of {length} bytes did not arrive within {self.body_timeout:g} s"
                await self._refuse(reader, writer, _Refused(408, why))
                return
            except asyncio.IncompleteReadError as short:
                why = f"the body ended after {len(short.partial)} of its {length} bytes"
                await self._refuse(reader, writer, _Refused(400, why))
                return
        if writer not in self._open:
            return  # evicted meanwhile
        self._open[writer] = False
        peer = writer.get_extra_info("peername") or (HOST, 0)
        loop = asyncio.get_running_loop()
        try:
            answer = await loop.run_in_executor(self._pool, self._answer, head + body, peer)
        except Exception as exc:  # a failed route: 500 and one line, no traceback
            _note(f"review page: {type(exc).__name__}: {exc}")
            answer = _response(500, "the review page failed on this request (its stderr says why)")
        writer.write(answer)
        await asyncio.wait_for(writer.drain(), self.body_timeout)

    def _answer(self, request: bytes, peer: tuple[str, int]) -> bytes:
        return self._exchange(request, peer).out.getvalue()

    async def _refuse(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, refused: _Refused
    ) -> None:
        """Answer before the request was read whole, then drain what the client still sends
        for a moment: closing on unread input would reset the connection, and the client
        could lose the answer."""
        writer.write(_response(refused.status, refused.why))
        await asyncio.wait_for(writer.drain(), self.body_timeout)
        if writer in self._open:
            self._open[writer] = True
        if writer.can_write_eof():
            writer.write_eof()
        with contextlib.suppress(TimeoutError, ValueError):
            await asyncio.wait_for(_drain(reader), min(_LINGER, self.body_timeout))


class _Refused(Exception):
    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status
        self.why = why


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    """The request line and headers through the blank line, or None at an early end."""
    lines: list[bytes] = []
    size = 0
    while True:
        try:
            line = await reader.readline()
        except ValueError as exc:  # one line past the reader's limit
            raise _Refused(431, "a request or header line is too long") from exc
        if not line.endswith(b"\n"):
            return None
        size += len(line)
        lines.append(line)
        if size > _MAX_HEAD or len(lines) > _MAX_HEADER_LINES + 1:
            raise _Refused(431, "the request's headers are too large")
        if line in (b"\r\n", b"\n"):
            return b"".join(lines)


def _content_length(head: bytes, most: int) -> int:
    """The body's length as ``head`` declares it (0 when it does not), or a refusal."""
    _, _, fields = head.partition(b"\n")
    try:
        headers = http.client.parse_headers(io.BytesIO(fields))
    except http.client.HTTPException as exc:
        raise _Refused(431, "the request's headers are too large") from exc
    if headers.get_all("Transfer-Encoding"):
        raise _Refused(411, "send the body with a Content-Length, not a Transfer-Encoding")
    given = headers.get_all("Content-Length") or []
    if not given:
        return 0
    if len(given) > 1:
        raise _Refused(400, "more than one Content-Length")
    value = str(given[0]).strip()
    if not _DIGITS.fullmatch(value):
        if value.isascii() and value.isdigit():  # more digits than any body we take
            raise _Refused(413, f"a request body may hold at most {most} bytes")
        raise _Refused(400, f"Content-Length must be a number of bytes, not {value[:40]!r}")
    length = int(value)
    if length > most:
        raise _Refused(413, f"a request body may hold at most {most} bytes")
    return length


async def _drain(reader: asyncio.StreamReader) -> None:
    while await reader.read(65536):
        pass


def _response(status: int, why: str) -> bytes:
    """A whole answer written by the loop itself (the connection closes after it)."""
    body = error_page(status, why).encode("utf-8")
    lines = [
        f"HTTP/1.0 {status} {HTTPStatus(status).phrase}",
        "Server: truss-files-review",
        "Content-Type: text/html; charset=utf-8",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in _HEADERS.items()),
        "Connection: close",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _note(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's own errors, as one line each (its default prints a traceback)."""
    exc = context.get("exception")
    said = f": {type(exc).__name__}: {exc}" if exc is not None else ""
    _note(f"review page: {context.get('message', 'error')}{said}")


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())


class _Exchange(BaseHTTPRequestHandler):
    """One request, already read whole by the loop, answered into a buffer (``out``): the
    handler never waits on a client."""

    def __init__(self, request: bytes, peer: tuple[str, int]) -> None:
        # Not BaseRequestHandler's: there is no socket here, nor a socketserver.
        self.client_address = peer
        self.rfile = io.BytesIO(request)
        self.out = io.BytesIO()
        self.wfile = self.out
        self.close_connection = True
        self.handle_one_request()


def _one(values: dict[str, list[str]], name: str) -> str | None:
    found = values.get(name)
    return found[0] if found else None


def _handler(server: ReviewServer) -> type[_Exchange]:
    class Handler(_Exchange):
        server_version = "truss-files-review"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            """Silent: the request line holds the token, and stdout is the URL line alone."""

        def send_error(
            self, code: int, message: str | None = None, explain: str | None = None
        ) -> None:
            """A request line the stdlib refuses: our page and headers, not its own."""
            self.close_connection = True
            self._send(code, error_page(code, message or HTTPStatus(code).phrase))

        # -- guards ----------------------------------------------------------------------

        def _host_ok(self) -> bool:
            return self.headers.get("Host", "") == f"{HOST}:{server.port}"

        def _token_ok(self, given: str | None) -> bool:
            if given is None:
                return False
            return hmac.compare_digest(given.encode(), server.token.encode())

        def _send(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (_HEADERS | (headers or {})).items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _refuse(self, why: str) -> None:
            self._send(HTTPStatus.FORBIDDEN, error_page(403, why))

        def _guarded(self, token: str | None, route: Callable[[], None]) -> None:
            if not self._host_ok():
                self._refuse("this page answers only at its own address, 127.0.0.1:PORT")
            elif not self._token_ok(token):
                self._refuse(
                    "no valid token: open the URL `truss-files review --web` printed "
                    "(a new start makes a new token)"
                )
            else:
                try:
                    with server.lock:
                        route()
                except NotFound as exc:
                    self._send(HTTPStatus.NOT_FOUND, error_page(404, exc.message))
                except TrussError as exc:
                    self._send(HTTPStatus.BAD_REQUEST, error_page(400, exc.message))

        # -- routes ----------------------------------------------------------------------

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            parts = urlsplit(self.path)
            query = parse_qs(parts.query)
            token = _one(query, "token")
            path = parts.path
            if path == "/":
                self._guarded(token, lambda: self._index(query))
            elif path.startswith("/entry/") and path.count("/") == 2:
                ref = path.removeprefix("/entry/")
                self._guarded(token, lambda: self._entry(ref, query))
            else:
                self._guarded(token, self._not_found)

        do_HEAD = do_GET

        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            # The loop has read exactly the body its checked Content-Length gave: the rest.
            form = parse_qs(self.rfile.read().decode("utf-8", "replace"))
            token = self.headers.get("X-Truss-Token") or _one(form, "token")
            origin = self.headers.get("Origin")
            if origin is not None and origin != f"http://{HOST}:{server.port}":
                self._refuse(f"a request from {origin} may not decide here")
                return
            if urlsplit(self.path).path != "/decide":
                self._guarded(token, self._not_found)
                return
            self._guarded(token, lambda: self._decide(form))

        def _not_found(self) -> None:
            self._send(HTTPStatus.NOT_FOUND, error_page(404, "no such page"))

        def _index(self, query: dict[str, list[str]]) -> None:
            flash = _one(query, "decided")
            page = index_page(
                server.queue(),
                server.token,
                store=server.store_name(),
                flash=f"decided {flash}" if flash else None,
            )
            self._send(HTTPStatus.OK, page)

        def _entry(
            self,
            ref: str,
            query: dict[str, list[str]],
            error: str | None = None,
            status: int = HTTPStatus.OK,
        ) -> None:
            store = server.store
            entry = store.get(ref)
            read = store.open_read(Trust.UNVERIFIED)
            entry = store.get(entry.id, read.snap)
            marks = timeline(store, entry.id)
            item = None
            if entry.trust is Trust.UNVERIFIED:
                found = pending(store, kind=entry.kind)
                item = next((p for p in found.items if p.entry.id == entry.id), None)
            flash = None
            if _one(query, "decided") and marks:
                last = marks[-1]
                flash = (
                    f"decided: now {entry.trust.value} ({last.outcome or last.op}, signed by "
                    f"{last.signer}, commit {last.commit[:12]})"
                )
            chain = provenance(store, entry, read.snap, read.withheld)
            page = entry_page(
                entry, marks, chain, server.token, item=item, flash=flash, error=error
            )
            self._send(status, page)

        def _decide(self, form: dict[str, list[str]]) -> None:
            ref = (form.get("id") or [""])[0]
            outcome = (form.get("outcome") or [""])[0]
            note = (form.get("note") or [""])[0].strip()
            try:
                done = decide(server.store, ref, outcome, note=note)
            except (TransitionError, UsageError) as exc:
                if isinstance(exc, NotFound) or not ref:
                    raise
                self._entry(ref, {}, error=exc.message, status=HTTPStatus.CONFLICT)
                return
            target = f"/entry/{done.entry.id}?token={quote(server.token, safe='')}&decided=1"
            self._send(
                HTTPStatus.SEE_OTHER,
                error_page(303, "decided; see the entry"),
                {"Location": target},
            )

    return Handler
