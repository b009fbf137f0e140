"""The verify / recheck / config show commands, through click and as real processes —
including a verify killed halfway."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from truss_files.config.settings import global_config_path
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.git.gitstore import Snapshot
from truss_files.model import Trust
from truss_files.panel.runner import verify
from truss_files.trust.audit import audit

pytestmark = pytest.mark.spawns  # the panel runs each entry's checks through `sh -c`

Commit = Callable[..., str]
MAIN = "from truss_files.faces.cli.main import main; main()"
# The checks these tests' entries name, as an operator defines them in truss.toml.
CHECKS = {"true": "true", "false": "false", "crash": "kill -9 $$"}


@pytest.fixture
def store(store: MemoryStore, define_checks: Commit) -> MemoryStore:
    define_checks(store, CHECKS)
    return store


def invoke(store: MemoryStore, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    where = str(store.git.workdir)
    result = CliRunner().invoke(
        cli, ["--store", where, "--key", str(tmp_path / "operator_key"), *args]
    )
    return result.exit_code, result.stdout, result.stderr


def set_toml(
    store: MemoryStore, signed_commit: Commit, old: str, new: str, extra: str = ""
) -> None:
    def changes(snap: Snapshot) -> dict[str, bytes | None]:
        text = (snap.read("truss.toml") or b"").decode().replace(old, new)
        return {"truss.toml": (text + extra).encode()}

    signed_commit(store, changes)


def test_verify_prints_a_json_summary_and_nothing_on_stderr(
    store: MemoryStore, tmp_path: Path
) -> None:
    good = store.write("fact", "a", "holds", checks=["true"])
    store.write("fact", "b", "does not", checks=["false"])
    store.write("fact", "c", "unclear", checks=["crash"])
    store.write("fact", "d", "unreviewed")
    code, out, err = invoke(store, tmp_path, "verify", "--pending", "--format", "json")
    assert code == 0, out + err
    assert err == ""  # no progress bar when stderr is not a terminal
    data = json.loads(out)
    assert (data["promoted"], data["rejected"], data["undecided"], data["no-reviewers"]) == (
        1,
        1,
        1,
        1,
    )
    assert {e["status"] for e in data["entries"]} == {
        "promoted",
        "rejected",
        "undecided",
        "no-reviewers",
    }
    assert store.get(good.id).trust is Trust.VERIFIED


def test_verify_text_summary_names_what_stays_unverified(
    store: MemoryStore, tmp_path: Path
) -> None:
    store.write("decision", "d", "unreviewed")
    code, out, _ = invoke(store, tmp_path, "verify", "--pending", "--format", "text")
    assert code == 0
    assert out.startswith("verify: 0 promoted, 0 rejected, 0 undecided, 1 no-reviewers")
    assert "no reviewers configured for kind decision" in out


def test_verify_refuses_politely_when_the_policy_is_off(
    store: MemoryStore, tmp_path: Path, signed_commit: Commit
) -> None:
    set_toml(store, signed_commit, 'verification = "lazy"', 'verification = "off"')
    store.write("fact", "a", "x", checks=["true"])
    code, out, _ = invoke(store, tmp_path, "verify", "--pending", "--format", "json")
    assert code == 1
    error = json.loads(out)["error"]
    assert error["code"] == "invalid_input" and "verification policy is off" in error["message"]


def test_recheck_demotes_and_reports(
    store: MemoryStore, tmp_path: Path, define_checks: Commit
) -> None:
    flag = tmp_path / "flag"
    define_checks(store, {"no-flag": f"test ! -e {flag}"})
    entry = store.write("fact", "a", "x", checks=["no-flag"])
    verify(store, [entry.id])
    flag.touch()
    code, out, _ = invoke(store, tmp_path, "recheck", "--all", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["demoted"] == 1 and data["entries"][0]["trust"] == "stale"
    assert store.get(entry.id).trust is Trust.STALE
    code, out, _ = invoke(store, tmp_path, "log", entry.id, "--format", "json")
    assert [item["op"] for item in json.loads(out)][-1] == "demote"
    assert json.loads(out)[-1]["verdict"] == data["entries"][0]["verdict"]


def test_config_show_prints_values_and_their_sources(
    store: MemoryStore, tmp_path: Path, signed_commit: Commit
) -> None:
    set_toml(store, signed_commit, "", "", '\n[agents.bot.panel]\nquorum = "majority"\n')
    path = global_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('[memory]\nscope = "per-agent"\n')
    contract = tmp_path / "contract.toml"
    contract.write_text('[policy]\nconflict = "keep-both-flagged"\n')
    args = ("config", "show", "--agent", "bot", "--contract", str(contract))
    code, out, _ = invoke(store, tmp_path, *args, "--format", "json")
    assert code == 0, out
    values = json.loads(out)["values"]
    assert values["memory.scope"] == {
        "value": "per-agent",
        "source": str(path),
        "authority": "tighten",
    }
    assert values["panel.quorum"] == {
        "value": "majority",
        "source": "truss.toml [agents.bot]",
        "authority": "tighten",
    }
    assert values["policy.conflict"]["source"] == str(contract)
    assert values["policy.verification"] == {
        "value": "lazy",
        "source": "truss.toml",
        "authority": "free",
    }
    code, out, _ = invoke(store, tmp_path, *args, "--format", "text")
    assert 'panel.quorum = "majority"' in out and "# tighten   truss.toml [agents.bot]" in out

    path.write_text('[memory]\nscope = "shared"\n')  # wider than the default: refused
    code, out, _ = invoke(store, tmp_path, *args, "--format", "json")
    assert code == 1
    error = json.loads(out)["error"]
    assert error["code"] == "config" and f"{path}: memory.scope" in error["message"]
    path.write_text("")

    contract.write_text("[panel]\ntimeout = -1\n")
    code, out, _ = invoke(store, tmp_path, *args, "--format", "json")
    assert code == 1
    message = json.loads(out)["error"]["message"]
    assert str(contract) in message and "panel.timeout" in message


def test_write_with_checks_is_verified_at_once_when_eager(
    store: MemoryStore, tmp_path: Path, signed_commit: Commit
) -> None:
    set_toml(store, signed_commit, 'verification = "lazy"', 'verification = "eager"')
    args = ("write", "--kind", "fact", "--key", "k", "--check", "true", "--format", "json")
    code, out, err = invoke(store, tmp_path, *args, "it holds")
    assert code == 0, out + err
    data = json.loads(out)
    assert data["trust"] == "verified" and data["verification"]["status"] == "promoted"
    assert store.get(data["id"]).checks == ("true",)


def test_query_reports_keep_both_flagged_conflicts(
    store: MemoryStore, tmp_path: Path, signed_commit: Commit
) -> None:
    set_toml(store, signed_commit, '"verified-wins"', '"keep-both-flagged"')
    a = store.write("decision", "db", "the database is postgres", checks=["true"])
    b = store.write("decision", "db", "the database is sqlite", checks=["true"])
    verify(store, pending=True)
    code, out, _ = invoke(store, tmp_path, "query", "postgres", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert [e["id"] for e in data["entries"]] == [a.id]
    assert data["conflicts"] == [{"kind": "decision", "key": "db", "ids": [a.id, b.id]}]
    code, out, _ = invoke(store, tmp_path, "query", "postgres", "--format", "text")
    assert f"conflict: decision/db is held by verified {a.id[:12]}, {b.id[:12]}" in out


def _verify_process(
    store: MemoryStore, tmp_path: Path, stderr: int = subprocess.PIPE
) -> subprocess.Popen[bytes]:
    where = str(store.git.workdir)
    argv = [sys.executable, "-c", MAIN, "--store", where, "--key", str(tmp_path / "operator_key")]
    scratch = tmp_path / "scratch"  # the process's TMPDIR: where its checkout goes
    scratch.mkdir(exist_ok=True)
    return subprocess.Popen(
        [*argv, "verify", "--pending"],
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=dict(os.environ, TMPDIR=str(scratch)),
    )


def _wait_for(path: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while not (path.exists() and path.read_text().strip()):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the third check never started"
        time.sleep(0.02)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_verify_interrupted_halfway_leaves_decided_entries_decided_and_nothing_half_written(
    store: MemoryStore,
    tmp_path: Path,
    git: Callable[..., str],
    how: signal.Signals,
    define_checks: Commit,
) -> None:
    gate, marker = tmp_path / "gate", tmp_path / "pid"
    gate.touch()
    # The third entry's check blocks (while the gate exists) after telling us its pid.
    define_checks(
        store, {"blocker": f"if [ -e {gate} ]; then echo $$ > {marker}; exec sleep 60; fi"}
    )
    ids = [
        store.write("fact", f"e{i}", f"entry {i}", checks=["blocker" if i == 3 else "true"]).id
        for i in range(1, 5)
    ]
    before = len(list(store.git.repo.walk(store.git.tip().id)))  # type: ignore[union-attr]
    proc = _verify_process(store, tmp_path)
    try:
        _wait_for(marker, proc)
        proc.send_signal(how)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        sleeper = int(marker.read_text()) if marker.exists() else None
        if how == signal.SIGKILL and sleeper:
            os.kill(sleeper, signal.SIGKILL)  # an orphan: SIGKILL gave verify no chance

    if how == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM
        # verify unwound: the blocking check was killed and its checkout removed.
        deadline = time.monotonic() + 10
        while Path(f"/proc/{sleeper}").exists() and time.monotonic() < deadline:
            state = Path(f"/proc/{sleeper}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":
                break
            time.sleep(0.02)
        else:
            assert not Path(f"/proc/{sleeper}").exists()
        assert list((tmp_path / "scratch").iterdir()) == []  # the checkout is gone

    trusts = [store.get(i).trust for i in ids]
    assert trusts == [Trust.VERIFIED, Trust.VERIFIED, Trust.UNVERIFIED, Trust.UNVERIFIED]
    after = len(list(store.git.repo.walk(store.git.tip().id)))  # type: ignore[union-attr]
    assert after == before + 2  # exactly the two promotions, nothing partial
    assert audit(store.git).ok
    assert git(store.git.workdir, "status", "--porcelain") == ""
    assert len(list(store.iter_entries())) == 4  # every file parses

    gate.unlink()
    report = verify(store, pending=True)
    assert report.counts()["promoted"] == 2
    assert all(store.get(i).trust is Trust.VERIFIED for i in ids)
    assert audit(store.git).ok


def test_a_progress_bar_appears_only_on_a_terminal(store: MemoryStore, tmp_path: Path) -> None:
    for i in range(3):
        store.write("fact", f"k{i}", f"entry {i}", checks=["true"])
    main, replica = pty.openpty()
    try:
        proc = _verify_process(store, tmp_path, stderr=replica)
        os.close(replica)
        out, _ = proc.communicate(timeout=60)
        seen = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(main)
    assert proc.returncode == 0
    assert json.loads(out)["promoted"] == 3
    assert b"verifying" in seen


def test_verify_votes_carry_the_judges_rationale(
    store: MemoryStore, tmp_path: Path, signed_commit: Commit
) -> None:
    """votes[].reason is the judge's own rationale, not a restatement of its vote."""
    script = tmp_path / "judge.py"
    script.write_text(
        "import json, sys\njson.load(sys.stdin)\n"
        "print(json.dumps({'vote': 'FAIL', 'rationale': 'the deploy log says Thursdays'}))\n"
    )
    judge = f'fact = [{{type = "judge", command = {json.dumps(f"{sys.executable} {script}")}}}]'

    def reviewers(snap: Snapshot) -> dict[str, bytes | None]:  # the operator's signed config
        toml = (snap.read("truss.toml") or b"").decode()
        return {"truss.toml": f"{toml.rstrip()}\n\n[panel.reviewers]\n{judge}\n".encode()}

    signed_commit(store, reviewers)
    entry = store.write("fact", "deploy-day", "Deploys happen on Tuesdays.")
    code, out, err = invoke(store, tmp_path, "verify", entry.id, "--format", "json")
    assert code == 0, out + err
    [row] = json.loads(out)["entries"]
    assert row["status"] == "rejected"
    assert [v["reason"] for v in row["votes"]] == ["the deploy log says Thursdays"]
    # The signed verdict the entry keeps carries the same why.
    verdict = store.get(entry.id).provenance.verified_by
    assert verdict is not None and verdict["outcome"] == "FAIL"
    assert verdict["votes"][0]["evidence"]["reason"] == "the deploy log says Thursdays"


def test_log_shows_why_an_entry_was_demoted(store: MemoryStore, tmp_path: Path) -> None:
    entry = store.write("fact", "a", "x")
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="checked"))
    code, out, err = invoke(
        store, tmp_path, "demote", entry.id, "--reason", "the API changed in v2", "--format", "json"
    )
    assert code == 0, out + err
    code, out, _ = invoke(store, tmp_path, "log", entry.id, "--format", "json")
    items = json.loads(out)
    assert [(i["op"], i["reason"]) for i in items] == [
        ("write", None),
        ("promote", None),
        ("demote", "the API changed in v2"),
    ]
    code, out, _ = invoke(store, tmp_path, "log", entry.id, "--format", "text")
    assert out.splitlines()[-1].endswith("reason: the API changed in v2")
