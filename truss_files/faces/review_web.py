"""The review page's server: the standard library's ``ThreadingHTTPServer`` on 127.0.0.1.

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

Requests are served one store operation at a time (a lock): pygit2 objects are not shared
across threads.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from ..errors import NotFound, TransitionError, TrussError, UsageError
from ..model import Kind, Trust
from ..review.belief import provenance, timeline
from ..review.page import CSP, entry_page, error_page, index_page
from ..review.queue import Queue, decide, pending

__all__ = ["HOST", "ReviewServer", "check_host"]

HOST = "127.0.0.1"
_MAX_BODY = 64 * 1024


def check_host(host: str) -> str:
    if host != HOST:
        raise UsageError(
            f"--host {host}: the review page serves on {HOST} only, since it signs verdicts "
            "with your panel key. To reach it from another machine, forward a port over "
            f"SSH (ssh -L PORT:{HOST}:PORT this-host) and open the printed URL there"
        )
    return host


class ReviewServer:
    """The page over ``store`` (a ``MemoryStore`` signing with a panel key)."""

    def __init__(
        self,
        store: Any,
        *,
        host: str = HOST,
        port: int = 0,
        kind: Kind | None = None,
        limit: int | None = None,
        token: str | None = None,
    ) -> None:
        check_host(host)
        self.store = store
        self.kind = kind
        self.limit = limit
        self.token = token or secrets.token_urlsafe(32)
        self.lock = threading.Lock()
        try:
            self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        except OSError as exc:
            raise UsageError(
                f"cannot serve on {host}:{port}: {exc.strerror}; pick another --port "
                "(or 0 for any free one)"
            ) from exc
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/?token={quote(self.token, safe='')}"

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- what the routes do, under the lock --------------------------------------------

    def queue(self) -> Queue:
        return pending(self.store, kind=self.kind, limit=self.limit)

    def store_name(self) -> str:
        return str(self.store.git.workdir or self.store.git.git_dir)


def _one(values: dict[str, list[str]], name: str) -> str | None:
    found = values.get(name)
    return found[0] if found else None


def _handler(server: ReviewServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "truss-files-review"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            """Silent: the request line holds the token, and stdout is the URL line alone."""

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
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("X-Frame-Options", "DENY")
            self.send_header("Referrer-Policy", "same-origin")
            self.send_header("Cache-Control", "no-store")
            for name, value in (headers or {}).items():
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
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, error_page(413, "too large"))
                return
            form = parse_qs(self.rfile.read(length).decode("utf-8", "replace"))
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
