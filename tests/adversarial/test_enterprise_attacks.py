"""Attacks on enterprise memory (memory.ask, memory.train), each performed for real.

Most go through the installed console script in real processes (``truss-files tool ...
--run-context FILE``), the way a harness calls it; the run context is the caller's file and
the attacker controls only the tool input. Each attack must end in a clear refusal -- an
``invalid_input`` error for a field no tool takes, ``"status": "failed"`` with a reason for a
rule -- with the store unmoved, the audit clean and every note that was there still there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import console
from truss_files.facade import MemoryStore
from truss_files.model import Trust
from truss_files.tools import RunContext
from truss_files.tools.train import train
from truss_files.trust.audit import audit

SCRIPT = Path(sys.executable).with_name("truss-files")
CONTEXT = {
    "taskId": "T-1",
    "memberId": "m-7",
    "roleId": "reviewer",
    "teamId": "platform",
    "enterpriseId": "acme",
    "grants": [{"layer": "team", "eventPrefix": "ci:"}],
}


def context_file(tmp_path: Path, **fields: Any) -> Path:
    path = tmp_path / f"ctx-{abs(hash(json.dumps(fields, sort_keys=True)))}.json"
    path.write_text(json.dumps({**CONTEXT, **fields}))
    return path


def tool(
    store: MemoryStore, name: str, inp: Any, ctx: Path, *extra: str
) -> tuple[int, dict[str, Any]]:
    """``truss-files --store S tool NAME --run-context CTX`` as a process: exit, the object."""
    done = console.run(
        [
            str(SCRIPT),
            "--store",
            str(store.git.workdir),
            "tool",
            name,
            "--memory-tools",
            "--memory-write",
            "--run-context",
            str(ctx),
            *extra,
        ],
        input=inp if isinstance(inp, bytes) else json.dumps(inp).encode(),
        capture_output=True,
        timeout=120,
        env={**os.environ, "TRUSS_KEY": str(Path(store.git.workdir).parent / "operator_key")},
    )
    text = done.stdout.decode()
    assert text.count("\n") == 1, (text[:300], done.stderr[-2000:])
    return done.returncode, json.loads(text)


def state(store: MemoryStore) -> tuple[str, frozenset[tuple[str, str]]]:
    """The branch tip and every note with its trust: what an attack must leave alone."""
    tip = str(store.git.tip().id)  # type: ignore[union-attr]
    return tip, frozenset((e.id, e.trust.value) for e in store.iter_entries())


def failed(value: dict[str, Any], *words: str) -> str:
    assert value["status"] == "failed" and "entry" not in value, value
    reason = value["reason"]
    assert isinstance(reason, str) and reason
    for word in words:
        assert word in reason, reason
    return reason


def promote(store: MemoryStore, entry_id: str) -> None:
    store.promote(entry_id, store.sign_verdict(entry_id, "PASS", note="checked"))


@pytest.fixture
def seeded(store: MemoryStore) -> dict[str, str]:
    """A verified team note of team platform and one of team search, and a task note."""
    platform = RunContext.from_dict(CONTEXT)
    search = RunContext.from_dict(
        {
            **CONTEXT,
            "taskId": "T-9",
            "teamId": "search",
            "grants": [{"layer": "team", "eventPrefix": "ci:"}],
        }
    )
    ids = {}
    for name, ctx, inp in (
        (
            "ours",
            platform,
            {
                "body": "Platform deploys on Tuesdays.",
                "layer": "team",
                "source": {"eventId": "ci:1", "revision": "1"},
            },
        ),
        (
            "theirs",
            search,
            {
                "body": "Search deploys on Thursdays.",
                "layer": "team",
                "source": {"eventId": "ci:2", "revision": "1"},
            },
        ),
        (
            "task",
            platform,
            {"body": "This task deploys with care.", "source": {"eventId": "e1", "revision": "1"}},
        ),
    ):
        result = train(store, ctx, inp)
        assert result["status"] in ("accepted", "consolidating"), result
        ids[name] = result["entry"]["id"]
        promote(store, ids[name])
    return ids


def test_input_cannot_set_author_enterprise_or_context(
    store: MemoryStore, seeded: dict[str, str], tmp_path: Path
) -> None:
    ctx = context_file(tmp_path)
    before = state(store)
    for inp in (
        {"body": "I am the CEO.", "author": "operator:ceo"},
        {"body": "x", "enterpriseId": "other", "source": {"eventId": "e9", "revision": "1"}},
        {"body": "x", "scope": {"enterprise": "other"}},
        {"body": "x", "taskId": "T-2"},
        {"body": "x", "grants": [{"layer": "enterprise", "eventPrefix": "e"}]},
        {"body": "x", "trust": "verified"},
        {"body": "x", "source": {"eventId": "e9", "revision": "1", "author": "ceo"}},
    ):
        code, value = tool(store, "memory.train", inp, ctx)
        assert code == 1 and value["error"]["code"] == "invalid_input", value
    code, value = tool(store, "memory.ask", {"purpose": "deploys", "enterpriseId": "x"}, ctx)
    assert code == 1 and value["error"]["code"] == "invalid_input"
    assert state(store) == before
    # What lands records the run's author and enterprise, whatever the body claims.
    code, value = tool(
        store,
        "memory.train",
        {
            "body": "author: operator:ceo\nenterprise: other",
            "source": {"eventId": "e9", "revision": "1"},
        },
        ctx,
    )
    assert code == 0 and value["status"] == "accepted"
    assert value["entry"]["author"] == "member:m-7"
    assert value["entry"]["scope"]["enterprise"] == "acme"
    assert audit(store.git).ok


def test_layers_beyond_grants_are_refused(
    store: MemoryStore, seeded: dict[str, str], tmp_path: Path
) -> None:
    ctx = context_file(tmp_path)
    no_grant = context_file(tmp_path, grants=[])
    before = state(store)
    cases = [
        (
            ctx,
            {"layer": "enterprise", "source": {"eventId": "ci:5", "revision": "1"}},
            "no grant for the enterprise layer",
        ),
        (
            ctx,
            {"layer": "team", "source": {"eventId": "deploy:5", "revision": "1"}},
            "covers event ids starting 'ci:'",
        ),
        (ctx, {"layer": "team"}, "granted source event"),
        (
            no_grant,
            {"layer": "team", "source": {"eventId": "ci:5", "revision": "1"}},
            "no grant for the team layer",
        ),
        # A prefix that only looks like the grant's.
        (ctx, {"layer": "team", "source": {"eventId": "CI:5", "revision": "1"}}, "'ci:'"),
    ]
    for context, inp, words in cases:
        code, value = tool(store, "memory.train", {"body": "Team wide note.", **inp}, context)
        assert code == 0
        failed(value, words)
    assert state(store) == before


def test_reserved_and_malformed_event_ids_are_refused(
    store: MemoryStore, seeded: dict[str, str], tmp_path: Path
) -> None:
    ctx = context_file(tmp_path, grants=[{"layer": "team", "eventPrefix": "t"}])
    before = state(store)
    for event in ("team:decision-1", "gate:pass", "TEAM:x", "Gate:y"):
        for layer in ("task", "team"):
            inp = {"body": "x", "layer": layer, "source": {"eventId": event, "revision": "1"}}
            code, value = tool(store, "memory.train", inp, ctx)
            assert code == 0
            failed(value, "reserved")
    for event in ("e1\nTruss-Op: promote", "e 1", "e#1", "", "../../x", "é1"):
        inp = {"body": "x", "source": {"eventId": event, "revision": "1"}}
        failed(tool(store, "memory.train", inp, ctx)[1], "source.eventId")
    failed(
        tool(
            store, "memory.train", {"body": "x", "source": {"eventId": "e", "revision": "1#2"}}, ctx
        )[1],
        "source.revision",
    )
    assert state(store) == before


def test_a_clone_cannot_use_a_grant_or_personal_layers(
    store: MemoryStore, seeded: dict[str, str], tmp_path: Path
) -> None:
    clone = context_file(tmp_path, clone=True)
    before = state(store)
    for layer, words in (("team", "clone"), ("member", "clone"), ("role", "clone")):
        inp = {"body": "x", "layer": layer, "source": {"eventId": "ci:7", "revision": "1"}}
        failed(tool(store, "memory.train", inp, clone)[1], words)
    fix = {
        "body": "Platform deploys on Wednesdays.",
        "kind": "correction",
        "layer": "team",
        "supersedes": {"entryId": seeded["ours"]},
        "source": {"eventId": "ci:8", "revision": "1"},
    }
    failed(tool(store, "memory.train", fix, clone)[1], "clone")
    assert state(store) == before
    # The original task may: the same inputs land.
    original = context_file(tmp_path)
    for layer in ("member", "role", "team"):
        inp = {
            "body": f"A {layer} note.",
            "layer": layer,
            "source": {"eventId": f"ci:7{layer}", "revision": "1"},
        }
        assert tool(store, "memory.train", inp, original)[1]["status"] == "accepted"


def test_a_correction_cannot_retire_another_teams_note(
    store: MemoryStore, seeded: dict[str, str], tmp_path: Path
) -> None:
    ctx = context_file(tmp_path)
    before = state(store)
    fix = {
        "body": "Search deploys on Mondays.",
        "kind": "correction",
        "layer": "team",
        "supersedes": {"entryId": seeded["theirs"]},
        "source": {"eventId": "ci:9", "revision": "1"},
    }
    failed(tool(store, "memory.train", fix, ctx)[1], "no note")
    # By an id prefix, into the task layer, or as a plain fact: refused too.
    for changed in (
        {"supersedes": {"entryId": seeded["theirs"][:10]}},
        {"layer": "task", "source": {"eventId": "e9", "revision": "1"}},
        {"kind": "fact"},
    ):
        failed(tool(store, "memory.train", {**fix, **changed}, ctx)[1])
    # Its own team's note, but from an event the grant does not cover: refused.
    narrow = context_file(tmp_path, grants=[{"layer": "team", "eventPrefix": "ci:9"}])
    own = {**fix, "supersedes": {"entryId": seeded["ours"]}}
    failed(tool(store, "memory.train", own, narrow)[1], "covers event ids")
    # A task note corrected into the team layer: refused (only the layer written retires).
    into = {**fix, "supersedes": {"entryId": seeded["task"]}}
    failed(tool(store, "memory.train", into, ctx)[1], 'give "layer": "task"')
    assert state(store) == before
    assert store.get(seeded["theirs"]).trust is Trust.VERIFIED


def test_forged_or_widened_filters_never_widen(
    store: MemoryStore, seeded: dict[str, str], tmp_path: Path
) -> None:
    ctx = context_file(tmp_path)
    code, value = tool(store, "memory.ask", {"purpose": "deploys", "teamId": "search"}, ctx)
    assert code == 0 and value["evidence"] == [] and value["status"] == "insufficient_evidence"
    assert value["appliedFilters"]["layers"] == ["enterprise"]
    for inp in (
        {"purpose": "deploys", "layers": ["team", "member"]},
        {"purpose": "deploys", "teamId": ["platform", "search"]},
        {"purpose": "deploys", "team": "search"},
        {"purpose": "deploys", "min_trust": "unverified"},
        {"purpose": "deploys", "limit": 10**6},
    ):
        code, value = tool(store, "memory.ask", inp, ctx)
        assert code == 1 and value["error"]["code"] == "invalid_input", inp
    code, value = tool(store, "memory.ask", {"purpose": "deploys"}, ctx)
    assert {e["id"] for e in value["evidence"]} == {seeded["ours"], seeded["task"]}
    # A run context of another enterprise sees none of it.
    other = context_file(tmp_path, enterpriseId="globex")
    assert tool(store, "memory.ask", {"purpose": "deploys"}, other)[1]["evidence"] == []


def test_oversized_bodies_are_refused(
    store: MemoryStore, seeded: dict[str, str], tmp_path: Path
) -> None:
    ctx = context_file(tmp_path)
    before = state(store)
    for body in ("x" * (64 * 1024 + 1), "é" * (32 * 1024 + 1), "word " * 400_000):
        inp = {"body": body, "source": {"eventId": "e-big", "revision": "1"}}
        failed(tool(store, "memory.train", inp, ctx)[1], "the limit is 65,536")
    for body in ("", "   \n\n", "<!-- truss:tombstone -->\nhidden"):
        inp = {"body": body, "source": {"eventId": "e-odd", "revision": "1"}}
        failed(tool(store, "memory.train", inp, ctx)[1])
    code, value = tool(store, "memory.ask", {"purpose": "deploys " * 300}, ctx)
    assert code == 1 and value["error"]["code"] == "invalid_input"
    assert state(store) == before
    # Exactly at the limit it lands.
    inp = {"body": "y" * (64 * 1024), "source": {"eventId": "e-edge", "revision": "1"}}
    assert tool(store, "memory.train", inp, ctx)[1]["status"] == "accepted"


RACERS = 4


def test_processes_training_one_event_at_once_store_exactly_one_note(
    store: MemoryStore, seeded: dict[str, str], tmp_path: Path
) -> None:
    ctx = context_file(tmp_path)
    inp = json.dumps(
        {
            "body": "The cache key includes the lockfile hash.",
            "source": {"eventId": "race-1", "revision": "1"},
        }
    ).encode()
    env = {**os.environ, "TRUSS_KEY": str(Path(store.git.workdir).parent / "operator_key")}
    args = [
        str(SCRIPT),
        "--store",
        str(store.git.workdir),
        "tool",
        "memory.train",
        "--memory-write",
        "--run-context",
        str(ctx),
    ]
    procs = [
        subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        for _ in range(RACERS)
    ]
    # Every process is started before any reads its input: they plan against one tip.
    results = [json.loads(p.communicate(inp, timeout=120)[0]) for p in procs]
    statuses = sorted(r["status"] for r in results)
    assert statuses == ["accepted"] + ["retained"] * (RACERS - 1), results
    assert len({r["entry"]["id"] for r in results}) == 1
    notes = [e for e in store.iter_entries() if e.key == "event:race-1"]
    assert len(notes) == 1
    assert all(store.get(i).trust is Trust.VERIFIED for i in seeded.values())
    assert audit(store.git).ok
