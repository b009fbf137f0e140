"""``truss-files setup HOST``: write a host's MCP server entry (and its hooks), in the
host's own files, merged into what is there.

    claude-code      .mcp.json            {"mcpServers": {"truss-files": {...}}}
                     .claude/settings.json {"hooks": {"SessionStart": [{"hooks": [...]}], ...}}
                     (--scope user: ~/.claude.json under "projects" -> this folder, and
                     ~/.claude/settings.json)
    claude-desktop   claude_desktop_config.json in the app's config folder
    mcp-json         prints {"mcpServers": {...}} for any other client (or --config FILE)

Every command written is an absolute path: the console script beside the interpreter that
runs this (a host started with its own PATH -- a desktop app, a service -- finds it), else
that interpreter with ``-m truss_files``. The server entry names the store by absolute
path, turns the write tool on, and makes each session a child of one run per project (the
agent's stable identity there: ``agent_run``), so a session sees the notes earlier
sessions left pending.

What is ours is told by shape, not by a record kept elsewhere: the server of our name, and
hook commands that run ``truss-files … hook session-start`` (or pre-compact, session-end,
stop). Anything else in the files -- other servers, other hooks, other settings -- is kept
as it was, in its order. Running setup again changes nothing; ``--remove`` takes out
exactly what setup puts in (and a file left holding nothing, ``{}``, with it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ...errors import ConfigError, UsageError

__all__ = [
    "HOOK_EVENTS",
    "HOSTS",
    "Edit",
    "Plan",
    "agent_run",
    "console_command",
    "desktop_config_path",
    "hook_command",
    "is_ours",
    "plan",
    "server_entry",
]

HOSTS: Final = ("claude-code", "claude-desktop", "mcp-json")
SCOPES: Final = ("project", "user")
SERVER_NAME: Final = "truss-files"
# Claude Code's hook events and ours; each event's timeout (seconds) as the host reads it.
HOOK_EVENTS: Final = {
    "SessionStart": ("session-start", 30),
    "PreCompact": ("pre-compact", 120),
    "SessionEnd": ("session-end", 120),
    "Stop": ("stop", 10),
}
_OUR_HOOK = re.compile(r"\bhook (session-start|pre-compact|session-end|stop)\b")
_OUR_PROGRAM = re.compile(r"truss-files|truss_files")


def console_command(executable: str | None = None) -> list[str]:
    """How a host runs truss-files: the console script beside ``executable`` (default: this
    interpreter, unresolved, so a virtual environment stays one), else the interpreter with
    ``-m truss_files``. Always absolute."""
    python = Path(os.path.abspath(executable or sys.executable))
    for name in ("truss-files", "truss-files.exe"):
        script = python.parent / name
        if script.is_file() and os.access(script, os.X_OK):
            return [str(script)]
    return [str(python), "-m", "truss_files"]


def agent_run(project: Path) -> str:
    """The run that stands for the agent in ``project``: one id per folder, stable across
    sessions (the folder's name, for people, and a digest of its absolute path)."""
    resolved = project.resolve()
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", resolved.name).strip("-.")[:40] or "project"
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
    return f"agent-{slug}-{digest}"


def server_entry(
    command: Sequence[str], store: Path, run: str, *, typed: bool = True
) -> dict[str, Any]:
    """The MCP server entry: stdio, the read tools and the write binding on, each session a
    child of ``run``."""
    args = [*command[1:], "mcp", "--store", str(store)]
    args += ["--memory-tools", "--memory-write", "--parent", run]
    entry: dict[str, Any] = {"type": "stdio"} if typed else {}
    entry.update({"command": command[0], "args": args})
    return entry


def hook_command(command: Sequence[str], store: Path, hook: str, run: str) -> str:
    """The shell command a host hook runs (hosts run hook commands through a shell)."""
    return shlex.join([*command, "--store", str(store), "hook", hook, "--agent", run])


def is_ours(hook: Any) -> bool:
    """Whether a host's hook item is one setup wrote."""
    if not isinstance(hook, Mapping):
        return False
    command = hook.get("command")
    return (
        isinstance(command, str)
        and bool(_OUR_HOOK.search(command))
        and bool(_OUR_PROGRAM.search(command))
    )


@dataclass(frozen=True)
class Edit:
    """One change to one file (or, printed, what would go there)."""

    path: Path | None
    what: str
    action: str  # added, updated, removed, unchanged

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": str(self.path) if self.path else None,
            "what": self.what,
            "action": self.action,
        }

    def line(self) -> str:
        where = str(self.path) if self.path else "(printed)"
        return f"{self.action:<9} {self.what} in {where}"


@dataclass
class Plan:
    """What setup does: the files it changes, with their new contents, and each edit."""

    host: str
    run: str
    command: list[str]
    edits: list[Edit] = field(default_factory=list)
    files: dict[Path, dict[str, Any] | None] = field(default_factory=dict)  # None: delete
    printed: dict[str, Any] | None = None

    @property
    def changed(self) -> bool:
        return any(e.action != "unchanged" for e in self.edits)

    def apply(self) -> None:
        for path, data in self.files.items():
            if data is None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            else:
                _write_json(path, data)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "host": self.host,
            "agent_run": self.run,
            "command": self.command,
            "changed": self.changed,
            "edits": [e.to_dict() for e in self.edits],
        }
        if self.printed is not None:
            out["config"] = self.printed
        return out


def desktop_config_path(environ: Mapping[str, str], platform: str | None = None) -> Path:
    """Claude Desktop's config file where the app reads it on this system."""
    home = _home(environ)
    system = platform or sys.platform
    if system == "darwin":
        base = home / "Library" / "Application Support"
    elif system.startswith("win"):
        base = Path(environ.get("APPDATA") or home / "AppData" / "Roaming")
    else:
        base = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    return base / "Claude" / "claude_desktop_config.json"


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or Path.home())


def plan(
    host: str,
    *,
    store: Path,
    project: Path,
    remove: bool = False,
    scope: str = "project",
    name: str = SERVER_NAME,
    config: Path | None = None,
    command: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Plan:
    """The edits ``setup HOST`` makes (``remove``: undoes), with the files' new contents;
    nothing is written until ``Plan.apply``."""
    if host not in HOSTS:
        raise UsageError(f"unknown host {host!r}; use one of: {', '.join(HOSTS)}")
    if scope not in SCOPES:
        raise UsageError(f"unknown scope {scope!r}; use one of: {', '.join(SCOPES)}")
    env = os.environ if environ is None else environ
    store, project = store.resolve(), project.resolve()
    cmd = list(command or console_command())
    run = agent_run(project)
    out = Plan(host, run, cmd)
    entry = server_entry(cmd, store, run, typed=host != "claude-desktop")
    if host == "mcp-json" and config is None:
        out.printed = {"mcpServers": {name: entry}}
        out.edits.append(Edit(None, f"mcpServers.{name}", "removed" if remove else "added"))
        return out
    if host == "claude-code":
        home = _home(env)
        pointer: tuple[str, ...]
        if config is not None:
            mcp_file, pointer = config, ("mcpServers",)
        elif scope == "user":
            mcp_file, pointer = home / ".claude.json", ("projects", str(project), "mcpServers")
        else:
            mcp_file, pointer = project / ".mcp.json", ("mcpServers",)
        _edit(out, mcp_file, lambda d: _server(d, pointer, name, entry, remove))
        settings = (
            home / ".claude" / "settings.json"
            if scope == "user"
            else project / ".claude" / "settings.json"
        )
        hooks = {
            event: hook_command(cmd, store, hook, run) for event, (hook, _t) in HOOK_EVENTS.items()
        }
        _edit(out, settings, lambda d: _hooks(d, hooks, remove))
    else:
        target = config or (
            desktop_config_path(env) if host == "claude-desktop" else project / ".mcp.json"
        )
        _edit(out, target, lambda d: _server(d, ("mcpServers",), name, entry, remove))
    return out


Editor = Callable[[dict[str, Any]], list[tuple[str, str]]]


def _edit(out: Plan, path: Path, editor: Editor) -> None:
    """Run ``editor`` over the file's JSON (a copy); keep the new contents if it changed."""
    existed = path.exists()
    data = _read_json(path) if existed else {}
    before = json.dumps(data, sort_keys=False)
    changes = editor(data)
    for what, action in changes:
        out.edits.append(Edit(path, what, action))
    if json.dumps(data, sort_keys=False) == before:
        return
    out.files[path] = None if (not data and existed and _all(changes, "removed")) else data


def _all(changes: list[tuple[str, str]], action: str) -> bool:
    return all(a in (action, "unchanged") for _w, a in changes)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path} cannot be read ({exc}); fix or move it, then run setup again"
        ) from exc
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            "setup changes nothing in a file it cannot read: fix it, then run setup again"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a JSON {type(data).__name__}, not an object; fix it")
    return data


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write whole (a rename over the old file), keeping the old file's mode (a host's
    config may hold tokens of its own: ~/.claude.json is 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _table(
    data: dict[str, Any], pointer: Sequence[str], where: str, create: bool
) -> dict[str, Any] | None:
    """The object at ``pointer`` in ``data`` (made when ``create``), or None."""
    node = data
    for i, part in enumerate(pointer):
        nxt = node.get(part)
        if nxt is None:
            if not create:
                return None
            nxt = node[part] = {}
        if not isinstance(nxt, dict):
            at = ".".join(pointer[: i + 1])
            raise ConfigError(f"{where}: {at} is not a JSON object; fix it, then run setup again")
        node = nxt
    return node


def _prune(data: dict[str, Any], pointer: Sequence[str]) -> None:
    """Drop the objects along ``pointer`` that are left empty, deepest first."""
    for depth in range(len(pointer), 0, -1):
        parent = _table(data, pointer[: depth - 1], "", False) if depth > 1 else data
        if parent is None:
            return
        child = parent.get(pointer[depth - 1])
        if isinstance(child, dict) and not child:
            del parent[pointer[depth - 1]]
        else:
            return


def _server(
    data: dict[str, Any], pointer: Sequence[str], name: str, entry: dict[str, Any], remove: bool
) -> list[tuple[str, str]]:
    what = ".".join([*pointer, name]) if pointer[0] != "projects" else f"mcpServers.{name}"
    servers = _table(data, pointer, what, not remove)
    if remove:
        if servers is None or name not in servers:
            return [(what, "unchanged")]
        del servers[name]
        _prune(data, pointer)
        return [(what, "removed")]
    assert servers is not None
    held = servers.get(name)
    if held == entry:
        return [(what, "unchanged")]
    servers[name] = entry
    return [(what, "updated" if held is not None else "added")]


def _hooks(
    data: dict[str, Any], commands: Mapping[str, str], remove: bool
) -> list[tuple[str, str]]:
    table = _table(data, ("hooks",), "hooks", not remove)
    if table is None:
        return [(f"hooks.{event}", "unchanged") for event in commands]
    changes = []
    for event, command in commands.items():
        groups = table.get(event)
        if groups is not None and not isinstance(groups, list):
            raise ConfigError(f"hooks.{event} is not a list of matcher groups; fix it")
        groups = list(groups or [])
        kept, had = _without_ours(groups)
        ours = {
            "hooks": [{"type": "command", "command": command, "timeout": HOOK_EVENTS[event][1]}]
        }
        new = kept if remove else [*kept, ours]
        if new == groups:
            changes.append((f"hooks.{event}", "unchanged"))
            continue
        if new:
            table[event] = new
        else:
            table.pop(event, None)
        action = "removed" if remove else ("updated" if had else "added")
        changes.append((f"hooks.{event}", action))
    _prune(data, ("hooks",))
    return changes


def _without_ours(groups: list[Any]) -> tuple[list[Any], bool]:
    """The matcher groups with our hook items taken out (a group left empty goes too)."""
    kept, had = [], False
    for group in groups:
        items = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(items, list):
            kept.append(group)
            continue
        others = [h for h in items if not is_ours(h)]
        if len(others) == len(items):
            kept.append(group)
            continue
        had = True
        if others:
            kept.append({**group, "hooks": others})
    return kept, had
