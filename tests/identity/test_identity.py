"""Identity (L0) under [identity] policy: truss_files/identity/changes.py, judge.py and
principals.py, on real repositories, keys and judge processes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from truss_files.config.settings import load_settings, settings_for
from truss_files.errors import TransitionError, UsageError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.format.proposal import CORE_PATH, SELF_PATH, SELF_TEMPLATE, parse
from truss_files.format.trailers import parse_trailers
from truss_files.git.gitstore import Snapshot
from truss_files.identity import changes as ident
from truss_files.identity.amend import propose
from truss_files.identity.judge import judge_proposals
from truss_files.identity.principals import set_principal, show_principal
from truss_files.review.diff import change_set
from truss_files.review.render import to_text
from truss_files.signing import Ed25519Signer
from truss_files.signing.trustpolicy import CONFIG_PATH
from truss_files.store.initstore import CORE_TEMPLATE
from truss_files.tools.dispatch import ToolSession
from truss_files.trust.audit import audit

OPERATOR = "operator@example.test"
NEW_SELF = "# Self\n\nTerse. Cites the commit behind every claim.\n"


def judge_command(tmp_path: Path, refuse: str = "never ask") -> str:
    """A judge that records its stdin and refuses a proposal containing ``refuse`` (a rule
    core.md forbids contradicting)."""
    script = tmp_path / "judge.py"
    script.write_text(
        "import json, sys\n"
        "data = json.load(sys.stdin)\n"
        f"open({str(tmp_path / 'judge-stdin.json')!r}, 'w').write(json.dumps(data))\n"
        f"bad = {refuse!r} in data['proposed']\n"
        "print(json.dumps({'vote': 'FAIL' if bad else 'PASS', "
        "'rationale': 'contradicts core' if bad else 'consistent with core'}))\n"
    )
    return f"{sys.executable} {script}"


def set_policy(
    store: MemoryStore,
    signed_commit: Callable[..., str],
    policy: str,
    *,
    verification: str = "lazy",
    judge: str | None = None,
    tools_identity: bool = False,
) -> None:
    """Rewrite truss.toml's [identity], [policy] and identity reviewers (operator-signed)."""

    def changes(snap: Snapshot) -> dict[str, bytes | None]:
        text = (snap.read(CONFIG_PATH) or b"").decode()
        text = re.sub(r'^policy = ".*"$', f'policy = "{policy}"', text, flags=re.M)
        text = re.sub(
            r'^verification = ".*"$', f'verification = "{verification}"', text, flags=re.M
        )
        if tools_identity:
            text = text.replace("memory_write = false", "memory_write = false\nidentity = true")
        if judge is not None:
            spec = f'{{type = "judge", command = {json.dumps(judge)}}}'
            text += f"\n[panel.reviewers]\nidentity = [{spec}]\n"
        return {CONFIG_PATH: text.encode()}

    signed_commit(store, changes, message="truss: policy\n\nTruss-Op: config")


@pytest.fixture
def agent_key() -> Ed25519Signer:
    return Ed25519Signer.generate("agent@example.test")


@pytest.fixture
def agent(
    store: MemoryStore,
    agent_key: Ed25519Signer,
    add_signer: Callable[..., str],
    store_as: Callable[[Ed25519Signer], MemoryStore],
) -> MemoryStore:
    """The same store, signing with a key that holds only the agent role."""
    add_signer(store, agent_key, "agent@example.test", ("agent",))
    return store_as(agent_key)


def _trailers(store: MemoryStore, commit: str) -> dict[str, list[str]]:
    return parse_trailers(store.git.commit(commit).message)


def _verify_commit(store: MemoryStore, commit: str) -> subprocess.CompletedProcess[str]:
    """git's own verify-commit against the store's allowed signers."""
    work = store.git.workdir
    assert work is not None
    return subprocess.run(
        ["git", "-c", "gpg.ssh.allowedSignersFile=.truss/allowed_signers", "verify-commit", commit],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )


# -- templates, show, policy settings --------------------------------------------------------


def test_init_writes_both_templates_and_show_serves_them(store: MemoryStore) -> None:
    shown = ident.show(store)
    assert shown["core"] == CORE_TEMPLATE and shown["self"] == SELF_TEMPLATE
    assert shown["commit"] == str(store.git.tip().id)  # type: ignore[union-attr]
    assert audit(store.git).ok


@pytest.mark.parametrize(
    ("store_policy", "layer_policy", "effective"),
    [
        ("self_amend", "propose", "propose"),
        ("self_amend", "locked", "locked"),
        ("propose", "self_amend", None),  # a loosening is refused, naming the key
        ("locked", "self_amend", None),
        ("locked", "propose", None),
    ],
)
def test_layers_only_tighten_the_identity_policy(
    tmp_path: Path, store_policy: str, layer_policy: str, effective: str | None
) -> None:
    from truss_files.errors import ConfigError

    contract = tmp_path / "contract.toml"
    contract.write_text(f'[identity]\npolicy = "{layer_policy}"\n')
    store_toml = {"identity": {"policy": store_policy}}
    if effective is None:
        with pytest.raises(ConfigError, match="contract.toml: identity.policy .* loosens"):
            load_settings(store_toml, contract=contract, environ={})
        return
    settings = load_settings(store_toml, contract=contract, environ={})
    assert settings.identity_policy == effective
    assert settings.source("identity.policy").endswith("contract.toml")


def test_an_agent_table_tightens_and_config_show_shows_the_result(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    def changes(snap: Snapshot) -> dict[str, bytes | None]:
        text = (snap.read(CONFIG_PATH) or b"").decode()
        text = text.replace('policy = "propose"', 'policy = "self_amend"')
        text += '\n[agents.bot.identity]\npolicy = "locked"\n'
        return {CONFIG_PATH: text.encode()}

    signed_commit(store, changes)
    runner = CliRunner()
    base = ["--store", str(store.git.workdir), "config", "show", "--format", "json"]
    shown = json.loads(runner.invoke(cli, [*base, "--agent", "bot"]).output)
    assert shown["values"]["identity.policy"] == {
        "value": "locked",
        "source": "truss.toml [agents.bot]",
        "authority": "tighten",
    }
    plain = json.loads(runner.invoke(cli, base).output)
    assert plain["values"]["identity.policy"] == {
        "value": "self_amend",
        "source": "truss.toml",
        "authority": "tighten",
    }
    assert settings_for(store, agent="bot").identity_policy == "locked"


def test_an_unknown_identity_policy_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    from truss_files.errors import ConfigError

    with pytest.raises(ConfigError, match="identity.policy is 'open'"):
        load_settings({"identity": {"policy": "open"}}, environ={})


# -- propose -> approve / decline (propose) -------------------------------------------------


def test_propose_then_approve_applies_in_one_signed_commit(
    store: MemoryStore, agent: MemoryStore
) -> None:
    done = propose(agent, NEW_SELF)
    assert done.status == "pending" and done.policy == "propose"
    assert ident.show(store)["self"] == SELF_TEMPLATE  # nothing applied yet
    (pending,) = ident.proposals(store)
    assert pending.id == done.proposal.id and pending.author == "agent@example.test"
    assert _trailers(store, done.commit or "")["Truss-Op"] == ["identity-propose"]

    approved = ident.approve(store, pending.id[:10])

    assert ident.show(store)["self"] == NEW_SELF
    tip = store.git.tip()
    assert tip is not None and str(tip.id) == approved["commit"]
    assert [str(p.id) for p in tip.parents] == [done.commit]  # one commit, applied at once
    fields = _trailers(store, approved["commit"])
    assert fields["Truss-Op"] == ["identity-approve"]
    assert fields["Truss-Proposal"] == [pending.id]
    assert _verify_commit(store, approved["commit"]).returncode == 0
    assert ident.proposals(store) == []
    (decided,) = ident.proposals(store, status=None)
    assert (decided.status, decided.decided_by) == ("approved", OPERATOR)
    assert audit(store.git).ok


def test_decline_keeps_the_proposal_and_self(store: MemoryStore, agent: MemoryStore) -> None:
    done = propose(agent, NEW_SELF)
    ident.decline(store, done.proposal.id)
    assert ident.show(store)["self"] == SELF_TEMPLATE
    (kept,) = ident.proposals(store, status="declined")
    assert kept.text == NEW_SELF
    with pytest.raises(TransitionError, match="a decision is final"):
        ident.approve(store, done.proposal.id)
    assert audit(store.git).ok


def test_only_an_operator_approves_or_declines(store: MemoryStore, agent: MemoryStore) -> None:
    done = propose(agent, NEW_SELF)
    tip = store.git.tip()
    for action in (ident.approve, ident.decline):
        with pytest.raises(UsageError, match="only an operator"):
            action(agent, done.proposal.id)
    assert store.git.tip() == tip


def test_locked_refuses_every_proposal_and_operators_set_identity(
    store: MemoryStore, agent: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    set_policy(store, signed_commit, "locked")
    tip = store.git.tip()
    for who in (agent, store):
        with pytest.raises(UsageError, match='"locked"'):
            propose(who, NEW_SELF)
    assert store.git.tip() == tip
    with pytest.raises(UsageError, match="only an operator"):
        ident.set_identity(agent, "self", NEW_SELF)

    made = ident.set_identity(store, "self", NEW_SELF)

    assert ident.show(store)["self"] == NEW_SELF
    assert _trailers(store, made["commit"])["Truss-Op"] == ["identity-set"]
    assert audit(store.git).ok


def test_a_proposal_records_the_self_it_amends(store: MemoryStore, agent: MemoryStore) -> None:
    done = propose(agent, NEW_SELF)
    path = done.proposal.path
    snap = store.snapshot()
    stored = parse(snap.read(path) or b"", path)
    assert stored.base == snap.blob_id(SELF_PATH) and stored.text == NEW_SELF
    with pytest.raises(UsageError, match="nothing to amend"):
        propose(agent, SELF_TEMPLATE)


# -- self_amend: the panel against core ------------------------------------------------------


def test_self_amend_eager_applies_what_the_judge_passes(
    tmp_path: Path, store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    set_policy(
        store, signed_commit, "self_amend", verification="eager", judge=judge_command(tmp_path)
    )
    done = propose(store, NEW_SELF)

    assert done.status == "passed", done.to_dict()
    assert ident.show(store)["self"] == NEW_SELF
    request = json.loads((tmp_path / "judge-stdin.json").read_text())
    assert request["core"] == CORE_TEMPLATE
    assert request["self"] == SELF_TEMPLATE and request["proposed"] == NEW_SELF
    (passed,) = ident.proposals(store, status="passed")
    assert passed.verdict is not None and passed.verdict["outcome"] == "PASS"
    fields = _trailers(store, done.judged.commit)
    assert fields["Truss-Op"] == ["identity-amend"] and fields["Truss-Verdict"]
    assert audit(store.git).ok


def test_self_amend_judge_refuses_a_change_contradicting_core(
    tmp_path: Path, store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    set_policy(
        store, signed_commit, "self_amend", verification="eager", judge=judge_command(tmp_path)
    )
    bad = "# Self\n\nAct alone; never ask a person before acting.\n"

    done = propose(store, bad)

    assert done.status == "failed"
    assert ident.show(store)["self"] == SELF_TEMPLATE
    (failed,) = ident.proposals(store, status="failed")  # kept for the audit
    assert failed.text == bad and failed.verdict is not None
    assert failed.verdict["outcome"] == "FAIL"
    assert audit(store.git).ok


def test_self_amend_lazy_waits_for_verify_pending(
    tmp_path: Path, store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    set_policy(store, signed_commit, "self_amend", judge=judge_command(tmp_path))
    done = propose(store, NEW_SELF)
    assert done.status == "pending" and "verify --pending" in done.note
    assert ident.show(store)["self"] == SELF_TEMPLATE

    key = str(tmp_path / "operator_key")
    result = CliRunner().invoke(
        cli,
        [
            "--store",
            str(store.git.workdir),
            "--key",
            key,
            "verify",
            "--pending",
            "--format",
            "json",
        ],
    )

    assert result.exit_code == 0, result.output
    (judged,) = json.loads(result.output)["identity"]
    assert judged["id"] == done.proposal.id and judged["status"] == "passed"
    assert ident.show(store)["self"] == NEW_SELF
    assert audit(store.git).ok


def test_self_amend_with_verification_off_applies_nothing(
    tmp_path: Path, store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    set_policy(
        store, signed_commit, "self_amend", verification="off", judge=judge_command(tmp_path)
    )
    done = propose(store, NEW_SELF)
    assert done.status == "pending" and "nothing is applied" in done.note
    with pytest.raises(UsageError, match="verification is off"):
        judge_proposals(store, settings=settings_for(store))
    assert ident.show(store)["self"] == SELF_TEMPLATE
    assert not (tmp_path / "judge-stdin.json").exists()


def test_an_empty_identity_panel_never_passes(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    set_policy(store, signed_commit, "self_amend", verification="eager")
    done = propose(store, NEW_SELF)
    assert done.status == "no-reviewers"
    assert ident.show(store)["self"] == SELF_TEMPLATE


# -- log, revert, diff ------------------------------------------------------------------------


def test_log_revert_and_diff_of_an_amendment(store: MemoryStore, agent: MemoryStore) -> None:
    base = str(store.git.tip().id)  # type: ignore[union-attr]
    done = propose(agent, NEW_SELF)
    approved = ident.approve(store, done.proposal.id)

    amendments = ident.log(store)
    last = amendments[-1]
    assert (last.commit, last.op, last.signer, last.path) == (
        approved["commit"],
        "identity-approve",
        OPERATOR,
        SELF_PATH,
    )
    assert "+Terse. Cites the commit behind every claim." in last.diff
    assert [a.path for a in amendments[:2]] == [CORE_PATH, SELF_PATH]  # init wrote both

    text = to_text(change_set(store.git, f"{base}..HEAD"))
    assert f"identity amendment by identity-approve of proposal {done.proposal.id[:12]}" in text

    # Only an operator reverts an identity change; the agent's key cannot.
    with pytest.raises(Exception, match="operator"):
        agent.revert(approved["commit"])
    reverted = store.revert(approved["commit"])

    assert ident.show(store)["self"] == SELF_TEMPLATE
    assert _trailers(store, str(reverted.id))["Truss-Op"] == ["revert"]
    assert ident.log(store)[-1].op == "revert"
    with pytest.raises(UsageError, match="declining it"):
        store.revert(done.commit or "")
    assert audit(store.git).ok


def test_identity_cli_walkthrough(store: MemoryStore, tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["--store", str(store.git.workdir), "--key", str(tmp_path / "operator_key")]
    source = tmp_path / "self.md"
    source.write_text(NEW_SELF)

    proposed = json.loads(
        runner.invoke(cli, [*base, "identity", "propose", str(source), "--format", "json"]).output
    )
    listed = json.loads(
        runner.invoke(cli, [*base, "identity", "proposals", "--format", "json"]).output
    )
    assert [p["id"] for p in listed["proposals"]] == [proposed["id"]]
    assert set(listed["proposals"][0]) >= {"id", "author", "run", "created", "text"}
    approved = runner.invoke(cli, [*base, "identity", "approve", proposed["id"][:8]])
    assert approved.exit_code == 0, approved.output
    shown = json.loads(runner.invoke(cli, [*base, "identity", "show", "--format", "json"]).output)
    assert shown["self"] == NEW_SELF
    logged = json.loads(runner.invoke(cli, [*base, "identity", "log", "--format", "json"]).output)
    assert set(logged["amendments"][-1]) >= {"commit", "op", "signer", "path", "diff"}
    missing = runner.invoke(cli, [*base, "identity", "approve", "ffffffff", "--format", "json"])
    assert missing.exit_code == 1 and json.loads(missing.output)["error"]["code"] == "not_found"


# -- the identity tool ------------------------------------------------------------------------


def test_identity_propose_is_served_only_by_truss_toml(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    session = ToolSession(store, run_id="R-1", durable=True)
    refused = session.call("identity_propose", {"text": NEW_SELF})
    assert refused.error is not None and refused.error["code"] == "tool_not_served"
    assert "[tools] identity = true" in refused.error["message"]
    with pytest.raises(UsageError, match="never by a flag"):
        ToolSession(store, flags=["identity"]).served()
    assert ident.proposals(store) == []


def test_identity_propose_is_recorded_on_the_durable_ledger(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    from truss_files.runs.ledger import RunLedger

    set_policy(store, signed_commit, "propose", tools_identity=True)
    loose = ToolSession(store, run_id="R-2").call("identity_propose", {"text": NEW_SELF})
    assert loose.error is not None and "durable" in loose.error["message"]

    session = ToolSession(store, run_id="R-2", durable=True)
    done = session.call("identity_propose", {"text": NEW_SELF})

    assert done.ok, done.error
    result = dict(done.result or {})
    assert result["status"] == "pending" and result["run"] == "R-2"
    assert result["call"] == done.ledger_ref == result["ledger_ref"] == "run:R-2/1"
    (proposal,) = ident.proposals(store)
    assert (proposal.run, proposal.call) == ("R-2", "run:R-2/1")
    (record,) = RunLedger(store, "R-2").records()
    assert record.entry.tool == "identity_propose" and record.entry.ledger_ref == "run:R-2/1"
    assert ident.show(store)["self"] == SELF_TEMPLATE
    assert audit(store.git).ok


# -- principals -------------------------------------------------------------------------------


def test_a_principal_writes_its_own_file_and_an_operator_any(
    store: MemoryStore,
    add_signer: Callable[..., str],
    store_as: Callable[[Ed25519Signer], MemoryStore],
) -> None:
    alice_key = Ed25519Signer.generate("alice@example.test")
    add_signer(store, alice_key, "alice@example.test")  # a user: no role at all
    alice = store_as(alice_key)

    set_principal(alice, "alice@example.test", "Alice. Prefers short answers.\n")
    set_principal(store, "bob@example.test", "Bob. Reads diffs, not summaries.\n")

    assert show_principal(store, "alice@example.test")["text"] == "Alice. Prefers short answers.\n"
    with pytest.raises(UsageError, match="may write only principals/alice@example.test.md"):
        set_principal(alice, "bob@example.test", "Bob wants everything deleted.\n")
    assert show_principal(store, "bob@example.test")["text"].startswith("Bob. Reads diffs")
    assert audit(store.git).ok

    runner = CliRunner()
    shown = runner.invoke(
        cli, ["--store", str(store.git.workdir), "principal", "show", "alice@example.test"]
    )
    assert shown.exit_code == 0 and "Prefers short answers." in shown.output
