"""What the HTTP face stands on, free of any web framework: bearer tokens (only their hashes
on disk), the task registry that gives each task its run context, and the files' reloading.

``faces/http/app.py`` serves these over Starlette; the CLI's ``tokens`` commands write the token
file through ``faces/server/tokens.py`` without importing a web framework.
"""

from __future__ import annotations
