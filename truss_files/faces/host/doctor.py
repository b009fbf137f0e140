"""``truss-files doctor``: is everything in place for an agent that remembers?

Each check is ok, a warning (works, but something is missing that a person may want) or a
failure (something that will not work), and says what to do. The checks:

    install     this truss-files, its console script (absolute), the optional extras the
                host path needs (mcp; the learn model's SDK)
    store       the store opens, has commits, and its history passes the read gate
    key         a signing key whose principal the store knows, and its roles (agent to
                write; panel for a write to be verified at once under eager)
    learn       a [learn] model and its provider's key in the environment
    host        each host config setup writes, where it is: our server entry and hooks,
                each command still there to run, the store it names still a store
    hooks       each host hook's last run (from the log ``state.py`` keeps), and the log file

``doctor`` exits 1 when a check fails, 0 otherwise (warnings included).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ...errors import TrussError
from ...model import Trust
from .setup import HOOK_EVENTS, SERVER_NAME, console_command, desktop_config_path, is_ours
from .state import host_dir, last_runs, log_path

if TYPE_CHECKING:
    from ...facade import MemoryStore

__all__ = ["Check", "Report", "diagnose"]

OK: Final = "ok"
WARN: Final = "warn"
FAIL: Final = "fail"


@dataclass(frozen=True)
class Check:
    area: str
    status: str  # ok, warn, fail
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        data = {"area": self.area, "status": self.status, "detail": self.detail}
        if self.fix:
            data["fix"] = self.fix
        return data

    def line(self) -> str:
        mark = {OK: "ok  ", WARN: "warn", FAIL: "FAIL"}[self.status]
        text = f"{mark} {self.area:<8} {self.detail}"
        return text + (f"\n              fix: {self.fix}" if self.fix else "")


@dataclass(frozen=True)
class Report:
    checks: tuple[Check, ...]
    log: str | None

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "log": self.log, "checks": [c.to_dict() for c in self.checks]}

    def text(self) -> str:
        lines = [c.line() for c in self.checks]
        if self.log:
            lines.append(f"hook log: {self.log}")
        failed = sum(1 for c in self.checks if c.status == FAIL)
        lines.append("all good" if not failed else f"{failed} problem(s) to fix")
        return "\n".join(lines)


def diagnose(
    store_path: str | None,
    project: Path,
    environ: Mapping[str, str],
    *,
    open_store: Any = None,
) -> Report:
    """Run every check; ``open_store(path) -> MemoryStore`` opens the store (the CLI's)."""
    checks: list[Check] = []
    project = project.resolve()
    checks.extend(_install(environ))
    store = None
    path = store_path or "."
    try:
        store = open_store(path)
        checks.extend(_store(store))
    except TrussError as exc:
        checks.append(
            Check(
                "store",
                FAIL,
                f"no store at {os.path.abspath(path)}: {exc.message}",
                "run `truss-files init` there, or pass --store PATH",
            )
        )
    except Exception as exc:  # noqa: BLE001 - doctor reports, it never ends on a bad store
        checks.append(Check("store", FAIL, f"the store at {path} cannot be opened ({exc})"))
    if store is not None:
        checks.extend(_key(store))
        checks.extend(_learn(store, environ))
    checks.extend(_hosts(project, environ))
    folder = host_dir(store.git.git_dir if store is not None else None, environ)
    checks.extend(_hooks(folder))
    log = log_path(folder)
    return Report(tuple(checks), str(log) if log.exists() else None)


def _install(environ: Mapping[str, str]) -> list[Check]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        have = version("truss-files")
    except PackageNotFoundError:
        have = "(not installed as a package)"
    command = console_command()
    out = [Check("install", OK, f"truss-files {have}, run as {shlex.join(command)}")]
    if importlib.util.find_spec("mcp") is None:
        out.append(
            Check(
                "install",
                WARN,
                "the mcp extra is not installed: hosts cannot start `truss-files mcp`",
                "pip install 'truss-files[mcp]'",
            )
        )
    return out


def _store(store: MemoryStore) -> list[Check]:
    snap = store.snapshot()
    where = store.git.workdir or store.git.git_dir
    if snap.oid is None:
        return [Check("store", FAIL, f"{where} has no commits", "run `truss-files init`")]
    try:
        store.open_read(Trust.VERIFIED, snap)
    except TrussError as exc:
        return [
            Check(
                "store",
                FAIL,
                f"{where}: {exc.message}",
                "run `truss-files audit` to see which commit and rule",
            )
        ]
    pending = len(store.list_entries(trust=Trust.UNVERIFIED, snap=snap))
    detail = f"{where}: history passes the audit; {pending} notes await review"
    return [Check("store", OK, detail, "truss-files review" if pending else "")]


def _key(store: MemoryStore) -> list[Check]:
    try:
        principal = store.principal()
    except TrussError as exc:
        return [
            Check(
                "key",
                FAIL,
                f"no usable signing key: {exc.message}",
                "truss-files keys new, then ask an operator to add it (truss-files signers add)",
            )
        ]
    roles = sorted(r for r, members in store.config().roles().items() if principal in members)
    out = [Check("key", OK, f"signing as {principal}, roles: {', '.join(roles) or 'none'}")]
    if "agent" not in roles:
        out.append(
            Check(
                "roles",
                FAIL,
                f"{principal} lacks the agent role: its writes are refused",
                f"an operator runs: truss-files roles grant agent {principal}",
            )
        )
    if "panel" not in roles:
        out.append(
            Check(
                "roles",
                WARN,
                f"{principal} lacks the panel role: eager verification waits for "
                "TRUSS_PANEL_KEY or `truss-files verify --pending` by a panel member",
            )
        )
    return out


def _learn(store: MemoryStore, environ: Mapping[str, str]) -> list[Check]:
    # the layered settings (tomllib, the panel's rules): only once a store has opened
    from ...config.judgespec import PROVIDER_ENV
    from ...config.settings import settings_for

    try:
        settings = settings_for(store)
    except TrussError as exc:
        return [Check("learn", FAIL, f"settings: {exc.message}")]
    provider, model = settings.get("learn.provider"), settings.get("learn.model")
    if not provider or not model:
        return [
            Check(
                "learn",
                WARN,
                "no [learn] model: sessions are not learned from",
                '[learn] provider = "anthropic", model = "..." in truss.toml or your config',
            )
        ]
    var = PROVIDER_ENV[str(provider)][0]
    out = [Check("learn", OK, f"learns with {provider} {model}")]
    if not environ.get(var):
        out.append(Check("learn", FAIL, f"{var} is not set", f"export {var}=..."))
    if importlib.util.find_spec(str(provider)) is None:
        out.append(
            Check(
                "learn",
                FAIL,
                f"the {provider} SDK is missing",
                f"pip install 'truss-files[{provider}]'",
            )
        )
    return out


def _hosts(project: Path, environ: Mapping[str, str]) -> list[Check]:
    home = Path(environ.get("HOME") or Path.home())
    found: list[Check] = []
    servers = [
        ("claude-code", project / ".mcp.json", ("mcpServers",)),
        ("claude-code", home / ".claude.json", ("projects", str(project.resolve()), "mcpServers")),
        ("claude-desktop", desktop_config_path(environ), ("mcpServers",)),
    ]
    for host, path, pointer in servers:
        entry = _at(_load(path), [*pointer, SERVER_NAME])
        if entry is None:
            continue
        found.extend(_server_check(host, path, entry))
    for path in (project / ".claude" / "settings.json", home / ".claude" / "settings.json"):
        hooks = _at(_load(path), ["hooks"])
        if not isinstance(hooks, dict):
            continue
        ours = {
            event: [
                h
                for g in hooks.get(event) or []
                if isinstance(g, dict)
                for h in g.get("hooks") or []
                if is_ours(h)
            ]
            for event in HOOK_EVENTS
        }
        if not any(ours.values()):
            continue
        missing = [e for e, items in ours.items() if not items]
        if missing:
            found.append(
                Check(
                    "host",
                    FAIL,
                    f"{path}: no truss-files hook for {', '.join(missing)}",
                    "truss-files setup claude-code",
                )
            )
        for event, items in ours.items():
            for item in items:
                found.extend(_command_check(f"{path} hooks.{event}", shlex.split(item["command"])))
        if not missing:
            found.append(Check("host", OK, f"{path}: hooks {', '.join(HOOK_EVENTS)}"))
    if not found:
        found.append(
            Check(
                "host",
                WARN,
                f"no host is set up for {project}",
                "truss-files setup claude-code (or claude-desktop, mcp-json)",
            )
        )
    return found


def _server_check(host: str, path: Path, entry: Any) -> list[Check]:
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return [
            Check(
                "host", FAIL, f"{path}: {SERVER_NAME} has no command", f"truss-files setup {host}"
            )
        ]
    given = entry.get("args")
    args: list[Any] = given if isinstance(given, list) else []
    out = _command_check(f"{path} ({host})", [entry["command"], *map(str, args)])
    if not out:
        out = [Check("host", OK, f"{path}: MCP server {SERVER_NAME} for {host}")]
    return out


def _command_check(where: str, argv: Sequence[str]) -> list[Check]:
    out = []
    program = argv[0] if argv else ""
    if not os.path.isabs(program):
        out.append(
            Check(
                "host",
                FAIL,
                f"{where}: {program!r} is not an absolute path; a host with its own PATH may not "
                "find it",
                "run `truss-files setup` again",
            )
        )
    elif not (os.path.isfile(program) and os.access(program, os.X_OK)):
        out.append(
            Check("host", FAIL, f"{where}: {program} is gone", "run `truss-files setup` again")
        )
    args = list(argv)
    if "--store" in args[:-1]:
        store = args[args.index("--store") + 1]
        if not os.path.isdir(store):
            out.append(
                Check(
                    "host", FAIL, f"{where}: store {store} is gone", "run `truss-files setup` again"
                )
            )
    return out


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _at(data: Any, pointer: Sequence[str]) -> Any:
    for part in pointer:
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def _hooks(folder: Path) -> list[Check]:
    runs = last_runs(folder)
    out = []
    log = log_path(folder)
    for hook, run in sorted(runs.items()):
        at = run.get("at", "?")
        if run.get("ok"):
            out.append(Check("hooks", OK, f"{hook} last ran {at}: {run.get('detail', '')}"))
        else:
            out.append(
                Check(
                    "hooks",
                    FAIL,
                    f"{hook} failed {at}: {run.get('detail', '')}",
                    f"see {log}",
                )
            )
    ended = runs.get("stop")
    learned = runs.get("session-end") or runs.get("pre-compact")
    if (
        ended
        and ended.get("transcript_path")
        and (not learned or learned.get("session_id") != ended.get("session_id"))
    ):
        out.append(
            Check(
                "hooks",
                WARN,
                f"session {ended.get('session_id')} was never learned from",
                f"truss-files learn --transcript {shlex.quote(str(ended['transcript_path']))}",
            )
        )
    return out
