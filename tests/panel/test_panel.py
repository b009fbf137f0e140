"""Quorum rules, the panel, and the verdicts it signs: forged, replayed, edited, agent-signed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.recall_support import find_conflicts
from truss_files.errors import ConfigError, UsageError, VerdictError
from truss_files.facade import MemoryStore
from truss_files.model import Trust
from truss_files.panel.panel import ABSTAIN, FAIL, PASS, Panel, Quorum, tally
from truss_files.panel.reviewers import CheckReviewer, Subject
from truss_files.panel.runner import verify
from truss_files.panel.workspace import Workspace
from truss_files.signing import Ed25519Signer
from truss_files.trust.audit import audit
from truss_files.trust.verdict import Verdict, check_verdict, sign_verdict

# -- quorum ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rule", "k", "n"),
    [
        ("unanimous", "unanimous", 0, 0),
        ("ALL", "unanimous", 0, 0),
        ("majority", "majority", 0, 0),
        (2, "at-least", 2, 0),
        ("2", "at-least", 2, 0),
        ("2-of-3", "k-of-n", 2, 3),
        ("2 of 3", "k-of-n", 2, 3),
    ],
)
def test_quorum_parses(text: str | int, rule: str, k: int, n: int) -> None:
    assert Quorum.parse(text) == Quorum(rule, k, n)


@pytest.mark.parametrize("bad", [0, -1, True, "0", "3-of-2", "0-of-2", "most", "", "1.5"])
def test_quorum_refuses_nonsense(bad: str | int) -> None:
    with pytest.raises(ConfigError, match="quorum"):
        Quorum.parse(bad)


def test_quorum_need_per_panel_size() -> None:
    assert Quorum.parse("unanimous").need(3) == 3
    assert Quorum.parse("majority").need(4) == 3
    assert Quorum.parse("majority").need(3) == 2
    assert Quorum.parse(2).need(5) == 2
    assert Quorum.parse("2-of-3").text(3) == "2-of-3"
    assert Quorum.parse("unanimous").text(2) == "2-of-2"


def test_quorum_that_the_panel_cannot_meet_is_an_error() -> None:
    with pytest.raises(ConfigError, match="only 2 reviewer"):
        Quorum.parse(3).need(2)
    with pytest.raises(ConfigError, match="expects 3 reviewers but this panel has 2"):
        Quorum.parse("2-of-3").need(2)
    with pytest.raises(ConfigError, match="empty panel"):
        Quorum.parse("unanimous").need(0)


@pytest.mark.parametrize(
    ("votes", "quorum", "expected"),
    [
        ([PASS, PASS, PASS], "unanimous", PASS),
        ([PASS, PASS, FAIL], "unanimous", FAIL),  # one FAIL makes unanimity impossible
        ([PASS, PASS, ABSTAIN], "unanimous", None),  # an abstention is not a FAIL
        ([PASS, PASS, FAIL], "2-of-3", PASS),
        ([PASS, FAIL, FAIL], "2-of-3", FAIL),
        ([PASS, FAIL, ABSTAIN], "2-of-3", None),
        ([PASS, PASS, FAIL, FAIL], "majority", FAIL),  # majority of 4 needs 3 PASS
        ([PASS, ABSTAIN, ABSTAIN], 1, PASS),
        ([ABSTAIN, ABSTAIN, ABSTAIN], 1, None),
        ([FAIL, FAIL, PASS], 1, PASS),  # "at least 1 PASS" is met
        ([FAIL], "unanimous", FAIL),
        ([ABSTAIN], "unanimous", None),
    ],
)
def test_quorum_decides(votes: list[str], quorum: str | int, expected: str | None) -> None:
    assert Quorum.parse(quorum).decide(votes) == expected


@given(st.lists(st.sampled_from([PASS, FAIL, ABSTAIN]), min_size=1, max_size=9), st.data())
def test_tally_is_never_both_and_never_passes_short(votes: list[str], data: st.DataObject) -> None:
    need = data.draw(st.integers(min_value=1, max_value=len(votes)))
    result = tally(votes, need)
    passes, fails = votes.count(PASS), votes.count(FAIL)
    assert (result == PASS) == (passes >= need)
    assert (result == FAIL) == (passes < need and fails >= len(votes) - need + 1)
    if passes == fails == 0:
        assert result is None  # abstentions alone never decide


# -- the panel -------------------------------------------------------------------------------


def test_an_empty_panel_is_an_error_not_a_pass() -> None:
    with pytest.raises(ConfigError, match="empty panel is not a pass"):
        Panel(())


def test_a_panel_refuses_a_quorum_it_cannot_meet_before_anything_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    reviewers = (CheckReviewer(f"touch {marker}"),)
    with pytest.raises(ConfigError):
        Panel(reviewers, Quorum.parse(2))
    assert not marker.exists()


def test_panel_runs_every_reviewer_and_applies_the_quorum(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "body")
    reviewers = (CheckReviewer("true"), CheckReviewer("false"), CheckReviewer("kill -9 $$"))
    with Workspace(workdir=Path(store.git.workdir or "."), environ={}) as ws:
        subject = Subject(entry, ws)
        seen: list[str] = []
        decision = Panel(reviewers, Quorum.parse(1)).run(subject, lambda b: seen.append(b.vote))
        assert seen == [PASS, FAIL, ABSTAIN]
        assert decision.outcome == PASS and decision.quorum == "1-of-3"
        assert Panel(reviewers, Quorum.parse("2-of-3")).run(subject).outcome is None
        assert Panel(reviewers).run(subject).outcome == FAIL
    assert "1 PASS, 1 FAIL, 1 ABSTAIN" in decision.summary()
    assert [v["vote"] for v in decision.votes] == [PASS, FAIL, ABSTAIN]


# -- verdicts --------------------------------------------------------------------------------


def _pass_verdict(store: MemoryStore, entry_id: str) -> Verdict:
    vote = {"reviewer": "true", "kind": "check", "vote": PASS, "evidence": {"exit_status": 0}}
    return store.sign_verdict(entry_id, PASS, votes=[vote], quorum="1-of-1", policy="lazy")


def test_a_verdict_signed_by_an_agent_only_key_is_refused(
    store: MemoryStore,
    add_signer: Callable[..., str],
    store_as: Callable[[Ed25519Signer], MemoryStore],
) -> None:
    agent = Ed25519Signer.generate("agent@example.test")
    add_signer(store, agent, "agent@example.test", ("agent",))
    entry = store.write("fact", "k", "claimed by the agent")
    forged = sign_verdict(
        entry.id,
        PASS,
        [{"reviewer": "me", "kind": "check", "vote": PASS, "evidence": {}}],
        signer=agent,
        principal="agent@example.test",
        quorum="1-of-1",
        policy="lazy",
        now="2026-11-29T12:00:00Z",
    )
    with pytest.raises(VerdictError, match="panel"):
        store.promote(entry.id, forged)
    # The panel runner refuses up front too: nothing it signed would be accepted.
    with pytest.raises(UsageError, match="does not hold the panel role"):
        verify(store_as(agent), [entry.id])
    assert store.get(entry.id).trust is Trust.UNVERIFIED


def test_a_verdict_replayed_onto_another_entry_is_refused(store: MemoryStore) -> None:
    a = store.write("fact", "a", "first")
    b = store.write("fact", "b", "second")
    verdict = _pass_verdict(store, a.id)
    with pytest.raises(VerdictError, match=f"is for entry {a.id}"):
        store.promote(b.id, verdict)
    assert store.get(b.id).trust is Trust.UNVERIFIED
    assert store.promote(a.id, verdict).trust is Trust.VERIFIED


def test_a_verdict_whose_votes_were_edited_after_signing_is_refused(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "body")
    vote = {"reviewer": "c", "kind": "check", "vote": FAIL, "evidence": {"exit_status": 1}}
    verdict = store.sign_verdict(entry.id, FAIL, votes=[vote], quorum="1-of-1", policy="lazy")
    # Flip both the vote and the outcome: the signature no longer covers what it says.
    edited = dataclasses.replace(
        verdict, outcome=PASS, votes=({**vote, "vote": PASS, "evidence": {"exit_status": 0}},)
    )
    with pytest.raises(VerdictError, match="signature"):
        store.promote(entry.id, edited)
    # A copy carrying its old verdict_id is caught before any signature check.
    with pytest.raises(VerdictError, match="edited after signing"):
        Verdict.from_dict({**edited.to_dict(), "verdict_id": verdict.id})
    assert store.get(entry.id).trust is Trust.UNVERIFIED


def test_votes_edited_in_the_entry_file_fail_the_audit(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    entry = store.write("fact", "k", "body")
    promoted = store.promote(entry.id, _pass_verdict(store, entry.id))
    path = promoted.path
    text = (store.snapshot().read(path) or b"").decode()
    assert "exit_status: 0" in text
    signed_commit(store, {path: text.replace("exit_status: 0", "exit_status: 3").encode()})
    report = audit(store.git)
    assert [v.rule for v in report.violations] == ["verdict"]
    assert report.violations[0].path == path


@pytest.mark.parametrize(
    ("outcome", "votes", "quorum", "message"),
    [
        (PASS, [FAIL], "1-of-1", "do not reach"),
        (PASS, [PASS, ABSTAIN], "2-of-2", "do not reach"),
        (FAIL, [PASS, ABSTAIN], "2-of-2", "do not reach"),  # undecided is not FAIL
        (PASS, [PASS, PASS], "2-of-3", "holds 2 votes"),
        (PASS, ["MAYBE"], "1-of-1", "MAYBE"),
    ],
)
def test_a_signed_verdict_whose_votes_contradict_it_is_refused(
    store: MemoryStore, outcome: str, votes: list[str], quorum: str, message: str
) -> None:
    entry = store.write("fact", "k", "body")
    signed = store.sign_verdict(
        entry.id,
        outcome,
        votes=[{"reviewer": f"r{i}", "kind": "check", "vote": v} for i, v in enumerate(votes)],
        quorum=quorum,
        policy="lazy",
    )
    with pytest.raises(VerdictError, match=message):
        check_verdict(signed, entry.id, outcome, store.policy())


# -- conflicts -------------------------------------------------------------------------------


def test_find_conflicts_reports_live_verified_rivals_even_when_not_returned(
    store: MemoryStore,
) -> None:
    a = store.write("decision", "db", "use postgres")
    b = store.write("decision", "db", "use sqlite")
    c = store.write("decision", "cache", "use redis")
    for e in (a, b, c):
        store.promote(e.id, _pass_verdict(store, e.id), conflict="keep-both-flagged")
    entries = list(store.iter_entries())
    only_b = [e for e in entries if e.id == b.id]
    found = find_conflicts(only_b, entries)
    assert [(f.kind, f.key, f.ids) for f in found] == [("decision", "db", (a.id, b.id))]
    assert find_conflicts(only_b) == []  # nothing to compare with
    assert find_conflicts([e for e in entries if e.id == c.id], entries) == []
    # Once one supersedes the other there is no conflict left.
    store.supersede(a.id, b.id)
    assert find_conflicts(list(store.iter_entries()), store.iter_entries()) == []
