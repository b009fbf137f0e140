"""Review and enforcement commands: `diff`, `hooks`, `textconv`, `merge-driver`, `sync`."""

from __future__ import annotations

from .cli import cli

__all__ = ["cli"]
