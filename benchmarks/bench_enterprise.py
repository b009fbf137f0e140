"""Enterprise memory in process: memory.ask and memory.train at 10k notes.

* ``ask()`` (three layers of one run's context, conflict check, budget) beside
  ``memory_query`` through the same registry with the same words: what the layer areas and
  the reply's shape add to a ranked read;
* ``train()`` of a new event (the idempotency lookup in the commit plan, the overlap measure,
  one signed commit) beside ``MemoryStore.write`` of the same note (one signed commit);
* ``train()`` of an event already stored (``retained``: the lookup alone, no commit).

The store holds 10k fact notes of one enterprise spread over 40 tasks and 8 teams (one in
fifty a team note), 200 of them verified through signed verdicts. The HTTP face's
concurrent-client figures are its own.
"""

from __future__ import annotations

import dataclasses
import itertools

from truss_files.format import entryfile
from truss_files.model import Kind, Layer, Provenance
from truss_files.tools import RunContext, ToolSession
from truss_files.tools.ask import ask
from truss_files.tools.train import train

from .common import (
    Figure,
    Synth,
    commit_files,
    freeze_heap,
    label,
    measure,
    measure_pair,
    new_store,
    progress,
    scaled,
    scratch,
)

RUNS = 21
PROMOTED = 200


def run(quick: bool) -> list[Figure]:
    total = scaled(2_000 if quick else 10_000)
    runs = 7 if quick else RUNS
    figures: list[Figure] = []
    with scratch("enterprise") as tmp:
        store = new_store(tmp / "store.git")
        synth = Synth(kind=Kind.FACT, seed=31)
        progress(f"seeding {label(total)} enterprise notes")
        files = {}
        chosen: list[str] = []
        for i, entry in enumerate(synth.entries(total, salt="e")):
            task, team = f"T-{i % 40}", f"team-{i % 8}"
            layer = Layer.TEAM if i % 50 == 0 else Layer.TASK
            note = dataclasses.replace(
                entry,
                key=f"event:seed-{i}",
                layer=layer,
                scope={"task": task, "team": team, "enterprise": "acme"},
                provenance=Provenance(
                    produced_by=f"event:seed-{i}#1", sources=(f"event:seed-{i}#1",)
                ),
            )
            files[note.path] = entryfile.serialize(note).encode()
            if i % (total // PROMOTED) == 1:
                chosen.append(note.id)
        commit_files(store, files, f"seed {total} notes")
        # Promoted through signed verdicts, so the history audits clean and reads serve them.
        progress(f"promoting {len(chosen)} notes")
        for entry_id in chosen:
            store.promote(entry_id, store.sign_verdict(entry_id, "PASS", note="bench"))
        freeze_heap()
        context = RunContext.from_dict(
            {"taskId": "T-1", "teamId": "team-1", "enterpriseId": "acme", "memberId": "m"}
        )
        words = synth.words
        text = f"{words[3]} {words[40]} {words[400]}"
        session = ToolSession(store, flags=("memory",), context=context)
        size = label(total)

        progress(f"ask vs memory_query x {runs}")

        def asked() -> None:
            ask(store, context, {"purpose": text, "limit": 8})

        def queried() -> None:
            outcome = session.call("memory_query", {"query": text, "limit": 8})
            assert outcome.ok, outcome.error

        ask_t, query_t = measure_pair(asked, queried, runs)
        figures.append(
            Figure(
                name=f"memory.ask in process at {size} notes (p50)",
                value=ask_t.ms(),
                unit="ms",
                baseline_name="memory_query, same words, same registry",
                baseline_value=query_t.ms(),
                note=f"ask p95 {ask_t.ms('p95'):.1f} ms",
            )
        )

        progress(f"train vs write x {runs}")
        counter = itertools.count()

        def trained() -> None:
            n = next(counter)
            body = f"{words[n % 900]} {words[(n * 7) % 900]} note {n}"
            result = train(
                store, context, {"body": body, "source": {"eventId": f"b{n}", "revision": "1"}}
            )
            assert result["status"] in ("accepted", "consolidating"), result

        def written() -> None:
            n = next(counter)
            store.write("fact", f"w{n}", f"{words[n % 900]} {words[(n * 7) % 900]} note {n}")

        train_t, write_t = measure_pair(trained, written, runs)
        figures.append(
            Figure(
                name=f"memory.train of a new event at {size} notes (p50)",
                value=train_t.ms(),
                unit="ms",
                baseline_name="MemoryStore.write (one signed commit)",
                baseline_value=write_t.ms(),
            )
        )

        def retained() -> None:
            result = train(
                store, context, {"body": "x", "source": {"eventId": "b0", "revision": "1"}}
            )
            assert result["status"] == "retained", result

        retained_t = measure(retained, runs)
        figures.append(
            Figure(
                name=f"memory.train repeated (`retained`) at {size} notes (p50)",
                value=retained_t.ms(),
                unit="ms",
                baseline_name="MemoryStore.write (one signed commit)",
                baseline_value=write_t.ms(),
            )
        )
    return figures
