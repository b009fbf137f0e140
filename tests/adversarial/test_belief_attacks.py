"""Attacks on a belief's life: a verdict replayed (across a demotion, or after a signed revert
of the promotion it made), arbitration bypassed (a plain PASS or a hand `supersede` over a
verified rival under panel-arbitrated), an entry with no LedgerRef.

Real stores, real keys; each attack is made as a hostile client makes it (past the library,
through ``GitStore.apply``: tests/support/hand_commits.py) or through the public API and the CLI,
and the library refuses it or the audit names the commit, the file and the rule."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.belief_support import (
    MARKER,
    durable_call,
    edit_config,
    run_cli,
    set_conflict,
    tip,
)
from tests.support.hand_commits import commit as hand_commit
from tests.support.hand_commits import promote as hand_promote
from truss_files.errors import ConflictError, UsageError, VerdictError
from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.format.trailers import trailers
from truss_files.git.gitstore import Snapshot
from truss_files.model import Entry, Kind, Provenance, Trust
from truss_files.signing import Ed25519Signer
from truss_files.trust.audit import audit
from truss_files.trust.verdict import Verdict, sign_verdict


def _rules(store: MemoryStore) -> list[str]:
    return [v.rule for v in audit(store.git).violations]


def _verify_commit(store: MemoryStore, commit: str) -> None:
    done = subprocess.run(
        ["git", "-c", "gpg.ssh.allowedSignersFile=.truss/allowed_signers", "verify-commit", commit],
        cwd=store.git.workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- verdict replay


def test_a_pass_verdict_cannot_be_replayed_across_a_demotion(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "holds")
    early = store.sign_verdict(entry.id, "PASS")  # signed, kept back
    verdict = store.sign_verdict(entry.id, "PASS", note="the one used")
    assert verdict.basis == store.snapshot().blob_id(entry.path)
    store.promote(entry.id, verdict)
    store.demote(entry.id, "no longer true")
    before = tip(store)
    for replayed in (verdict, early):
        with pytest.raises(VerdictError, match="changed since"):
            store.promote(entry.id, replayed)
    assert tip(store) == before and store.get(entry.id).trust is Trust.STALE
    fresh = store.sign_verdict(entry.id, "PASS", note="re-checked")
    assert store.promote(entry.id, fresh).trust is Trust.VERIFIED
    assert audit(store.git).ok


def test_a_verdict_without_a_basis_cannot_be_replayed_either(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    def old_style(now: str) -> Verdict:  # as verdicts were signed before they named a basis
        return sign_verdict(
            entry.id,
            "PASS",
            [{"reviewer": "operator@example.test", "kind": "human", "vote": "PASS"}],
            signer=operator_key,
            principal="operator@example.test",
            quorum="1-of-1",
            policy="manual",
            now=now,
        )

    entry = store.write("fact", "k", "holds")
    used = old_style("2026-11-29T12:00:00Z")
    assert used.basis is None
    store.promote(entry.id, used)
    store.demote(entry.id, "no longer true")
    with pytest.raises(VerdictError, match="replayed across a demotion"):
        store.promote(entry.id, used)
    # Nor one signed before it (kept back), while a fresh one re-verifies.
    with pytest.raises(VerdictError, match="before the verdict that last verified"):
        store.promote(entry.id, old_style("2026-11-29T11:59:00Z"))
    fresh = old_style("2026-11-29T12:30:00Z")
    assert store.promote(entry.id, fresh).trust is Trust.VERIFIED
    assert audit(store.git).ok


def test_the_audit_flags_a_hand_made_replay(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    entry = store.write("fact", "k", "holds")
    verdict = store.sign_verdict(entry.id, "PASS")
    store.promote(entry.id, verdict)
    store.demote(entry.id, "no longer true")
    assert audit(store.git).ok
    bad = hand_promote(store, operator_key, entry.id, verdict)
    found = [v for v in audit(store.git).violations if v.rule == "verdict-replay"]
    assert [v.commit for v in found] == [bad]


def test_a_signed_revert_of_a_demotion_is_not_a_replay(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "holds")
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS"))
    store.demote(entry.id, "oops")
    store.revert(tip(store))
    assert store.get(entry.id).trust is Trust.VERIFIED
    assert audit(store.git).ok


@pytest.mark.parametrize("outcome", ["PASS", "FAIL"])
def test_a_verdict_replayed_after_a_signed_revert_of_its_own_commit_is_refused(
    store: MemoryStore, outcome: str
) -> None:
    entry = store.write("fact", "k", "holds")
    verdict = store.sign_verdict(entry.id, outcome)
    decide = store.promote if outcome == "PASS" else store.reject
    decide(entry.id, verdict)
    spent = tip(store)
    store.revert(spent)
    # The revert put back the very state the verdict judged: its basis matches again.
    assert store.get(entry.id).trust is Trust.UNVERIFIED
    assert store.snapshot().blob_id(entry.path) == verdict.basis
    before = tip(store)
    with pytest.raises(VerdictError) as caught:
        decide(entry.id, verdict)
    said = caught.value.message
    assert entry.id in said and verdict.id in said and spent[:12] in said
    assert "spent already" in said and "Run the panel again" in said
    assert f"truss-files verify {entry.id[:12]}" in said
    assert tip(store) == before and store.get(entry.id).trust is Trust.UNVERIFIED
    assert audit(store.git).ok
    # The panel run again: a new verdict decides.
    fresh = store.sign_verdict(entry.id, outcome, note="judged again")
    assert decide(entry.id, fresh).trust is not Trust.UNVERIFIED
    assert audit(store.git).ok
    _verify_commit(store, tip(store))


def test_the_cli_refuses_the_replay_after_a_revert_with_exit_1(
    store: MemoryStore, tmp_path: Path
) -> None:
    key = tmp_path / "operator_key"
    entry = store.write("fact", "k", "holds")
    verdict = tmp_path / "v.json"
    verdict.write_text(store.sign_verdict(entry.id, "PASS").to_json())
    done = run_cli(store, key, "promote", entry.id, "--verdict", str(verdict))
    assert done.exit_code == 0, done.output
    spent = tip(store)
    done = run_cli(store, key, "revert", spent)
    assert done.exit_code == 0, done.output
    before = tip(store)
    done = run_cli(store, key, "promote", entry.id, "--verdict", str(verdict), "--format", "json")
    assert done.exit_code == 1, done.output
    error = json.loads(done.output)["error"]
    assert error["code"] == "bad_verdict"
    assert entry.id in error["message"] and spent[:12] in error["message"]
    assert "Run the panel again" in error["message"]
    assert tip(store) == before and store.get(entry.id).trust is Trust.UNVERIFIED


def test_the_audit_flags_a_hand_made_replay_after_a_signed_revert(
    store: MemoryStore, operator_key: Ed25519Signer, tmp_path: Path
) -> None:
    entry = store.write("fact", "k", "holds")
    verdict = store.sign_verdict(entry.id, "PASS")
    store.promote(entry.id, verdict)
    spent = tip(store)
    store.revert(spent)
    reverted = tip(store)
    assert audit(store.git).ok
    # Past the library: the same promote commit again, signed by a key allowed to make it.
    bad = hand_promote(store, operator_key, entry.id, verdict)
    _verify_commit(store, bad)  # a good signature: only the replay is wrong
    found = [v for v in audit(store.git).violations if v.rule == "verdict-replay"]
    assert [(v.commit, v.path) for v in found] == [(bad, entry.path)]
    assert spent[:12] in found[0].message and "spent already" in found[0].message
    # A range audit that starts after the spending commit finds it below the range too.
    ranged = audit(store.git, f"{reverted}..{bad}")
    assert [(v.commit, v.rule) for v in ranged.violations] == [(bad, "verdict-replay")]
    done = run_cli(store, tmp_path / "operator_key", "audit")
    assert done.exit_code == 1 and "verdict-replay" in done.output, done.output


def test_one_verdict_spent_on_two_branches_is_no_replay(
    store: MemoryStore, operator_key: Ed25519Signer, git: Callable[..., str]
) -> None:
    # Two clones handed the same verdict each promote with it: neither spent it first.
    entry = store.write("fact", "k", "holds")
    verdict = store.sign_verdict(entry.id, "PASS")
    work = store.git.workdir
    assert work is not None
    fork = tip(store)
    one = hand_promote(store, operator_key, entry.id, verdict)
    promoted = Snapshot(store.git.repo, store.git.commit(one)).read(entry.path)
    assert promoted is not None
    git(work, "reset", "--hard", fork)
    message = "truss: promote in the other clone\n\n" + trailers(
        op="promote", entry=entry.id, verdict=verdict.id
    )
    hand_commit(store, operator_key, {entry.path: promoted}, message)
    git(work, "-c", "commit.gpgsign=false", "merge", "--no-ff", "-m", "Merge clones", one)
    assert len(store.git.commit(tip(store)).parents) == 2
    assert "verdict-replay" not in _rules(store)


# --------------------------------------------------------------------------- arbitration


def _two_verified(
    store: MemoryStore, signed_commit: Callable[..., str], arbitrated: bool = False
) -> tuple[Entry, Entry]:
    """Two verified entries of one kind and key (both stand under keep-both-flagged), then
    conflict policy panel-arbitrated. ``arbitrated``: the second's verdict carries the
    arbiters' decision naming the first."""
    set_conflict(store, signed_commit, "keep-both-flagged")
    first = store.write("decision", "db", "postgres")
    store.promote(first.id, store.sign_verdict(first.id, "PASS"))
    second = store.write("decision", "db", "sqlite")
    decision = {"rival": first.id, "votes": [{"reviewer": "arbiter", "vote": "PASS"}]}
    verdict = store.sign_verdict(second.id, "PASS", arbitration=decision if arbitrated else None)
    store.promote(second.id, verdict)
    set_conflict(store, signed_commit, "panel-arbitrated")
    return store.get(first.id), store.get(second.id)


def test_a_plain_pass_cannot_supersede_a_verified_rival_under_panel_arbitrated(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    edit_config(store, signed_commit, MARKER, 'conflict = "panel-arbitrated"')
    first = store.write("decision", "db", "postgres")
    store.promote(first.id, store.sign_verdict(first.id, "PASS"))  # no rival: it stands
    second = store.write("decision", "db", "sqlite")
    verdict = store.sign_verdict(second.id, "PASS")
    before = tip(store)
    for override in (None, "verified-wins", "latest-wins"):
        # A layered override cannot loosen truss.toml's panel-arbitrated either.
        with pytest.raises(ConflictError, match="arbiters' decision") as caught:
            store.promote(second.id, verdict, conflict=override)
        assert caught.value.code == "conflict" and first.id in caught.value.message
    assert tip(store) == before
    assert store.get(first.id).trust is Trust.VERIFIED
    assert store.get(second.id).trust is Trust.UNVERIFIED
    assert audit(store.git).ok


def test_the_cli_promote_refuses_it_with_exit_1_and_code_conflict(
    store: MemoryStore, signed_commit: Callable[..., str], tmp_path: Path
) -> None:
    edit_config(store, signed_commit, MARKER, 'conflict = "panel-arbitrated"')
    first = store.write("decision", "db", "postgres")
    store.promote(first.id, store.sign_verdict(first.id, "PASS"))
    second = store.write("decision", "db", "sqlite")
    verdict = tmp_path / "v.json"
    verdict.write_text(store.sign_verdict(second.id, "PASS").to_json())
    key = tmp_path / "operator_key"
    result = run_cli(
        store, key, "promote", second.id, "--verdict", str(verdict), "--format", "json"
    )
    assert result.exit_code == 1, result.output
    assert "conflict" in result.output and "arbiters" in result.output
    assert store.get(first.id).trust is Trust.VERIFIED


def test_a_supersede_by_hand_cannot_stand_in_for_the_arbiters(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    first, second = _two_verified(store, signed_commit)
    before = tip(store)
    with pytest.raises(ConflictError) as caught:
        store.supersede(first.id, second.id)
    said = caught.value.message
    assert caught.value.code == "conflict" and first.id in said and second.id in said
    assert "carries no arbiters' decision" in said and "truss-files recheck" in said
    assert tip(store) == before
    assert store.get(first.id).trust is Trust.VERIFIED and store.get(first.id).superseded_by is None
    assert audit(store.git).ok
    # A link between two keys is no conflict: supersede makes it as under any policy.
    other = store.write("decision", "cache", "redis")
    store.promote(other.id, store.sign_verdict(other.id, "PASS"))
    old, new = store.supersede(first.id, other.id)
    assert old.trust is Trust.STALE and new.supersedes == first.id
    assert audit(store.git).ok


def test_the_cli_supersede_refuses_it_with_exit_1_and_code_conflict(
    store: MemoryStore, signed_commit: Callable[..., str], tmp_path: Path
) -> None:
    first, second = _two_verified(store, signed_commit)
    before = tip(store)
    key = tmp_path / "operator_key"
    done = run_cli(store, key, "supersede", first.id, second.id, "--format", "json")
    assert done.exit_code == 1, done.output
    error = json.loads(done.output)["error"]
    assert error["code"] == "conflict" and "arbiters" in error["message"]
    assert tip(store) == before and store.get(first.id).trust is Trust.VERIFIED


def test_an_arbitrated_verdict_lets_supersede_link_the_rival(
    store: MemoryStore, signed_commit: Callable[..., str], tmp_path: Path
) -> None:
    first, second = _two_verified(store, signed_commit, arbitrated=True)
    done = run_cli(store, tmp_path / "operator_key", "supersede", first.id, second.id)
    assert done.exit_code == 0, done.output
    assert store.get(first.id).trust is Trust.STALE
    assert store.get(first.id).superseded_by == second.id
    assert audit(store.git).ok
    _verify_commit(store, tip(store))


def _arbitration_flagged(
    store: MemoryStore, signer: Ed25519Signer, won: Entry, lost: Entry, message: str
) -> None:
    """Commit ``won`` and ``lost`` past the library, with a good signature: the audit names
    that commit and the rival's file, rule ``arbitration``."""
    files = {e.path: entryfile.serialize(e).encode() for e in (won, lost)}
    bad = hand_commit(store, signer, files, message)
    _verify_commit(store, bad)  # a good signature: only the bypass is wrong
    found = [v for v in audit(store.git).violations if v.rule == "arbitration"]
    assert [(v.commit, v.path) for v in found] == [(bad, lost.path)]
    assert "carries no arbiters' decision" in found[0].message


def test_the_audit_flags_a_hand_promote_that_superseded_the_rival_with_a_plain_pass(
    store: MemoryStore, signed_commit: Callable[..., str], operator_key: Ed25519Signer
) -> None:
    edit_config(store, signed_commit, MARKER, 'conflict = "panel-arbitrated"')
    first = store.write("decision", "db", "postgres")
    store.promote(first.id, store.sign_verdict(first.id, "PASS"))
    second = store.write("decision", "db", "sqlite")
    verdict = store.sign_verdict(second.id, "PASS")
    # Past the library: the promote commit verified-wins would make.
    snap = store.snapshot()
    rival = store.get(first.id, snap)
    new = store.get(second.id, snap)
    prov = dataclasses.replace(new.provenance, verified_by=verdict.to_dict())
    won = dataclasses.replace(new, trust=Trust.VERIFIED, provenance=prov, supersedes=rival.id)
    lost = dataclasses.replace(rival, trust=Trust.STALE, superseded_by=new.id)
    message = f"truss: promote {new.id[:12]}\n\n" + trailers(
        op="promote",
        entry=new.id,
        trust=[f"{new.id} unverified -> verified", f"{rival.id} verified -> stale"],
        verdict=verdict.id,
    )
    _arbitration_flagged(store, operator_key, won, lost, message)


def test_the_audit_flags_a_hand_supersede_of_the_rival_with_a_plain_pass(
    store: MemoryStore, signed_commit: Callable[..., str], operator_key: Ed25519Signer
) -> None:
    first, second = _two_verified(store, signed_commit)
    assert audit(store.git).ok
    # Past the library: the supersede commit it refuses to make.
    lost = dataclasses.replace(first, trust=Trust.STALE, superseded_by=second.id)
    won = dataclasses.replace(second, supersedes=first.id)
    message = f"truss: supersede {first.id[:12]} (decision db)\n\n" + trailers(
        op="supersede",
        entry=first.id,
        trust=[f"{first.id} verified -> stale", f"{second.id} verified -> verified"],
        superseded_by=second.id,
    )
    _arbitration_flagged(store, operator_key, won, lost, message)


# --------------------------------------------------------------------------- ledger refs


def _null_ref_entry() -> Entry:
    return Entry(
        kind=Kind.FACT,
        key="nowhere",
        body="from nowhere",
        author="agent:operator@example.test",
        created="2026-11-29T12:00:00Z",
        provenance=Provenance(produced_by=None),
    )


def test_the_audit_refuses_a_new_entry_without_a_ledger_ref(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    entry = _null_ref_entry()
    with pytest.raises(UsageError, match="no provenance.produced_by"):
        store.write_many([entry])
    message = "truss: write fact nowhere\n\n" + trailers(op="write", entry=entry.id)
    bad = hand_commit(
        store, operator_key, {entry.path: entryfile.serialize(entry).encode()}, message
    )
    found = [v for v in audit(store.git).violations if v.rule == "ledger-ref"]
    assert [(v.commit, v.path) for v in found] == [(bad, entry.path)]


def test_an_older_store_without_the_cut_over_still_audits(
    store: MemoryStore, signed_commit: Callable[..., str], operator_key: Ed25519Signer
) -> None:
    # A store made before the cut-over: truss.toml has no [policy] provenance line.
    edit_config(store, signed_commit, 'provenance = "required"\n', "")
    entry = _null_ref_entry()
    message = "truss: write fact nowhere\n\n" + trailers(op="write", entry=entry.id)
    hand_commit(store, operator_key, {entry.path: entryfile.serialize(entry).encode()}, message)
    assert audit(store.git).ok
    # The operator turns it on: from then on a null ref is refused, the past still audits.
    edit_config(store, signed_commit, MARKER, MARKER + '\nprovenance = "required"')
    later = dataclasses.replace(entry, key="later")
    message = "truss: write fact later\n\n" + trailers(op="write", entry=later.id)
    bad = hand_commit(
        store, operator_key, {later.path: entryfile.serialize(later).encode()}, message
    )
    assert [(v.commit, v.rule) for v in audit(store.git).violations] == [(bad, "ledger-ref")]


# --------------------------------------------------------------------------- citations


def test_a_verdict_may_cite_a_signed_call_and_not_a_missing_or_unsigned_one(
    store: MemoryStore, operator_key: Ed25519Signer, git: Callable[..., str]
) -> None:
    entry = store.write("fact", "k", "holds")
    cite = durable_call(store, "R-cite")
    good = store.sign_verdict(entry.id, "PASS", cites=[cite])
    assert good.votes[0]["evidence"]["cites"] == [cite]
    missing = store.sign_verdict(entry.id, "PASS", cites=["run:R-cite/9"])
    nowhere = store.sign_verdict(entry.id, "PASS", cites=["run:R-none/1"])
    # An unsigned "ledger" made with plain git: a call #1 nobody signed.
    repo = store.git.workdir
    assert repo is not None
    tree = git(repo, "write-tree").strip()
    fake = git(repo, "commit-tree", tree, "-m", "call\n\nTruss-Run: R-fake\nTruss-Seq: 1").strip()
    git(repo, "update-ref", "refs/truss/runs/R-fake", fake)
    unsigned = store.sign_verdict(entry.id, "PASS", cites=["run:R-fake/1"])
    before = tip(store)
    for bad, words in (
        (missing, "holds no call #9"),
        (nowhere, "no ledger of run R-none"),
        (unsigned, "is unsigned"),
    ):
        with pytest.raises(VerdictError, match=words):
            store.promote(entry.id, bad)
    assert tip(store) == before
    store.promote(entry.id, good)
    assert audit(store.git).ok
    # Past the library: a verdict citing a call that is not there.
    other = store.write("fact", "k2", "also holds")
    forged = store.sign_verdict(other.id, "PASS", cites=["run:R-cite/9"])
    bad = hand_promote(store, operator_key, other.id, forged)
    found = [v for v in audit(store.git).violations if v.rule == "verdict-cites"]
    assert [v.commit for v in found] == [bad] and "holds no call #9" in found[0].message
