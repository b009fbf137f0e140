"""The HTTP face: memory.ask and memory.train over Starlette and uvicorn (extra [http]).

    GET  /v1/tasks/{taskId}/memory/ask?purpose=…   scope tasks:read
    POST /v1/tasks/{taskId}/memory/train           scope tasks:write
    /v1/tasks/{taskId}/store/…                     the whole store (``store.py``)
    GET  /healthz, GET /openapi.json               no token

Each request is checked in this order: token (401), scope and the token's tenant binding
(403), task (404), all in ``tokens.admit``; then input (413, 408, 422);
then memory.ask or memory.train runs (their public entry points, after the dispatcher's
input checks) with the run context of the task registry's entry for
``{taskId}`` — nothing in the request can change it — on a worker thread with that thread's
own store (a pygit2 repository is not shared between threads). Trains queue on the store's
writer lock and move the branch by compare-and-swap; asks read snapshots in parallel.

Logs carry method, route, task id, status and time: never a header, a query string or a body,
so neither a token nor anything a client sent reaches them. Only ``truss-files serve`` imports
this module; the rest of the CLI never loads Starlette.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from uvicorn.supervisors import Multiprocess

from ...errors import (
    AccessError,
    ConfigError,
    ConflictError,
    Forbidden,
    IndexUnavailable,
    ScopeError,
    SecretFound,
    TrussError,
    UsageError,
    VectorsMissing,
)
from ...facade import MemoryStore
from ...signing.keys import load_signer
from ...tools.ask import ask
from ...tools.registry import lookup
from ...tools.schema import check_json
from ...tools.train import train
from ..server import tokens as token_file
from ..server.runner import SyncLoop, check_panel_key, check_server_key
from ..server.tasks import TaskRegistry
from ..server.watched import Watched
from . import openapi as http_openapi
from . import store as store_routes
from .deadline import DeadlineConfig
from .wire import HttpError, error_response, parse_json, read_body

if TYPE_CHECKING:
    from ...facade import MemoryStore
    from ...model import Entry
    from ...panel.eager import Written
    from ...runs.runcontext import RunContext
    from ...signing import Signer

log = logging.getLogger("truss_files.http")

ENV_OPTIONS = "TRUSS_HTTP_OPTIONS"
ASK, TRAIN = "memory.ask", "memory.train"
# An idempotency key becomes the tool call id of a train without a source.
IDEMPOTENCY_HEADER = "idempotency-key"
LOG_TASK = "truss.task"  # the ASGI scope key that hands a known task id to the log line
MAX_IDEMPOTENCY_KEY = 128


@dataclass(frozen=True)
class ServeOptions:
    """Everything a server process (or each of its workers) needs; JSON-able for workers."""

    store: str
    tasks: str
    tokens: str
    key: str | None = None
    signer: str | None = None
    # A train's body is one small JSON object; 1 MiB is far beyond any note the store takes.
    max_body: int = 1024 * 1024
    # A client that has not sent its whole body by then is cut off (a slow-body attack holds
    # a worker thread otherwise).
    body_timeout: float = 10.0
    # A read slower than this answers "unavailable" rather than hold a thread.
    ask_timeout: float = 30.0
    # A client that has not sent a request's whole head by then is dropped (slow loris).
    header_timeout: float = 5.0
    # The key a promote or reject is committed with (it must hold the panel role); without
    # one the server signs no decision.
    panel_key: str | None = None

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServeOptions:
        env = os.environ if environ is None else environ
        return cls(**json.loads(env[ENV_OPTIONS]))


# Train statuses that stored a note (a sync soon pushes it).
WROTE = ("accepted", "consolidating")


class Backend:
    """The library side of a server process: files watched for changes, one store per thread."""

    def __init__(
        self,
        options: ServeOptions,
        signer: Signer | None = None,
        after_write: Callable[[], None] | None = None,
    ) -> None:
        self.options = options
        self.after_write = after_write
        self.tasks = Watched(options.tasks, TaskRegistry.parse)
        self.tokens = Watched(options.tokens, token_file.TokenFile.parse)
        self._signer = signer
        self._local = threading.local()
        self._signer_lock = threading.Lock()
        # One train at a time per process: the threads queue here in order, and only one of
        # them waits on the store's writer lock (a file lock polled with a deadline, where
        # sixteen threads of one process would starve each other into compare-and-swap races).
        self._train_lock = threading.Lock()

    @property
    def signer(self) -> Signer:
        with self._signer_lock:
            if self._signer is None:
                self._signer = load_signer(self.options.key, signer=self.options.signer)
            return self._signer

    def store(self) -> MemoryStore:
        found: MemoryStore | None = getattr(self._local, "store", None)
        if found is None:
            found = MemoryStore(self.options.store, signer=self.signer)
            found.origin = "http"  # a write outside a run names http:<principal>
            self._local.store = found
        return found

    def panel_store(self) -> MemoryStore:
        """The store a decision is committed through: signed with ``--panel-key``, or the
        server's own key when there is none (which holds no panel role, so the store
        refuses before signing anything)."""
        if not self.options.panel_key:
            return self.store()
        found: MemoryStore | None = getattr(self._local, "panel", None)
        if found is None:
            found = MemoryStore(self.options.store, signer=load_signer(self.options.panel_key))
            found.origin = "http"
            self._local.panel = found
        return found

    def write(self, act: Callable[[MemoryStore], Written]) -> Written:
        """A write of the store routes: queued behind the trains, then a sync soon."""
        with self._train_lock:
            done = act(self.store())
        if self.after_write is not None:
            self.after_write()
        return done

    def decide(self, act: Callable[[MemoryStore], Entry]) -> Entry:
        """A promote or reject: through the panel store, queued behind the writes."""
        with self._train_lock:
            entry = act(self.panel_store())
        if self.after_write is not None:
            self.after_write()
        return entry

    def admit(self, request: Request, need: str) -> RunContext:
        """Every route that takes a task calls this, and only this, before anything else:
        token, scope, the token's tenant binding and the task (``tokens.admit``)."""
        task_id = request.path_params["taskId"]
        now = datetime.datetime.now(datetime.UTC)
        found = token_file.admit(
            self.tokens.get(),
            request.headers.get("authorization"),
            need,
            task_id,
            self.tasks.get(),
            now,
        )
        if found is None:
            raise HttpError(
                404,
                "unknown_task",
                "no such task in this server's task registry; check the task id",
            )
        # Only a task id of the registry reaches the log: a client may send anything there,
        # a token pasted in the wrong place included.
        request.scope[LOG_TASK] = task_id
        return found

    def call(
        self, context: RunContext, tool: str, tool_input: Any, call_id: str | None
    ) -> dict[str, Any]:
        """Run memory.ask or memory.train through its public entry point: the same checks as
        the dispatcher (plain bounded JSON, then the tool's schema), the task's context."""
        check_json(tool_input)
        store = self.store()
        if tool == ASK:
            # Over HTTP nothing is left out: no budget, every note's text in the answer.
            return ask(store, context, tool_input, budget=None, timeout=self.options.ask_timeout)

        with self._train_lock:
            result = train(store, context, tool_input, call_id=call_id)
        if self.after_write is not None and result.get("status") in WROTE:
            self.after_write()
        return result


def build_app(
    options: ServeOptions,
    *,
    signer: Signer | None = None,
    after_write: Callable[[], None] | None = None,
) -> Starlette:
    backend = Backend(options, signer, after_write)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def openapi(request: Request) -> Response:
        return JSONResponse(http_openapi.document(options.max_body))

    async def ask(request: Request) -> Response:
        context = backend.admit(request, "tasks:read")
        tool_input = ask_input(request)
        return await _run(backend, context, ASK, tool_input, None)

    async def train(request: Request) -> Response:
        context = backend.admit(request, "tasks:write")
        call_id = idempotency_key(request)
        body = await read_body(request, options.max_body, options.body_timeout)
        tool_input = parse_json(body)
        return await _run(backend, context, TRAIN, tool_input, call_id)

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/v1/tasks/{taskId}/memory/ask", ask, methods=["GET"]),
        Route("/v1/tasks/{taskId}/memory/train", train, methods=["POST"]),
        *store_routes.routes(backend, options.max_body, options.body_timeout),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_exception})
    app.add_middleware(_Guard)
    return app


async def _run(
    backend: Backend, context: RunContext, tool: str, tool_input: Any, call_id: str | None
) -> Response:
    result = await run_in_threadpool(backend.call, context, tool, tool_input, call_id)
    return JSONResponse(result)


def ask_input(request: Request) -> dict[str, Any]:
    """The query string as memory.ask's input: each field once, integers as integers."""
    tool = lookup(ASK)
    props: Mapping[str, Any] = tool.input_schema.get("properties", {}) if tool else {}
    out: dict[str, Any] = {}
    for name, value in request.query_params.multi_items():
        if name not in props:
            raise HttpError(
                422,
                "invalid_input",
                f"unknown query parameter {name[:40]!r}; memory/ask takes: {', '.join(props)}",
            )
        if name in out:
            raise HttpError(422, "invalid_input", f"`{name}` is given more than once; give it once")
        if props[name].get("type") == "integer":
            if not (value.isascii() and value.lstrip("-").isdigit() and len(value) <= 18):
                raise HttpError(422, "invalid_input", f"`{name}` must be an integer")
            out[name] = int(value)
        else:
            out[name] = value
    return out


def idempotency_key(request: Request) -> str | None:
    value = request.headers.get(IDEMPOTENCY_HEADER)
    if value is None:
        return None
    if not (0 < len(value) <= MAX_IDEMPOTENCY_KEY and value.isascii() and value.isprintable()):
        raise HttpError(
            422,
            "invalid_input",
            f"`Idempotency-Key` must be 1-{MAX_IDEMPOTENCY_KEY} printable ASCII characters",
        )
    return value


class _Guard:
    """Errors as JSON, one log line per request (no query, header or body), bugs as 500s
    whose log line names the exception type only (its message may quote the input)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON answer
            response = _answer(exc)
            status = response.status_code
            await response(scope, receive, send)
        finally:
            log.info(
                "%s %s %s %.1fms",
                scope.get("method", "-"),
                _route(str(scope.get("path", "")), scope.get(LOG_TASK)),
                status,
                (time.perf_counter() - started) * 1000,
            )


async def _http_exception(request: Request, exc: Exception) -> Response:
    # The router's own answers (no such route, wrong method), as JSON like every other error.
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
    message = {
        404: "no such route; see /openapi.json",
        405: "this route does not take that method; see /openapi.json",
    }.get(exc.status_code, str(exc.detail))
    # The router's own headers stay: a 405 names the methods the route takes (Allow).
    return error_response(exc.status_code, code, message, exc.headers)


def _answer(exc: Exception) -> Response:
    if isinstance(exc, HttpError):
        return error_response(exc.status, exc.code, exc.message)
    if isinstance(exc, ScopeError | Forbidden):
        return error_response(403, "forbidden", exc.message)
    if isinstance(exc, AccessError):
        return error_response(401, exc.code, exc.message)
    if isinstance(exc, ClientDisconnect):
        return error_response(400, "bad_request", "the client went away")
    if isinstance(exc, ConfigError):
        log.error("configuration error: %s", exc.message)
        return error_response(
            503, "unavailable", "the server's configuration cannot be read; tell its operator"
        )
    if isinstance(exc, UsageError):
        code = exc.code if isinstance(exc, SecretFound) else "invalid_input"
        return error_response(422, code, exc.message)
    if isinstance(exc, ConflictError):
        return error_response(409, exc.code, exc.message)
    if isinstance(exc, VectorsMissing):
        return error_response(503, exc.code, exc.message)
    if isinstance(exc, IndexUnavailable):
        log.warning("%s: %s", type(exc).__name__, exc.message)
        return error_response(
            503, exc.code, "the recall index is damaged and is being rebuilt; ask again"
        )
    if isinstance(exc, TrussError):
        log.error("%s: %s", type(exc).__name__, exc.message)
        return error_response(503, "unavailable", "memory could not be read or written")
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb else "?"
    log.error("unexpected %s at %s", type(exc).__name__, where)
    return error_response(500, "bug", "an unexpected error; the server's log names it")


def _route(path: str, task: str | None) -> str:
    """The path as logged: the route, with the task id only once the registry knew it (and
    an entry id never: a client may send anything there)."""
    parts = path.split("/")
    if len(parts) == 6 and parts[1:3] == ["v1", "tasks"] and parts[5] in ("ask", "train"):
        return f"/v1/tasks/{task or '<unknown>'}/memory/{parts[5]}"
    if len(parts) >= 6 and parts[1:3] == ["v1", "tasks"] and parts[4] == "store":
        rest = parts[5:]
        if rest in (["query"], ["export"], ["pending"], ["entries"]):
            return f"/v1/tasks/{task or '<unknown>'}/store/{rest[0]}"
        if (
            len(rest) in (2, 3)
            and rest[0] == "entries"
            and rest[2:] in ([], ["why"], ["promote"], ["reject"])
        ):
            return "/".join(
                [f"/v1/tasks/{task or '<unknown>'}/store/entries/{{entryId}}", *rest[2:]]
            )
    return path if path in ("/healthz", "/openapi.json") else "<other>"


def app_from_env() -> Starlette:
    """The app of one uvicorn worker process (``--workers N``): options from the environment."""
    return build_app(ServeOptions.from_env())


# Our one log line per request goes to stderr; uvicorn's access log (which would print the
# query string, where an ask's purpose travels) stays off.
LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(message)s"}},
    "handlers": {
        "stderr": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "stream": "ext://sys.stderr",
        }
    },
    "loggers": {
        "truss_files.http": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "uvicorn": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
        "uvicorn.access": {"handlers": [], "level": "CRITICAL", "propagate": False},
    },
}


def serve(
    options: ServeOptions,
    *,
    host: str,
    port: int,
    workers: int = 1,
    sync_remote: str | None = None,
    sync_every: float = 5.0,
    echo: Callable[[str], None],
    warn: Callable[[str], None] | None = None,
) -> None:
    """Bind, then serve until a signal; ``echo`` gets the one ``listening on`` line once the
    server accepts connections (with port 0, the port the system gave), ``warn`` (stderr by
    default) each start-up warning, once."""
    say = warn or _stderr

    def open_store() -> MemoryStore:
        return MemoryStore(options.store, signer=load_signer(options.key, signer=options.signer))

    first = open_store()
    check_server_key(first)
    if options.panel_key:
        check_panel_key(MemoryStore(options.store, signer=load_signer(options.panel_key)))
    Watched(options.tasks, TaskRegistry.parse).get()  # a broken file stops us here, not later
    for text in start_warnings(first.signer, options.tokens):
        say(text)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(2048)
    sock.set_inheritable(True)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    line = f"listening on http://{shown}:{bound}"
    loop = SyncLoop(open_store, sync_remote, sync_every) if sync_remote else None
    common: dict[str, Any] = {
        "log_config": LOGGING,
        "access_log": False,
        "server_header": False,
        "timeout_keep_alive": 5,
        "header_timeout": options.header_timeout,
    }
    try:
        if loop is not None:
            loop.start()
        if workers <= 1:
            app = build_app(options, after_write=loop.poke if loop else None)
            _ReadyServer(DeadlineConfig(app, **common), lambda: echo(line)).run(sockets=[sock])
        else:
            os.environ[ENV_OPTIONS] = options.to_env()
            config = DeadlineConfig(
                f"{__name__}:app_from_env", factory=True, workers=workers, **common
            )
            # The socket already listens: connections queue in the kernel until a worker takes
            # them, so the line may come before the workers are up.
            echo(line)
            Multiprocess(config, sockets=[sock]).run()
    finally:
        if loop is not None:
            loop.stop()
        sock.close()


def start_warnings(signer: Signer, tokens: str) -> list[str]:
    """What ``serve`` warns of once at start: a private key file that others may read, and
    tokens made before tokens were bound to tenants (they act for no task)."""
    found: list[str] = []
    path = getattr(signer, "key_path", None)
    # A .pub names a key whose private half ssh-agent holds: no secret in that file.
    if path is not None and path.suffix != ".pub":
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = 0
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            found.append(
                f"warning: the server's key file {path} can be read by others (mode "
                f"{stat.S_IMODE(mode):04o}); anyone who can read it can sign as the server: "
                f"run `chmod 600 {path}`"
            )
    try:
        unbound = token_file.load(tokens).unbound()
    except ConfigError:
        unbound = []  # every request says so (503), and the log line names the problem
    if unbound:
        found.append(
            f"warning: {tokens}: token(s) {', '.join(unbound)} were made before tokens were "
            "bound to tenants and act for no task (403); issue new ones with `truss-files "
            f"tokens new` and {token_file.BINDING_OPTIONS}, then `truss-files tokens revoke`"
        )
    return found


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class _ReadyServer(uvicorn.Server):
    """A uvicorn server that says when it accepts connections."""

    def __init__(self, config: uvicorn.Config, ready: Callable[[], None]) -> None:
        super().__init__(config)
        self._ready = ready

    async def startup(self, sockets: list[Any] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._ready()
