"""truss-files: signed, reviewable, revertible memory for LLM agents.

The names below are the public surface; everything else may change.
"""

from __future__ import annotations

# Every public name is imported on first use: importing the package imports nothing else
# (not even typing), so what a command pays for is what its own modules import -- pygit2 and
# cryptography cost more than a whole query.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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
    from .facade import MemoryStore
    from .memory import Memory
    from .model import Entry, Kind, Layer, Provenance, Trust
    from .recall.engine import RecallResult
    from .recall.pipeline import Hit
    from .trust.verdict import Verdict

_EXPORTS = {
    **dict.fromkeys(
        (
            "ConfigError",
            "ConflictError",
            "EntryError",
            "NotFound",
            "SignatureError",
            "StoreError",
            "TransitionError",
            "TrussError",
            "UsageError",
            "VerdictError",
        ),
        "errors",
    ),
    **dict.fromkeys(("Entry", "Kind", "Layer", "Provenance", "Trust"), "model"),
    "Memory": "memory",
    "Hit": "recall.pipeline",
    "RecallResult": "recall.engine",
    "MemoryStore": "facade",
    "Verdict": "trust.verdict",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'truss_files' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value


__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ConflictError",
    "Entry",
    "EntryError",
    "Hit",
    "Kind",
    "Layer",
    "Memory",
    "MemoryStore",
    "NotFound",
    "Provenance",
    "RecallResult",
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
