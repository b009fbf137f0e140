"""The write path's name for the credential detector (format/secrets.py, where the outputs of
stored text reach it too): ``refuse``, ``scan_fields`` and ``entry_fields`` for a write,
``mask`` for what is learned unattended."""

from __future__ import annotations

from ..format.secrets import (
    Allow,
    Hit,
    entry_fields,
    find,
    mask,
    refuse,
    scan_fields,
    where,
    without_private,
)

__all__ = [
    "Allow",
    "Hit",
    "entry_fields",
    "find",
    "mask",
    "refuse",
    "scan_fields",
    "where",
    "without_private",
]
