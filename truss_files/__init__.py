"""truss-files: signed, reviewable, revertible memory for LLM agents.

The names below are the public surface; everything else may change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    ConfigError,
    ConflictError,
    EntryError,
    NotFound,
    SignatureError,
    StoreError,
    TransitionError,
    TrussError,
    UsageError,
    VerdictError,
)
from .model import Entry, Kind, Layer, Provenance, Trust

if TYPE_CHECKING:
    from .panel.verdict import Verdict
    from .store import MemoryStore


def __getattr__(name: str) -> Any:
    # pygit2 and cryptography cost ~100 ms to import; the query path must not pay for them.
    if name == "MemoryStore":
        from .store import MemoryStore

        return MemoryStore
    if name == "Verdict":
        from .panel.verdict import Verdict

        return Verdict
    raise AttributeError(f"module 'truss_files' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ConflictError",
    "Entry",
    "EntryError",
    "Kind",
    "Layer",
    "MemoryStore",
    "NotFound",
    "Provenance",
    "SignatureError",
    "StoreError",
    "TransitionError",
    "Trust",
    "TrussError",
    "UsageError",
    "Verdict",
    "VerdictError",
    "__version__",
]
