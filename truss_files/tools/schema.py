"""Tool input checking against the registry's JSON schemas, and schema export per provider.

The checker covers the subset of JSON Schema the registry uses (object, nested objects,
string, integer, boolean, array, enum, bounds) and words its errors for a model to read and
correct. Export gives every served tool as Anthropic, OpenAI (function calling) or MCP
definitions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ..errors import UsageError
from .registry import Tool

FORMATS = ("anthropic", "openai", "mcp")
# What any tool input may be, before its schema is looked at: no tool takes anything nested
# deeper than a few levels or larger than a few hundred values, and a parser or a hash of the
# input must never meet an unpaired surrogate (not encodable as UTF-8), an integer no JSON
# client reads exactly, or a number that is not finite.
MAX_DEPTH: Final = 32
MAX_VALUES: Final = 10_000
MAX_INT: Final = 2**53 - 1
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def check_json(value: Any) -> None:
    """Raise UsageError unless ``value`` is plain JSON a tool may take: objects with text
    keys, lists, strings of valid Unicode, integers within +/-(2**53 - 1), finite numbers,
    booleans and null, at most ``MAX_DEPTH`` deep and ``MAX_VALUES`` values in all. The walk
    is iterative, so no nesting can exhaust the stack."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    count = 0
    while stack:
        item, where, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise UsageError(
                f"the tool input holds more than {MAX_VALUES:,} values; send only the fields "
                "the tool takes"
            )
        name = (
            f"`{where if len(where) <= 60 else where[:57] + '...'}`" if where else "the tool input"
        )
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found:
                raise UsageError(
                    f"{name} holds an unpaired surrogate ({ascii(found.group())[1:-1]}), which "
                    "is not Unicode text; send valid UTF-8"
                )
        elif item is None or isinstance(item, bool):
            pass
        elif isinstance(item, int):
            if not -MAX_INT <= item <= MAX_INT:
                raise UsageError(
                    f"{name} is an integer of about {int(item.bit_length() * 0.30103) + 1:,} "
                    f"digits; integers must lie within +/-{MAX_INT:,}"
                )
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise UsageError(f"{name} is {item}; numbers must be finite")
        elif isinstance(item, Mapping | list | tuple):
            if depth >= MAX_DEPTH:
                raise UsageError(
                    f"{name} is nested more than {MAX_DEPTH} levels deep; no tool takes that"
                )
            if isinstance(item, Mapping):
                for key, sub in item.items():
                    if not isinstance(key, str) or _SURROGATE.search(key):
                        raise UsageError(
                            f"{name} has a field name {_label(key)} that is not valid text; "
                            "field names are strings of valid UTF-8"
                        )
                    stack.append(
                        (sub, f"{where}.{_label(key)}" if where else _label(key), depth + 1)
                    )
            else:
                for i, sub in enumerate(item):
                    stack.append((sub, f"{where or 'input'}[{i}]", depth + 1))
        else:
            raise UsageError(f"{name} is a {type(item).__name__}, which is not a JSON value")


def _label(key: Any) -> str:
    """A field name as a message may quote it: short, and never an unencodable character."""
    text = key if isinstance(key, str) else repr(key)
    text = text if len(text) <= 40 else text[:40] + "..."
    return text if text.isprintable() and not _SURROGATE.search(text) else ascii(text)[1:-1]


def check_input(schema: Mapping[str, Any], value: Any) -> None:
    """Raise UsageError naming the field, what it must be and what was given."""
    if not isinstance(value, Mapping):
        raise UsageError(f"the tool input must be a JSON object, got {_kind(value)}")
    _check_fields(schema, value, "")


def _check_fields(schema: Mapping[str, Any], value: Mapping[str, Any], where: str) -> None:
    """The fields of an object: the tool input itself (``where`` empty) or one inside it."""
    props: Mapping[str, Any] = schema.get("properties", {})
    unknown = sorted(set(value) - set(props))
    if unknown and schema.get("additionalProperties") is False:
        names = ", ".join(repr(u) for u in unknown)
        if where:
            raise UsageError(
                f"`{where}` has unknown field(s) {names}; it takes: {', '.join(props)}"
            )
        raise UsageError(f"unknown field(s) {names}; this tool takes: " + ", ".join(props))
    prefix = f"{where}." if where else ""
    for name in schema.get("required", ()):
        if name not in value:
            raise UsageError(f"`{prefix}{name}` is required")
    for name, sub in props.items():
        if name in value:
            _check(sub, value[name], prefix + name)


def _check(schema: Mapping[str, Any], value: Any, where: str) -> None:
    kind = schema.get("type")
    if value is None and schema.get("nullable"):
        return
    if kind == "string":
        if not isinstance(value, str):
            raise UsageError(f"`{where}` must be a string, got {_kind(value)}")
        limit = schema.get("maxLength")
        if limit is not None and len(value) > limit:
            raise UsageError(f"`{where}` is {len(value)} characters; the limit is {limit}")
    elif kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            raise UsageError(f"`{where}` must be an integer, got {_kind(value)}")
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            raise UsageError(f"`{where}` must be between {low} and {high}, got {value}")
    elif kind == "boolean":
        if not isinstance(value, bool):
            raise UsageError(f"`{where}` must be true or false, got {_kind(value)}")
    elif kind == "array":
        if not isinstance(value, list):
            raise UsageError(f"`{where}` must be a list, got {_kind(value)}")
        low, high = schema.get("minItems"), schema.get("maxItems")
        if (low is not None and len(value) < low) or (high is not None and len(value) > high):
            size = f"exactly {low}" if low == high else f"between {low} and {high}"
            raise UsageError(f"`{where}` must hold {size} items, got {len(value)}")
        items = schema.get("items")
        if items:
            for i, item in enumerate(value):
                _check(items, item, f"{where}[{i}]")
    elif kind == "object":
        if not isinstance(value, Mapping):
            raise UsageError(f"`{where}` must be an object, got {_kind(value)}")
        _check_fields(schema, value, where)
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        raise UsageError(f"`{where}` must be one of: {', '.join(map(str, enum))}; got {value!r}")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def export(tools: Iterable[Tool], fmt: str) -> list[dict[str, Any]]:
    if fmt not in FORMATS:
        raise UsageError(f"unknown schema format '{fmt}'; use one of: {', '.join(FORMATS)}")
    return [_one(tool, fmt) for tool in tools]


def _one(tool: Tool, fmt: str) -> dict[str, Any]:
    schema = dict(tool.input_schema)
    if fmt == "anthropic":
        if tool.anthropic_definition is not None:
            return dict(tool.anthropic_definition)
        return {
            "name": tool.provider_name,
            "description": tool.description,
            "input_schema": schema,
        }
    if fmt == "openai":
        return {
            "type": "function",
            "function": {
                "name": tool.provider_name,
                "description": tool.description,
                "parameters": schema,
            },
        }
    found = {
        "name": tool.provider_name,
        "title": tool.annotations.title,
        "description": tool.description,
        "inputSchema": schema,
        "annotations": tool.annotations.to_mcp(),
    }
    if tool.output_schema is not None:
        found["outputSchema"] = dict(tool.output_schema)
    return found
