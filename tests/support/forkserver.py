"""``truss-files`` on a shell's PATH, run by forking a process that imported it once.

A docs page is a shell script a reader runs: a dozen ``truss-files`` commands, each a fresh
interpreter that spends about half a second of CPU importing the package. ``ForkServer``
starts one process that imports the console script's ``main`` and then forks it for every
call; ``shim_dir`` holds a ``truss-files`` that a shell finds first on its PATH and that hands
the server its argv, environment, working directory and its three standard streams (the
descriptors themselves, over a Unix socket), forwards the signals it gets to the forked child
and exits with the child's status. So ``truss-files serve &`` then ``kill %1`` stops the
server, a pipe into ``truss-files`` is read by it, and its exit status is the script's.

What it does not try is what ``tests/support/console.py`` does not try either: the script's
shebang and a cold import. The README's walk-through starts the installed script, and with
``TRUSS_SLOW=1`` every docs page does too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from tests.support import console

# The slow run (``TRUSS_SLOW=1``) starts the installed script for every call.
REAL = console.REAL

_SHIM = """\
#!{python} -SE
# truss-files, forked by the test suite's fork server (tests/support/forkserver.py)
import json, os, signal, socket, sys

sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect({socket_path!r})
request = json.dumps(
    {{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}
).encode()
socket.send_fds(sock, [len(request).to_bytes(4, "big") + request], [0, 1, 2])
reply = sock.makefile("rb")
pid = int(reply.readline())
sent = []


def forward(signum, _frame):
    sent.append(signum)
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
    signal.signal(getattr(signal, name), forward)
status = reply.readline()
if status:
    sys.exit(int(status))
if sent:  # the child died of the signal this process passed on: so does this one
    signal.signal(sent[-1], signal.SIG_DFL)
    os.kill(os.getpid(), sent[-1])
sys.exit(1)
"""


def _serve(socket_path: str) -> None:
    """The server: import once, then one forked child per connection (never returns)."""
    import truss_files.facade  # noqa: F401 - what every command imports
    from truss_files.faces.cli.main import main  # noqa: F401 - imported once, used by children

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, _reap)  # reaped, so their CPU counts as this process's
    print("ready", flush=True)
    while True:
        conn, _addr = listener.accept()
        try:
            head, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
            size = int.from_bytes(head[:4], "big")
            data = head[4:]
            while len(data) < size:
                more = conn.recv(size - len(data))
                if not more:
                    break
                data += more
            request = json.loads(data)
        except (OSError, ValueError):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            _child(conn, fds, request)
        for fd in fds:
            os.close(fd)
        conn.close()  # the child writes both lines: its pid, then its status


def _reap(_signum: int, _frame: object) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _child(conn: socket.socket, fds: list[int], request: dict[str, object]) -> None:
    code = 1
    try:
        conn.sendall(f"{os.getpid()}\n".encode())
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for source, target in zip(fds, (0, 1, 2), strict=True):
            os.dup2(source, target)
            os.close(source)
        env, argv = request["env"], request["argv"]
        assert isinstance(env, dict) and isinstance(argv, list)
        code = console.as_script([str(a) for a in argv], env, str(request["cwd"]))
    finally:
        with contextlib.suppress(OSError):
            conn.sendall(f"{code}\n".encode())
        os._exit(code)


class ForkServer:
    """The server process and the folder whose ``truss-files`` calls it."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.socket_path = folder / "server.sock"
        self.shim_dir = folder / "bin"
        self.shim_dir.mkdir(exist_ok=True)
        shim = self.shim_dir / "truss-files"
        shim.write_text(_SHIM.format(python=sys.executable, socket_path=str(self.socket_path)))
        shim.chmod(0o755)
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(_BOOT), str(root), str(self.socket_path)],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its children share its group: one kill stops them all
        )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()
        if ready.strip() != "ready":
            self.close()
            raise RuntimeError(f"the fork server did not start: {ready!r}")

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


_BOOT = """
import sys
sys.path.insert(0, sys.argv[1])
from tests.support.forkserver import _serve
_serve(sys.argv[2])
"""


@contextlib.contextmanager
def forked_script(folder: Path) -> Iterator[Path | None]:
    """The folder to put first on a shell's PATH (None in the slow run: the real script)."""
    if REAL:
        yield None
        return
    server = ForkServer(folder)
    try:
        yield server.shim_dir
    finally:
        server.close()
