"""Agent tools: one registry, served by the CLI (`truss-files tool`), MCP and the SDK adapter.

Importing this package imports none of its modules: the names below load on first use, so a
process that needs one small module (``tipconfig`` on the cold query path) does not pay for
the dispatcher, the run context and the registry (threading, tomllib, seven dataclasses).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..runs.runcontext import Grant, RunContext, load_run_context
    from .dispatch import Call, Outcome, ToolSession
    from .registry import (
        Annotations,
        Serving,
        Tool,
        all_tools,
        lookup,
    )

_EXPORTS = {
    **dict.fromkeys(("Grant", "RunContext", "load_run_context"), ".runs.runcontext"),
    **dict.fromkeys(("Call", "Outcome", "ToolSession"), "dispatch"),
    **dict.fromkeys(
        ("Annotations", "Serving", "Tool", "all_tools", "lookup"),
        "registry",
    ),
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value


__all__ = [
    "Annotations",
    "Call",
    "Grant",
    "Outcome",
    "RunContext",
    "Serving",
    "Tool",
    "ToolSession",
    "all_tools",
    "load_run_context",
    "lookup",
]
