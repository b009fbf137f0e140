"""The ASGI factory's public path (``uvicorn --factory truss_files.http:create_app``);
it lives in ``faces/http/factory.py``.

Kept as a public import path; nothing else lives here.
"""

from __future__ import annotations

from .faces.http.factory import create_app

__all__ = ["create_app"]
