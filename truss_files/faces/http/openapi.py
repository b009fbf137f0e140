"""The OpenAPI document of the HTTP face, built from the tool registry's own schemas.

The ask route's query parameters are memory.ask's input fields and the train route's body is
memory.train's input schema; the store routes take the read tools' fields and write_memory's
input (``store.py`` builds those schemas for its handlers and for this document alike), so the
document cannot drift from what the handlers check. Each
route lists every status the server answers with (``tests/faces/http/test_http.py`` checks them
against real answers, and the schema-driven fuzz against the running server).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...tools.registry import lookup

VERSION = "1"

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}

_WHY = {
    "401": "no token, an unknown token or an expired one",
    "403": "the token lacks the route's scope, or is not bound to this task's tenant",
    "404": "no such task in the task registry",
    "408": "the body did not arrive in time",
    "413": "the body is larger than the server takes",
    "409": "the store kept moving under the write; try again",
    "422": "the input is invalid; the message names the field",
    "503": "memory or the server's configuration could not be read",
}


_STORE = {
    "403": "the token lacks the route's scope, or is not bound to this task's tenant; on "
    "promote and reject also the server holding no key with the panel role (bad_signature)",
    "404": "no such task in the task registry, or no such entry for this task's tenant",
    "409": "the store kept moving under the write, or the entry is not in a state this "
    "changes; the message says which",
    "422": "the input is invalid; the message names the field (code secret: a credential in "
    "a write, never echoed; bad_verdict: a verdict the store refuses)",
}


def _input_schema(tool_name: str) -> Mapping[str, Any]:
    tool = lookup(tool_name)
    if tool is None:
        return {"type": "object"}
    return tool.input_schema


def _errors(*codes: str, store: bool = False) -> dict[str, Any]:
    why = {**_WHY, **_STORE} if store else _WHY
    return {
        code: {
            "description": why[code],
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
        for code in codes
    }


def _query_parameters(schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    required = set(schema.get("required", ()))
    out = []
    for name, sub in schema.get("properties", {}).items():
        param: dict[str, Any] = {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": dict(sub),
        }
        if "description" in sub:
            param["description"] = sub["description"]
        out.append(param)
    return out


def _store_paths(task: Mapping[str, Any], max_body: int) -> dict[str, Any]:
    # Late: the store routes' module imports Starlette, which this module does not need.
    from . import store

    entry = {
        "name": "entryId",
        "in": "path",
        "required": True,
        "description": "An entry's full id (32 hex digits).",
        "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
    }
    reads = _errors("401", "403", "404", "422", "503", store=True)
    writes = _errors("401", "403", "404", "408", "409", "413", "422", "503", store=True)
    json_ok = {"description": "the answer", "content": {"application/json": {"schema": {}}}}

    def read(op: str, summary: str, params: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "get": {
                "operationId": op,
                "summary": summary,
                "security": [{"bearer": []}],
                "parameters": [task, *params],
                "responses": {"200": json_ok, **reads},
            }
        }

    def post(op: str, summary: str, body: str, schema: Any, path: list[Any]) -> dict[str, Any]:
        return {
            "post": {
                "operationId": op,
                "summary": summary,
                "security": [{"bearer": []}],
                "parameters": [task, *path],
                "requestBody": {
                    "required": True,
                    "description": f"{body}; at most {max_body:,} bytes",
                    "content": {"application/json": {"schema": schema}},
                },
                "responses": {"200": json_ok, **writes},
            }
        }

    verdict = {"type": "object", "description": "a verdict as `truss-files verdict sign` prints it"}
    base = "/v1/tasks/{taskId}/store"
    export = read(
        "store_export",
        "the tenant's entries as JSON lines that `truss-files import` reads back (tasks:read)",
        _query_parameters(store.read_schema()),
    )
    export["get"]["responses"]["200"] = {
        "description": "one entry a line",
        "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
    }
    return {
        f"{base}/query": read(
            "store_query",
            "search the tenant's entries, as memory_query (tasks:read)",
            _query_parameters(store.query_schema()),
        ),
        f"{base}/export": export,
        f"{base}/pending": read(
            "store_pending",
            "the review queue: the tenant's unverified entries (tasks:panel)",
            _query_parameters(store.pending_schema()),
        ),
        f"{base}/entries": post(
            "store_write",
            "write an entry for the task; it lands unverified (tasks:write)",
            "write_memory's input",
            store.write_schema(),
            [],
        ),
        f"{base}/entries/{{entryId}}": read(
            "store_view",
            "one entry by id, as memory_view (tasks:read)",
            [entry, *_query_parameters(store.read_schema())],
        ),
        f"{base}/entries/{{entryId}}/why": read(
            "store_why", "why the store believes an entry, each change dated (tasks:read)", [entry]
        ),
        f"{base}/entries/{{entryId}}/promote": post(
            "store_promote",
            "unverified -> verified on a panel member's PASS verdict (tasks:panel)",
            "a PASS verdict for this entry",
            verdict,
            [entry],
        ),
        f"{base}/entries/{{entryId}}/reject": post(
            "store_reject",
            "unverified -> rejected on a panel member's FAIL verdict (tasks:panel)",
            "a FAIL verdict for this entry",
            verdict,
            [entry],
        ),
    }


def document(max_body: int) -> dict[str, Any]:
    task = {
        "name": "taskId",
        "in": "path",
        "required": True,
        "description": "A task of the server's task registry: it gives the call's run context.",
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"},
    }
    ok = {"description": "the tool's result", "content": {"application/json": {"schema": {}}}}
    ask_schema = _input_schema("memory.ask")
    train_schema = dict(_input_schema("memory.train"))
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "truss-files enterprise memory",
            "version": VERSION,
            "description": "memory.ask and memory.train of the tool registry, over HTTP, "
            "and the whole store for a task's tenant (query, view, write, why, export, the "
            'review queue, promote, reject). A train the rules refuse is a 200 with "status": '
            '"failed". A train without a source is idempotent on its Idempotency-Key header.',
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": _ERROR},
        },
        "paths": {
            "/healthz": {
                "get": {
                    "summary": "liveness",
                    "security": [],
                    "responses": {"200": {"description": "the server is up"}},
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "this document",
                    "security": [],
                    "responses": {"200": {"description": "OpenAPI 3.0"}},
                }
            },
            "/v1/tasks/{taskId}/memory/ask": {
                "get": {
                    "operationId": "memory_ask",
                    "summary": "memory.ask in the task's run context (scope tasks:read)",
                    "security": [{"bearer": []}],
                    "parameters": [task, *_query_parameters(ask_schema)],
                    "responses": {"200": ok, **_errors("401", "403", "404", "422", "503")},
                }
            },
            "/v1/tasks/{taskId}/memory/train": {
                "post": {
                    "operationId": "memory_train",
                    "summary": "memory.train in the task's run context (scope tasks:write)",
                    "security": [{"bearer": []}],
                    "parameters": [
                        task,
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": False,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 128},
                        },
                    ],
                    "requestBody": {
                        "required": True,
                        "description": f"memory.train's input; at most {max_body:,} bytes",
                        "content": {"application/json": {"schema": train_schema}},
                    },
                    "responses": {
                        "200": ok,
                        **_errors("401", "403", "404", "408", "409", "413", "422", "503"),
                    },
                }
            },
            **_store_paths(task, max_body),
        },
    }
