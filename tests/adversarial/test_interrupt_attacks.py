"""Ctrl-C at random moments of a real ``truss-files import`` whose stderr is a terminal.

The promise (``faces.progress.interruptible``, which import, verify and audit share): a
Ctrl-C says once what was done and how to go on, ends with exit 130, and leaves the store as
it was -- wherever the signal lands, including inside a write to stderr: the handler's line
once went through stderr's own buffer and crashed the command with exit 3 ("reentrant call").
The console script is interrupted at random moments; a process whose stderr is a full pipe
makes the signal land inside that write every time.
"""

from __future__ import annotations

import json
import os
import pty
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.faces.cli.test_progress import _read_tty
from truss_files.facade import MemoryStore

TRIALS = int(os.environ.get("TRUSS_INTERRUPT_TRIALS", "6"))


def _cli() -> list[str]:
    found = Path(sys.executable).parent / "truss-files"
    return [str(found)] if found.exists() else [sys.executable, "-m", "truss_files"]


def test_ctrl_c_anywhere_in_an_import_ends_130_and_imports_nothing(
    store: MemoryStore, tmp_path: Path
) -> None:
    source = tmp_path / "many.jsonl"
    source.write_text(
        "".join(
            json.dumps({"kind": "fact", "key": f"m{i}", "body": f"many facts {i}"}) + "\n"
            for i in range(20_000)
        )
    )
    before = store.git.tip()
    rng = random.Random(os.environ.get("TRUSS_INTERRUPT_SEED", "0"))
    argv = [*_cli(), "--store", str(store.git.workdir), "--key", str(tmp_path / "operator_key")]
    argv += ["import", str(source), "--format", "text"]
    for trial in range(TRIALS):
        main, replica = pty.openpty()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=replica,
            env=dict(os.environ, TERM="xterm"),
        )
        os.close(replica)
        try:
            seen = _read_tty(main, until=lambda b: b"import: checking entries" in b)
            time.sleep(rng.uniform(0.0, 0.03))
            proc.send_signal(signal.SIGINT)
            seen += _read_tty(main, until=lambda b: b"again" in b, timeout=30)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
            os.close(main)
        text = seen.decode(errors="replace")
        assert proc.returncode == 130, f"trial {trial}: exit {proc.returncode}\n{text[-2000:]}"
        assert "Traceback" not in text and "unexpected bug" not in text, text[-2000:]
        assert text.count("nothing was imported. Run the same command again") == 1, text
        after = store.git.tip()
        assert before is not None and after is not None and after.id == before.id
    assert list(store.iter_entries()) == []


# Ctrl-C while the progress line is being written: stderr is a pipe kept full, so the
# redraw's flush blocks inside the stream's buffer when the signal reaches the main thread.
_MID_WRITE = r"""
import io, os, signal, sys, threading, time
from truss_files.faces.cli.progress import Progress, interruptible

r, w = os.pipe()
os.set_blocking(w, False)
try:
    while True:
        os.write(w, b"." * 65536)
except BlockingIOError:
    pass
os.set_blocking(w, True)
stream = io.TextIOWrapper(io.BufferedWriter(io.FileIO(w, "w")), encoding="utf-8")
chunks = []

def drain():
    time.sleep(1.0)
    while chunk := os.read(r, 1 << 16):
        chunks.append(chunk)

drainer = threading.Thread(target=drain)
drainer.start()
main = threading.main_thread().ident
threading.Timer(0.4, signal.pthread_kill, (main, signal.SIGINT)).start()
code = 0
try:
    with interruptible(Progress("import", True, stream=stream), lambda: "STOPPED: nothing done"):
        stream.write("x" * (1 << 17))  # the pipe is full: this write blocks
        stream.flush()
        time.sleep(10)
except SystemExit as exc:
    code = exc.code
stream.close()
drainer.join()
sys.stdout.write(b"".join(chunks).decode("utf-8", "replace").replace(".", "").replace("x", ""))
sys.exit(code)
"""


def test_ctrl_c_in_the_middle_of_writing_stderr_still_says_what_was_done() -> None:
    """The handler prints while the main thread is inside a write to the same stream: the line
    goes past the stream's buffer (which would refuse a second writer) and the command still
    ends with exit 130, the line said once -- not a crash with exit 3."""
    done = subprocess.run(
        [sys.executable, "-c", _MID_WRITE], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stdout.count("STOPPED: nothing done") == 1, done.stdout[-2000:]
    assert "reentrant" not in done.stderr
