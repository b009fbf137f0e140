"""The task registry of the HTTP API: each task's run context, from a TOML file.

An HTTP call's run context (member, role, team, enterprise, project, version, clone flag,
grants) is this file's entry for the ``{taskId}`` in its path, and nothing else: no header,
query parameter or body field can add to it or change it.

    [tasks.T-118]
    member = "m-7"
    role = "reviewer"
    team = "platform"
    enterprise = "acme"
    project = "p-3"          # optional
    version = "4"            # optional
    clone = false            # optional, default false
    grants = [{layer = "team", eventPrefix = "ci:"}]   # optional
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from ...runs.runcontext import RunContext
from .watched import toml_tables

# A task id is a path segment: no '/', no '..', nothing a URL or a log line would mangle.
TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
REQUIRED = ("member", "role", "team", "enterprise")
OPTIONAL = ("project", "version", "clone", "grants", "agent")


@dataclass(frozen=True)
class TaskRegistry:
    tasks: Mapping[str, RunContext]

    @classmethod
    def parse(cls, data: bytes, source: str = "tasks.toml") -> TaskRegistry:
        table = toml_tables(data, source, "tasks.TASK_ID", "fix the task registry")
        return cls({task: _context(task, item, source) for task, item in table.items()})

    def get(self, task_id: str) -> RunContext | None:
        return self.tasks.get(task_id) if TASK_ID.match(task_id) else None


def _context(task: str, item: Any, source: str) -> RunContext:
    where = f"{source}: [tasks.{task}]"
    if not TASK_ID.match(task):
        raise ConfigError(f"{where}: a task id is letters, digits, '.', '_', ':' or '-'")
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: must be a table")
    unknown = set(item) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(sorted(unknown))}; a task takes "
            + ", ".join(REQUIRED + OPTIONAL)
        )
    missing = [name for name in REQUIRED if not isinstance(item.get(name), str) or not item[name]]
    if missing:
        raise ConfigError(f"{where}: needs {', '.join(missing)} (non-empty strings)")
    if "version" in item and not isinstance(item["version"], str | int):
        raise ConfigError(f"{where}: 'version' must be a string")
    return RunContext.from_dict({**item, "task": task}, where)
