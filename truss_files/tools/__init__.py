"""Agent tools: one registry, served by the CLI (`truss-files tool`), MCP and the SDK adapter.

Importing this package is cheap; the tool modules load on first use of the registry.
"""

from __future__ import annotations

from .context import Grant, RunContext, load_run_context
from .dispatch import Call, Outcome, ToolSession
from .registry import Annotations, Serving, Tool, ToolNotServed, UnknownTool, all_tools, lookup

__all__ = [
    "Annotations",
    "Call",
    "Grant",
    "Outcome",
    "RunContext",
    "Serving",
    "Tool",
    "ToolNotServed",
    "ToolSession",
    "UnknownTool",
    "all_tools",
    "load_run_context",
    "lookup",
]
