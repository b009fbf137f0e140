"""VerificationPolicy off / lazy / eager / tiered: when the panel runs — and, under every one
of them, that a default read never surfaces unverified content as trusted."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.gated import search
from truss_files.config.policy import VerificationPolicy
from truss_files.config.settings import Settings, settings_for
from truss_files.errors import ConfigError, UsageError
from truss_files.facade import MemoryStore
from truss_files.git.gitstore import Snapshot
from truss_files.model import Trust
from truss_files.panel.eager import Written, verify_written
from truss_files.panel.runner import recheck, verify
from truss_files.recall.pipeline import Filter
from truss_files.signing import Ed25519Signer
from truss_files.trust.audit import audit
from truss_files.trust.verdict import Verdict, check_verdict

pytestmark = pytest.mark.spawns  # the panel runs each entry's checks through `sh -c`

Commit = Callable[..., str]
# The checks these tests' entries name, as an operator defines them in truss.toml.
CHECKS = {"true": "true", "false": "false", "crash": "kill -9 $$"}


@pytest.fixture
def store(store: MemoryStore, define_checks: Commit) -> MemoryStore:
    define_checks(store, CHECKS)
    return store


TOML = {
    "off": 'verification = "off"',
    "lazy": 'verification = "lazy"',
    "eager": 'verification = "eager"',
    "tiered": 'verification = "tiered"',
}
TIERS = '\n[policy.tiered]\ndecision = "eager"\nscratch = "off"\n'


def write_entry(
    store: MemoryStore,
    kind: str,
    key: str,
    body: str,
    *,
    settings: Settings | None = None,
    checks: list[str] | None = None,
) -> Written:
    """One entry through the front door every face writes through."""
    entry = store.new_entry(kind, key, body, checks=checks or [])
    return store.write_entries([entry], settings=settings)


def set_policy(store: MemoryStore, signed_commit: Commit, mode: str) -> None:
    def changes(snap: Snapshot) -> dict[str, bytes | None]:
        text = (snap.read("truss.toml") or b"").decode()
        text = text.replace('verification = "lazy"', TOML[mode])
        return {"truss.toml": (text + (TIERS if mode == "tiered" else "")).encode()}

    signed_commit(store, changes)


def write_all(store: MemoryStore) -> dict[str, str]:
    """Entries every policy sees: passing, failing, abstaining and unreviewed, two kinds."""
    made = {}
    for kind in ("decision", "scratch"):
        for name, checks in (
            ("pass", ["true"]),
            ("fail", ["false"]),
            ("abstain", ["crash"]),
            ("none", []),
        ):
            result = write_entry(
                store, kind, f"{kind}-{name}", f"shared words {name}", checks=checks
            )
            made[f"{kind}-{name}"] = result.entries[0].id
    return made


def assert_default_reads_are_trusted(store: MemoryStore) -> list[str]:
    """Every entry a default query returns is verified on a valid panel verdict."""
    entries = list(store.iter_entries())
    hits = search(store.git.workdir or store.git.git_dir, "shared words", Filter(), 100).hits
    policy = store.policy()
    for hit in hits:
        assert hit.entry.trust is Trust.VERIFIED
        assert hit.entry.provenance.verified_by is not None
        verdict = Verdict.from_dict(hit.entry.provenance.verified_by)
        check_verdict(verdict, hit.entry.id, "PASS", policy)
    returned = {h.entry.id for h in hits}
    below = {e.id for e in entries if e.trust is not Trust.VERIFIED}
    assert not returned & below
    return sorted(h.entry.key for h in hits)


def trust(store: MemoryStore, made: dict[str, str]) -> dict[str, str]:
    return {name: store.get(eid).trust.value for name, eid in made.items()}


def test_policy_off_leaves_everything_unverified_and_verify_refuses(
    store: MemoryStore, signed_commit: Commit
) -> None:
    set_policy(store, signed_commit, "off")
    made = write_all(store)
    with pytest.raises(UsageError, match="verification policy is off"):
        verify(store, pending=True)
    with pytest.raises(UsageError, match="verification policy is off"):
        recheck(store, all_verified=True)
    assert set(trust(store, made).values()) == {"unverified"}
    assert assert_default_reads_are_trusted(store) == []


def test_policy_lazy_waits_for_verify(store: MemoryStore, signed_commit: Commit) -> None:
    set_policy(store, signed_commit, "lazy")
    made = write_all(store)
    assert set(trust(store, made).values()) == {"unverified"}
    assert assert_default_reads_are_trusted(store) == []
    verify(store, pending=True)
    assert assert_default_reads_are_trusted(store) == ["decision-pass", "scratch-pass"]
    assert trust(store, made)["decision-fail"] == "rejected"
    assert trust(store, made)["decision-abstain"] == "unverified"
    assert trust(store, made)["decision-none"] == "unverified"


def test_policy_eager_runs_the_panel_in_the_write_path(
    store: MemoryStore, signed_commit: Commit
) -> None:
    set_policy(store, signed_commit, "eager")
    result = write_entry(store, "fact", "solo", "shared words solo", checks=["true"])
    (entry,) = result.entries
    outcome = result.outcome_for(entry.id)
    assert entry.trust is Trust.VERIFIED and outcome is not None
    assert outcome.status == "promoted"
    assert result.result(path=True) == {
        "id": entry.id,
        "trust": "verified",
        "path": entry.path,
        "verification": outcome.to_dict(),
    }
    made = write_all(store)
    states = trust(store, made)
    assert states["decision-pass"] == states["scratch-pass"] == "verified"
    assert states["decision-fail"] == "rejected"
    assert states["decision-abstain"] == states["decision-none"] == "unverified"
    keys = assert_default_reads_are_trusted(store)
    assert keys == ["decision-pass", "scratch-pass", "solo"]
    verdict = Verdict.from_dict(store.get(made["decision-pass"]).provenance.verified_by or {})
    assert verdict.policy == "eager"
    assert audit(store.git).ok


def test_policy_tiered_decides_per_kind(store: MemoryStore, signed_commit: Commit) -> None:
    set_policy(store, signed_commit, "tiered")
    made = write_all(store)
    states = trust(store, made)
    assert states["decision-pass"] == "verified"  # eager
    assert states["scratch-pass"] == "unverified"  # off
    assert assert_default_reads_are_trusted(store) == ["decision-pass"]
    report = verify(store, pending=True)
    scratch = [o for o in report.outcomes if o.kind == "scratch"]
    assert {o.status for o in scratch} == {"skipped"}
    assert "verification is off for kind scratch" in scratch[0].message
    assert trust(store, made)["scratch-pass"] == "unverified"
    assert assert_default_reads_are_trusted(store) == ["decision-pass"]
    verdict = Verdict.from_dict(store.get(made["decision-pass"]).provenance.verified_by or {})
    assert verdict.policy == "tiered:eager"


def test_eager_without_a_panel_key_writes_unverified_and_says_why(
    store: MemoryStore,
    signed_commit: Commit,
    add_signer: Callable[..., str],
    store_as: Callable[[Ed25519Signer], MemoryStore],
    tmp_path: Path,
) -> None:
    set_policy(store, signed_commit, "eager")
    agent = Ed25519Signer.generate("agent@example.test")
    add_signer(store, agent, "agent@example.test", ("agent",))
    as_agent = store_as(agent)
    result = write_entry(as_agent, "fact", "a", "by the agent", checks=["true"])
    assert result.entries[0].trust is Trust.UNVERIFIED and result.outcomes == ()
    assert result.note is not None and "does not hold the panel role" in result.note

    # With TRUSS_PANEL_KEY the write path borrows the panel key; the write stays the agent's.
    env = dict(os.environ, TRUSS_PANEL_KEY=str(tmp_path / "operator_key"))
    where = store.git.workdir
    assert where is not None
    agent_with_panel = MemoryStore(where, signer=agent, environ=env)
    done = write_entry(agent_with_panel, "fact", "b", "by the agent, checked", checks=["true"])
    assert done.entries[0].trust is Trust.VERIFIED
    assert audit(store.git).ok


def test_eager_settings_come_from_the_layers(store: MemoryStore, tmp_path: Path) -> None:
    contract = tmp_path / "contract.toml"
    contract.write_text('[policy]\nverification = "eager"\n')
    settings = settings_for(store, contract=contract)
    result = write_entry(store, "fact", "a", "x", checks=["true"], settings=settings)
    assert result.entries[0].trust is Trust.VERIFIED
    plain = write_entry(store, "fact", "b", "y", checks=["true"])
    assert plain.entries[0].trust is Trust.UNVERIFIED  # the store alone is lazy


def test_verification_policy_values() -> None:
    tiered = VerificationPolicy("tiered", {"decision": "eager", "scratch": "off"})
    assert [tiered.mode_for(k) for k in ("decision", "scratch", "fact")] == [
        "eager",
        "off",
        "lazy",
    ]
    assert tiered.runs_on_write("decision") and not tiered.runs_on_verify("scratch")
    assert VerificationPolicy("off").label("fact") == "off"
    with pytest.raises(ConfigError):
        VerificationPolicy("sometimes")
    with pytest.raises(ConfigError):
        VerificationPolicy("tiered", {"fact": "tiered"})


def test_verify_written_runs_eager_kinds_only(store: MemoryStore, signed_commit: Commit) -> None:
    set_policy(store, signed_commit, "tiered")
    # Committed below the front door (Store.write_many, as an import is), so still unverified.
    decision, lesson = store.write_many(
        [
            store.new_entry("decision", "d", "committed by a tool", checks=["true"]),
            store.new_entry("lesson", "l", "lazy kind", checks=["true"]),
        ]
    )
    outcomes, note = verify_written(store, [decision, lesson])
    assert note is None
    assert [(o.id, o.status) for o in outcomes] == [(decision.id, "promoted")]
    assert store.get(lesson.id).trust is Trust.UNVERIFIED
    assert verify_written(store, [store.get(decision.id)]) == ([], None)  # already verified
