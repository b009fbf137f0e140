"""The host hooks: what session-start gives a session (its agent's own pending notes, never
another agent's; what changed since its last session), and that no hook ever breaks its
host (exit 0, within its budget, what went wrong in the log doctor reads)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tests.support.host_support import cli as run_cli
from tests.support.host_support import hook_commands, new_project, payload, run_hook
from tests.support.tools_support import promote
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.faces.host.hookrun import PENDING_HEAD, run_host_hook
from truss_files.faces.host.setup import agent_run
from truss_files.faces.host.state import host_dir, last_runs


def _hook(
    store: MemoryStore | None,
    name: str,
    data: Any,
    *args: str,
    store_path: str | None = None,
) -> tuple[int, str]:
    out = io.StringIO()
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    code = run_host_hook(
        name,
        args,
        store_path=store_path or (str(store.git.workdir) if store else None),
        stdin=io.BytesIO(raw),
        stdout=out,
        environ=os.environ,
    )
    return code, out.getvalue()


def _context(store: MemoryStore, session: str, agent: str, **more: Any) -> dict[str, Any]:
    code, out = _hook(
        store,
        "session-start",
        {"session_id": session, "source": "startup", **more},
        "--agent",
        agent,
    )
    assert code == 0
    return json.loads(out)


def _key(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("TRUSS_KEY", str(tmp_path / "operator_key"))


def test_a_session_sees_its_agents_pending_notes_and_changes_never_another_agents(
    store: MemoryStore, tmp_path: Path, monkeypatch: Any
) -> None:
    _key(tmp_path, monkeypatch)
    me, other = agent_run(tmp_path / "app"), agent_run(tmp_path / "other-app")
    first = _context(store, "s1", me)["hookSpecificOutput"]
    assert first["hookEventName"] == "SessionStart"
    assert PENDING_HEAD not in first["additionalContext"]
    _context(store, "o1", other)
    mine = store.write("lesson", "deploys", "Deploy from CI only.", produced_by="run:cc-s1/4")
    theirs = store.write("lesson", "secret-plan", "Other agent's draft.", produced_by="run:cc-o1/2")
    settled = store.write("fact", "db", "The database is Postgres 16.")
    promote(store, settled.id)

    answer = _context(store, "s2", me)
    text = answer["hookSpecificOutput"]["additionalContext"]
    assert PENDING_HEAD in text and f"[unverified] lesson/deploys ({mine.id[:12]})" in text
    assert "Other agent's draft." not in text and theirs.id[:12] not in text
    assert "The database is Postgres 16." in text  # verified since the agent's last session
    assert "2 memory notes await review" in answer["systemMessage"]

    # The next session of the same agent: nothing changed since s2, the note still pending.
    text = _context(store, "s3", me, source="compact")["hookSpecificOutput"]["additionalContext"]
    assert "Postgres 16" not in text and "Deploy from CI only." in text
    # The other agent sees its own note, not mine.
    text = _context(store, "o2", other)["hookSpecificOutput"]["additionalContext"]
    assert "Other agent's draft." in text and "Deploy from CI only." not in text


def test_a_hook_never_breaks_its_host(store: MemoryStore, tmp_path: Path, monkeypatch: Any) -> None:
    _key(tmp_path, monkeypatch)
    folder = host_dir(store.git.git_dir)
    for garbage in (b"{not json", b"[1, 2]", b"\xff\xfe", b""):
        code, out = _hook(store, "session-start", garbage, "--agent", "agent-x")
        assert (
            code == 0 and json.loads(out)["hookSpecificOutput"]["hookEventName"] == "SessionStart"
        )
    code, out = _hook(store, "session-start", {"session_id": "bad/../id"}, "--agent", "no such/run")
    assert code == 0  # the session still gets its context; the log says what was left out
    assert "cc-bad----id" in json.loads(out)["hookSpecificOutput"]["additionalContext"]
    last = last_runs(folder)["session-start"]
    assert not last["ok"] and "run id" in last["detail"]
    log = (folder / "hooks.log").read_text()
    assert "session-start error" in log and "session-start ok" in log

    # Out of time: the host goes on, the log says so.
    code, out = _hook(
        store, "session-start", {"session_id": "s"}, "--agent", "a", "--budget", "0.001"
    )
    assert code == 0 and out == ""
    assert "gave up after" in last_runs(folder)["session-start"]["detail"]

    # Learning with no [learn] model: nothing stored, the reason logged.
    tip = store.snapshot().oid
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(
        json.dumps({"type": "user", "message": {"role": "user", "content": "Fact: x."}}) + "\n"
    )
    code, _ = _hook(store, "session-end", {"session_id": "s", "transcript_path": str(transcript)})
    assert code == 0 and store.snapshot().oid == tip
    assert "[learn]" in last_runs(folder)["session-end"]["detail"]


def test_with_no_store_the_log_goes_to_the_users_state_dir(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("TRUSS_STATE_DIR", str(tmp_path / "state"))
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    code, out = _hook(None, "session-start", {"session_id": "s", "cwd": str(nowhere)})
    assert code == 0 and out == ""
    last = last_runs(tmp_path / "state")["session-start"]
    assert not last["ok"] and last["cwd"] == str(nowhere)
    result = CliRunner().invoke(cli, ["--store", str(nowhere), "doctor", "--format", "json"])
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["log"] == str(tmp_path / "state" / "hooks.log")
    assert any(c["area"] == "hooks" and c["status"] == "fail" for c in report["checks"])


def test_doctor_names_what_to_fix(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    done = run_cli("doctor", "--format", "json", cwd=project)
    report = json.loads(done.stdout)
    assert done.returncode == 0, report  # warnings only: no host, no learn model
    statuses = {(c["area"], c["status"]) for c in report["checks"]}
    assert ("host", "warn") in statuses and ("learn", "warn") in statuses
    assert ("store", "ok") in statuses and ("key", "ok") in statuses

    # A setup whose program is gone, and a hook that failed: exit 1, each with its fix.
    assert run_cli("setup", "claude-code", cwd=project).returncode == 0
    settings = project / ".claude" / "settings.json"
    settings.write_text(settings.read_text().replace(str(Path(os.sys.executable).parent), "/gone"))
    start = hook_commands(settings)["SessionStart"][0].replace(
        "/gone", str(Path(os.sys.executable).parent)
    )
    run_hook(start, payload("SessionStart", "s", project, tmp_path / "t", source="startup"))
    run_hook(start.replace("--agent", "--budget 0.001 --agent"), {"session_id": "s"})
    done = run_cli("doctor", "--format", "json", cwd=project)
    report = json.loads(done.stdout)
    assert done.returncode == 1
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert any("/gone/truss-files is gone" in c["detail"] for c in failed)
    assert any("gave up" in c["detail"] and report["log"] in c["fix"] for c in failed)
    text = run_cli("doctor", "--format", "text", cwd=project).stdout
    assert "fix: run `truss-files setup` again" in text and "hook log:" in text
