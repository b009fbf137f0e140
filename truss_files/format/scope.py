"""Who may read an entry: ``memory.scope`` applied on write (a stamp) and on read (a reader).

A write stamps the entry's ``scope`` with what the caller's run says about it -- the agent
(run context ``agent``, ``--agent``, ``TRUSS_AGENT``) and the project (run context
``projectId``) -- and never from a tool's input. The stamp is part of the content address,
so no later edit can move an entry into another agent's view.

A read under ``memory.scope`` admits (``Reader.sees``):

    per-agent     the reader's own agent's entries, plus shared ones (no ``agent`` stamp);
                  an entry stamped with another project stays out too
    per-project   every agent's entries of the reader's project, plus shared ones (no
                  ``project`` stamp)
    shared        everything

A reader that names no agent is a reader of shared entries only under ``per-agent``: it never
sees another agent's notes by not saying who it is. People at the CLI read without a reader
(everything, as reviewers must) unless they pass ``--agent``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ..errors import UsageError

__all__ = ["MEMORY_SCOPES", "Reader", "parse_scope_pairs", "stamp"]

MEMORY_SCOPES: Final = ("per-agent", "per-project", "shared")


@dataclass(frozen=True)
class Reader:
    """A reader's place under ``memory.scope``: the mode and who is asking."""

    mode: str | None = "per-agent"  # None: the store's [memory] scope, resolved by recall
    agent: str | None = None
    project: str | None = None

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in MEMORY_SCOPES:
            raise UsageError(
                f"unknown memory scope '{self.mode}'; use one of: {', '.join(MEMORY_SCOPES)}"
            )

    def sees(self, scope: Mapping[str, str]) -> bool:
        if self.mode == "shared":
            return True
        project = scope.get("project")
        if project is not None and project != self.project:
            return False
        if self.mode == "per-project":
            return True
        agent = scope.get("agent")
        return agent is None or agent == self.agent


def stamp(
    scope: Mapping[str, str] | None,
    *,
    agent: str | None = None,
    project: str | None = None,
) -> dict[str, str]:
    """``scope`` with the caller's agent and project added. A given scope may repeat them but
    not contradict them: a write cannot claim to be another agent's."""
    out = dict(scope or {})
    for name, value in (("agent", agent), ("project", project)):
        if value is None:
            continue
        given = out.get(name)
        if given is not None and given != value:
            raise UsageError(
                f"scope {name}={given!r} contradicts the run's {name} {value!r}; drop it "
                "from --scope (the run's own is stamped)"
            )
        out[name] = value
    return out


def parse_scope_pairs(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``--scope agent=build-bot --scope project=p-3`` as a mapping."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise UsageError(f"--scope takes NAME=VALUE (e.g. agent=build-bot), got {pair!r}")
        if name in out and out[name] != value:
            raise UsageError(f"--scope names {name} twice with different values")
        out[name] = value
    return out
