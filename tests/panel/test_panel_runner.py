"""verify and recheck over a real store: signed verdicts, one commit per decision, conflict
policies (panel-arbitrated included) and the failing verdict of a re-check."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from truss_files.config.settings import Settings, load_settings, settings_for
from truss_files.errors import UsageError
from truss_files.facade import MemoryStore
from truss_files.format.trailers import parse_trailers
from truss_files.git.gitstore import Snapshot
from truss_files.model import Trust
from truss_files.panel.runner import failed_recheck, recheck, verify
from truss_files.trust.audit import audit
from truss_files.trust.verdict import Verdict, check_verdict

pytestmark = pytest.mark.spawns  # the panel runs each entry's checks through `sh -c`

Commit = Callable[..., str]
# The checks these tests' entries name, as an operator defines them in truss.toml.
CHECKS = {
    "true": "true",
    "false": "false",
    "crash": "kill -9 $$",
    "config-present": "test -f truss.toml",
    "printf-ok": "printf ok",
}


@pytest.fixture
def store(store: MemoryStore, define_checks: Commit) -> MemoryStore:
    define_checks(store, CHECKS)
    return store


def configure(store: MemoryStore, signed_commit: Commit, toml: str, **replace: str) -> None:
    """Append ``toml`` to truss.toml and replace [policy] values, in one operator commit."""

    def changes(snap: Snapshot) -> dict[str, bytes | None]:
        text = (snap.read("truss.toml") or b"").decode()
        for key, value in replace.items():
            text = text.replace(f'{key} = "', f'{key} = "{value}" # was "', 1)
        return {"truss.toml": (text + "\n" + toml).encode()}

    signed_commit(store, changes)


def judge(tmp_path: Path, vote: str, name: str = "judge", log: Path | None = None) -> str:
    script = tmp_path / f"{name}.py"
    record = f"open({str(log)!r}, 'a').write(json.dumps(data) + '\\n')\n" if log else ""
    script.write_text(
        "import json, sys\ndata = json.load(sys.stdin)\n"
        + record
        + f"print(json.dumps({{'vote': {vote!r}, 'rationale': 'because'}}))\n"
    )
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


def ops(store: MemoryStore) -> list[str]:
    tip = store.git.tip()
    assert tip is not None
    return [
        (parse_trailers(c.message).get("Truss-Op") or ["?"])[0] for c in store.git.repo.walk(tip.id)
    ][::-1]


def test_verify_promotes_rejects_and_reports_undecided_each_in_its_own_commit(
    store: MemoryStore,
) -> None:
    passes = store.write("fact", "a", "holds", checks=["config-present", "true"])
    fails = store.write("fact", "b", "does not hold", checks=["true", "false"])
    abstains = store.write("fact", "c", "cannot tell", checks=["true", "crash"])
    lonely = store.write("fact", "d", "nobody reviews me")
    before = ops(store)
    report = verify(store, pending=True)
    assert report.counts() == {"promoted": 1, "rejected": 1, "undecided": 1, "no-reviewers": 1}
    status = {o.id: o.status for o in report.outcomes}
    assert status == {
        passes.id: "promoted",
        fails.id: "rejected",
        abstains.id: "undecided",
        lonely.id: "no-reviewers",
    }
    assert ops(store) == [*before, "promote", "reject"]
    assert store.get(passes.id).trust is Trust.VERIFIED
    assert store.get(fails.id).trust is Trust.REJECTED
    assert store.get(abstains.id).trust is Trust.UNVERIFIED
    assert store.get(lonely.id).trust is Trust.UNVERIFIED
    message = next(o.message for o in report.outcomes if o.id == lonely.id)
    assert "no reviewers configured for kind fact" in message and "[panel.reviewers]" in message
    assert audit(store.git).ok


def test_the_signed_verdict_records_votes_evidence_quorum_and_policy(store: MemoryStore) -> None:
    entry = store.write("fact", "a", "holds", checks=["printf-ok"])
    verify(store, [entry.id[:10]])
    verified = store.get(entry.id)
    assert verified.provenance.verified_by is not None
    verdict = Verdict.from_dict(verified.provenance.verified_by)
    assert check_verdict(verdict, entry.id, "PASS", store.policy()) == "operator@example.test"
    assert (verdict.quorum, verdict.policy) == ("1-of-1", "lazy")
    (vote,) = verdict.votes
    assert (vote["reviewer"], vote["kind"], vote["vote"]) == ("printf-ok", "check", "PASS")
    ev = vote["evidence"]
    assert ev["exit_status"] == 0 and ev["command"] == "printf ok"
    assert ev["output_sha256"] == "2689367b205c16ce32ed4200942b8b8b1e262dfc70d9bc9fbc77c49699a4f1df"
    assert isinstance(ev["duration_ms"], int)
    head = store.git.tip()
    assert head is not None
    assert parse_trailers(head.message)["Truss-Verdict"] == [verdict.id]


def test_configured_reviewers_join_the_entry_checks(
    store: MemoryStore, signed_commit: Commit, tmp_path: Path
) -> None:
    log = tmp_path / "judge.log"
    configure(
        store,
        signed_commit,
        f"[panel.reviewers]\ndecision = [{{type = 'judge', command = {json.dumps(judge(tmp_path, 'FAIL', log=log))}}}]\n",  # noqa: E501
    )
    decision = store.write("decision", "db", "use postgres", checks=["true"])
    fact = store.write("fact", "f", "no reviewer for facts")
    report = verify(store, pending=True)
    got = {o.id: (o.status, o.quorum, [v["vote"] for v in o.votes]) for o in report.outcomes}
    # truss.toml's judge decides under the quorum; the entry's check is a requirement besides
    assert got[decision.id] == ("rejected", "1-of-1", ["PASS", "FAIL"])
    assert got[fact.id][0] == "no-reviewers"
    (request,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert request["entry"]["id"] == decision.id and request["task"] == "review"


def test_quorum_from_settings_and_a_panel_that_cannot_meet_it(store: MemoryStore) -> None:
    def fact_panel(quorum: object, *commands: str) -> Settings:
        reviewers = [{"type": "check", "command": c} for c in commands]
        return load_settings({"panel": {"quorum": quorum, "reviewers": {"fact": reviewers}}})

    a = store.write("fact", "a", "one of two")
    (promoted,) = verify(store, [a.id], settings=fact_panel(1, "true", "false")).outcomes
    assert (promoted.status, promoted.quorum) == ("promoted", "1-of-2")
    b = store.write("fact", "b", "two reviewers")
    three = fact_panel("2-of-3", "true", "true")
    (outcome,) = verify(store, [b.id], settings=three).outcomes
    assert outcome.status == "error" and "expects 3 reviewers" in outcome.message
    assert store.get(b.id).trust is Trust.UNVERIFIED


def test_an_entrys_checks_are_requirements_beside_the_quorum(store: MemoryStore) -> None:
    """A writer's checks make a PASS harder, never easier: named twice they run once, and
    each must PASS besides the quorum of truss.toml's reviewers."""
    majority = load_settings(
        {
            "panel": {
                "quorum": "majority",
                "reviewers": {"fact": [{"type": "check", "command": "false", "name": "strict"}]},
            }
        }
    )
    stuffed = store.write("fact", "a", "stuffed", checks=["true", "true"])
    (outcome,) = verify(store, [stuffed.id], settings=majority).outcomes
    assert (outcome.status, outcome.quorum) == ("rejected", "1-of-1")
    assert [(v["reviewer"], v["vote"]) for v in outcome.votes] == [
        ("true", "PASS"),
        ("strict", "FAIL"),
    ]
    verdict = Verdict.from_dict(store.get(stuffed.id).provenance.verified_by or {})
    assert [v.get("required") for v in verdict.votes] == [True, None]
    lenient = load_settings(
        {"panel": {"reviewers": {"fact": [{"type": "check", "command": "true"}]}}}
    )
    failing = store.write("fact", "b", "its own check fails", checks=["false"])
    (outcome,) = verify(store, [failing.id], settings=lenient).outcomes
    assert outcome.status == "rejected" and "quorum 1-of-1 and 1 required" in outcome.message


def test_entry_checks_can_be_switched_off(store: MemoryStore) -> None:
    entry = store.write("fact", "a", "self-checked", checks=["true"])
    settings = load_settings({"panel": {"entry_checks": False}})
    (outcome,) = verify(store, [entry.id], settings=settings).outcomes
    assert outcome.status == "no-reviewers"


def test_verify_needs_a_selection_and_skips_decided_entries(store: MemoryStore) -> None:
    with pytest.raises(UsageError, match="give IDs or --pending"):
        verify(store)
    entry = store.write("fact", "a", "x", checks=["true"])
    verify(store, [entry.id])
    (again,) = verify(store, [entry.id]).outcomes
    assert again.status == "skipped" and "already verified" in again.message


# -- recheck ---------------------------------------------------------------------------------


def test_a_failed_recheck_demotes_to_stale_with_the_fail_verdict_recorded(
    store: MemoryStore, tmp_path: Path, define_checks: Commit
) -> None:
    broken = tmp_path / "broken"
    define_checks(store, {"unbroken": f"test ! -e {broken}"})
    entry = store.write("lesson", "flaky", "the suite is green", checks=["unbroken"])
    other = store.write("lesson", "steady", "always true", checks=["true"])
    verify(store, pending=True)
    passed = store.get(entry.id).provenance.verified_by
    broken.touch()
    before = ops(store)
    report = recheck(store, all_verified=True)
    assert report.counts() == {"holds": 1, "demoted": 1, "reverified": 0, "undecided": 0}
    assert ops(store) == [*before, "demote"]
    demoted = store.get(entry.id)
    assert demoted.trust is Trust.STALE
    assert demoted.provenance.verified_by == passed  # the PASS that once verified it stays
    assert store.get(other.id).trust is Trust.VERIFIED
    verdict = failed_recheck(store, entry.id)
    assert verdict is not None and verdict.policy == "recheck"
    check_verdict(verdict, entry.id, "FAIL", store.policy())
    assert verdict.id == next(o.verdict for o in report.outcomes if o.id == entry.id)
    assert failed_recheck(store, other.id) is None
    assert audit(store.git).ok

    # --all leaves stale entries alone; named, a passing re-check verifies it again.
    broken.unlink()
    assert entry.id not in {o.id for o in recheck(store, all_verified=True).outcomes}
    (again,) = recheck(store, [entry.id]).outcomes
    assert again.status == "reverified" and store.get(entry.id).trust is Trust.VERIFIED
    assert audit(store.git).ok


def test_recheck_skips_superseded_and_judge_only_entries(
    store: MemoryStore, signed_commit: Commit, tmp_path: Path
) -> None:
    configure(
        store,
        signed_commit,
        f"[panel.reviewers]\ndecision = [{{type = 'judge', command = {json.dumps(judge(tmp_path, 'PASS'))}}}]\n",  # noqa: E501
    )
    old = store.write("fact", "k", "old", checks=["true"])
    verify(store, [old.id])
    new = store.write("fact", "k", "new", checks=["true"])
    verify(store, [new.id])
    assert store.get(old.id).superseded_by == new.id
    (superseded,) = recheck(store, [old.id]).outcomes
    assert superseded.status == "skipped" and "superseded by" in superseded.message
    decision = store.write("decision", "d", "judged only")
    verify(store, [decision.id])
    (judged,) = recheck(store, [decision.id]).outcomes
    assert judged.status == "no-checks"
    assert store.get(decision.id).trust is Trust.VERIFIED


# -- conflict policies -----------------------------------------------------------------------


def test_verified_wins_supersedes_the_older_entry(store: MemoryStore) -> None:
    old = store.write("fact", "k", "old", checks=["true"])
    new = store.write("fact", "k", "new", checks=["true"])
    verify(store, [old.id])
    (outcome,) = verify(store, [new.id]).outcomes
    assert "supersedes" in outcome.message
    assert store.get(old.id).trust is Trust.STALE
    assert store.get(old.id).superseded_by == new.id


def test_latest_wins_keeps_the_newer_entry_and_the_audit_accepts_it(store: MemoryStore) -> None:
    settings = load_settings({"policy": {"conflict": "latest-wins"}})
    older = store.write("fact", "k", "older claim", checks=["true"])
    newer = store.write("fact", "k", "newer claim", checks=["true"])
    verify(store, [newer.id], settings=settings)
    (outcome,) = verify(store, [older.id], settings=settings).outcomes
    assert outcome.status == "promoted" and outcome.trust == "stale"
    assert store.get(older.id).superseded_by == newer.id
    assert store.get(newer.id).trust is Trust.VERIFIED
    assert audit(store.git).ok, audit(store.git).violations
    store.revert("HEAD")
    assert store.get(older.id).trust is Trust.UNVERIFIED
    assert audit(store.git).ok


def test_the_contract_layer_overrides_the_store_conflict_policy(
    store: MemoryStore, tmp_path: Path
) -> None:
    contract = tmp_path / "contract.toml"
    contract.write_text('[policy]\nconflict = "keep-both-flagged"\n')
    settings = settings_for(store, contract=contract)
    a = store.write("decision", "db", "postgres", checks=["true"])
    b = store.write("decision", "db", "sqlite", checks=["true"])
    verify(store, pending=True, settings=settings)
    assert store.get(a.id).trust is store.get(b.id).trust is Trust.VERIFIED


@pytest.mark.parametrize(
    ("arbiter", "status", "new_trust", "old_trust"),
    [
        ("PASS", "promoted", Trust.VERIFIED, Trust.STALE),
        ("FAIL", "rejected", Trust.REJECTED, Trust.VERIFIED),
        ("garbage", "undecided", Trust.UNVERIFIED, Trust.VERIFIED),
        (None, "undecided", Trust.UNVERIFIED, Trust.VERIFIED),
    ],
)
def test_panel_arbitrated(
    store: MemoryStore,
    tmp_path: Path,
    arbiter: str | None,
    status: str,
    new_trust: Trust,
    old_trust: Trust,
) -> None:
    log = tmp_path / "arbiter.log"
    panel: dict[str, object] = {}
    if arbiter == "garbage":
        panel["arbiters"] = [{"type": "judge", "command": "echo not-json"}]
    elif arbiter is not None:
        panel["arbiters"] = [{"type": "judge", "command": judge(tmp_path, arbiter, log=log)}]
    settings = load_settings({"policy": {"conflict": "panel-arbitrated"}, "panel": panel})
    first = store.write("decision", "db", "postgres", checks=["true"])
    (alone,) = verify(store, [first.id], settings=settings).outcomes
    assert alone.status == "promoted" and not log.exists()  # no rival: nobody asked
    second = store.write("decision", "db", "sqlite", checks=["true"])
    (outcome,) = verify(store, [second.id], settings=settings).outcomes
    assert outcome.status == status
    assert store.get(second.id).trust is new_trust
    assert store.get(first.id).trust is old_trust
    if arbiter in ("PASS", "FAIL"):
        (request,) = [json.loads(line) for line in log.read_text().splitlines()]
        assert request["task"] == "arbitrate"
        assert (request["entry"]["id"], request["rival"]["id"]) == (second.id, first.id)
    if arbiter == "FAIL":
        verdict = Verdict.from_dict(store.get(second.id).provenance.verified_by or {})
        assert verdict.policy == "panel-arbitrated" and verdict.outcome == "FAIL"
        assert [v["kind"] for v in verdict.votes] == ["judge"]
    if arbiter is None:
        assert "needs [panel] arbiters" in outcome.message
    assert audit(store.git).ok
