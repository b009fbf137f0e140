"""Locks on one repository: ours between truss processes, and git's ``*.lock`` files.

Our own locks are ``flock``s on files under ``.git/truss/``: the kernel drops them when their
process dies, so a kill never leaves one behind. Git's locks are different: ``index.lock`` and
``refs/heads/<branch>.lock`` are files whose mere existence is the lock, and they hold no
owner. A writer killed while holding one leaves it forever, and every later write fails (the
ref cannot move; the index cannot be written). ``clear_stale`` decides when such a file is
stale; the rule is in its docstring.

A record of who we are, ``owner_tag()``, names a process by pid *and* start time (from
``/proc``), so a journal or lock record of a dead process is never mistaken for a new process
that happens to get the same pid.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows has no flock
    fcntl = None  # type: ignore[assignment]

# Seconds a git lock file must have existed before a process that cannot be seen is presumed
# gone. libgit2 holds a ref lock only briefly, even to rewrite a large index; a git process
# holding a lock for long (``git commit`` waiting on an editor) is alive and visible, so the
# age only has to cover a process that has just created the file.
STALE_AGE = 2.0

_PROC = Path("/proc")
_HELD = threading.local()  # the lock files this thread holds


@contextlib.contextmanager
def flock(git_dir: Path, name: str, wait: float | None = None) -> Iterator[None]:
    """An exclusive lock between truss processes on one repository (none without flock).

    ``wait``: give up after this many seconds and go on unlocked (None: wait as long as it
    takes). A dead process's lock is released by the kernel, so none is ever left behind.
    """
    if fcntl is None:  # pragma: no cover - Windows: CAS and index.lock retries alone
        yield
        return
    folder = git_dir / "truss"
    path = str(folder / name)
    mine: set[str] = _HELD.__dict__.setdefault("paths", set())
    if path in mine:
        yield  # re-entered on this thread (a plan that writes): we hold it already
        return
    folder.mkdir(exist_ok=True)
    with open(path, "a") as handle:
        held = False
        if wait is None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            held = True
        else:
            deadline = time.monotonic() + wait
            while not held:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    held = True
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.0005 + random.random() * 0.001)
        if held:
            mine.add(path)
        try:
            yield
        finally:
            if held:
                mine.discard(path)
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# -- processes ---------------------------------------------------------------------------------


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (None: no /proc, or no such pid)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def owner_tag() -> str:
    """``<pid>-<start time>`` of this process, for records that outlive it."""
    pid = os.getpid()
    # Read from /proc once per process (a fork is a new pid): a bulk write names one
    # temporary file per entry, and reading it each time cost a tenth of an import.
    if _OWNER[0] != pid:
        _OWNER[:] = [pid, f"{pid}-{start_time(pid) or 0}"]
    return str(_OWNER[1])


_OWNER: list[object] = [0, ""]


def owner_alive(tag: str) -> bool:
    """Whether the process an ``owner_tag`` names still runs (the same process, not its pid's
    next user). A tag that does not parse names nobody."""
    pid_text, _, start = tag.partition("-")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    now = start_time(pid)
    return not (start not in ("", "0") and now is not None and now != start)


@dataclass(frozen=True)
class GitProcess:
    pid: int
    command: str


def git_processes(paths: tuple[Path, ...]) -> list[GitProcess] | None:
    """Running git processes that may be working in one of ``paths`` (None: cannot tell).

    A process counts when its name starts with ``git`` and either its working directory or its
    command line points into a path, or its working directory cannot be read (another user's
    process: assume it may be ours). Other programs that link libgit2 are not seen here; the
    age rule of ``clear_stale`` covers them.
    """
    if not (_PROC / "self").exists():
        return None
    roots = [str(p.resolve()) for p in paths]
    me = os.getpid()
    found: list[GitProcess] = []
    for item in _PROC.iterdir():
        if not item.name.isdigit() or int(item.name) == me:
            continue
        try:
            name = (item / "comm").read_text().strip()
        except OSError:
            continue
        if not name.startswith("git"):
            continue
        try:
            cmdline = (item / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmdline = name
        try:
            cwd = os.readlink(item / "cwd")
        except PermissionError:
            found.append(GitProcess(int(item.name), cmdline.strip()))
            continue
        except OSError:
            continue  # gone (or a zombie) since the listing: it holds nothing any more
        inside = any(cwd == r or cwd.startswith(r + os.sep) or r in cmdline for r in roots)
        if inside:
            found.append(GitProcess(int(item.name), cmdline.strip()))
    return found


# -- git's lock files --------------------------------------------------------------------------


@dataclass(frozen=True)
class LockState:
    """What ``clear_stale`` found at one lock file."""

    path: Path
    removed: bool
    detail: str  # what happened, for a line on stderr or in an error


def clear_stale(
    lock: Path,
    repo_paths: tuple[Path, ...],
    *,
    max_wait: float = STALE_AGE,
    clock: Callable[[], float] = time.time,
) -> LockState | None:
    """Remove git's lock file ``lock`` if its owner is gone; None when there is no such file.

    Git's ``*.lock`` files record no owner, so staleness is inferred. The store's writers call
    this holding our own lock for that file (``write.lock`` for the branch, ``worktree.lock``
    for the index): every truss writer on this machine takes it before the git lock, so none
    of ours can be inside its critical section. (A ref no lock of ours guards, a run ledger,
    rests on the two rules below alone.) The file is then stale when both hold:

    1. no running git process works in this repository (``git_processes``: its working
       directory or command line points here, or cannot be read) — a live ``git commit``
       waiting on an editor keeps its ``index.lock``, however old;
    2. the file is at least ``STALE_AGE`` seconds old — covering a process we cannot see (a
       libgit2 program, a truss process outside our locks) that has only just created it.
       A younger file is waited on, up to ``max_wait`` seconds, rather than judged.

    Without ``/proc`` nothing can be told, and nothing is removed. A lock on another machine
    (a repository on a network file system) is outside what this can see.
    """
    deadline = time.monotonic() + max_wait
    while True:
        try:
            mtime = lock.stat().st_mtime
        except FileNotFoundError:
            return None
        running = git_processes(repo_paths)
        if running is None:
            return LockState(lock, False, f"{lock} exists and this system cannot show its owner")
        if running:
            who = ", ".join(f"pid {p.pid}: {p.command[:60]}" for p in running[:3])
            return LockState(lock, False, f"{lock} is held by a running git process ({who})")
        age = clock() - mtime
        if age >= STALE_AGE:
            try:
                lock.unlink()
            except FileNotFoundError:
                return None
            return LockState(
                lock,
                True,
                f"removed the stale lock {lock} ({age:.0f} s old; no git process works in "
                "this repository, so it was left by a process that died holding it)",
            )
        if time.monotonic() >= deadline:
            return LockState(lock, False, f"{lock} is {age:.1f} s old and may still be in use")
        time.sleep(min(0.1, max(0.01, STALE_AGE - age)))
