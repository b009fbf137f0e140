"""The HTTP API as an ASGI app for a server you run yourself (extra [http])::

    TRUSS_STORE=/srv/memory TRUSS_TASKS=/etc/truss/tasks.toml \\
    TRUSS_TOKENS=/etc/truss/tokens.toml TRUSS_KEY=/etc/truss/server_key \\
        uvicorn --factory truss_files.http:create_app --host 127.0.0.1 --port 8377

``create_app`` builds what ``truss-files serve`` serves (same routes, checks, logs and
errors) from the environment: ``TRUSS_STORE``, ``TRUSS_TASKS`` and ``TRUSS_TOKENS`` name the
store and the two files (each required), ``TRUSS_KEY`` / ``TRUSS_SIGNER`` the server's own
key as for every command, ``TRUSS_PANEL_KEY`` the key promotes and rejects are committed with
(as ``serve --panel-key``). It makes the same start-up checks as ``serve`` (the key holds the
agent role and no other, the task registry parses) and prints the same warnings, so a broken
set-up stops the process before it accepts a connection. gunicorn takes it too, with
``-k uvicorn.workers.UvicornWorker 'truss_files.http:create_app()'``.

``serve`` keeps what plain uvicorn lacks: the slow-headers deadline and ``--sync-remote``.
Put the app behind a reverse proxy that terminates TLS and buffers slow clients (README "The
HTTP API"). uvicorn's access log is switched off here, as ``serve`` does: it would print the
query string, where an ask's purpose travels.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from starlette.applications import Starlette

from ...errors import ConfigError
from ...facade import MemoryStore
from ...signing.keys import load_signer
from ..server.runner import check_panel_key, check_server_key
from ..server.tasks import TaskRegistry
from ..server.watched import Watched
from . import app as face

REQUIRED = ("TRUSS_STORE", "TRUSS_TASKS", "TRUSS_TOKENS")


def options_from(environ: Mapping[str, str]) -> face.ServeOptions:
    """The server's options from ``environ``; a missing variable is refused by name."""
    missing = [name for name in REQUIRED if not environ.get(name)]
    if missing:
        raise ConfigError(
            f"truss_files.http:create_app needs {', '.join(missing)} in the environment: "
            "TRUSS_STORE the store, TRUSS_TASKS the task registry (tasks.toml), TRUSS_TOKENS "
            "the token file (`truss-files tokens new`), as `truss-files serve --tasks "
            "--tokens` takes them"
        )
    return face.ServeOptions(
        store=os.path.expanduser(environ["TRUSS_STORE"]),
        tasks=os.path.expanduser(environ["TRUSS_TASKS"]),
        tokens=os.path.expanduser(environ["TRUSS_TOKENS"]),
        key=environ.get("TRUSS_KEY") or None,
        signer=environ.get("TRUSS_SIGNER") or None,
        panel_key=environ.get("TRUSS_PANEL_KEY") or None,
    )


def create_app(environ: Mapping[str, str] | None = None) -> Starlette:
    """The ASGI app ``truss-files serve`` serves, configured from ``environ`` (default: the
    process environment); for ``uvicorn --factory truss_files.http:create_app``."""
    options = options_from(os.environ if environ is None else environ)
    signer = load_signer(options.key, signer=options.signer)
    check_server_key(MemoryStore(options.store, signer=signer))
    if options.panel_key:
        check_panel_key(MemoryStore(options.store, signer=load_signer(options.panel_key)))
    Watched(options.tasks, TaskRegistry.parse).get()  # a broken file stops us here, not later
    for text in face.start_warnings(signer, options.tokens):
        print(text, file=sys.stderr, flush=True)
    _quiet_access_log()
    return face.build_app(options, signer=signer)


def _quiet_access_log() -> None:
    """uvicorn's access line holds the query string (an ask's purpose): off. Our own line per
    request (method, route, task, status, time) goes to stderr unless logging says otherwise."""
    logging.getLogger("uvicorn.access").disabled = True
    ours = logging.getLogger("truss_files.http")
    if not ours.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        ours.addHandler(handler)
        ours.setLevel(logging.INFO)
        ours.propagate = False


__all__ = ["create_app", "options_from"]
