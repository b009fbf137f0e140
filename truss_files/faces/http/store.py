"""The whole store over HTTP: query, view, write, why, export, the review queue and a
verdict's promote or reject, for a task's tenant.

    GET  /v1/tasks/{taskId}/store/query?query=…&kind=&key=&limit=&min_trust=&at=   tasks:read
    GET  /v1/tasks/{taskId}/store/entries/{entryId}?min_trust=&at=               tasks:read
    GET  /v1/tasks/{taskId}/store/entries/{entryId}/why                          tasks:read
    GET  /v1/tasks/{taskId}/store/export?min_trust=&at=    (JSON lines)         tasks:read
    POST /v1/tasks/{taskId}/store/entries   {"kind", "key", "body"}              tasks:write
    GET  /v1/tasks/{taskId}/store/pending?kind=&limit=                           tasks:panel
    POST /v1/tasks/{taskId}/store/entries/{entryId}/promote  (a PASS verdict)    tasks:panel
    POST /v1/tasks/{taskId}/store/entries/{entryId}/reject   (a FAIL verdict)    tasks:panel

Each route is admitted as ask and train are (``Backend.admit``: token, scope, the token's
tenant binding, the task), and the task's registry entry says whose store it reaches: every
read and decision passes ``tenant_scope`` of the task's run context to the facade, so an
entry of another enterprise -- or one with no enterprise at all -- answers as no entry (404,
worded as for an unknown id). A write goes through the facade's one write path
(``MemoryStore.write_for``): the task layer, the task's scope, its member as author, landing
unverified, refused whole when it holds a credential (422 ``secret``, the value never echoed).

Promote and reject take the verdict JSON ``truss-files verdict sign`` prints: signed by a
panel member's key, checked by the store as the CLI's ``promote`` checks it. The server
commits the decision with its panel key (``serve --panel-key``); without one it signs nothing
and answers as the CLI does for a key without the role (403 ``bad_signature``).

An entry id is the full 32-hex id: a prefix could be ambiguous across tenants, and the
store's answer to an ambiguous prefix names the ids it matched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ...errors import (
    KeylessError,
    NotFound,
    SignatureError,
    TransitionError,
    TrussError,
    UntrustedHistory,
    VerdictError,
)
from ...facade import export_record, read_verdict, tenant_scope
from ...format.views import entry_view
from ...recall.query import document
from ...tools.registry import lookup
from ...tools.schema import check_input, check_json
from .wire import HttpError, parse_json, read_body

if TYPE_CHECKING:
    from ...facade import MemoryStore
    from ...model import Entry
    from ...panel.eager import Written
    from ...runs.runcontext import RunContext
    from ...trust.verdict import Verdict


class Backend(Protocol):
    """What these routes need of a server process (``app.Backend``)."""

    def admit(self, request: Request, need: str) -> RunContext: ...
    def store(self) -> MemoryStore: ...
    def write(self, act: Callable[[MemoryStore], Written]) -> Written: ...
    def decide(self, act: Callable[[MemoryStore], Entry]) -> Entry: ...


PREFIX = "/v1/tasks/{taskId}/store"
ENTRY_ID = re.compile(r"^[0-9a-f]{32}$")
READ, WRITE, PANEL = "tasks:read", "tasks:write", "tasks:panel"

# The read tools' own fields (memory_query, memory_view), so the routes take what the tools
# take and the OpenAPI document cannot drift from either. ``contains`` and ``revalidate``
# belong to tool calls in a run, not to a request.
QUERY_FIELDS = ("query", "kind", "key", "limit", "min_trust", "at")
READ_FIELDS = ("min_trust", "at")
DEFAULT_LIMIT = 32  # memory_query's
PENDING_LIMIT = {"type": "integer", "minimum": 1, "maximum": 1000}


def _props(tool: str, names: tuple[str, ...]) -> dict[str, Any]:
    found = lookup(tool)
    props: Mapping[str, Any] = found.input_schema.get("properties", {}) if found else {}
    return {name: dict(props[name]) for name in names if name in props}


def query_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": _props("memory_query", QUERY_FIELDS),
        "required": ["query"],
        "additionalProperties": False,
    }


def read_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": _props("memory_view", READ_FIELDS),
        "additionalProperties": False,
    }


def pending_schema() -> dict[str, Any]:
    kind = _props("memory_query", ("kind",))
    return {
        "type": "object",
        "properties": {**kind, "limit": PENDING_LIMIT},
        "additionalProperties": False,
    }


def write_schema() -> dict[str, Any]:
    found = lookup("write_memory")
    return dict(found.input_schema) if found else {"type": "object"}


def params(request: Request, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The query string as input of ``schema``: each field once, integers as integers, then
    the schema's own checks (enums, bounds, required fields)."""
    props: Mapping[str, Any] = schema.get("properties", {})
    out: dict[str, Any] = {}
    for name, value in request.query_params.multi_items():
        if name not in props:
            takes = ", ".join(props) or "no parameters"
            raise HttpError(
                422, "invalid_input", f"unknown query parameter {name[:40]!r}; this takes: {takes}"
            )
        if name in out:
            raise HttpError(422, "invalid_input", f"`{name}` is given more than once; give it once")
        if props[name].get("type") == "integer":
            if not (value.isascii() and value.lstrip("-").isdigit() and len(value) <= 18):
                raise HttpError(422, "invalid_input", f"`{name}` must be an integer")
            out[name] = int(value)
        else:
            out[name] = value
    check_input(schema, out)
    return out


def entry_id(request: Request) -> str:
    found = str(request.path_params["entryId"])
    if not ENTRY_ID.match(found):
        raise HttpError(
            422,
            "invalid_input",
            "an entry id here is the full id: 32 lowercase hex digits (`truss-files list`)",
        )
    return found


def refusal(exc: TrussError) -> HttpError | None:
    """The status of an error only these routes meet; None leaves it to the face's own."""
    if isinstance(exc, NotFound):
        return HttpError(404, "not_found", exc.message)
    if isinstance(exc, KeylessError):  # a keyless verdict that does not verify
        return HttpError(422, exc.code, exc.message)
    if isinstance(exc, SignatureError):
        # The key the server would commit with lacks the role (``Store.require_role``): the
        # CLI's code for the same refusal, and nothing signed.
        return HttpError(
            403, exc.code, f"the server cannot commit this decision: {exc.message}; its "
            "operator starts it with a key holding the panel role (serve --panel-key)"
        )  # fmt: skip
    if isinstance(exc, VerdictError):
        return HttpError(422, exc.code, exc.message)
    if isinstance(exc, TransitionError):
        return HttpError(409, exc.code, exc.message)
    if isinstance(exc, UntrustedHistory):
        return HttpError(503, exc.code, exc.message)
    return None


async def _answer(work: Callable[[], Any]) -> Any:
    try:
        return await run_in_threadpool(work)
    except TrussError as exc:
        raise refusal(exc) or exc from None


def _verdict(body: bytes) -> Verdict:
    check_json(parse_json(body))
    try:
        return read_verdict(body.decode("utf-8"), "the request body")
    except TrussError as exc:
        raise refusal(exc) or exc from None


def routes(backend: Backend, max_body: int, body_timeout: float) -> list[Route]:
    def admit(request: Request, need: str) -> tuple[RunContext, dict[str, str]]:
        context = backend.admit(request, need)
        return context, tenant_scope(context)

    async def query(request: Request) -> Response:
        _, scope = admit(request, READ)
        inp = params(request, query_schema())

        def work() -> dict[str, Any]:
            result = backend.store().query(
                inp["query"],
                kind=inp.get("kind"),
                key=inp.get("key"),
                min_trust=inp.get("min_trust", "verified"),
                limit=inp.get("limit", DEFAULT_LIMIT),
                at=inp.get("at"),
                scope=scope,
            )
            return document(result)

        return JSONResponse(await _answer(work))

    async def view(request: Request) -> Response:
        _, scope = admit(request, READ)
        ref = entry_id(request)
        inp = params(request, read_schema())
        floor = inp.get("min_trust", "verified")

        def work() -> dict[str, Any]:
            found = backend.store().view([ref], min_trust=floor, at=inp.get("at"), scope=scope)
            if not found:
                raise HttpError(
                    404,
                    "not_found",
                    f"no entry {ref} at or above {floor} for this task's tenant"
                    + (f" at {inp['at']}" if inp.get("at") else ""),
                )
            return {"min_trust": floor, "entry": entry_view(found[0], full=True)}

        return JSONResponse(await _answer(work))

    async def why(request: Request) -> Response:
        _, scope = admit(request, READ)
        ref = entry_id(request)
        params(request, {"type": "object", "properties": {}, "additionalProperties": False})
        return JSONResponse(await _answer(lambda: backend.store().why(ref, scope=scope)))

    async def export(request: Request) -> Response:
        _, scope = admit(request, READ)
        inp = params(request, read_schema())

        def work() -> Any:
            store = backend.store()
            return store.export(inp.get("min_trust", "verified"), at=inp.get("at"), scope=scope)

        exported = await _answer(work)
        headers = {"Truss-Withheld": _header(exported.withheld)} if exported.withheld else None
        return StreamingResponse(
            _lines(exported.entries), media_type="application/x-ndjson", headers=headers
        )

    async def write(request: Request) -> Response:
        context, _ = admit(request, WRITE)
        body = await read_body(request, max_body, body_timeout)
        inp = parse_json(body)
        check_json(inp)
        check_input(write_schema(), inp)

        def work() -> dict[str, Any]:
            done = backend.write(
                lambda store: store.write_for(context, inp["kind"], inp["key"], inp["body"])
            )
            return done.result()

        return JSONResponse(await _answer(work))

    async def pending(request: Request) -> Response:
        _, scope = admit(request, PANEL)
        inp = params(request, pending_schema())

        def work() -> dict[str, Any]:
            queue = backend.store().pending(
                kind=inp.get("kind"), limit=inp.get("limit"), scope=scope
            )
            data = queue.to_dict()
            data.pop("skipped", None)  # file paths of the whole store, not the tenant's
            return data

        return JSONResponse(await _answer(work))

    def decision(outcome: str) -> Callable[[Request], Any]:
        async def decide(request: Request) -> Response:
            _, scope = admit(request, PANEL)
            ref = entry_id(request)
            verdict = _verdict(await read_body(request, max_body, body_timeout))
            if verdict.outcome != outcome:
                verb = "promote" if outcome == "PASS" else "reject"
                raise HttpError(
                    422,
                    "bad_verdict",
                    f"this verdict is a {verdict.outcome}; {verb} takes a {outcome} verdict",
                )

            def work() -> dict[str, Any]:
                def act(store: MemoryStore) -> Any:
                    if outcome == "PASS":
                        return store.promote(ref, verdict, scope=scope)
                    return store.reject(ref, verdict, scope=scope)

                entry = backend.decide(act)
                return {
                    "id": entry.id,
                    "trust": entry.trust.value,
                    "supersedes": entry.supersedes,
                    "superseded_by": entry.superseded_by,
                }

            return JSONResponse(await _answer(work))

        return decide

    entry = PREFIX + "/entries/{entryId}"
    return [
        Route(PREFIX + "/query", query, methods=["GET"]),
        Route(PREFIX + "/export", export, methods=["GET"]),
        Route(PREFIX + "/pending", pending, methods=["GET"]),
        Route(PREFIX + "/entries", write, methods=["POST"]),
        Route(entry, view, methods=["GET"]),
        Route(entry + "/why", why, methods=["GET"]),
        Route(entry + "/promote", decision("PASS"), methods=["POST"]),
        Route(entry + "/reject", decision("FAIL"), methods=["POST"]),
    ]


def _lines(entries: Any) -> Iterator[bytes]:
    for entry in entries:
        yield (json.dumps(export_record(entry), ensure_ascii=False, sort_keys=True) + "\n").encode()


def _header(text: str) -> str:
    return text.encode("ascii", "replace").decode("ascii").replace("\n", " ")[:500]
