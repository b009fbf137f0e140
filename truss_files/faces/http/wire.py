"""What every HTTP route shares on the wire: the JSON error, a bounded body, a strict JSON
parse. The routes of ``app.py`` (ask, train) and of ``store.py`` (the whole store) use these,
so a body is bounded and refused alike on every route."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse


class HttpError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    sent = dict(headers or {})
    if status == 401:
        sent["WWW-Authenticate"] = "Bearer"
    return JSONResponse({"error": {"code": code, "message": message}}, status, sent or None)


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The whole body, refused as soon as it is known to pass ``limit`` or to arrive too late."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HttpError(400, "bad_request", "Content-Length must be a number of bytes")
        if int(declared) > limit:
            raise HttpError(413, "too_large", f"the body may hold at most {limit:,} bytes")
    chunks: list[bytes] = []
    size = 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HttpError(413, "too_large", f"the body may hold at most {limit:,} bytes")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        raise HttpError(
            408, "timeout", f"the body did not arrive within {timeout:g} s; send it at once"
        ) from None
    return b"".join(chunks)


def _parse_int(text: str) -> int:
    # int() of thousands of digits is slow, and no field takes more than a few.
    if len(text) > 20:
        raise ValueError("a number with more than 20 digits")
    return int(text)


def _parse_constant(text: str) -> Any:
    raise ValueError(f"{text} is not a JSON number")


def parse_json(body: bytes) -> Any:
    if not body:
        raise HttpError(422, "invalid_input", "the body must be a JSON object; it is empty")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HttpError(
            422, "invalid_input", f"the body is not UTF-8 (offset {exc.start})"
        ) from None
    try:
        return json.loads(text, parse_int=_parse_int, parse_constant=_parse_constant)
    except RecursionError:
        raise HttpError(422, "invalid_input", "the body is nested too deeply to read") from None
    except ValueError as exc:  # JSONDecodeError too; its message quotes no input
        raise HttpError(422, "invalid_input", f"the body is not JSON: {exc}") from None
