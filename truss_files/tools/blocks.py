"""Anthropic content blocks: a ``tool_use`` block in, the matching ``tool_result`` block out.

A harness can pipe the model's blocks straight through ``truss-files tool --block``: the
result block carries the model-facing text (the memory tool's content, a JSON result, or the
error message) and ``is_error``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .dispatch import Outcome


@dataclass(frozen=True)
class ToolUse:
    id: str
    name: str
    input: Mapping[str, Any]


def parse_tool_use(block: Any) -> ToolUse:
    """Check a ``{"type": "tool_use", "id", "name", "input"}`` block."""
    if not isinstance(block, Mapping) or block.get("type") != "tool_use":
        raise UsageError(
            'expected a tool_use block: {"type": "tool_use", "id": ..., "name": ..., '
            '"input": {...}}'
        )
    block_id, name, tool_input = block.get("id"), block.get("name"), block.get("input", {})
    if not isinstance(block_id, str) or not block_id:
        raise UsageError("the tool_use block needs a string `id`")
    if not isinstance(name, str) or not name:
        raise UsageError("the tool_use block needs a string `name`")
    if not isinstance(tool_input, Mapping):
        raise UsageError("the tool_use block's `input` must be an object")
    return ToolUse(block_id, name, tool_input)


def tool_result(use: ToolUse, outcome: Outcome) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": use.id,
        "content": outcome.text,
        "is_error": not outcome.ok,
    }
