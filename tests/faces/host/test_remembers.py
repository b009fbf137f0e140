"""Five minutes to an agent that remembers, as a host lives it: setup writes Claude Code's
files; the hook commands in them run as Claude Code runs them (a shell, the documented JSON
on stdin); session one starts, works, ends; learning writes its notes, the model judge
verifies them at once (eager), and session two starts knowing what session one learned."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.fake_provider import FakeProvider
from tests.support.host_support import (
    Transcript,
    cli,
    hook_commands,
    new_project,
    payload,
    run_hook,
)
from tests.support.model_judges import add_to_config
from truss_files.facade import MemoryStore

JUDGES = """
[panel.judges]
claude = {provider = "anthropic", model = "judge-test", max_retries = 0, timeout = 10}

[panel.reviewers]
default = ["claude"]
"""
USER_CONFIG = """
[policy]
verification = "eager"

[learn]
provider = "anthropic"
model = "learn-test"
"""
LESSON = "The CI network tests need one retry: the package mirror is slow before 9am."
READ_BACK = "Lesson: retry the CI three times, a memory read said so."


@pytest.fixture(name="fake")
def fake_fixture() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


def _user_config(text: str) -> None:
    folder = Path(os.environ["TRUSS_CONFIG_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(text)


def test_a_session_learns_and_the_next_session_starts_knowing_it(
    tmp_path: Path, fake: FakeProvider
) -> None:
    project = new_project(tmp_path)
    add_to_config(MemoryStore(project), JUDGES)  # the operator's signed judges
    _user_config(USER_CONFIG)
    env = {"ANTHROPIC_API_KEY": "sk-ant-fake", "ANTHROPIC_BASE_URL": fake.url}
    done = cli("setup", "claude-code", "--format", "json", cwd=project)
    assert done.returncode == 0, done.stderr
    hooks = hook_commands(project / ".claude" / "settings.json")
    assert set(hooks) == {"SessionStart", "PreCompact", "SessionEnd", "Stop"}

    # Session one starts: nothing learned yet.
    one = Transcript(tmp_path / "claude" / "s-one.jsonl", "s-one", project)
    start = run_hook(
        hooks["SessionStart"][0],
        payload("SessionStart", "s-one", project, one.path, source="startup"),
        env,
    )
    assert start.returncode == 0, start.stderr
    first = json.loads(start.stdout)["hookSpecificOutput"]
    assert first["hookEventName"] == "SessionStart"
    assert "[truss-files memory]" in first["additionalContext"]
    assert "mirror is slow" not in first["additionalContext"]

    # It works: reads memory (whose answer must never be learned back), finds a lesson.
    one.user("The CI keeps failing on the network tests; please fix it.")
    one.assistant(
        "Let me check memory first.",
        [{"id": "toolu_01", "name": "mcp__truss-files__memory_query", "input": {"query": "ci"}}],
    )
    one.tool_result("toolu_01", READ_BACK)
    said = one.assistant(f"Fixed it.\nLesson: {LESSON}")
    run_hook(hooks["Stop"][0], payload("Stop", "s-one", project, one.path), env)

    # Session one ends: learn, and the judge (eager) decides at once.
    end = run_hook(
        hooks["SessionEnd"][0],
        payload("SessionEnd", "s-one", project, one.path, reason="exit"),
        env,
    )
    assert end.returncode == 0 and end.stdout == "", end.stderr
    store = MemoryStore(project)
    learned = [
        e for e in store.list_entries() if e.provenance.produced_by.startswith("run:cc-s-one/")
    ]
    assert [(e.kind.value, e.body, e.trust.value) for e in learned] == [
        ("lesson", LESSON, "verified")
    ]
    assert learned[0].provenance.produced_by == f"run:cc-s-one/{said}"
    assert all("three times" not in e.body for e in store.list_entries())
    sent = [
        r for r in fake.requests if r["body"].get("tool_choice", {}).get("name") == "record_notes"
    ]
    assert len(sent) == 1 and READ_BACK not in json.dumps(sent[0]["body"])

    # Session two starts knowing it.
    two = Transcript(tmp_path / "claude" / "s-two.jsonl", "s-two", project)
    start = run_hook(
        hooks["SessionStart"][0],
        payload("SessionStart", "s-two", project, two.path, source="startup"),
        env,
    )
    context = json.loads(start.stdout)["hookSpecificOutput"]["additionalContext"]
    assert LESSON in context
    assert learned[0].id[:12] in context

    # Learning session one again stores nothing new.
    before = len(store.list_entries())
    again = run_hook(hooks["SessionEnd"][0], payload("SessionEnd", "s-one", project, one.path), env)
    assert again.returncode == 0
    assert len(MemoryStore(project).list_entries()) == before
    assert len([r for r in fake.requests if "record_notes" in json.dumps(r["body"])]) == 1

    # And doctor finds everything in place.
    doctor = cli("doctor", "--format", "json", cwd=project, env=env)
    report = json.loads(doctor.stdout)
    assert doctor.returncode == 0, report
    assert any(c["area"] == "hooks" and "session-end" in c["detail"] for c in report["checks"])
