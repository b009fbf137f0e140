"""Which entries reads returned: ``.git/truss/usage``, outside git, for ``salience update``.

Every read face (the CLI's ``query``, the tools ``memory_query`` and ``memory_view`` -- so MCP
and HTTP too -- and ``MemoryStore.query`` / ``view``) appends one line per answer::

    <unix seconds> <face> <entry id> <entry id> ...

Cheap on purpose: no commit, no lock, no pygit2. One ``write`` of a line shorter than
``LINE_MAX`` to a file opened ``O_APPEND``: the kernel places each write at the end of the
file, so concurrent readers (other processes, other threads) never interleave inside a
line. A reader of the file skips any line it cannot parse (a crash mid-write, a hand edit),
and recording never fails a read: an unwritable file is the same as recording off.
``TRUSS_USAGE=off`` turns it off (``python -m benchmarks usage`` measures both).

The file is a hint, not a record of belief: anyone with the work tree can edit it, which is
why its only effect is through ``salience update``, one signed commit a panel key makes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from .gitdir import GitDir

USAGE_FILE = "usage"
LINE_MAX = 4000  # below PIPE_BUF-sized writes, which every local filesystem appends whole
_ID_LEN = 32


class Use(NamedTuple):
    """What the usage file says of one entry: how often reads returned it, and when last."""

    uses: int
    last: float


def usage_path(where: str | os.PathLike[str] | GitDir) -> str:
    """``.git/truss/usage`` of the repository at ``where`` (a work tree, a git dir, or one
    already discovered)."""
    git = where if isinstance(where, GitDir) else GitDir.discover(where)
    return os.path.join(git.cache_str, USAGE_FILE)


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get("TRUSS_USAGE", "on").strip().lower() not in ("off", "0", "false", "no")


def record(
    where: str | os.PathLike[str] | GitDir,
    ids: Iterable[str],
    face: str,
    *,
    environ: Mapping[str, str] | None = None,
    now: float | None = None,
) -> None:
    """Append that a read by ``face`` returned ``ids``. Never raises: a read must not fail
    because its use could not be noted."""
    try:
        if not enabled(environ):
            return
        found = [i for i in ids if len(i) == _ID_LEN and i.isalnum()]
        if not found:
            return
        stamp = f"{int(now if now is not None else time.time())} {face.replace(' ', '_')}"
        lines: list[str] = []
        line = stamp
        for entry_id in found:
            if len(line) + 1 + _ID_LEN + 1 > LINE_MAX:
                lines.append(line + "\n")
                line = stamp
            line += " " + entry_id
        lines.append(line + "\n")
        path = usage_path(where)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            for text in lines:
                os.write(fd, text.encode("ascii"))
        finally:
            os.close(fd)
    except Exception:  # noqa: BLE001 - recording is best effort by contract, never a failure
        return


def read_usage(where: str | os.PathLike[str]) -> dict[str, Use]:
    """Per entry id, how many answers returned it and the time of the last; a line that
    does not parse is skipped."""
    out: dict[str, Use] = {}
    try:
        with open(usage_path(where), "rb") as handle:
            data = handle.read()
    except OSError:
        return out
    for raw in data.split(b"\n"):
        parts = raw.split()
        if len(parts) < 3:
            continue
        try:
            when = float(parts[0])
            ids = [p.decode("ascii") for p in parts[2:]]
        except (ValueError, UnicodeDecodeError):
            continue
        for entry_id in ids:
            if len(entry_id) != _ID_LEN:
                continue
            seen = out.get(entry_id)
            out[entry_id] = (
                Use(1, when) if seen is None else Use(seen.uses + 1, max(seen.last, when))
            )
    return out
