"""Agent tool commands: `tool`, `tools schema`, `runs`, `mcp`."""

from __future__ import annotations

from .cli import cli

__all__ = ["cli"]
