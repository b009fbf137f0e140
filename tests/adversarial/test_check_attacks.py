"""Attacks on checks: a writer must never get a command of its own run by the operator.

The reported exploit (issue 20, item 1): an agent-only key wrote a note with ``--check 'CMD'``;
the operator's routine ``truss-files verify --pending`` ran CMD as the operator, CMD read the
operator's private key by absolute path and exited 0, and the note was promoted. The rule
(trust/authority.py, "checks"): a command runs as a reviewer only if the signed truss.toml defines
it under ``[panel.checks]``; entries hold names. Each attack goes through the installed console
script in real processes (the agent writes with its own key, the operator verifies with the
panel key) and proves with a marker file that the command it tried to plant never ran.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.script import SCRIPT, run, truss
from truss_files.errors import UsageError
from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.format.trailers import trailers
from truss_files.model import Trust
from truss_files.signing import Ed25519Signer
from truss_files.trust.audit import audit
from truss_files.trust.authority import is_check_name, require_check_names, resolve_check

AGENT = "agent@example.test"
Commit = Callable[..., str]


def steal(tmp_path: Path, loot: Path) -> str:
    """The exploit's command: copy the operator's private key out, then claim a pass."""
    return f"cat {tmp_path / 'operator_key'} > {loot}; exit 0"


def state(store: MemoryStore) -> tuple[str, frozenset[tuple[str, str]]]:
    tip = store.git.tip()
    assert tip is not None
    return str(tip.id), frozenset((e.id, e.trust.value) for e in store.iter_entries())


def operator_verifies(store: MemoryStore, *extra: str, **env: str) -> tuple[int, dict[str, Any]]:
    return truss(store, "operator_key", "verify", "--pending", *extra, "--format", "json", **env)


def plant(
    store: MemoryStore,
    signed_commit: Commit,
    agent: Ed25519Signer,
    checks: tuple[str, ...],
    key: str = "planted",
) -> str:
    """An entry file whose ``checks:`` the agent wrote by hand, committed with the agent's
    valid signature and the trailers of an ordinary write (what a hostile client sends)."""
    made = MemoryStore(str(store.git.workdir), signer=agent).new_entry(
        "fact", key, "The release is green."
    )
    entry = dataclasses.replace(made, checks=checks)
    message = f"truss: write fact {key}\n\n" + trailers(
        op="write", entry=[entry.id], trust="none -> unverified"
    )
    signed_commit(
        store, {entry.path: entryfile.serialize(entry).encode()}, signer=agent, message=message
    )
    assert store.get(entry.id).checks == checks
    return entry.id


# -- the reported exploit, refused at write time ---------------------------------------------


def exploit(store: MemoryStore, tmp_path: Path, loot: Path, listed: str) -> None:
    """The agent-only key writes the exploit; the operator then runs its routine verify."""
    before = state(store)
    code, out = truss(
        store,
        "agent_key",
        "write",
        "--kind",
        "lesson",
        "--key",
        "ci",
        "--check",
        steal(tmp_path, loot),
        "--format",
        "json",
        "Retry the network tests once.",
    )
    assert code == 1, out
    assert out["error"]["code"] == "invalid_input"
    message = out["error"]["message"]
    assert "not a check name" in message and listed in message
    assert "[panel.checks]" in message  # how to define one
    assert state(store) == before

    code, out = operator_verifies(store)
    assert code == 0, out
    assert out["entries"] == [] and not loot.exists()
    assert audit(store.git).ok


def test_the_reported_exploit_is_refused_at_write_and_verify_runs_nothing(
    store: MemoryStore, agent_key: Ed25519Signer, define_checks: Commit, tmp_path: Path
) -> None:
    loot = tmp_path / "loot"
    for defined in ({}, {"tests": "true", "lint": "true"}):
        if defined:
            define_checks(store, defined)
        exploit(store, tmp_path, loot, "defines no checks" if not defined else "lint, tests")


@pytest.mark.parametrize("name", ["pwn", "tests; cat ~/.ssh/id_ed25519", "$(id)", "", "a" * 65])
def test_an_unknown_or_malformed_name_is_refused_listing_the_defined_ones(
    store: MemoryStore, agent_key: Ed25519Signer, define_checks: Commit, name: str
) -> None:
    define_checks(store, {"tests": "true"})
    before = state(store)
    code, out = truss(
        store, "agent_key", "write", "--kind", "fact", "--key", "k", "--check", name, "body"
    )
    assert (code, out["error"]["code"]) == (1, "invalid_input"), out
    assert "defined checks: tests" in out["error"]["message"]
    assert state(store) == before


def test_a_store_without_checks_says_how_to_define_one(
    store: MemoryStore, agent_key: Ed25519Signer
) -> None:
    code, out = truss(
        store, "agent_key", "write", "--kind", "fact", "--key", "k", "--check", "tests", "body"
    )
    assert (code, out["error"]["code"]) == (1, "invalid_input")
    message = out["error"]["message"]
    assert "defines no checks" in message and '[panel.checks] tests = "make test"' in message


def test_import_refuses_command_text_and_unknown_names(
    store: MemoryStore, agent_key: Ed25519Signer, define_checks: Commit, tmp_path: Path
) -> None:
    define_checks(store, {"tests": "true"})
    loot = tmp_path / "loot"
    before = state(store)
    for checks in ([steal(tmp_path, loot)], ["tests", "pwn"], "tests"):
        line = {"kind": "fact", "key": "k", "body": "imported", "checks": checks}
        good = {"kind": "fact", "key": "ok", "body": "fine"}
        text = json.dumps(good) + "\n" + json.dumps(line) + "\n"
        code, out = truss(store, "agent_key", "import", "-", stdin=text)
        assert (code, out["error"]["code"]) == (1, "invalid_input"), out
        assert out["error"]["message"].startswith("<stdin>:2: ")  # which line, and why
        assert state(store) == before  # one commit or none: the good line is not kept either
    assert operator_verifies(store)[1]["entries"] == [] and not loot.exists()


def test_the_library_refuses_a_crafted_entry_and_the_tools_take_no_checks(
    store: MemoryStore, agent_key: Ed25519Signer, define_checks: Commit, tmp_path: Path
) -> None:
    define_checks(store, {"tests": "true"})
    loot = tmp_path / "loot"
    agent = MemoryStore(str(store.git.workdir), signer=agent_key)
    before = state(store)
    with pytest.raises(UsageError, match="not a check name"):
        agent.write("fact", "k", "body", checks=[steal(tmp_path, loot)])
    made = agent.new_entry("fact", "k", "body", checks=["tests"])
    with pytest.raises(UsageError, match="unknown check 'pwn'"):
        agent.write_many([dataclasses.replace(made, checks=("pwn",))])
    assert state(store) == before

    # write_memory takes no checks field at all; the memory tool's text is a body, never
    # front matter: a file that looks like an entry's stays text, naming no check.
    where = Path(str(store.git.workdir))
    tool = [str(SCRIPT), "--store", str(where), "--key", str(where.parent / "agent_key")]
    done = subprocess.run(
        [*tool, "tool", "write_memory", "--memory-write"],
        input=json.dumps({"kind": "fact", "key": "k", "body": "x", "checks": ["tests"]}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and json.loads(done.stdout)["error"]["code"] == "invalid_input"
    assert state(store) == before
    front = f"---\nchecks: [{json.dumps(steal(tmp_path, loot))}]\n---\nThe release is green.\n"
    done = subprocess.run(
        [*tool, "tool", "memory", "--memory-write", "--run", "R-1"],
        input=json.dumps({"command": "create", "path": "/memories/x.md", "file_text": front}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert [e.checks for e in store.iter_entries()] == [()]
    code, out = operator_verifies(store)
    assert code == 0 and [e["status"] for e in out["entries"]] == ["no-reviewers"]
    assert not loot.exists()


# -- entries that carry text or unknown names: never run, never promoted ---------------------


def test_a_hand_made_entry_with_command_text_is_not_run_and_not_promoted(
    store: MemoryStore,
    agent_key: Ed25519Signer,
    signed_commit: Commit,
    tmp_path: Path,
) -> None:
    loot = tmp_path / "loot"
    planted = plant(store, signed_commit, agent_key, (steal(tmp_path, loot),))
    assert audit(store.git).ok  # an ordinary, validly signed write: only verify can refuse it

    code, out = operator_verifies(store)
    assert code == 0, out
    (entry,) = out["entries"]
    assert (entry["id"], entry["status"], entry["trust"]) == (planted, "undecided", "unverified")
    (vote,) = entry["votes"]
    assert vote["vote"] == "ABSTAIN" and "not a check name" in vote["reason"]
    assert "never run" in vote["reason"]
    assert not loot.exists()
    assert store.get(planted).trust is Trust.UNVERIFIED

    # The report a person reads says so too, and it still ran nothing.
    done = run(store, "operator_key", "verify", planted[:12], "--format", "text")
    assert done.returncode == 0 and "0 promoted" in done.stdout
    assert "ABSTAIN" in done.stdout and "not a check name" in done.stdout
    assert not loot.exists()


def test_a_name_no_longer_defined_abstains_and_says_which(
    store: MemoryStore,
    agent_key: Ed25519Signer,
    signed_commit: Commit,
    define_checks: Commit,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    define_checks(store, {"tests": f"touch {marker}"})
    code, out = truss(
        store, "agent_key", "write", "--kind", "fact", "--key", "k", "--check", "tests", "body"
    )
    assert code == 0, out
    written = out["id"]
    planted = plant(store, signed_commit, agent_key, ("pwn",))

    def drop(snap: Any) -> dict[str, bytes | None]:
        text = (snap.read("truss.toml") or b"").decode()
        return {"truss.toml": text.replace(f'tests = "touch {marker}"\n', "").encode()}

    signed_commit(store, drop)  # the operator removes the check
    assert store.defined_checks() == {}

    code, out = operator_verifies(store)
    assert code == 0, out
    got = {e["id"]: e for e in out["entries"]}
    for eid, name in ((written, "tests"), (planted, "pwn")):
        assert got[eid]["status"] == "undecided" and got[eid]["trust"] == "unverified"
        (vote,) = got[eid]["votes"]
        assert vote["vote"] == "ABSTAIN" and vote["reviewer"] == name
        assert f"unknown check '{name}'" in vote["reason"]
    assert not marker.exists()
    done = run(store, "operator_key", "verify", "--pending", "--format", "text")
    assert done.returncode == 0 and "unknown check 'tests'" in done.stdout
    assert "unknown check 'pwn'" in done.stdout and not marker.exists()


def test_recheck_runs_no_command_text_either(
    store: MemoryStore,
    agent_key: Ed25519Signer,
    signed_commit: Commit,
    tmp_path: Path,
) -> None:
    """An entry verified before checks were named (its checks: holds command text) is never
    run by recheck: it stays as it was, and the report says why."""
    loot = tmp_path / "loot"
    planted = plant(store, signed_commit, agent_key, (steal(tmp_path, loot),))
    store.promote(planted, store.sign_verdict(planted, "PASS", note="verified by hand"))
    code, out = truss(store, "operator_key", "recheck", "--all", "--format", "json")
    assert code == 0, out
    (entry,) = out["entries"]
    assert entry["status"] == "undecided" and entry["votes"][0]["vote"] == "ABSTAIN"
    assert not loot.exists() and store.get(planted).trust is Trust.VERIFIED


def test_an_eager_write_runs_only_the_defined_command(
    store: MemoryStore,
    agent_key: Ed25519Signer,
    signed_commit: Commit,
    define_checks: Commit,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"

    def eager(snap: Any) -> dict[str, bytes | None]:
        text = (snap.read("truss.toml") or b"").decode()
        return {"truss.toml": text.replace('"lazy"', '"eager"').encode()}

    signed_commit(store, eager)
    define_checks(store, {"tests": f"touch {marker}"})
    loot = tmp_path / "loot"
    code, out = truss(
        store,
        "operator_key",
        "write",
        "--kind",
        "fact",
        "--key",
        "k",
        "--check",
        steal(tmp_path, loot),
        "body",
    )
    assert code == 1 and out["error"]["code"] == "invalid_input" and not loot.exists()
    code, out = truss(
        store, "operator_key", "write", "--kind", "fact", "--key", "k", "--check", "tests", "body"
    )
    assert code == 0 and out["trust"] == "verified", out
    assert marker.exists()


# -- what may define a check: the signed truss.toml, nothing else -----------------------------


def test_a_defined_name_runs_and_its_exit_status_is_the_vote(
    store: MemoryStore, agent_key: Ed25519Signer, define_checks: Commit, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    define_checks(store, {"green": f"touch {marker}; exit 0", "red": "exit 3"})
    ids = {}
    for name in ("green", "red"):
        code, out = truss(
            store, "agent_key", "write", "--kind", "fact", "--key", name, "--check", name, name
        )
        assert code == 0, out
        ids[name] = out["id"]
    assert store.get(ids["green"]).checks == ("green",)
    code, out = operator_verifies(store)
    assert code == 0, out
    got = {e["id"]: e for e in out["entries"]}
    assert got[ids["green"]]["status"] == "promoted" and marker.exists()
    assert got[ids["red"]]["status"] == "rejected"
    (vote,) = got[ids["red"]]["votes"]
    assert (vote["reviewer"], vote["vote"], vote["reason"]) == ("red", "FAIL", "exit 3")
    assert store.get(ids["green"]).trust is Trust.VERIFIED
    assert store.get(ids["red"]).trust is Trust.REJECTED
    assert audit(store.git).ok


def test_no_other_layer_may_define_a_check(
    store: MemoryStore,
    agent_key: Ed25519Signer,
    signed_commit: Commit,
    tmp_path: Path,
) -> None:
    """A contract file, the user config, an [agents.NAME] table: none of them defines the
    name a planted entry carries; verify refuses the layer and runs nothing."""
    loot = tmp_path / "loot"
    planted = plant(store, signed_commit, agent_key, ("pwn",))
    table = f'[panel.checks]\npwn = "{steal(tmp_path, loot)}"\n'
    contract = tmp_path / "contract.toml"
    contract.write_text(table)
    config_dir = tmp_path / "userconfig"
    config_dir.mkdir()
    (config_dir / "config.toml").write_text(table)
    for extra, env in (
        (("--contract", str(contract)), {}),
        ((), {"TRUSS_CONTRACT": str(contract)}),
        ((), {"TRUSS_CONFIG_DIR": str(config_dir)}),
    ):
        code, out = operator_verifies(store, *extra, **env)
        assert code == 1 and out["error"]["code"] == "config", out
        assert "signed truss.toml only" in out["error"]["message"]
        assert not loot.exists()

    def agent_table(snap: Any) -> dict[str, bytes | None]:
        text = (snap.read("truss.toml") or b"").decode()
        return {"truss.toml": (text + "\n[agents.bot.panel.checks]\n" + table[15:]).encode()}

    signed_commit(store, agent_table)
    code, out = operator_verifies(store, "--agent", "bot")
    assert code == 1 and "signed truss.toml only" in out["error"]["message"]
    assert not loot.exists() and store.get(planted).trust is Trust.UNVERIFIED


@pytest.mark.parametrize("kind", ["check", "judge"])
def test_no_other_layer_may_write_a_reviewer_with_its_command(
    store: MemoryStore, agent_key: Ed25519Signer, tmp_path: Path, kind: str
) -> None:
    """The red team's path around the rule above: not a check, but a reviewer written with
    its command in the user config or a contract (files an agent on the same machine can
    write), waiting for the operator's routine verify to run it as the panel. Refused, the
    command never runs and the agent's note stays unverified; naming a check truss.toml
    defines still works from the same layers."""
    ran = tmp_path / "ran"
    spec = f'[{{type = "{kind}", command = "touch {ran}; exit 0"}}]'
    planted = tmp_path / "planted.toml"
    config_dir = tmp_path / "userconfig"
    config_dir.mkdir()
    code, out = truss(
        store, "agent_key", "write", "--kind", "fact", "--key", "sky", "The sky is green."
    )
    assert code == 0, out
    note = out["id"]
    for text in (f"[panel.reviewers]\nfact = {spec}\n", f"[panel]\narbiters = {spec}\n"):
        planted.write_text(text)
        (config_dir / "config.toml").write_text(text)
        for extra, env in (
            (("--contract", str(planted)), {}),
            ((), {"TRUSS_CONTRACT": str(planted)}),
            ((), {"TRUSS_CONFIG_DIR": str(config_dir)}),
        ):
            code, out = operator_verifies(store, *extra, **env)
            assert code == 1 and out["error"]["code"] == "config", out
            said = out["error"]["message"]
            assert "runs a command" in said or "panel.arbiters has authority operator" in said
            assert not ran.exists() and store.get(note).trust is Trust.UNVERIFIED
    assert audit(store.git).ok


def test_an_agent_cannot_define_a_check_by_editing_truss_toml(
    store: MemoryStore,
    agent_key: Ed25519Signer,
    signed_commit: Commit,
    tmp_path: Path,
) -> None:
    """truss.toml changed in a commit the agent signed: the audit refuses it, and verify runs
    no reviewer on that history (nor the planted name)."""
    loot = tmp_path / "loot"

    def define(snap: Any) -> dict[str, bytes | None]:
        text = (snap.read("truss.toml") or b"").decode()
        return {
            "truss.toml": (text + f'\n[panel.checks]\npwn = "{steal(tmp_path, loot)}"\n').encode()
        }

    signed_commit(store, define, signer=agent_key)
    assert not audit(store.git).ok
    # Whether a write may land on such a history is another rule's business; a planted
    # entry names the check either way.
    planted = plant(store, signed_commit, agent_key, ("pwn",))
    code, out = operator_verifies(store)
    assert code == 1 and out["error"]["code"] == "untrusted_history", out
    assert "runs no reviewer" in out["error"]["message"]
    assert not loot.exists() and store.get(planted).trust is Trust.UNVERIFIED
    code, out = truss(store, "operator_key", "recheck", "--all", "--format", "json")
    assert code == 1 and out["error"]["code"] == "untrusted_history", out
    assert not loot.exists()


# -- the rule itself -------------------------------------------------------------------------


def test_the_authority_rule() -> None:
    assert is_check_name("tests") and is_check_name("Lint_2-fast")
    for bad in ("", "1st", "a b", "a;b", "../x", "a" * 65, "tésts", None, 3):
        assert not is_check_name(bad)
    assert require_check_names(["tests", "tests"], {"tests": "true"}) == ("tests", "tests")
    with pytest.raises(UsageError, match="defined checks: lint, tests"):
        require_check_names(["nope"], {"tests": "true", "lint": "true"})
    assert resolve_check("tests", {"tests": "make test"}).command == "make test"
    unknown = resolve_check("nope", {"tests": "make test"})
    assert unknown.command is None and "unknown check 'nope'" in (unknown.refusal or "")
    text = resolve_check("make test", {"make test": "x"})
    assert text.command is None and "not a check name" in (text.refusal or "")
