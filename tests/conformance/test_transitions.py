"""Trust moves only on a valid signed verdict: promote on a PASS for exactly this entry,
reject on a FAIL, demote with a reason, supersede over a verified entry. Every refused
move raises a project error and changes nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from truss_files.errors import NotFound, TransitionError, UsageError, VerdictError
from truss_files.memory import Memory
from truss_files.model import Entry, Trust
from truss_files.signing import Ed25519Signer
from truss_files.trust.verdict import Verdict

from .conftest import Panel


def _trust(memory: Memory, entry_id: str) -> Trust:
    [entry] = memory.view([entry_id], min_trust="unverified")
    return entry.trust


def test_promote_on_a_valid_pass_verdict(memory: Memory, panel: Panel) -> None:
    entry = memory.write("fact", "k", "The build uses Python 3.11.")
    verdict = panel.verdict(entry.id)
    promoted = memory.promote(entry.id[:10], verdict)  # a unique prefix names it too
    assert promoted.id == entry.id and promoted.trust is Trust.VERIFIED
    assert promoted.provenance.verified_by == verdict.to_dict()
    assert memory.view([entry.id]) == [promoted]


Forgery = Callable[[Panel, Entry, Entry], Verdict]

FORGERIES: dict[str, tuple[type[Exception], Forgery]] = {
    "signed by a key the store never saw, in the panel's name": (
        VerdictError,
        lambda p, e, _o: p.verdict(e.id, key=Ed25519Signer.generate(p.principal)),
    ),
    "votes edited after signing": (
        VerdictError,
        lambda p, e, _o: dataclasses.replace(
            p.verdict(e.id),
            votes=({"reviewer": "mallory", "kind": "human", "vote": "PASS", "evidence": {}},),
        ),
    ),
    "entry id edited after signing": (
        VerdictError,
        lambda p, e, o: dataclasses.replace(p.verdict(o.id), entry=e.id),
    ),
    "a valid verdict for another entry": (VerdictError, lambda p, _e, o: p.verdict(o.id)),
    "a FAIL verdict offered as a pass": (VerdictError, lambda p, e, _o: p.verdict(e.id, "FAIL")),
    "no votes": (VerdictError, lambda p, e, _o: p.verdict(e.id, votes=[])),
    "FAIL votes under a PASS": (
        VerdictError,
        lambda p, e, _o: p.verdict(
            e.id, votes=[{"reviewer": p.principal, "kind": "human", "vote": "FAIL"}]
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(FORGERIES))
def test_promote_refuses_a_verdict_that_is_not_a_valid_pass_for_this_entry(
    memory: Memory, panel: Panel, case: str
) -> None:
    entry = memory.write("fact", "k", "The build uses Python 3.11.")
    other = memory.write("fact", "other", "The build uses Python 3.12.")
    error, forge = FORGERIES[case]
    before = memory.context("R1").cursor
    with pytest.raises(error):
        memory.promote(entry.id, forge(panel, entry, other))
    assert _trust(memory, entry.id) is Trust.UNVERIFIED
    assert memory.view([entry.id]) == []
    assert memory.delta_since(before).changes == ()


def test_a_verdict_replayed_on_a_decided_entry_changes_nothing(
    memory: Memory, panel: Panel
) -> None:
    passed = memory.write("fact", "a", "Deploys happen on Tuesdays.")
    failed = memory.write("fact", "b", "Deploys happen on Sundays.")
    pending = memory.write("fact", "c", "Deploys happen on Mondays.")
    pass_verdict = panel.verdict(passed.id)
    memory.promote(passed.id, pass_verdict)
    memory.reject(failed.id, panel.verdict(failed.id, "FAIL"))
    cursor = memory.context("R1").cursor
    with pytest.raises(TransitionError):
        memory.promote(passed.id, pass_verdict)  # the same verdict again
    with pytest.raises(TransitionError):
        memory.promote(failed.id, panel.verdict(failed.id))  # a rejection is final
    with pytest.raises(VerdictError):
        memory.promote(pending.id, pass_verdict)  # another entry's verdict, replayed
    assert _trust(memory, passed.id) is Trust.VERIFIED
    assert _trust(memory, pending.id) is Trust.UNVERIFIED
    assert memory.view([failed.id], min_trust="unverified") == []  # still rejected
    assert memory.delta_since(cursor).changes == ()


def test_reject_on_a_valid_fail_verdict_and_never_shown(memory: Memory, panel: Panel) -> None:
    entry = memory.write("fact", "k", "Wrongmarker: the moon is cheese.")
    with pytest.raises(VerdictError):
        memory.reject(entry.id, panel.verdict(entry.id, "PASS"))
    with pytest.raises(VerdictError):
        memory.reject(entry.id, panel.verdict(entry.id, "FAIL", key=Ed25519Signer.generate("x")))
    assert _trust(memory, entry.id) is Trust.UNVERIFIED
    rejected = memory.reject(entry.id, panel.verdict(entry.id, "FAIL"))
    assert rejected.trust is Trust.REJECTED
    # Kept for the record, never shown: not at any floor a read may ask for.
    for floor in ("verified", "stale", "unverified"):
        assert memory.view([entry.id], min_trust=floor) == []
        assert memory.query("wrongmarker moon", min_trust=floor).hits == []
    with pytest.raises(UsageError):
        memory.query("wrongmarker", min_trust="rejected")


def test_demote_needs_a_verified_entry_and_a_reason(memory: Memory, panel: Panel) -> None:
    entry = memory.write("fact", "api", "The API is v2.")
    with pytest.raises(TransitionError):
        memory.demote(entry.id, "never verified")
    memory.promote(entry.id, panel.verdict(entry.id))
    with pytest.raises(UsageError):
        memory.demote(entry.id, "   ")
    assert _trust(memory, entry.id) is Trust.VERIFIED
    stale = memory.demote(entry.id, "the API moved to v3")
    assert stale.trust is Trust.STALE and stale.id == entry.id
    assert memory.view([entry.id]) == []
    assert [e.trust for e in memory.view([entry.id], min_trust="stale")] == [Trust.STALE]
    with pytest.raises(TransitionError):
        memory.demote(entry.id, "again")


def test_a_fresh_pass_re_verifies_a_stale_entry(memory: Memory, panel: Panel) -> None:
    entry = memory.write("fact", "api", "The API is v2.")
    memory.promote(entry.id, panel.verdict(entry.id))
    memory.demote(entry.id, "doubt")
    again = memory.promote(entry.id, panel.verdict(entry.id))
    assert again.trust is Trust.VERIFIED and memory.view([entry.id]) == [again]


def test_supersede_hides_the_old_entry_from_default_reads(memory: Memory, panel: Panel) -> None:
    old = memory.write("fact", "db-v1", "Supermarker: the database is Postgres 15.")
    new = memory.write("fact", "db-v2", "Supermarker: the database is Postgres 16.")
    memory.promote(old.id, panel.verdict(old.id))
    hits = memory.query("supermarker database postgres").hits
    assert {h.entry.id for h in hits} == {old.id}
    with pytest.raises(TransitionError):
        memory.supersede(old.id, new.id)  # the newer one is not verified yet
    memory.promote(new.id, panel.verdict(new.id))
    was, now = memory.supersede(old.id, new.id)
    assert was.id == old.id and was.superseded_by == new.id and was.trust is Trust.STALE
    assert now.id == new.id and now.supersedes == old.id and now.trust is Trust.VERIFIED
    hits = memory.query("supermarker database postgres").hits
    assert [h.entry.id for h in hits] == [new.id]
    assert [e.id for e in memory.view([old.id, new.id])] == [new.id]
    with pytest.raises(UsageError):
        memory.supersede(new.id, new.id)


def test_transitions_on_unknown_or_malformed_ids_are_refused(memory: Memory, panel: Panel) -> None:
    unknown = "0123456789abcdef0123456789abcdef"
    with pytest.raises(NotFound):
        memory.promote(unknown, panel.verdict(unknown))
    with pytest.raises(NotFound):
        memory.demote(unknown, "why not")
    for bad in ("not-an-id", "abc", "../../etc/passwd"):
        with pytest.raises(UsageError):
            memory.promote(bad, panel.verdict(unknown))
        with pytest.raises(UsageError):
            memory.view([bad])
