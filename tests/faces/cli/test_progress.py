"""Long commands on a terminal: phases, counts and an honest ETA on a real pseudo-terminal,
nothing on a pipe or with --format json, and a real ^C that stops at once and says what was
done and how to go on."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from truss_files.facade import MemoryStore
from truss_files.faces.cli.progress import Progress, enabled
from truss_files.git.gitstore import Snapshot
from truss_files.model import Trust
from truss_files.trust.audit import audit

MAIN = "from truss_files.faces.cli.main import main; main()"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_eta_waits_for_a_finished_item_and_leaves_the_set_up_out() -> None:
    clock = FakeClock()
    out = io.StringIO()
    progress = Progress("verify", True, stream=out, clock=clock)
    progress.phase("verifying", 10)
    clock.now += 60  # a slow checkout before the first entry
    assert progress.eta() is None and "left" not in progress.line()
    progress.advance(promoted=1)
    assert progress.eta() is None  # one item tells the set-up, not the pace
    for _ in range(4):
        clock.now += 2
        progress.advance(promoted=1)
    assert progress.eta() == 10.0  # 2 s an item, 5 to go
    line = progress.line()
    assert line == "verify: verifying 5/10 (50%) · 5 promoted · 1m08s · about 10s left"
    assert "\r" in out.getvalue()


def test_progress_is_off_on_a_pipe_and_in_json_mode() -> None:
    assert not enabled(False, io.StringIO())
    main, replica = pty.openpty()
    try:
        with os.fdopen(os.dup(replica), "w") as tty:
            assert enabled(False, tty)
            assert not enabled(True, tty)
    finally:
        os.close(main)
        os.close(replica)
    out = io.StringIO()
    with Progress("import", False, stream=out) as off:
        off.phase("checking", 3)
        off.advance()
    assert out.getvalue() == ""


def _spawn(
    store: MemoryStore, tmp_path: Path, *args: str, stdin: Path | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """The real command with stderr on a pseudo-terminal; returns it and the terminal's end."""
    main, replica = pty.openpty()
    argv = [sys.executable, "-c", MAIN, "--store", str(store.git.workdir)]
    argv += ["--key", str(tmp_path / "operator_key"), *args]
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        argv,
        stdin=open(stdin, "rb") if stdin else subprocess.DEVNULL,  # noqa: SIM115
        stdout=subprocess.PIPE,
        stderr=replica,
        env=dict(os.environ, TMPDIR=str(scratch), TERM="xterm"),
    )
    os.close(replica)
    return proc, main


def _read_tty(
    main: int, until: Callable[[bytes], bool] | None = None, timeout: float = 60
) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.05)
        if not ready:
            continue
        try:
            chunk = os.read(main, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
        if until is not None and until(seen):
            return seen
    return seen


def _run_tty(store: MemoryStore, tmp_path: Path, *args: str, stdin: Path | None = None) -> bytes:
    proc, main = _spawn(store, tmp_path, *args, stdin=stdin)
    try:
        seen = _read_tty(main)
        out, _ = proc.communicate(timeout=60)
    finally:
        os.close(main)
    assert proc.returncode == 0, (out, seen)
    return seen


def test_import_shows_each_phase_with_counts_on_a_terminal_only(
    store: MemoryStore, tmp_path: Path
) -> None:
    source = tmp_path / "notes.jsonl"
    source.write_text(
        "".join(
            json.dumps({"kind": "fact", "key": f"k{i}", "body": f"fact {i}"}) + "\n"
            for i in range(300)
        )
    )

    seen = _run_tty(store, tmp_path, "import", str(source), "--format", "text")

    assert b"import: checking entries" in seen and b"300/300 (100%)" in seen
    assert b"import: committing 300 entries in one signed commit" in seen
    assert seen.endswith(b"\r") or b"\r" in seen  # one line, redrawn in place
    # JSON mode on the same terminal, and a pipe: not one byte of progress.
    quiet = _run_tty(store, tmp_path, "import", str(source), "--format", "json")
    assert b"import:" not in quiet
    piped = subprocess.run(
        [sys.executable, "-c", MAIN, "--store", str(store.git.workdir)]
        + ["--key", str(tmp_path / "operator_key"), "import", str(source), "--format", "text"],
        capture_output=True,
        timeout=60,
    )
    assert piped.returncode == 0 and piped.stderr == b""


def test_audit_shows_the_commits_it_checked(store: MemoryStore, tmp_path: Path) -> None:
    for i in range(5):
        store.write("fact", f"a{i}", f"fact {i}")
    seen = _run_tty(store, tmp_path, "audit", "--format", "text")
    assert b"audit: checking commits" in seen and b"6/6 (100%)" in seen


def test_audit_reports_progress_through_its_callback(store: MemoryStore) -> None:
    for i in range(3):
        store.write("fact", f"b{i}", f"fact {i}")
    calls: list[tuple[str, int, int]] = []
    report = audit(store.git, on_commit=lambda c, n, total: calls.append((c, n, total)))
    assert [(n, total) for _c, n, total in calls] == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    tip = store.git.tip()
    assert tip is not None and calls[-1][0] == str(tip.id)
    assert report.ok and report.checked == 4


def _promoted_shown(screen: bytes) -> int:
    return max((int(n) for n in re.findall(rb"(\d+) promoted", screen)), default=0)


def test_ctrl_c_stops_verify_at_once_and_says_what_was_decided(
    store: MemoryStore,
    tmp_path: Path,
    signed_commit: Callable[..., str],
    define_checks: Callable[..., str],
) -> None:
    define_checks(store, {"slow": "sleep 0.3"})
    ids = [store.write("fact", f"s{i}", f"slow fact {i}", checks=["slow"]).id for i in range(30)]

    proc, main = _spawn(store, tmp_path, "verify", "--pending", "--format", "text")
    try:
        # Wait until the terminal shows three promotions or more (a busy machine may draw
        # 2 then 4), then press ^C for real.
        seen = _read_tty(main, until=lambda b: _promoted_shown(b) >= 3)
        assert 3 <= _promoted_shown(seen) < 30, seen
        assert b"verify: verifying" in seen and b"/30" in seen
        pressed = time.monotonic()
        proc.send_signal(signal.SIGINT)
        seen += _read_tty(main, until=lambda b: b"to go on" in b, timeout=30)
        said = time.monotonic() - pressed
        proc.wait(timeout=30)
        stopped = time.monotonic() - pressed
        seen += _read_tty(main, timeout=1)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        os.close(main)

    assert proc.returncode == 130
    # Prompt, with room for a loaded machine (it used to take ~45 s to stop).
    assert said < 10 and stopped < 20, (said, stopped)
    text = seen.decode()
    summary = next(line for line in text.replace("\r", "\n").splitlines() if "interrupted:" in line)
    done = int(summary.split("interrupted: ")[1].split(" of ")[0])
    assert f"interrupted: {done} of 30 entries done ({done} promoted)" in summary
    assert "Run `truss-files verify --pending` to go on" in summary
    # What it says is what the store holds: exactly that many promotions, the rest untouched.
    verified = [i for i in ids if store.get(i).trust is Trust.VERIFIED]
    assert len(verified) == done >= 3
    assert all(store.get(i).trust is Trust.UNVERIFIED for i in ids if i not in verified)
    assert audit(store.git).ok
    assert Snapshot(store.git.repo, store.git.tip()).read("truss.toml") is not None


def test_the_query_and_reading_paths_never_load_the_progress_module(store: MemoryStore) -> None:
    store.write("fact", "q", "a fact to find")
    for args in (["query", "fact"], ["list"]):
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys\n"
                "from truss_files.faces.cli.main import main\n"
                "sys.argv = ['truss-files', '--store', sys.argv[1], *sys.argv[2:]]\n"
                "try:\n"
                "    main()\n"
                "finally:\n"
                "    print('progress' in str(sorted(sys.modules)), file=sys.stderr)\n",
                str(store.git.workdir),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.stderr.strip().splitlines()[-1] == "False", (args, done.stderr)


def test_ctrl_c_during_an_import_says_nothing_was_imported(
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

    proc, main = _spawn(store, tmp_path, "import", str(source), "--format", "text")
    try:
        seen = _read_tty(main, until=lambda b: b"import: checking entries" in b)
        proc.send_signal(signal.SIGINT)
        seen += _read_tty(main, until=lambda b: b"again" in b, timeout=30)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        os.close(main)

    assert proc.returncode == 130
    assert b"interrupted while checking line " in seen
    assert b"nothing was imported. Run the same command again" in seen
    after = store.git.tip()
    assert before is not None and after is not None and after.id == before.id
    assert list(store.iter_entries()) == []
