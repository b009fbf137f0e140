"""Agent tools: what a harness waits for per tool call, and what durability adds.

* cold ``truss-files tool memory_query`` at 10k entries (2k verified), as a fresh process
  per call, beside ``truss-files query`` with the same words on the same store: the tool
  face should cost about what the person-facing command costs;
* a cheap tool call (``memory_view`` of one id) with ``--run R --durable`` and
  ``revalidate: true`` — so every call is read live and recorded as one signed ledger commit —
  beside the same call without a run: the added cost of recording one durable call, end to
  end (a cheap call, so the ranking's own variance does not drown the difference);
* in process, ``RunLedger.record`` (one signed commit on refs/truss/runs/<id>) beside
  ``MemoryStore.write`` (one signed commit on the branch).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Callable

from truss_files.model import Trust
from truss_files.runs.ledger import RunLedger
from truss_files.signing import Ed25519Signer

from .bench_cli import console_script
from .common import (
    PRINCIPAL,
    Figure,
    Synth,
    commit_trusted,
    freeze_heap,
    label,
    measure_pair,
    new_store,
    progress,
    scaled,
    scratch,
)

RUNS = 9


def _tool(argv: list[str], stdin: str, env: dict[str, str]) -> Callable[[], None]:
    def run() -> None:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env)
        if done.returncode != 0 or "error" in json.loads(done.stdout or "{}"):
            raise RuntimeError(
                f"{' '.join(argv)} failed: {done.stdout[-300:]} {done.stderr[-300:]}"
            )

    return run


def run(quick: bool) -> list[Figure]:
    exe = console_script()
    total = scaled(2_000 if quick else 10_000)
    verified_n = max(1, total // 5)
    runs = 5 if quick else RUNS
    figures: list[Figure] = []
    with scratch("tools") as tmp:
        signer = Ed25519Signer.generate(PRINCIPAL)
        signer.save(tmp / "key")
        store = new_store(tmp / "store.git", signer=signer)
        progress(f"seeding {label(total)} entries ({label(verified_n)} verified)")
        verified_synth, other_synth = Synth(seed=21), Synth(seed=22)
        verified = [
            dataclasses.replace(e, trust=Trust.VERIFIED)
            for e in verified_synth.entries(verified_n, salt="v")
        ]
        others = other_synth.entries(total - verified_n, salt="u")
        files = {**verified_synth.files(verified), **other_synth.files(others)}
        commit_trusted(store, [*verified, *others], files, f"seed {total} entries")
        freeze_heap()

        words = verified_synth.words
        text = f"{words[3]} {words[40]} {words[400]}"
        env = dict(os.environ, TRUSS_CONFIG_DIR=str(tmp / "config"), HOME=str(tmp))
        env["TRUSS_KEY"] = str(tmp / "key")
        env.pop("TRUSS_STORE", None)
        path = str(store.git.git_dir)
        size = label(total)

        progress(f"cold tool memory_query vs query x {runs}")
        tool = _tool(
            [exe, "--store", path, "tool", "memory_query"], json.dumps({"query": text}), env
        )
        query = _tool(
            [exe, "--store", path, "query", text, "--format", "json", "--limit", "32"], "", env
        )
        tool_t, query_t = measure_pair(tool, query, runs)
        figures.append(
            Figure(
                name=f"cold `tool memory_query` at {size} entries (p50)",
                value=tool_t.ms(),
                unit="ms",
                baseline_name="`truss-files query` same words",
                baseline_value=query_t.ms(),
            )
        )

        progress(f"durable vs plain tool call x {runs}")
        live = json.dumps({"id": verified[0].id, "revalidate": True})
        plain = _tool([exe, "--store", path, "tool", "memory_view"], live, env)
        durable = _tool(
            [exe, "--store", path, "tool", "memory_view", "--run", "bench", "--durable"], live, env
        )
        durable_t, plain_t = measure_pair(durable, plain, runs)
        figures.append(
            Figure(
                name=f"cold durable `tool memory_view` at {size} (p50)",
                value=durable_t.ms(),
                unit="ms",
                baseline_name="the same call, not durable",
                baseline_value=plain_t.ms(),
                note=f"recording adds {durable_t.ms() - plain_t.ms():.1f} ms per call",
            )
        )

        progress("in-process: ledger record vs branch write")
        ledger = RunLedger(store, "bench-inproc")
        payload = {"recall_mode": "exact", "min_trust": "verified", "entries": []}
        counter = iter(range(1_000_000))

        def record() -> None:
            n = next(counter)
            ledger.record(
                seq=ledger.next_seq(),
                tool="memory_query",
                key=f"{n:032x}",
                tool_input={"query": f"q{n}"},
                payload=payload,
                error=False,
            )

        def write() -> None:
            n = next(counter)
            store.write("scratch", f"bench-{n}", f"scratch note {n}")

        record_t, write_t = measure_pair(record, write, runs * 3)
        figures.append(
            Figure(
                name="record one durable call (in process, p50)",
                value=record_t.ms(),
                unit="ms",
                baseline_name="MemoryStore.write (one signed commit)",
                baseline_value=write_t.ms(),
            )
        )
    return figures
