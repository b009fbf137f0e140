"""Where a run's enterprise memory lives: the layers and scopes of its context.

memory.ask and memory.train share these rules, and the HTTP face reaches them through those
two tools. Everything here is decided by the run context (``RunContext``: from the caller,
never from tool input):

* A note trained by a run records the run's task, team, enterprise (and project) in its
  ``scope``; a member or role note records the member or role too.
* A run reads the layers task (its own task), team (its own team) and enterprise (its own
  enterprise), always inside its own enterprise. A filter (teamId, projectId) narrows by
  scope and can only take notes away.
* A run's own notes (scope task = its task) pass the verified floor while unverified, marked
  by their trust, as a run's own writes do for memory_query.
"""

from __future__ import annotations

import re
from typing import Final

from ..errors import NoRunContext
from ..model import Entry, Layer
from ..recall.pipeline import Area
from ..runs.runcontext import RunContext, has_context

READ_LAYERS: Final = (Layer.TASK, Layer.TEAM, Layer.ENTERPRISE)
# Event ids the platform itself uses (team decisions, gate results): no tool input may claim
# to come from one.
RESERVED_PREFIXES: Final = ("team:", "gate:")
# What an event id and a revision may hold: they become part of a key and of a ledger ref
# (``event:<id>#<revision>``), so no spaces, no '#', nothing a reader could misread.
EVENT_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+=~-]{0,199}")
REVISION: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+=~-]{0,63}")
_EVENT_REF: Final = re.compile(r"event:([^\s#]+)(?:#([^\s#]+))?")


def require_context(context: RunContext | None, tool: str) -> RunContext:
    """The run context, holding at least a task and an enterprise."""
    if context is None or not has_context(context):
        missing = "a run context" if context is None else "taskId and enterpriseId"
        raise NoRunContext(
            f"{tool} needs {missing}: the caller says which task, team and enterprise this "
            "run works for (truss-files tool --run-context FILE, or TRUSS_RUN_CONTEXT holding "
            'the JSON, e.g. {"taskId": "T-1", "teamId": "platform", "enterpriseId": "acme"}); '
            "a tool input cannot set it"
        )
    return context


def event_ref(event_id: str, revision: str) -> str:
    return f"event:{event_id}#{revision}"


def source_event(entry: Entry) -> tuple[str, str | None] | None:
    """(event id, revision) of the event a note was trained from, or None."""
    for ref in (entry.provenance.produced_by, *entry.provenance.sources):
        found = _EVENT_REF.fullmatch(ref or "")
        if found:
            return found.group(1), found.group(2)
    return None


def scope_of(context: RunContext, layer: Layer) -> dict[str, str]:
    """The scope a note of ``layer`` trained by this run records."""
    scope = {"task": context.task or "", "enterprise": context.enterprise or ""}
    if context.team:
        scope["team"] = context.team
    if context.project:
        scope["project"] = context.project
    if layer is Layer.MEMBER and context.member:
        scope["member"] = context.member
    if layer is Layer.ROLE and context.role:
        scope["role"] = context.role
    return scope


def home(context: RunContext, layer: Layer) -> Area | None:
    """The part of ``layer`` that belongs to this run's context (None: it has none there)."""
    enterprise = ("enterprise", context.enterprise or "")
    own_field = {
        Layer.TASK: ("task", context.task),
        Layer.MEMBER: ("member", context.member),
        Layer.ROLE: ("role", context.role),
        Layer.TEAM: ("team", context.team),
        Layer.ENTERPRISE: None,
    }[layer]
    if own_field is None:
        return Area(layer, (enterprise,))
    name, value = own_field
    if not value:
        return None
    return Area(layer, tuple(sorted([enterprise, (name, value)])))


def tenant_scope(context: RunContext) -> dict[str, str]:
    """The scope fields every entry of this run's tenant holds: its enterprise. A read of the
    whole store for a task (HTTP) keeps to entries that hold them, so an entry another
    enterprise trained, or one written with no enterprise at all, stays out of reach."""
    require_context(context, "a read of the whole store")
    return {"enterprise": context.enterprise or ""}


def read_areas(context: RunContext) -> tuple[Area, ...]:
    """What a run reads: its task, team and enterprise, plus its own unverified notes in each."""
    areas: list[Area] = []
    task = ("task", context.task or "")
    for layer in READ_LAYERS:
        area = home(context, layer)
        if area is None:
            continue
        areas.append(area)
        own = Area(layer, tuple(sorted({*area.scope, task})), own=True)
        areas.append(own)
    return tuple(areas)


def readable(context: RunContext, entry: Entry) -> bool:
    """Whether ``entry`` lies in a layer this run may read or write (its own part of it)."""
    area = home(context, entry.layer)
    return area is not None and area.holds(entry.layer, entry.scope)
