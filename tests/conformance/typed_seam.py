"""Typed uses of the seam that ``test_protocol`` hands to mypy: the git store must be
assignable to ``Memory`` wherever a face or tool asks for one."""

from __future__ import annotations

from pathlib import Path

from truss_files import MemoryStore
from truss_files.memory import Memory


def git_memory(path: Path) -> Memory:
    m: Memory = MemoryStore(path)
    return m


def first_hit(memory: Memory, text: str) -> str | None:
    """What a face does with the seam: ask, read the answer's documented fields."""
    result = memory.query(text, min_trust="verified", limit=1)
    return result.hits[0].entry.id if result.hits else None
