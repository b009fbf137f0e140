"""Transcripts as a model may learn from them: each message where it came from, and what
is never sent (memory reads' results, the session-start context, <private> text, meta)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.host_support import Transcript
from truss_files.errors import UsageError
from truss_files.faces.cli.main import cli
from truss_files.faces.host.transcript import (
    CONTEXT_MARK,
    MESSAGE_CHARS,
    is_memory_read,
    read_transcript,
)


def test_claude_code_lines_keep_their_line_numbers_and_drop_memory(tmp_path: Path) -> None:
    t = Transcript(tmp_path / "s.jsonl", "abc-123", tmp_path)
    t.system(f"{CONTEXT_MARK} Memory for agent a")
    asked = t.user(f"{CONTEXT_MARK} pasted back by a host")
    asked = t.user("Fix the build.")
    looked = t.assistant(
        "Looking.", [{"id": "r1", "name": "read_memory", "input": {"query": "build"}}]
    )
    t.tool_result("r1", "the build needs make 4")
    with t.path.open("a") as handle:
        handle.write("{half a line\n\n")
    said = t.assistant("Done. <private>token=abc</private> <PRIVATE>never closed")
    got = read_transcript(t.path)
    assert got.session == "abc-123" and got.dropped_reads == 1
    assert [(m.seq, m.role) for m in got.messages] == [
        (asked, "user"),
        (looked, "assistant"),
        (said, "assistant"),
    ]
    text = "\n".join(m.text for m in got.messages)
    assert "make 4" not in text and CONTEXT_MARK not in text
    assert "token=abc" not in text and "never closed" not in text and "[private]" in text


def test_messages_in_three_shapes(tmp_path: Path) -> None:
    messages = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": [{"type": "text", "text": "hi " * MESSAGE_CHARS}]},
        {"role": "system", "content": "ignored"},
    ]
    for name, text in (
        ("list.json", json.dumps(messages)),
        ("object.json", json.dumps({"messages": messages})),
        ("lines.jsonl", "\n".join(json.dumps(m) for m in messages)),
    ):
        path = tmp_path / name
        path.write_text(text)
        got = read_transcript(path, "messages")
        assert [m.seq for m in got.messages] == [1, 2] and got.session is None
        assert got.messages[1].text.endswith(" [...]")
        assert len(got.messages[1].text) <= MESSAGE_CHARS + 6
    bad = tmp_path / "bad.json"
    bad.write_text("not json at all")
    with pytest.raises(UsageError, match="--format claude-code"):
        read_transcript(bad, "messages")
    with pytest.raises(UsageError, match="cannot be read"):
        read_transcript(tmp_path / "missing.json", "messages")
    with pytest.raises(UsageError, match="claude-code, messages"):
        read_transcript(bad, "chatml")


def test_which_calls_read_memory() -> None:
    for name in (
        "memory_query",
        "mcp__truss-files__memory_view",
        "mcp__x__read_memory",
        "memory.ask",
    ):
        assert is_memory_read(name, {})
    assert is_memory_read("memory", {"command": "view", "path": "/memories"})
    assert not is_memory_read("memory", {"command": "create", "path": "/memories/a"})
    assert not is_memory_read("mcp__truss-files__write_memory", {})
    assert not is_memory_read("Bash", {"command": "cat memory_query"})


def test_hook_help_lists_git_hooks_and_host_hooks() -> None:
    result = CliRunner().invoke(cli, ["hook", "--help"])
    assert result.exit_code == 0
    for name in (
        "pre-commit",
        "pre-receive",
        "session-start",
        "pre-compact",
        "session-end",
        "stop",
    ):
        assert name in result.output
    assert "Git hooks" in result.output and "Host hooks" in result.output


def test_the_hook_command_names_every_git_hook_without_loading_them() -> None:
    from truss_files.faces.cli.hookcmd import GIT_HOOKS
    from truss_files.faces.hooks import HOOK_NAMES

    assert GIT_HOOKS == HOOK_NAMES
