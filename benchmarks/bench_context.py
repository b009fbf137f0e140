"""A run's context: what a harness waits for to start (or resume) a run, and whether the
cached prefix really stays put.

* cold ``truss-files context --run R`` at 10k entries, a fresh process per call and a new run
  each time (a run start: the record is written, identity read at the tip), beside cold
  ``truss-files query`` with ordinary words on the same store;
* cold ``context`` of a run that has already started (the resume path), beside the same query;
* byte-stability: a run's tools + system bytes (the part behind the cache breakpoints),
  compared after each of 20 rounds of a write, a promotion and a demotion -- and an identity
  amendment half way -- against the bytes at the run's start. The figure is the number of
  rounds whose bytes were identical, beside the number of rounds: 1.00x or it is broken.

The store is seeded with unverified entries in one signed commit and a few goals promoted
through real verdicts, so the read gate audits a clean history (the first read pays that
audit once, before any timing).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from collections.abc import Callable

from truss_files.format.trailers import trailers
from truss_files.git.gitstore import Plan
from truss_files.signing import Ed25519Signer

from .bench_cli import console_script
from .common import (
    PRINCIPAL,
    Figure,
    Synth,
    commit_files,
    freeze_heap,
    label,
    measure_pair,
    new_store,
    progress,
    scaled,
    scratch,
)

RUNS = 9
ROUNDS = 20


def _command(argv: Callable[[], list[str]], env: dict[str, str]) -> Callable[[], None]:
    def run() -> None:
        done = subprocess.run(argv(), capture_output=True, text=True, env=env)
        if done.returncode != 0 or "error" in json.loads(done.stdout or "{}"):
            raise RuntimeError(f"{argv()} failed: {done.stdout[-300:]} {done.stderr[-300:]}")

    return run


def run(quick: bool) -> list[Figure]:
    exe = console_script()
    total = scaled(2_000 if quick else 10_000)
    runs = 5 if quick else RUNS
    figures: list[Figure] = []
    with scratch("context") as tmp:
        signer = Ed25519Signer.generate(PRINCIPAL)
        signer.save(tmp / "key")
        store = new_store(tmp / "store.git", signer=signer)
        progress(f"seeding {label(total)} entries and 3 verified goals")
        synth = Synth(seed=31)
        commit_files(store, synth.files(synth.entries(total, salt="c")), f"seed {total}")
        for n in range(3):
            goal = store.write("goal", f"goal-{n}", f"Goal {n}: keep the release train on time.")
            store.promote(goal.id, store.sign_verdict(goal.id, "PASS"))
        store.context("warm-up")  # the read gate's first audit and the index build
        freeze_heap()

        env = dict(os.environ, TRUSS_CONFIG_DIR=str(tmp / "config"), HOME=str(tmp))
        env["TRUSS_KEY"] = str(tmp / "key")
        env.pop("TRUSS_STORE", None)
        path = str(store.git.git_dir)
        size = label(total)
        words = synth.words
        text = f"{words[3]} {words[40]} {words[400]}"
        query = _command(lambda: [exe, "--store", path, "query", text, "--format", "json"], env)
        fresh = itertools.count()

        progress(f"cold context (run start) vs query x {runs}")
        start = _command(lambda: [exe, "--store", path, "context", "--run", f"R{next(fresh)}"], env)
        start_t, query_t = measure_pair(start, query, runs)
        figures.append(
            Figure(
                name=f"cold `context --run` starting a run at {size} entries (p50)",
                value=start_t.ms(),
                unit="ms",
                baseline_name="`truss-files query` same store",
                baseline_value=query_t.ms(),
            )
        )
        progress(f"cold context (resume) vs query x {runs}")
        resume = _command(lambda: [exe, "--store", path, "context", "--run", "R0"], env)
        resume_t, query_t = measure_pair(resume, query, runs)
        figures.append(
            Figure(
                name=f"cold `context --run` of a started run at {size} (p50)",
                value=resume_t.ms(),
                unit="ms",
                baseline_name="`truss-files query` same store",
                baseline_value=query_t.ms(),
            )
        )

        progress(f"byte-stability over {ROUNDS} rounds of write, promote, demote")
        stable = store.context("stable")
        before = {fmt: stable.stable_bytes(fmt) for fmt in ("anthropic", "openai")}
        message = "truss: amend identity/self.md\n\n" + trailers(op="identity")

        def amendment(_snap: object) -> Plan:
            return Plan({"identity/self.md": b"# Self\n\namended\n"}, message)

        same = 0
        for n in range(ROUNDS):
            entry = store.write("lesson", f"round-{n}", f"Round {n} lesson.")
            store.promote(entry.id, store.sign_verdict(entry.id, "PASS"))
            store.demote(entry.id, "bench round")
            if n == ROUNDS // 2:
                store._apply(amendment, {"operator"})
            now = store.context("stable")
            same += all(now.stable_bytes(fmt) == before[fmt] for fmt in before)
        figures.append(
            Figure(
                name=f"rounds with identical tools+system bytes ({ROUNDS} rounds, 1 amendment)",
                value=float(same),
                unit="rounds",
                baseline_name="rounds run",
                baseline_value=float(ROUNDS),
                note=f"prefix {len(before['anthropic'])} bytes (anthropic)",
            )
        )
    return figures
