"""truss-files: signed, reviewable, revertible memory for LLM agents.

The names below are the public surface; everything else may change.
"""

from __future__ import annotations

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
from .panel.verdict import Verdict
from .store import MemoryStore

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
