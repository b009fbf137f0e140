"""Attacks on retiring by name: a note whose promotion retires other notes it names (a merged
note's ``entry:<id>`` sources, a correction's ``supersedes``) must not reach a note of another
layer. The red team's path: an agent-only key imports a task note whose sources name an
enterprise note; the panel passes the innocent-looking note and the enterprise note turned
stale, with the review queue showing nothing it would supersede.

The rule (``authority.may_retire``): a note retires only notes of its own layer, so retiring
a team or enterprise note takes a note of that layer, which only a trainer may write. The
review queue shows what a PASS would retire before anyone votes.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tests.support import script
from tests.support.recall_support import promote
from truss_files.facade import MemoryStore
from truss_files.model import Kind, Layer, Trust
from truss_files.signing import Ed25519Signer
from truss_files.trust.audit import audit

AGENT = "agent@example.test"


def truss(store: MemoryStore, key: str, *args: str) -> tuple[int, Any]:
    """The console script with a user config of its own (none by default)."""
    where = Path(str(store.git.workdir))
    return script.truss(store, key, *args, TRUSS_CONFIG_DIR=str(where.parent / "config"))


def test_a_task_note_naming_an_enterprise_note_as_merged_does_not_retire_it(
    store: MemoryStore, agent_key: Ed25519Signer, tmp_path: Path
) -> None:
    policy = promote(
        store, store.write("fact", "policy", "Never deploy on Fridays.", layer="enterprise")
    )
    lines = tmp_path / "notes.jsonl"
    note = {"kind": "fact", "key": "tz", "body": "The nightly job runs at 02:00 UTC."}
    lines.write_text(json.dumps({**note, "sources": [f"entry:{policy.id}"]}) + "\n")
    code, out = truss(store, "agent_key", "import", str(lines), "--format", "json")
    assert code == 0, out
    [planted] = out["ids"]

    code, queue = truss(store, "operator_key", "review", "--format", "json")
    assert code == 0, queue
    [item] = [i for i in queue["pending"] if i["id"] == planted]
    assert item["supersedes"] == []  # and a PASS indeed retires nothing
    promote(store, store.get(planted))  # the panel passes the note it was shown
    assert store.get(planted).trust is Trust.VERIFIED
    kept = store.get(policy.id)
    assert kept.trust is Trust.VERIFIED and kept.superseded_by is None
    assert audit(store.git).ok


def test_a_task_correction_naming_an_enterprise_note_does_not_retire_it(
    store: MemoryStore, agent_key: Ed25519Signer
) -> None:
    """Past memory.train (whose own check refuses it), through the library's write path."""
    policy = promote(
        store, store.write("fact", "policy", "Never deploy on Fridays.", layer="enterprise")
    )
    agent = MemoryStore(str(store.git.workdir), signer=agent_key)
    made = agent.new_entry("correction", "policy-fix", "Deploying on Fridays is fine.")
    [stored] = agent.write_many([dataclasses.replace(made, supersedes=policy.id)])
    assert stored.layer is Layer.TASK and stored.supersedes == policy.id
    promote(store, stored)
    kept = store.get(policy.id)
    assert kept.trust is Trust.VERIFIED and kept.superseded_by is None


def test_a_merged_note_of_the_same_layer_still_retires_what_it_merged_and_the_queue_says_so(
    store: MemoryStore,
) -> None:
    """What consolidate writes (one note naming the notes it merged, of their kind and
    layer): a PASS retires them, and the queue shows it before the vote."""
    first = promote(store, store.write("fact", "ci-a", "Retry the network tests once."))
    second = promote(store, store.write("fact", "ci-b", "Network tests get one retry."))
    merged = store.write_many(
        [
            store.new_entry(
                Kind.FACT,
                "ci-a",
                "Retry the network tests once.\n\nNetwork tests get one retry.",
                sources=[f"entry:{first.id}", f"entry:{second.id}"],
            )
        ]
    )[0]
    code, queue = truss(store, "operator_key", "review", "--format", "json")
    assert code == 0, queue
    [item] = [i for i in queue["pending"] if i["id"] == merged.id]
    assert sorted(item["supersedes"]) == sorted([first.id, second.id])
    promote(store, merged)
    for old in (first, second):
        assert store.get(old.id).trust is Trust.STALE
        assert store.get(old.id).superseded_by == merged.id
