"""``truss-files setup HOST``: the host's files, real ones in a temporary HOME and project,
merged without losing what the user had, idempotent, undone exactly by --remove; and the
command it writes started as a host starts it (absolute path, an empty PATH)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.support.host_support import hook_commands
from truss_files.errors import ConfigError, UsageError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.faces.host.setup import (
    HOOK_EVENTS,
    agent_run,
    console_command,
    desktop_config_path,
    is_ours,
    plan,
)

USER_MCP = {
    "mcpServers": {"github": {"command": "/usr/bin/gh-mcp", "args": ["--stdio"]}},
    "enableAllProjectMcpServers": True,
}
USER_SETTINGS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(make test)"]},
    "hooks": {
        "SessionStart": [
            {"matcher": "startup", "hooks": [{"type": "command", "command": "echo hi"}]}
        ],
        "PostToolUse": [
            {"matcher": "Edit", "hooks": [{"type": "command", "command": "ruff format"}]}
        ],
    },
}


def _setup(store: MemoryStore, project: Path, *args: str) -> Any:
    runner = CliRunner()
    result = runner.invoke(
        cli,
        [
            "--store",
            str(store.git.workdir),
            "setup",
            *args,
            "--project",
            str(project),
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _write(path: Path, data: Any) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=4) + "\n"
    path.write_text(text)
    return text


def test_claude_code_merges_keeps_the_users_entries_and_is_idempotent(
    store: MemoryStore, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    _write(project / ".mcp.json", USER_MCP)
    _write(project / ".claude" / "settings.json", USER_SETTINGS)

    first = _setup(store, project, "claude-code")
    assert [e["action"] for e in first["edits"]] == ["added"] * 5
    mcp = json.loads((project / ".mcp.json").read_text())
    assert mcp["mcpServers"]["github"] == USER_MCP["mcpServers"]["github"]
    assert mcp["enableAllProjectMcpServers"] is True
    ours = mcp["mcpServers"]["truss-files"]
    assert ours["type"] == "stdio" and os.path.isabs(ours["command"])
    assert ours["args"][:3] == ["mcp", "--store", str(Path(str(store.git.workdir)).resolve())]
    assert "--memory-write" in ours["args"] and ours["args"][-1] == agent_run(project)

    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert settings["model"] == "opus" and settings["permissions"] == USER_SETTINGS["permissions"]
    assert settings["hooks"]["PostToolUse"] == USER_SETTINGS["hooks"]["PostToolUse"]
    start = settings["hooks"]["SessionStart"]
    assert start[0] == USER_SETTINGS["hooks"]["SessionStart"][0]  # the user's hook first, kept
    assert "matcher" not in start[1]  # ours fires for startup, resume, clear and compact
    for event, (hook, timeout) in HOOK_EVENTS.items():
        item = settings["hooks"][event][-1]["hooks"][0]
        argv = shlex.split(item["command"])
        assert os.path.isabs(argv[0]) and argv[-4:] == ["hook", hook, "--agent", agent_run(project)]
        assert item["type"] == "command" and item["timeout"] == timeout

    before = {
        p: p.read_bytes() for p in (project / ".mcp.json", project / ".claude" / "settings.json")
    }
    again = _setup(store, project, "claude-code")
    assert not again["changed"] and {e["action"] for e in again["edits"]} == {"unchanged"}
    assert {p: p.read_bytes() for p in before} == before


def test_remove_undoes_exactly_what_setup_added(store: MemoryStore, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    _write(project / ".mcp.json", USER_MCP)
    _write(project / ".claude" / "settings.json", USER_SETTINGS)
    _setup(store, project, "claude-code")
    removed = _setup(store, project, "claude-code", "--remove")
    assert [e["action"] for e in removed["edits"]] == ["removed"] * 5
    assert json.loads((project / ".mcp.json").read_text()) == USER_MCP
    assert json.loads((project / ".claude" / "settings.json").read_text()) == USER_SETTINGS
    again = _setup(store, project, "claude-code", "--remove")
    assert {e["action"] for e in again["edits"]} == {"unchanged"}


def test_files_setup_made_are_gone_after_remove(store: MemoryStore, tmp_path: Path) -> None:
    project = tmp_path / "fresh"
    _setup(store, project, "claude-code")
    assert (project / ".mcp.json").exists() and (project / ".claude" / "settings.json").exists()
    _setup(store, project, "claude-code", "--remove")
    assert not (project / ".mcp.json").exists()
    assert not (project / ".claude" / "settings.json").exists()


def test_print_writes_nothing(store: MemoryStore, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    shown = _setup(store, project, "claude-code", "--print")
    assert [e["action"] for e in shown["edits"]] == ["added"] * 5 and not shown["written"]
    assert not project.exists() or not any(project.iterdir())


def test_a_moved_install_updates_only_its_own_entries(store: MemoryStore, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    where = Path(str(store.git.workdir))
    old = plan("claude-code", store=where, project=project, command=["/old/venv/bin/truss-files"])
    old.apply()
    _write(project / ".mcp.json", {**json.loads((project / ".mcp.json").read_text()), "x": 1})
    new = plan("claude-code", store=where, project=project)
    assert [e.action for e in new.edits] == ["updated"] * 5
    new.apply()
    commands = hook_commands(project / ".claude" / "settings.json")
    assert all(len(c) == 1 and "/old/venv" not in c[0] for c in commands.values())
    assert json.loads((project / ".mcp.json").read_text())["x"] == 1


def test_user_scope_writes_under_the_project_in_claude_json(
    store: MemoryStore, tmp_path: Path
) -> None:
    home = Path(os.environ["HOME"])
    _write(
        home / ".claude.json", {"numStartups": 7, "projects": {"/elsewhere": {"mcpServers": {}}}}
    )
    (home / ".claude.json").chmod(0o600)
    project = tmp_path / "proj"
    _setup(store, project, "claude-code", "--scope", "user")
    data = json.loads((home / ".claude.json").read_text())
    assert data["numStartups"] == 7 and data["projects"]["/elsewhere"] == {"mcpServers": {}}
    assert "truss-files" in data["projects"][str(project.resolve())]["mcpServers"]
    assert stat.S_IMODE((home / ".claude.json").stat().st_mode) == 0o600  # its tokens stay private
    assert set(hook_commands(home / ".claude" / "settings.json")) == set(HOOK_EVENTS)
    _setup(store, project, "claude-code", "--scope", "user", "--remove")
    data = json.loads((home / ".claude.json").read_text())
    assert data == {"numStartups": 7, "projects": {"/elsewhere": {"mcpServers": {}}}}


def test_claude_desktop_and_mcp_json(store: MemoryStore, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    target = desktop_config_path(os.environ)
    _write(target, {"mcpServers": {"other": {"command": "/bin/other"}}, "globalShortcut": "x"})
    _setup(store, project, "claude-desktop")
    data = json.loads(target.read_text())
    assert data["globalShortcut"] == "x" and "other" in data["mcpServers"]
    assert "type" not in data["mcpServers"]["truss-files"]  # the app's own shape
    printed = _setup(store, project, "mcp-json")
    assert printed["config"]["mcpServers"]["truss-files"]["args"][0] == "mcp"
    assert not (project / ".mcp.json").exists()


def test_desktop_paths_per_system(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "APPDATA": str(tmp_path / "roaming")}
    assert desktop_config_path(env, "darwin") == (
        tmp_path / "Library/Application Support/Claude/claude_desktop_config.json"
    )
    assert (
        desktop_config_path(env, "win32") == tmp_path / "roaming/Claude/claude_desktop_config.json"
    )
    assert (
        desktop_config_path(env, "linux") == tmp_path / ".config/Claude/claude_desktop_config.json"
    )


@pytest.mark.parametrize(
    ("content", "said"),
    [("{not json", "line 1"), ("[1, 2]", "not an object"), ('{"mcpServers": []}', "mcpServers")],
)
def test_a_file_setup_cannot_read_is_left_alone(
    store: MemoryStore, tmp_path: Path, content: str, said: str
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / ".mcp.json").write_text(content)
    with pytest.raises(ConfigError, match=said):
        plan("claude-code", store=Path(str(store.git.workdir)), project=project)
    assert (project / ".mcp.json").read_text() == content
    assert not (project / ".claude").exists()


def test_setup_needs_a_store_and_a_known_host(tmp_path: Path) -> None:
    runner = CliRunner()
    empty = tmp_path / "empty"
    empty.mkdir()
    import subprocess

    subprocess.run(["git", "init", "-q", str(empty)], check=True)
    result = runner.invoke(cli, ["--store", str(empty), "setup", "claude-code", "--format", "json"])
    assert result.exit_code == 1 and "init" in result.output
    with pytest.raises(UsageError, match="claude-code"):
        plan("cursor", store=tmp_path, project=tmp_path)


def test_ours_is_told_by_shape() -> None:
    assert is_ours(
        {"type": "command", "command": "/v/bin/truss-files --store /s hook session-start"}
    )
    assert is_ours({"command": "/usr/bin/python3 -m truss_files hook stop --agent a"})
    assert not is_ours({"command": "/v/bin/truss-files hook pre-commit"})  # a git hook
    assert not is_ours({"command": "echo hook session-start"})
    assert not is_ours("truss-files hook stop")


def test_the_command_is_absolute_and_beside_the_interpreter(tmp_path: Path) -> None:
    assert console_command() == [str(Path(sys.executable).with_name("truss-files"))]
    bare = tmp_path / "bin" / "python3"
    bare.parent.mkdir()
    bare.write_text("")
    assert console_command(str(bare)) == [str(bare), "-m", "truss_files"]
    assert agent_run(tmp_path / "my app!") == agent_run(tmp_path / "my app!")
    assert agent_run(tmp_path / "a") != agent_run(tmp_path / "b" / "a")


mcp = pytest.importorskip("mcp")


@pytest.mark.spawns  # the mcp client starts the server setup wrote
def test_the_written_server_starts_as_a_host_starts_it(store: MemoryStore, tmp_path: Path) -> None:
    """The entry setup wrote, run by the mcp client with an empty PATH: the absolute command
    starts, names the store, and serves the read tools and the write binding."""
    import anyio
    from mcp import Client, StdioServerParameters

    project = tmp_path / "proj"
    _setup(store, project, "claude-code")
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["truss-files"]
    env = {k: v for k, v in os.environ.items() if k.startswith(("GIT_", "TRUSS_", "HOME", "XDG_"))}
    env["TRUSS_KEY"] = str(tmp_path / "operator_key")
    env["PATH"] = ""
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env, cwd="/")

    async def main() -> None:
        async with Client(params) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert {"memory_query", "memory", "write_memory"} <= set(names)
            made = await client.call_tool(
                "write_memory", {"kind": "fact", "key": "db", "body": "Postgres 16."}
            )
            assert not made.is_error and made.structured_content is not None
            assert made.structured_content["trust"] == "unverified"

    anyio.run(main)
    facts = [e for e in MemoryStore(str(store.git.workdir)).list_entries() if e.key == "db"]
    assert len(facts) == 1 and facts[0].provenance.produced_by.startswith("run:mcp-")
