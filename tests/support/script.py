"""The console script as an attacker or an operator runs it: a real process (the script's
``main`` in a forked child, tests/support/console.py), one store, the key file named by
``--key`` (saved beside the store by the fixtures)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support import console
from tests.support.console import SCRIPT
from truss_files.facade import MemoryStore


def run(
    store: MemoryStore, key: str, *args: str, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``truss-files --store S --key K ARGS`` as a process, signing with the key file K;
    whatever it does, it never prints a traceback."""
    where = Path(str(store.git.workdir))
    done = console.run(
        [str(SCRIPT), "--store", str(where), "--key", str(where.parent / key), *args],
        input=stdin,
        text=True,
        env={**os.environ, **env},
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def truss(
    store: MemoryStore, key: str, *args: str, stdin: str | None = None, **env: str
) -> tuple[int, Any]:
    """``run`` piped (JSON out): the exit status and the one object it printed."""
    done = run(store, key, *args, stdin=stdin, **env)
    return done.returncode, json.loads(done.stdout)
