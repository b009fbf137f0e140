"""Verification commands: `verify`, `recheck`, `config show`."""

from __future__ import annotations

from .cli import cli

__all__ = ["cli"]
