"""Which memory instruction a run's system prompt carries: per provider and model pattern.

``[context.instruction]`` in the layered settings holds ``default`` and, optionally,
``anthropic``, ``openai`` and model patterns (shell-style: ``"claude-*" = "…"``); the older
``[context] instruction = "…"`` is the same as ``default``. The most specific applies:

    1. a pattern the model matches: an exact name before any wildcard, then the pattern with
       more literal characters (``claude-opus-*`` before ``claude-*``), then by name;
    2. the provider of the format (``anthropic``, ``openai``; ``json`` names none);
    3. ``default``; else the built-in note (``assemble.default_instruction``).

A run records the whole table at its start, so every later ``context`` for the same format and
model returns the same system bytes, whatever the settings say by then.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ..config.settings import Settings

__all__ = ["BUILT_IN", "PROVIDERS", "instruction_table", "pick", "provider_of"]

PROVIDERS: Final = ("anthropic", "openai")
BUILT_IN: Final = "built-in"  # the name ``pick`` gives when nothing is configured
PREFIX: Final = "context.instruction."
_WILD: Final = frozenset("*?[")


def instruction_table(settings: Settings) -> dict[str, str]:
    """``{name: text}`` of every configured instruction (``default``, providers, patterns)."""
    out: dict[str, str] = {}
    legacy = settings.values.get("context.instruction")
    if legacy is not None and isinstance(legacy.value, str):
        out["default"] = legacy.value
    for key, value in settings.values.items():
        if key.startswith(PREFIX):
            out[key[len(PREFIX) :]] = str(value.value)
    return out


def provider_of(fmt: str | None) -> str | None:
    return fmt if fmt in PROVIDERS else None


def _rank(pattern: str) -> tuple[int, int, str]:
    wild = any(ch in _WILD for ch in pattern)
    literal = sum(1 for ch in pattern if ch not in _WILD)
    return (1 if wild else 0, -literal, pattern)


def pick(
    table: Mapping[str, str], provider: str | None, model: str | None
) -> tuple[str, str] | None:
    """``(name, text)`` of the most specific instruction for ``provider`` and ``model``;
    None when only the built-in note applies."""
    if model:
        patterns = [
            name
            for name in table
            if name != "default" and name not in PROVIDERS and fnmatch.fnmatchcase(model, name)
        ]
        if patterns:
            best = min(patterns, key=_rank)
            return best, table[best]
    if provider is not None and provider in table:
        return provider, table[provider]
    if "default" in table:
        return "default", table["default"]
    return None
