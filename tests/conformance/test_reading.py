"""Reading through the seam: the trust floor comes first, so text below it never shows
and never moves the score of an entry at or above it; view reads by id or unique prefix
and leaves out what the floor hides."""

from __future__ import annotations

import pytest

from truss_files.errors import UsageError
from truss_files.memory import Memory
from truss_files.model import Entry, Kind, Trust

from .conftest import Panel


def _verified(memory: Memory, panel: Panel, kind: str, key: str, body: str) -> Entry:
    entry = memory.write(kind, key, body)
    return memory.promote(entry.id, panel.verdict(entry.id))


def test_unverified_text_never_shows_at_the_verified_floor(memory: Memory, panel: Panel) -> None:
    good = _verified(memory, panel, "lesson", "flaky", "Retry flaky network tests once.")
    guess = memory.write("lesson", "flaky2", "Flaky network tests: skip them all.")
    for result in (memory.query("flaky network tests"), memory.query("skip them all")):
        assert result.min_trust is Trust.VERIFIED
        assert guess.id not in {h.entry.id for h in result.hits}
        assert all(h.entry.trust is Trust.VERIFIED for h in result.hits)
    assert [h.entry.id for h in memory.query("flaky network tests").hits] == [good.id]
    wide = memory.query("flaky network tests", min_trust="unverified")
    assert {h.entry.id for h in wide.hits} == {good.id, guess.id}
    assert all(h.score >= 0 for h in wide.hits)


def test_a_verified_score_does_not_move_when_unverified_text_is_added(
    memory: Memory, panel: Panel
) -> None:
    a = _verified(memory, panel, "lesson", "a", "Pin the rust toolchain in CI.")
    b = _verified(memory, panel, "lesson", "b", "Cache the cargo registry between runs.")
    before = {h.entry.id: h.score for h in memory.query("rust toolchain cargo").hits}
    assert set(before) == {a.id, b.id} and all(s > 0 for s in before.values())
    for n in range(12):  # a flood of unverified text full of the query's words
        memory.write("lesson", f"spam{n}", "rust rust toolchain toolchain cargo " * (n + 1))
    after = {h.entry.id: h.score for h in memory.query("rust toolchain cargo").hits}
    assert set(after) == set(before)  # the flood is below the floor: not a candidate
    assert [after[i] for i in (a.id, b.id)] == [before[i] for i in (a.id, b.id)]


def test_query_filters_by_kind_and_key_and_cuts_to_limit(memory: Memory, panel: Panel) -> None:
    lesson = _verified(memory, panel, "lesson", "deploy", "Deploy with the blue green script.")
    fact = _verified(memory, panel, "fact", "deploy", "Deploy script lives in ops/deploy.")
    other = _verified(memory, panel, "fact", "deploy-docs", "Deploy docs are in the wiki.")
    assert {h.entry.id for h in memory.query("deploy").hits} == {lesson.id, fact.id, other.id}
    assert [h.entry.id for h in memory.query("deploy", kind="lesson").hits] == [lesson.id]
    assert [h.entry.id for h in memory.query("deploy", kind=Kind.FACT, key="deploy").hits] == [
        fact.id
    ]
    assert len(memory.query("deploy", limit=2).hits) == 2
    scores = [h.score for h in memory.query("deploy").hits]
    assert scores == sorted(scores, reverse=True)


def test_query_refuses_bad_input_with_usage_errors(memory: Memory) -> None:
    for call in (
        lambda: memory.query("x " * 50_000),  # a whole text, not a question
        lambda: memory.query("deploy", min_trust="rejected"),
        lambda: memory.query("deploy", min_trust="trusted"),
        lambda: memory.query("deploy", kind="memo"),
    ):
        with pytest.raises(UsageError):
            call()


def test_view_reads_by_id_and_unique_prefix_at_the_floor(memory: Memory, panel: Panel) -> None:
    good = _verified(memory, panel, "fact", "k1", "The cache lives in the state folder.")
    pending = memory.write("fact", "k2", "The cache lives in /tmp.")
    unknown = "0123456789abcdef0123456789abcdef"
    assert memory.view([good.id]) == [good]
    assert memory.view([good.id[:8], good.id]) == [good]  # one entry, named twice
    assert memory.view([good.id, pending.id, unknown]) == [good]
    both = memory.view([good.id[:10], pending.id[:12]], min_trust="unverified")
    assert {e.id for e in both} == {good.id, pending.id}
    with pytest.raises(UsageError):
        memory.view([good.id[:5]])  # under 8 characters is not an id
