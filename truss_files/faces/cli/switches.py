"""The switches that serve the agent tools, shared by `tool`, `tools schema`, `mcp` and
`context`.

The write switch is ``--memory-write``: its first name, ``--memory-tool``, differed from the
read switch ``--memory-tools`` by one letter, so a typo served writes. The old name still works
(hidden from help), so harness configurations written for it keep running.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

READ_FLAG = "--memory-tools"
WRITE_FLAG = "--memory-write"
OLD_WRITE_FLAG = "--memory-tool"


def memory_switches(func: F) -> F:
    """Add --memory-tools and --memory-write (plus the hidden old --memory-tool) to a command;
    the command receives ``memory_tools`` and ``memory_write``."""

    @functools.wraps(func)
    def wrapper(*args: Any, old_memory_tool: bool = False, **kwargs: Any) -> Any:
        kwargs["memory_write"] = kwargs.get("memory_write", False) or old_memory_tool
        return func(*args, **kwargs)

    command: Any = click.option(OLD_WRITE_FLAG, "old_memory_tool", is_flag=True, hidden=True)(
        wrapper
    )
    command = click.option(
        WRITE_FLAG,
        "memory_write",
        is_flag=True,
        help="Serve the write binding (memory, write_memory), as [tools] memory_write = true "
        f"({OLD_WRITE_FLAG}, its old name, still works).",
    )(command)
    command = click.option(
        READ_FLAG,
        "memory_tools",
        is_flag=True,
        help="Serve the read tools (memory_query, memory_view, read_memory), as [tools] "
        "memory = true.",
    )(command)
    return command


def gates(memory_tools: bool, memory_write: bool) -> list[str]:
    """The registry's gates the two switches open."""
    return [g for g, on in (("memory", memory_tools), ("memory_write", memory_write)) if on]
