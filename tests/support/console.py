"""The console script's ``main`` in a forked child: a real process for a tenth of the cost.

Most attacks drive ``truss-files`` the way a person or a hostile agent does: argv, the
environment, a working directory, stdin, and what comes back on stdout, stderr and the exit
status. A fresh interpreter spends about half a second of CPU importing the package before it
does anything, and the suite starts thousands of them. ``run`` forks the test's process
instead (the package is already imported there) and calls the same ``main`` the installed
script calls, in a child with its own argv, environment, directory and standard streams: a
separate process, so nothing it does (caches, a crash, ``os._exit``, an open index) reaches
the test, and its exit status is the one the script would give.

What the fork does not try is the script itself: its shebang, a cold import, a signal
arriving while it imports. The tests of those start the installed script
(tests/faces/cli/test_cli.py, test_cli_startup.py, the sigpipe, crash and interrupt attacks,
and every docs page's shell blocks). With ``TRUSS_SLOW=1`` every call here starts the
installed script too, so the long run checks that both agree.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SCRIPT = Path(sys.executable).with_name("truss-files")

# The slow run (``TRUSS_SLOW=1``) starts the installed script for every call.
REAL = os.environ.get("TRUSS_SLOW") == "1"


def run(
    args: Sequence[str | os.PathLike[str]],
    *,
    input: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 120,
    capture_output: bool = True,
    text: bool = False,
    check: bool = False,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run([SCRIPT, *argv], ...)`` with the same result, in a forked child.

    ``args[0]`` is the script (its path or ``truss-files``); the rest is its argv. Output is
    always captured: text when ``text`` (as ``subprocess.run``), bytes otherwise."""
    assert capture_output, "the console runner captures the output"
    argv = [str(a) for a in args]
    if Path(argv[0]).name != "truss-files":
        raise ValueError(f"not the console script: {argv[0]!r}")
    environ = dict(os.environ if env is None else env)
    if REAL:
        return subprocess.run(
            [str(SCRIPT), *argv[1:]],
            input=input,
            env=environ,
            cwd=cwd,
            timeout=timeout,
            capture_output=True,
            text=text,
            check=check,
        )
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        stdin = _stdin(input)
        try:
            pid = _fork(argv, environ, cwd, stdin, out.fileno(), err.fileno())
        finally:
            os.close(stdin)
        status = _wait(pid, timeout, argv)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
        done = subprocess.CompletedProcess(
            argv,
            os.waitstatus_to_exitcode(status),
            stdout.decode() if text else stdout,
            stderr.decode() if text else stderr,
        )
    if check:
        done.check_returncode()
    return done


def _stdin(given: str | bytes | None) -> int:
    if given is None:
        return os.open(os.devnull, os.O_RDONLY)
    with tempfile.TemporaryFile() as held:
        held.write(given.encode() if isinstance(given, str) else given)
        held.flush()
        held.seek(0)
        return os.dup(held.fileno())


def _fork(
    argv: list[str],
    environ: dict[str, str],
    cwd: str | os.PathLike[str] | None,
    stdin: int,
    out: int,
    err: int,
) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # the child: never returns into the test
        os.setpgid(0, 0)
        for source, target in ((stdin, 0), (out, 1), (err, 2)):
            os.dup2(source, target)
        code = as_script(argv[1:], environ, cwd)
    finally:
        os._exit(code)


def as_script(
    args: Sequence[str], environ: Mapping[str, str], cwd: str | os.PathLike[str] | None
) -> int:
    """In a forked child whose descriptors 0, 1 and 2 are set: run the script's ``main`` with
    ``args``, ``environ`` and ``cwd``, as a fresh interpreter would; its exit status."""
    # The streams a fresh interpreter would open: the same encodings and error handlers as
    # this process was started with (surrogateescape on stdin in UTF-8 mode, ...).
    sys.stdin = _stream(0, "r", sys.__stdin__)
    sys.stdout = _stream(1, "w", sys.__stdout__)
    sys.stderr = _stream(2, "w", sys.__stderr__, line_buffering=True)
    os.environ.clear()
    os.environ.update(environ)
    if cwd is not None:
        os.chdir(cwd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [str(SCRIPT), *args]
    return _main()


def _stream(fd: int, mode: str, like: Any, *, line_buffering: bool = False) -> io.TextIOWrapper:
    raw = io.FileIO(fd, mode, closefd=False)
    buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
    return io.TextIOWrapper(
        buffered,
        encoding=getattr(like, "encoding", None) or "utf-8",
        errors=getattr(like, "errors", None) or "strict",
        line_buffering=line_buffering,
    )


def _main() -> int:
    from truss_files.faces.cli.main import main

    try:
        main()
        code = 0
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError, ValueError):
            stream.flush()
    return code


def _wait(pid: int, timeout: float, argv: list[str]) -> int:
    deadline = time.monotonic() + timeout
    pause = 0.0005
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise subprocess.TimeoutExpired(argv, timeout)
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
