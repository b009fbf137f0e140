"""The run context: who a run works for, supplied by the caller — never by a tool's input.

A run's task, member, role, team, enterprise, project, clone flag and layer grants come from a
JSON file (``--run-context FILE``) or the ``TRUSS_RUN_CONTEXT`` environment variable (a path,
or the JSON itself). The HTTP face builds the same value from its task registry. Tools read it
from their call context; a tool input that names a team or an author is a filter at most.

File format (camelCase as in the HTTP API, or snake_case)::

    {"taskId": "T-118", "memberId": "m-7", "roleId": "reviewer", "teamId": "platform",
     "enterpriseId": "acme", "projectId": "p-3", "version": "4", "clone": false,
     "grants": [{"layer": "team", "eventPrefix": "ci:"}], "agent": "build-bot",
     "purpose": "what the run is for"}

Any other field is refused (a misspelt ``taskID`` would otherwise leave the run without a task).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..model import Layer

ENV_VAR = "TRUSS_RUN_CONTEXT"

# JSON name -> field name; both spellings are accepted.
_FIELDS = {
    "taskId": "task",
    "task": "task",
    "task_id": "task",
    "memberId": "member",
    "member": "member",
    "member_id": "member",
    "roleId": "role",
    "role": "role",
    "role_id": "role",
    "teamId": "team",
    "team": "team",
    "team_id": "team",
    "enterpriseId": "enterprise",
    "enterprise": "enterprise",
    "enterprise_id": "enterprise",
    "projectId": "project",
    "project": "project",
    "project_id": "project",
    "version": "version",
    "agent": "agent",
}


# The names a run context file may use, as the error lists them (camelCase; snake_case too).
_KNOWN = (*(k for k in _FIELDS if k.endswith("Id")), "version", "agent", "clone", "grants",
          "purpose")  # fmt: skip


@dataclass(frozen=True)
class Grant:
    """This task version may write ``layer`` for source events whose id starts ``event_prefix``."""

    layer: Layer
    event_prefix: str


@dataclass(frozen=True)
class RunContext:
    task: str | None = None
    member: str | None = None
    role: str | None = None
    team: str | None = None
    enterprise: str | None = None
    project: str | None = None
    version: str | None = None
    agent: str | None = None
    clone: bool = False
    grants: tuple[Grant, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "run context") -> RunContext:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: must be a JSON object of run fields")
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for name, value in data.items():
            if name in _FIELDS:
                if value is not None and not isinstance(value, str | int):
                    raise ConfigError(f"{source}: '{name}' must be a string")
                values[_FIELDS[name]] = None if value is None else str(value)
            elif name == "clone":
                if not isinstance(value, bool):
                    raise ConfigError(f"{source}: 'clone' must be true or false")
                values["clone"] = value
            elif name == "grants":
                values["grants"] = _grants(value, source)
            elif name == "purpose":  # what a run's first context consults the enterprise on
                if value is not None and not isinstance(value, str):
                    raise ConfigError(f"{source}: 'purpose' must be a string")
                extra[name] = value
            else:
                # A misspelt field must not be dropped: a run would lose its task or team.
                near = [k for k in _KNOWN if k.lower() == str(name).lower().replace("_", "")]
                hint = f"did you mean '{near[0]}'? " if near else ""
                raise ConfigError(
                    f"{source}: unknown field {str(name)[:40]!r}; {hint}a run context takes "
                    + ", ".join(_KNOWN)
                )
        return cls(**values, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "taskId": self.task,
            "memberId": self.member,
            "roleId": self.role,
            "teamId": self.team,
            "enterpriseId": self.enterprise,
            "projectId": self.project,
            "version": self.version,
            "agent": self.agent,
            "clone": self.clone,
            "grants": [
                {"layer": g.layer.value, "eventPrefix": g.event_prefix} for g in self.grants
            ],
        }
        data = {k: v for k, v in data.items() if v is not None}
        data.update(self.extra)
        return data

    def grants_for(self, layer: Layer) -> tuple[Grant, ...]:
        return tuple(g for g in self.grants if g.layer is layer)


def _grants(value: Any, source: str) -> tuple[Grant, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{source}: 'grants' must be a list of {{layer, eventPrefix}}")
    out = []
    for item in value:
        if not isinstance(item, Mapping):
            raise ConfigError(f"{source}: each grant must be an object {{layer, eventPrefix}}")
        prefix = item.get("eventPrefix", item.get("event_prefix"))
        if not isinstance(prefix, str) or not prefix:
            raise ConfigError(f"{source}: a grant needs a non-empty 'eventPrefix'")
        try:
            layer = Layer.parse(str(item.get("layer")))
        except Exception as exc:  # UsageError: re-raised as a config problem with the source
            raise ConfigError(f"{source}: {exc}") from None
        out.append(Grant(layer, prefix))
    return tuple(out)


def has_context(context: RunContext | None) -> bool:
    """Whether ``context`` is one the context tools (memory.ask, memory.train) can work in:
    it names at least a task and an enterprise."""
    return context is not None and bool(context.task) and bool(context.enterprise)


def load_run_context(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> RunContext | None:
    """The run context from ``path``, else from ``TRUSS_RUN_CONTEXT``; None when neither is set."""
    env = os.environ if environ is None else environ
    source: str
    if path is not None:
        source = str(path)
        text = _read(Path(path))
    elif env.get(ENV_VAR):
        raw = env[ENV_VAR]
        if raw.lstrip().startswith("{"):
            source, text = ENV_VAR, raw
        else:
            source, text = raw, _read(Path(raw))
    else:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: not valid JSON ({exc}); fix the run context file") from exc
    return RunContext.from_dict(data, source)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read run context {path}: {exc.strerror}; pass an existing --run-context FILE"
        ) from exc
