"""Hosts for their tests (tests/faces/host/): a project with a store made by the real
console script, Claude Code's files as setup writes them, its hook payloads and session
transcripts in the shapes Claude Code documents, and the hook commands run as the host runs
them (``sh -c COMMAND``, the payload on stdin)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support import console
from tests.support.script import SCRIPT


def cli(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``truss-files ARGS`` as a process in ``cwd``; it never prints a traceback."""
    done = console.run(
        [str(SCRIPT), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def new_project(root: Path, name: str = "app") -> Path:
    """A git repository that is also the store (``truss-files init`` there, with the user's
    default key, made on first use)."""
    project = root / name
    project.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(project)], check=True)
    done = cli("init", "--format", "json", cwd=project)
    assert done.returncode == 0, done.stderr
    return project


def hook_commands(settings: Path) -> dict[str, list[str]]:
    """Each event's hook commands in a Claude Code settings file."""
    data = json.loads(settings.read_text())
    return {
        event: [h["command"] for g in groups for h in g.get("hooks", [])]
        for event, groups in data.get("hooks", {}).items()
    }


def run_hook(
    command: str, payload: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A hook command as Claude Code runs it: through a shell, the event's JSON on stdin."""
    return subprocess.run(
        ["sh", "-c", command],
        input=json.dumps(dict(payload)),
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
    )


def payload(
    event: str, session: str, project: Path, transcript: Path, **more: Any
) -> dict[str, Any]:
    """A hook's input as Claude Code documents it."""
    return {
        "session_id": session,
        "transcript_path": str(transcript),
        "cwd": str(project),
        "hook_event_name": event,
        **more,
    }


class Transcript:
    """A Claude Code session file (JSON lines), written as a session goes."""

    def __init__(self, path: Path, session: str, cwd: Path) -> None:
        self.path = path
        self.session = session
        self.cwd = cwd
        self.parent: str | None = None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def line_count(self) -> int:
        return len(self.path.read_text().splitlines())

    def _add(self, kind: str, message: dict[str, Any], **more: Any) -> int:
        me = str(uuid.uuid4())
        event = {
            "parentUuid": self.parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": str(self.cwd),
            "sessionId": self.session,
            "version": "2.0.0",
            "type": kind,
            "message": message,
            "uuid": me,
            "timestamp": "2026-12-07T12:00:00.000Z",
            **more,
        }
        self.parent = me
        with self.path.open("a") as handle:
            handle.write(json.dumps(event) + "\n")
        return self.line_count()

    def user(self, text: str) -> int:
        """A person's turn; returns its line number."""
        return self._add("user", {"role": "user", "content": text})

    def assistant(self, text: str, tools: Sequence[dict[str, Any]] = ()) -> int:
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        content.extend({"type": "tool_use", **t} for t in tools)
        message = {
            "id": f"msg_{uuid.uuid4().hex[:12]}",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": content,
            "stop_reason": "tool_use" if tools else "end_turn",
        }
        return self._add("assistant", message)

    def tool_result(self, tool_use_id: str, text: str) -> int:
        block = {
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": [{"type": "text", "text": text}],
        }
        return self._add(
            "user", {"role": "user", "content": [block]}, toolUseResult={"content": text}
        )

    def system(self, text: str) -> int:
        return self._add("system", {"role": "system", "content": text}, isMeta=True)
