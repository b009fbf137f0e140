"""delta_since: exactly what changed in verified memory since a cursor -- entries that
became verified, stopped being verified, or were superseded -- and a cursor to go on from.
Unverified writes and rejections of unverified text are no change of verified memory."""

from __future__ import annotations

import pytest

from truss_files.errors import BadCursor, UsageError
from truss_files.memory import Memory

from .conftest import Panel


def test_delta_names_exactly_what_changed_since_the_cursor(memory: Memory, panel: Panel) -> None:
    kept = memory.write("lesson", "a", "An old lesson.")
    memory.promote(kept.id, panel.verdict(kept.id))
    doomed = memory.write("fact", "db", "Postgres 15.")
    memory.promote(doomed.id, panel.verdict(doomed.id))
    untouched = memory.write("fact", "os", "Debian 12.")
    memory.promote(untouched.id, panel.verdict(untouched.id))
    cursor = memory.context("R1").cursor
    assert memory.delta_since(cursor).changes == ()

    fresh = memory.write("lesson", "b", "A new lesson.")
    memory.promote(fresh.id, panel.verdict(fresh.id))
    successor = memory.write("fact", "db-next", "Postgres 16.")
    memory.promote(successor.id, panel.verdict(successor.id))
    memory.supersede(doomed.id, successor.id)
    memory.demote(kept.id, "contradicted by the new CI")
    noise = memory.write("lesson", "c", "Unverified: never in a delta.")
    wrong = memory.write("lesson", "d", "Rejected: never in a delta either.")
    memory.reject(wrong.id, panel.verdict(wrong.id, "FAIL"))

    delta = memory.delta_since(cursor)
    got = {(c.id, c.from_, c.to) for c in delta.changes}
    assert got == {
        (fresh.id, None, "verified"),
        (successor.id, None, "verified"),
        (doomed.id, "verified", "stale"),
        (kept.id, "verified", "stale"),
    }
    assert noise.id not in {c.id for c in delta.changes}
    by_id = {c.id: c for c in delta.changes}
    assert (by_id[fresh.id].kind, by_id[fresh.id].key) == ("lesson", "b")
    assert delta.to_dict()["changes"][0].keys() == {"id", "kind", "key", "from", "to"}
    assert delta.cursor != cursor

    # From the new cursor: nothing, until something changes again.
    assert memory.delta_since(delta.cursor).changes == ()
    memory.promote(kept.id, panel.verdict(kept.id))
    [back] = memory.delta_since(delta.cursor).changes
    assert (back.id, back.from_, back.to) == (kept.id, "stale", "verified")
    # An old cursor still answers for everything since it.
    assert (kept.id, "verified", "stale") not in {
        (c.id, c.from_, c.to) for c in memory.delta_since(cursor).changes
    }


@pytest.mark.parametrize("bad", ["", "garbage", "tc1.", "tc1." + "0" * 40, "x" * 5000])
def test_a_bad_cursor_is_refused(memory: Memory, bad: str) -> None:
    memory.context("R1")
    with pytest.raises(BadCursor) as caught:
        memory.delta_since(bad)
    assert isinstance(caught.value, UsageError) and caught.value.message
