"""Check and judge reviewers as real processes: votes, evidence, hangs, garbage, signals, and an
environment that cannot reach the signing keys."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.model import Entry, Kind, Provenance, Trust
from truss_files.panel.panel import ABSTAIN, FAIL, PASS
from truss_files.panel.reviewers import (
    MAX_ANSWER,
    CheckReviewer,
    JudgeReviewer,
    Subject,
    clean_text,
)
from truss_files.panel.workspace import Workspace
from truss_files.signing import Ed25519Signer
from truss_files.trust.verdict import Verdict, sign_verdict

ENTRY = Entry(
    kind=Kind.FACT,
    key="release-check",
    body="The release check needs the preview URL.",
    created="2026-11-29T11:00:00Z",
    provenance=Provenance(produced_by="run:R-1/3", sources=("event:evt_1#1",)),
    checks=("true",),
)
SIGNER = Ed25519Signer.generate("prop@test")


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, TRUSS_KEY="/secret/key", SSH_AUTH_SOCK="/tmp/agent.sock")
    env["GIT_DIR"] = "/elsewhere/.git"
    with Workspace(workdir=work, environ=env) as ws:
        yield ws


def subject(ws: Workspace, entry: Entry = ENTRY) -> Subject:
    return Subject(entry, ws)


def judge(tmp_path: Path, body: str, name: str = "judge") -> str:
    script = tmp_path / f"{name}.py"
    script.write_text("import json, os, sys, time\n" + body)
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


def gone(pid: int) -> bool:
    """The process no longer runs (absent, or a zombie waiting for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.02)
    return False


# -- check -----------------------------------------------------------------------------------


def test_check_exit_zero_passes_with_evidence(workspace: Workspace) -> None:
    ballot = CheckReviewer("printf hello").review(subject(workspace))
    assert ballot.vote == PASS
    ev = ballot.evidence
    assert ev["command"] == "printf hello"
    assert ev["exit_status"] == 0
    assert ev["output_sha256"] == hashlib.sha256(b"hello").hexdigest()
    assert ev["output_bytes"] == 5
    assert isinstance(ev["duration_ms"], int) and ev["duration_ms"] >= 0
    assert ballot.to_vote()["evidence"]["reason"] == "exit 0"


def test_check_nonzero_exit_fails(workspace: Workspace) -> None:
    ballot = CheckReviewer("printf 'se%scret' 42 >&2; exit 3").review(subject(workspace))
    assert (ballot.vote, ballot.evidence["exit_status"], ballot.reason) == (FAIL, 3, "exit 3")
    assert "se42cret" in ballot.detail  # shown to the person, never signed
    assert "se42cret" not in json.dumps(ballot.to_vote())


def test_check_whose_child_crashed_abstains(workspace: Workspace) -> None:
    crash = f"{shlex.quote(sys.executable)} -c 'import os; os.kill(os.getpid(), 9)'"
    ballot = CheckReviewer(crash).review(subject(workspace))
    assert (ballot.vote, ballot.evidence["exit_status"]) == (ABSTAIN, 137)
    assert "killed by SIGKILL" in ballot.reason


def test_check_that_hangs_times_out_and_abstains_and_its_children_die(
    workspace: Workspace, tmp_path: Path
) -> None:
    pidfile = tmp_path / "child.pid"
    check = CheckReviewer(f"sleep 60 & echo $! > {pidfile}; wait", timeout=0.5)
    ballot = check.review(subject(workspace))
    assert ballot.vote == ABSTAIN
    assert "timed out after 0.5 s" in ballot.reason
    assert "exit_status" not in ballot.evidence
    assert wait_gone(int(pidfile.read_text()))


def test_background_children_of_a_finished_check_are_killed(
    workspace: Workspace, tmp_path: Path
) -> None:
    pidfile = tmp_path / "child.pid"
    ballot = CheckReviewer(f"sleep 60 & echo $! > {pidfile}; exit 0").review(subject(workspace))
    assert ballot.vote == PASS
    assert wait_gone(int(pidfile.read_text()))


def test_check_killed_by_a_signal_abstains(workspace: Workspace) -> None:
    ballot = CheckReviewer("kill -9 $$").review(subject(workspace))
    assert ballot.vote == ABSTAIN
    assert ballot.reason == "killed by SIGKILL"
    assert ballot.evidence["signal"] == "SIGKILL"
    assert "exit_status" not in ballot.evidence


@pytest.mark.parametrize("command", ["no-such-command-xyz", "./not-executable"])
def test_a_check_the_shell_cannot_run_abstains(workspace: Workspace, command: str) -> None:
    assert workspace.workdir is not None
    (workspace.workdir / "not-executable").write_text("#!/bin/sh\nexit 0\n")
    ballot = CheckReviewer(command).review(subject(workspace))
    assert ballot.vote == ABSTAIN
    assert "fix the check" in ballot.reason


def test_reviewers_get_no_signing_keys_and_an_empty_home(
    workspace: Workspace, tmp_path: Path
) -> None:
    dump = tmp_path / "env.json"
    script = f"{shlex.quote(sys.executable)} -c " + shlex.quote(
        "import json, os; json.dump({'env': dict(os.environ), 'cwd': os.getcwd(), "
        "'home': os.listdir(os.environ['HOME'] + '/.config/truss-files')}, "
        f"open({str(dump)!r}, 'w'))"
    )
    assert CheckReviewer(script).review(subject(workspace)).vote == PASS
    seen = json.loads(dump.read_text())
    env = seen["env"]
    for name in ("TRUSS_KEY", "SSH_AUTH_SOCK", "GIT_DIR"):
        assert name not in env
    assert env["HOME"] != os.environ["HOME"]
    assert env["TRUSS_CONFIG_DIR"].startswith(env["HOME"])
    assert seen["home"] == []  # no keys there
    assert env["TRUSS_ENTRY_ID"] == ENTRY.id
    assert Path(seen["cwd"]) == workspace.workdir


def test_checks_run_in_a_private_checkout_of_the_commit(
    store: MemoryStore, define_checks: Callable[..., str]
) -> None:
    define_checks(store, {"config-present": "test -f truss.toml"})
    entry = store.write("fact", "k", "body", checks=["config-present"])
    commit = store.snapshot().oid
    assert commit is not None and store.git.workdir is not None
    with Workspace(store.git.repo, commit, environ=dict(os.environ)) as ws:
        where = ws.checkout()
        assert (where / entry.path).read_bytes() == store.snapshot().read(entry.path)
        assert where.resolve() != store.git.workdir.resolve()
        ballot = CheckReviewer("test -f truss.toml && touch scribble").review(Subject(entry, ws))
        assert ballot.vote == PASS and ballot.evidence["commit"] == commit
        root = ws.root
    assert not root.exists()  # removed with the workspace
    assert not (store.git.workdir / "scribble").exists()


# -- judge -----------------------------------------------------------------------------------


def test_judge_reads_the_entry_and_provenance_and_votes(
    workspace: Workspace, tmp_path: Path
) -> None:
    seen = tmp_path / "seen.json"
    command = judge(
        tmp_path,
        f"data = json.load(sys.stdin)\nopen({str(seen)!r}, 'w').write(json.dumps(data))\n"
        "print(json.dumps({'vote': 'pass', 'rationale': 'matches\\nthe ledger'}))\n",
    )
    ballot = JudgeReviewer(command, label="llm-panel").review(subject(workspace))
    assert (ballot.vote, ballot.reviewer, ballot.kind) == (PASS, "llm-panel", "judge")
    assert ballot.evidence["rationale"] == "matches the ledger"  # one printable line
    request = json.loads(seen.read_text())
    assert request["task"] == "review"
    assert request["entry"]["id"] == ENTRY.id
    assert request["entry"]["body"] == ENTRY.body
    assert request["entry"]["provenance"]["produced_by"] == "run:R-1/3"
    assert request["entry"]["provenance"]["sources"] == ["event:evt_1#1"]
    assert request["entry"]["checks"] == ["true"]


def test_judge_fail_vote_fails(workspace: Workspace, tmp_path: Path) -> None:
    command = judge(tmp_path, "print(json.dumps({'vote': 'FAIL', 'rationale': 'contradicted'}))")
    ballot = JudgeReviewer(command).review(subject(workspace))
    assert (ballot.vote, ballot.evidence["rationale"]) == (FAIL, "contradicted")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("print('I think it is fine')", "not JSON"),
        ("print('[1, 2]')", "not a JSON object"),
        ("print(json.dumps({'vote': 'MAYBE'}))", "no vote PASS or FAIL"),
        ("print(json.dumps({'verdict': 'PASS'}))", "no vote PASS or FAIL"),
        ("print(json.dumps({'vote': 'PASS', 'rationale': 7}))", "rationale is not a string"),
        ("pass", "no answer"),
        ("print(json.dumps({'vote': 'PASS'})); sys.exit(2)", "exited 2"),
        ("raise RuntimeError('crash')", "exited 1"),
        ("os.kill(os.getpid(), 9)", "killed by SIGKILL"),
        ("os.kill(os.getppid(), 9)", "killed by SIGKILL"),
        ("print(json.dumps({'vote': 'PASS'}), flush=True); time.sleep(60)", "timed out"),
        (f"sys.stdout.write('{{\"vote\": \"PASS\", \"x\": \"' + 'a' * {MAX_ANSWER} + '\"}}')",
         "over"),
    ],
)  # fmt: skip
def test_judge_hang_crash_or_garbage_is_an_abstention_never_a_pass(
    workspace: Workspace, tmp_path: Path, body: str, reason: str
) -> None:
    ballot = JudgeReviewer(judge(tmp_path, body), timeout=1).review(subject(workspace))
    assert ballot.vote == ABSTAIN
    assert reason in ballot.reason


def test_judge_that_ignores_stdin_still_answers(workspace: Workspace, tmp_path: Path) -> None:
    command = 'echo \'{"vote": "PASS", "rationale": "ok"}\''
    assert JudgeReviewer(command).review(subject(workspace)).vote == PASS


def test_arbitration_request_names_the_rival(workspace: Workspace, tmp_path: Path) -> None:
    rival = Entry(kind=Kind.FACT, key="release-check", body="older", trust=Trust.VERIFIED)
    request = JudgeReviewer("true").request(Subject(ENTRY, workspace, "arbitrate", rival))
    assert request["task"] == "arbitrate"
    assert request["rival"]["id"] == rival.id
    assert "PASS if 'entry' should replace 'rival'" in request["question"]


# -- evidence survives the entry file --------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_cleaned_evidence_round_trips_through_the_entry_file(text: str) -> None:
    cleaned = clean_text(text)
    assert "\n" not in cleaned and len(cleaned) <= 500
    vote = {
        "reviewer": cleaned or "r",
        "kind": "judge",
        "vote": PASS,
        "evidence": {"rationale": cleaned, "exit_status": 0, "duration_ms": 12},
    }
    verdict = sign_verdict(
        ENTRY.id,
        PASS,
        [vote],
        signer=SIGNER,
        principal="prop@test",
        quorum="1-of-1",
        policy="lazy",
        now="2026-11-29T11:00:00Z",
    )
    stored = dataclasses.replace(
        ENTRY,
        trust=Trust.VERIFIED,
        provenance=Provenance("run:R-1/3", ("event:evt_1#1",), verdict.to_dict()),
    )
    parsed = entryfile.parse(entryfile.serialize(stored), stored.path)
    assert parsed.provenance.verified_by is not None
    again = Verdict.from_dict(parsed.provenance.verified_by)
    assert again.payload() == verdict.payload()


def test_an_interrupt_while_a_child_starts_is_held_then_delivered() -> None:
    from truss_files.panel.reviewers import _Held

    class Stop(Exception):
        pass

    def stop(_signum: int, _frame: object) -> None:
        raise Stop

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        held = _Held()
        os.kill(os.getpid(), signal.SIGTERM)  # as if it arrived inside Popen
        time.sleep(0.01)  # nothing is raised while held
        assert held.pending == [signal.SIGTERM]
        with pytest.raises(Stop):
            held.release()
        assert signal.getsignal(signal.SIGTERM) is stop
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_reviewers_get_private_xdg_directories(tmp_path: Path) -> None:
    """The caller's XDG directories point into the real home: a reviewer gets its own, inside
    its private HOME, and what it writes there never reaches the real ones."""
    real = tmp_path / "real-home"
    caller = {
        "XDG_CONFIG_HOME": real / ".config",
        "XDG_DATA_HOME": real / ".local" / "share",
        "XDG_STATE_HOME": real / ".local" / "state",
        "XDG_CACHE_HOME": real / ".cache",
        "XDG_RUNTIME_DIR": real / "run",
    }
    for where in caller.values():
        where.mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, HOME=str(real), **{k: str(v) for k, v in caller.items()})
    dump = tmp_path / "env.json"
    # A real reviewer process: prints its environment, then writes into each XDG directory.
    script = f"{shlex.quote(sys.executable)} -c " + shlex.quote(
        "import json, os, stat\n"
        f"names = {sorted(caller)!r}\n"
        "modes = {n: stat.S_IMODE(os.stat(os.environ[n]).st_mode) for n in names}\n"
        f"json.dump({{'env': dict(os.environ), 'modes': modes}}, open({str(dump)!r}, 'w'))\n"
        "for n in names:\n"
        "    open(os.path.join(os.environ[n], 'left-by-reviewer'), 'w').write('x')\n"
    )
    with Workspace(workdir=work, environ=env) as ws:
        assert CheckReviewer(script).review(subject(ws)).vote == PASS
    seen = json.loads(dump.read_text())
    home = Path(seen["env"]["HOME"])
    assert home != real and not home.is_relative_to(real)
    for name, where in caller.items():
        given = Path(seen["env"][name])
        assert given.is_relative_to(home) and given != where, name
        assert list(where.iterdir()) == [], f"a reviewer wrote into the real {name}"
    assert seen["modes"]["XDG_RUNTIME_DIR"] == 0o700
    assert not home.exists()  # removed with the workspace
