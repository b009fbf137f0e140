"""The Anthropic SDK adapter's public path; it lives in ``faces/anthropic_adapter.py``.

Kept as a public import path; nothing else lives here.
"""

from __future__ import annotations

from .faces.anthropic_adapter import TrussAsyncMemoryTool, TrussMemoryTool, read_tools

__all__ = ["TrussAsyncMemoryTool", "TrussMemoryTool", "read_tools"]
