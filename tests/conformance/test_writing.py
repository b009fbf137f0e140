"""Writing through the seam: every write lands unverified, the same content twice is one
entry, and input the contract refuses is refused with the project's errors, losing
nothing already stored."""

from __future__ import annotations

import pytest

from truss_files.errors import TrussError, UsageError
from truss_files.memory import Memory
from truss_files.model import MAX_BODY, Kind, Layer, Trust

from .conftest import Panel


def test_every_write_lands_unverified(memory: Memory) -> None:
    entry = memory.write(
        "lessons",
        "ci-flakes",
        "Retry the network tests once.",
        layer="task",
        sources=["git:9e1d2c4"],
    )
    assert entry.trust is Trust.UNVERIFIED and entry.provenance.verified_by is None
    assert entry.kind is Kind.LESSON and entry.layer is Layer.TASK
    assert entry.provenance.sources == ("git:9e1d2c4",)
    assert memory.view([entry.id], min_trust="unverified") == [entry]
    assert memory.view([entry.id]) == []  # not at the default floor


def test_a_write_that_resembles_a_verified_entry_is_still_unverified(
    memory: Memory, panel: Panel
) -> None:
    """New text under the key of a verified entry is a new, unverified belief; the verified
    one stays what a default read returns."""
    old = memory.write("fact", "db", "Postgres 15.")
    memory.promote(old.id, panel.verdict(old.id))
    new = memory.write("fact", "db", "Postgres 16.")
    assert new.trust is Trust.UNVERIFIED and new.id != old.id
    assert [e.id for e in memory.view([old.id, new.id])] == [old.id]


def test_the_same_content_twice_is_one_entry(memory: Memory, panel: Panel) -> None:
    first = memory.write("fact", "k", "same body")
    again = memory.write("fact", "k", "same body\n\n")  # trailing blank lines are no content
    assert again == first
    promoted = memory.promote(first.id, panel.verdict(first.id))
    assert memory.write("fact", "k", "same body") == promoted  # still verified: not reset
    assert memory.write("fact", "k", "other body").id != first.id


BAD_WRITES = {
    "empty body": {"body": "  \n\t "},
    "oversized body": {"body": "x" * (MAX_BODY + 1)},
    "empty key": {"key": ""},
    "key with a newline": {"key": "a\nb"},
    "unknown kind": {"kind": "memo"},
    "unknown layer": {"layer": "galaxy"},
    "produced_by not a ledger ref": {"produced_by": "yesterday"},
    "a source not a ledger ref": {"sources": ["git:9e1d2c4", "nope"]},
    "salience out of range": {"salience": 1.5},
}


@pytest.mark.parametrize("case", sorted(BAD_WRITES))
def test_bad_input_is_refused_and_nothing_is_lost(memory: Memory, panel: Panel, case: str) -> None:
    kept = memory.write("lesson", "kept", "Pin the toolchain version.")
    memory.promote(kept.id, panel.verdict(kept.id))
    pending = memory.write("lesson", "pending", "Pin the toolchain, maybe.")
    cursor = memory.context("R1").cursor
    call: dict[str, object] = {"kind": "fact", "key": "k", "body": "refusedmarker text"}
    call.update(BAD_WRITES[case])
    with pytest.raises(UsageError) as caught:
        memory.write(**call)  # type: ignore[arg-type]
    assert isinstance(caught.value, TrussError) and caught.value.message
    assert [e.id for e in memory.view([kept.id])] == [kept.id]
    assert [e.trust for e in memory.view([pending.id], min_trust="unverified")] == [
        Trust.UNVERIFIED
    ]
    assert memory.query("refusedmarker", min_trust="unverified").hits == []
    assert memory.delta_since(cursor).changes == ()


def test_unicode_and_line_endings_survive_a_write(memory: Memory) -> None:
    body = "Ünïcode — stays.\r\nSecond line ✓"
    entry = memory.write("fact", "text", body)
    [read] = memory.view([entry.id], min_trust="unverified")
    assert read.body == entry.body and "✓" in read.body and "Ünïcode" in read.body
