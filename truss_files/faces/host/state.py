"""What the host hooks leave behind, outside git: a log and each hook's last run.

A hook must never break its host, so it reports nothing to the host when it fails: it
writes what went wrong here, and ``truss-files doctor`` reads it back. The files live under
the store's ``.git/truss/host/`` (a cache beside the index: losing it loses a report, never
memory); when no store can be found, under the user's state dir (``TRUSS_STATE_DIR``
overrides it), so even "no store here" is written down somewhere doctor looks.

    host/hooks.log            one line per hook run: time, hook, outcome, detail
    host/last/<hook>.json     the last run of each hook: {"hook", "at", "ok", "detail", ...}
    host/learned/<run>.json   how much of a transcript was learned (learn.py's watermark)
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

__all__ = [
    "LOG_NAME",
    "host_dir",
    "last_runs",
    "log_path",
    "read_json",
    "record_run",
    "user_state_dir",
    "write_json",
]

LOG_NAME: Final = "hooks.log"
LOG_LIMIT: Final = 256 * 1024  # past this the log starts over (one older copy kept)


def user_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("TRUSS_STATE_DIR"):
        return Path(env["TRUSS_STATE_DIR"])
    import platformdirs  # a dependency; only when no store is at hand

    return Path(platformdirs.user_state_dir("truss-files")) / "host"


def host_dir(
    git_dir: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None
) -> Path:
    """Where the hooks of the store whose git dir is ``git_dir`` keep their state (the user's
    state dir when there is no store)."""
    if git_dir is None:
        return user_state_dir(environ)
    return Path(git_dir) / "truss" / "host"


def log_path(folder: Path) -> Path:
    return folder / LOG_NAME


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` whole (a rename over the old file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps(dict(data), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def record_run(folder: Path, hook: str, ok: bool, detail: str, **extra: Any) -> None:
    """Note one hook run: a log line, and the hook's last run. Never raises: a hook that
    cannot write its report still must not break the host."""
    at = _now()
    line = f"{at} {hook} {'ok' if ok else 'error'}: {' '.join(detail.split())}\n"
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        log = log_path(folder)
        with contextlib.suppress(OSError):
            if log.stat().st_size > LOG_LIMIT:
                os.replace(log, log.with_name(LOG_NAME + ".1"))
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(line)
        record = {"hook": hook, "at": at, "ok": ok, "detail": detail, **extra}
        write_json(folder / "last" / f"{hook}.json", record)


def last_runs(folder: Path) -> dict[str, dict[str, Any]]:
    """Each hook's last run, by hook name."""
    found: dict[str, dict[str, Any]] = {}
    last = folder / "last"
    if not last.is_dir():
        return found
    for path in sorted(last.glob("*.json")):
        data = read_json(path)
        if data is not None:
            found[path.stem] = data
    return found
