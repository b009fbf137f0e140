"""CLI cold start: what a person or a hook waits for before truss-files does anything.

Each command runs as a fresh process 15 times, alternating with ``python -c pass`` (the same
interpreter), and the medians are compared. ``query`` and ``tool memory_query`` (what a harness
runs, its JSON input on stdin) run against a small bare store of 200 entries (20 verified), so
their figures are start-up plus a little real work. ``--help`` lists every command from the
group's own table, importing none of their modules. Every command,
``query`` included, parses its argv with click; ``import click`` beside ``python -c pass`` is
what that costs each of them (a second, hand-written parser for ``query`` was dropped once it
came under the 25 ms issue #21 allowed it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from .common import (
    Figure,
    Synth,
    command_runner,
    commit_files,
    measure_pair,
    new_store,
    progress,
    scratch,
)

RUNS = 15


def console_script() -> str:
    """The truss-files next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("truss-files")
    if beside.exists():
        return str(beside)
    found = shutil.which("truss-files")
    if found is None:
        raise RuntimeError("truss-files is not installed; run `make demo` or pip install -e .")
    return found


def _fed(argv: list[str], stdin: bytes, env: dict[str, str]) -> Callable[[], None]:
    """Like ``command_runner``, with ``stdin`` on the command's standard input."""

    def run() -> None:
        done = subprocess.run(argv, env=env, input=stdin, capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr!r}")

    return run


def run(quick: bool) -> list[Figure]:
    exe = console_script()
    runs = 5 if quick else RUNS
    with scratch("cli") as tmp:
        store = new_store(tmp / "store.git")
        synth = Synth(seed=11)
        entries = synth.entries(200, salt="cli")
        commit_files(store, synth.files(entries), "seed 200 entries")
        for entry in entries[:20]:
            store.promote(entry.id, store.sign_verdict(entry.id, "PASS"))
        # A clean config dir: no user keys or settings leak into the timing.
        env = dict(os.environ, TRUSS_CONFIG_DIR=str(tmp / "config"), HOME=str(tmp))
        env.pop("TRUSS_STORE", None)
        python = command_runner([sys.executable, "-c", "pass"], env)
        commands = {
            "python -c 'import click'": [sys.executable, "-c", "import click"],
            "truss-files -V": [exe, "-V"],
            "truss-files --help": [exe, "--help"],
            "truss-files --store S query x": [exe, "--store", str(store.git.git_dir), "query", "x"],
        }
        fed = {
            "truss-files --store S tool memory_query": (
                [exe, "--store", str(store.git.git_dir), "tool", "memory_query"],
                b'{"query": "x"}',
            ),
        }
        figures = []
        runners = {name: command_runner(argv, env) for name, argv in commands.items()}
        runners.update({name: _fed(argv, stdin, env) for name, (argv, stdin) in fed.items()})
        for name, runner in runners.items():
            progress(f"{name} x {runs}")
            cmd_t, py_t = measure_pair(runner, python, runs)
            figures.append(
                Figure(
                    name=f"cold start: {name} (p50)",
                    value=cmd_t.ms(),
                    unit="ms",
                    baseline_name="python -c pass",
                    baseline_value=py_t.ms(),
                )
            )
        # `show` on a terminal renders the belief; its baseline is the raw file it replaced.
        where = str(store.git.git_dir)
        shown = entries[0].id
        progress(f"show text vs --raw x {runs}")
        text_t, raw_t = measure_pair(
            command_runner([exe, "--store", where, "show", shown, "--format", "text"], env),
            command_runner([exe, "--store", where, "show", shown, "--raw"], env),
            runs,
        )
        figures.append(
            Figure(
                name="truss-files show ID, the belief as text (p50)",
                value=text_t.ms(),
                unit="ms",
                baseline_name="show ID --raw",
                baseline_value=raw_t.ms(),
            )
        )
    return figures
