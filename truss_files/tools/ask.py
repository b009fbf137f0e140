"""memory.ask: what this run's task, team and enterprise know about a purpose.

Public entry point, served by the tool registry (``memory.ask`` / ``memory_ask``) and by the
HTTP face::

    ask(store: Store, context: RunContext | None, inp: Mapping[str, Any], *,
        budget: int | None | Literal["config"] = "config", run_id: str | None = None,
        mode: str | None = None, timeout: float | None = None) -> dict[str, Any]

``inp`` is the tool input (``{purpose, teamId?, projectId?, limit?}``, checked against
``INPUT_SCHEMA`` here too). ``budget``: ``"config"`` is a run's reply, held to ``[enterprise]
ask_budget_chars`` of truss.toml (``DEFAULT_BUDGET`` when unset); an int is that budget;
``None`` (HTTP) leaves nothing out and puts every note's text in ``answer``. ``run_id`` lets
the run's own unverified writes through, as for memory_query; ``mode`` is the recall mode
(None: truss.toml's); ``timeout`` in seconds turns a slow read into ``unavailable``. Asking
never stores anything. Bad input raises ``UsageError`` (``invalid_input``); a missing run
context raises ``NoRunContext``.

Rules:

* Layers: task, team and enterprise of the run's own context (``scope.read_areas``); a
  ``teamId`` or ``projectId`` filter narrows by the notes' scope and never adds a note.
* Trust: verified notes only (stale and superseded ones left out), plus this task's own
  unverified notes, marked ``trust: unverified``: a note in the task's own area is its own
  only when a key of a principal holding the ``trainer`` role signed the commit that added
  it (``authority.trainer_note``), and a run's note only on the run's own proof (as for
  memory_query). Rejected never. A history the audit refuses
  is ``unavailable`` (the read gate), never an empty answer.
* Status: ``answered``; ``insufficient_evidence`` (nothing in scope matches);
  ``conflict`` -- two live verified notes of one kind and key with different bodies, or a
  correction whose note is not retired yet (its target still live and verified); the
  optional ``conflicts`` field names them; ``unavailable`` -- the store, its index or its
  history could not be read, or the time ran out: no answer, no evidence, and ``reason``.
* Budget (a run): evidence holds whole notes in rank order while they fit; a first note too
  long alone is cut to the budget (``partial: true``, ``chars`` its full length); every other
  match left out is in ``omitted`` and counted in ``usage.evidenceOmitted``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from ..errors import ConfigError, NotFound, TrussError, UsageError
from ..format.secrets import shown
from ..git.gitdir import GitDir
from ..git.usage import record
from ..model import Entry, Kind, Trust
from ..recall.bounds import query_terms
from ..recall.engine import search_snapshot
from ..recall.pipeline import Filter
from ..runs.asked import record_asked
from ..runs.links import key_principal, run_view
from ..trust.authority import trainers
from .query import recall_mode
from .registry import Annotations, Tool, register
from .schema import check_input, check_json
from .tenancy import read_areas, require_context, source_event

if TYPE_CHECKING:
    from ..git.gitstore import Snapshot
    from ..runs.runcontext import RunContext
    from ..store.store import Store
    from .dispatch import Call

__all__ = ["DEFAULT_BUDGET", "INPUT_SCHEMA", "ask"]

DEFAULT_BUDGET: Final = 8_000
DEFAULT_LIMIT: Final = 8
MAX_LIMIT: Final = 100
MAX_PURPOSE: Final = 1_000

INPUT_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "purpose": {
            "type": "string",
            "maxLength": MAX_PURPOSE,
            "description": "What you want to know, in plain words (a question or a topic).",
        },
        "teamId": {
            "type": "string",
            "maxLength": 200,
            "description": "Only notes trained by this team (narrows; never widens).",
        },
        "projectId": {
            "type": "string",
            "maxLength": 200,
            "description": "Only notes trained for this project (narrows; never widens).",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
    },
    "required": ["purpose"],
    "additionalProperties": False,
}


class _Unreadable(Exception):
    """Memory could not be read: the reply is ``unavailable``."""


def ask(
    store: Store,
    context: RunContext | None,
    inp: Mapping[str, Any],
    *,
    budget: int | None | Literal["config"] = "config",
    run_id: str | None = None,
    mode: str | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """The reply of memory.ask; see the module docstring."""
    check_json(inp)
    check_input(INPUT_SCHEMA, inp)
    ctx = require_context(context, "memory.ask")
    purpose = str(inp["purpose"])
    if not purpose.strip():
        raise UsageError('`purpose` is empty; say what you want to know, e.g. "flaky checks"')
    limit = int(inp.get("limit", DEFAULT_LIMIT))
    narrow = {
        name: str(inp[field])
        for field, name in (("teamId", "team"), ("projectId", "project"))
        if inp.get(field) is not None
    }
    areas = read_areas(ctx)
    layers = [
        layer.value
        for layer in dict.fromkeys(a.layer for a in areas)
        if _may_hold(ctx.team, layer.value, narrow.get("team"))
    ]
    applied: dict[str, Any] = {"layers": layers}
    applied.update({f"{k}Id": v for k, v in narrow.items()})
    deadline = None if timeout is None else time.monotonic() + timeout
    flt = Filter(areas=areas, scope=narrow, visible_run=run_id, skip_marked=True)
    try:
        flt = _own_proof(store, flt, run_id)
        snap, limit_chars, hits, related = _read(store, purpose, flt, limit, budget, mode, deadline)
        problems = _conflicts(store, snap, hits, related, areas)
        _check_time(deadline)
    except _Unreadable as exc:
        return _unavailable(str(exc), applied)
    reply = _reply(hits, problems, limit_chars, applied)
    if run_id is not None:
        # What this run was told: memory.train in the run refuses to store it back.
        record_asked(GitDir.discover(store.git.git_dir), run_id, reply.get("evidence", ()))
    return reply


def _own_proof(store: Store, flt: Filter, run_id: str | None) -> Filter:
    """Who proves a note below the floor: the trainers (a task's own notes) and, in a run,
    the run's principal (``authority``, a run's own notes)."""
    roles = store.config(store.snapshot()).roles()
    flt = dataclasses.replace(flt, area_writers=trainers(roles))
    if run_id is None:
        return flt
    view = run_view(store, run_id, key_principal(store))
    return dataclasses.replace(flt, own_principal=view.principal, shared_runs=view.shared)


def _may_hold(team: str | None, layer: str, wanted: str | None) -> bool:
    """Whether a layer can still hold notes under a teamId filter: a run's task and team notes
    all carry its own team, so a filter naming another team leaves only enterprise notes."""
    return wanted is None or layer == "enterprise" or wanted == team


def _read(
    store: Store,
    purpose: str,
    flt: Filter,
    limit: int,
    budget: int | None | Literal["config"],
    mode: str | None,
    deadline: float | None,
) -> tuple[Snapshot, int | None, list[Entry], list[Entry]]:
    query_terms(purpose)  # an over-long purpose is the caller's to fix, not "unavailable"
    try:
        snap = store.snapshot()
        chars = _budget(store, snap) if budget == "config" else budget
        _check_time(deadline)
        result = search_snapshot(store, snap, purpose, flt, limit, gate=store.gate, mode=mode)
        related = list(result.related)  # decoded here: a damaged record is unreadable
        record(store.git.git_dir, [h.entry.id for h in result.hits], store.origin)
        _check_time(deadline)
    except (UsageError, ConfigError):
        raise
    except _Unreadable:
        raise
    except (TrussError, OSError) as exc:
        raise _Unreadable(_why(exc)) from exc
    except Exception as exc:
        if type(exc).__module__.split(".")[0] not in ("pygit2", "_pygit2"):
            raise
        raise _Unreadable(_why(exc)) from exc
    if chars is not None and chars < 1:
        raise ConfigError("truss.toml: enterprise.ask_budget_chars must be a positive integer")
    return snap, chars, [h.entry for h in result.hits], related


def _why(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return f"memory could not be read: {text}"


def _check_time(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise _Unreadable("memory could not be read in time; ask again, or with a shorter purpose")


def _budget(store: Store, snap: Snapshot) -> int:
    value = store.config(snap).get("enterprise", "ask_budget_chars", DEFAULT_BUDGET)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(
            f"truss.toml: enterprise.ask_budget_chars is {value!r}; give a positive number of "
            "characters, e.g. 8000"
        )
    return value


def _conflicts(
    store: Store, snap: Snapshot, hits: list[Entry], related: list[Entry], areas: Any
) -> list[dict[str, Any]]:
    """Notes in scope that disagree: verified rivals of one kind and key, and corrections
    whose target is still live and verified."""
    flt = Filter(areas=areas)
    seen: dict[tuple[str, str], dict[str, Entry]] = {}
    for entry in [*hits, *related]:
        if entry.trust is Trust.VERIFIED and entry.superseded_by is None and flt.admits(entry):
            seen.setdefault((entry.kind.value, entry.key), {})[entry.id] = entry
    out: list[dict[str, Any]] = []
    for (kind, key), group in seen.items():
        if len({e.body for e in group.values()}) > 1:
            ids = [e.id for e in sorted(group.values(), key=lambda e: (e.created, e.id))]
            out.append({"kind": kind, "key": key, "ids": ids, "why": "different bodies"})
    for entry in hits:
        if entry.kind is not Kind.CORRECTION or not entry.supersedes:
            continue
        try:
            target = store.get(entry.supersedes, snap)
        except NotFound:
            continue
        if target.trust is Trust.VERIFIED and target.superseded_by is None:
            out.append(
                {
                    "kind": entry.kind.value,
                    "key": entry.key,
                    "ids": [target.id, entry.id],
                    "why": "correction not settled: the note it corrects is still verified",
                }
            )
    return out


def _evidence(entry: Entry, body: str, partial: bool) -> dict[str, Any]:
    source = source_event(entry)
    return {
        "id": entry.id,
        "layer": entry.layer.value,
        "kind": entry.kind.value,
        "body": body,
        "sourceEventId": source[0] if source else None,
        "partial": partial,
        "chars": len(entry.body),
        "trust": entry.trust.value,
    }


def _omitted(entry: Entry) -> dict[str, Any]:
    source = source_event(entry)
    return {
        "id": entry.id,
        "layer": entry.layer.value,
        "sourceEventId": source[0] if source else None,
        "chars": len(entry.body),
    }


def _reply(
    hits: list[Entry], conflicts: list[dict[str, Any]], budget: int | None, applied: Any
) -> dict[str, Any]:
    evidence: list[dict[str, Any]] = []
    omitted: list[dict[str, Any]] = []
    used = 0
    for n, entry in enumerate(map(shown, hits)):
        size = len(entry.body)
        if budget is None or used + size <= budget:
            evidence.append(_evidence(entry, entry.body, False))
            used += size
        elif n == 0:
            # The best match alone is longer than the budget: its start, rather than nothing.
            evidence.append(_evidence(entry, entry.body[:budget], True))
            used += budget
        else:
            omitted.append(_omitted(entry))
    if not hits:
        status = "insufficient_evidence"
    elif conflicts:
        status = "conflict"
    else:
        status = "answered"
    out: dict[str, Any] = {
        "answer": _answer(evidence, omitted, conflicts, full=budget is None),
        "evidence": evidence,
        "appliedFilters": applied,
        "status": status,
        "usage": {
            "notesMatched": len(hits),
            "notesReturned": len(evidence),
            "evidenceOmitted": len(omitted),
            "chars": used,
        },
    }
    if budget is not None:
        out["omitted"] = omitted
    if conflicts:
        out["conflicts"] = conflicts
    return out


def _label(n: int, item: Mapping[str, Any]) -> str:
    event = f", event {item['sourceEventId']}" if item.get("sourceEventId") else ""
    part = f", cut at {len(item['body'])} of {item['chars']} characters" if item["partial"] else ""
    return f"[{n}] {item['id']} ({item['kind']}, {item['layer']}, {item['trust']}{event}{part})"


def _answer(
    evidence: list[dict[str, Any]],
    omitted: list[dict[str, Any]],
    conflicts: list[dict[str, Any]],
    *,
    full: bool,
) -> str:
    if not evidence:
        return (
            "No note in this task's, team's or enterprise's memory matches this purpose: "
            "nothing is known about it here yet."
        )
    many = len(evidence) != 1
    count = f"{len(evidence)} note{'s' if many else ''} in scope match{'' if many else 'es'}"
    if full:
        parts = [f"{count} this purpose:"]
        parts += [f"{_label(n, e)}:\n{e['body']}" for n, e in enumerate(evidence, 1)]
        text = "\n\n".join(parts)
    else:
        cited = "; ".join(_label(n, e) for n, e in enumerate(evidence, 1))
        text = f"{count} this purpose: {cited}. Their text is in evidence."
    if omitted:
        text += (
            f" {len(omitted)} more matched but did not fit this reply (see omitted); ask with "
            "a narrower purpose or a smaller limit to read them."
        )
    if any(e["trust"] == "unverified" for e in evidence):
        text += " Notes marked unverified are this task's own and no panel has checked them."
    if conflicts:
        text += " These notes disagree (see conflicts): check each side before relying on either."
    return text


def _unavailable(reason: str, applied: Any) -> dict[str, Any]:
    return {
        "answer": "",
        "evidence": [],
        "omitted": [],
        "appliedFilters": applied,
        "status": "unavailable",
        "reason": reason,
        "usage": {"notesMatched": 0, "notesReturned": 0, "evidenceOmitted": 0, "chars": 0},
    }


_NULLABLE_STRING = {"type": ["string", "null"]}
# MCP's outputSchema: the reply's shape, loose where a later field may be added.
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "evidence": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "layer": {"type": "string"},
                    "kind": {"type": "string"},
                    "body": {"type": "string"},
                    "sourceEventId": _NULLABLE_STRING,
                    "partial": {"type": "boolean"},
                    "chars": {"type": "integer"},
                    "trust": {"type": "string"},
                },
                "required": ["id", "layer", "kind", "body", "trust"],
            },
        },
        "omitted": {"type": "array", "items": {"type": "object"}},
        "appliedFilters": {},
        "status": {
            "type": "string",
            "enum": ["answered", "insufficient_evidence", "conflict", "unavailable"],
        },
        "reason": {"type": "string"},
        "conflicts": {"type": "array", "items": {"type": "object"}},
        "usage": {"type": "object"},
    },
    "required": ["answer", "evidence", "status", "usage"],
}


def memory_ask(call: Call, inp: Mapping[str, Any]) -> dict[str, Any]:
    return ask(call.store, call.context, inp, run_id=call.run_id, mode=recall_mode(call))


register(
    Tool(
        name="memory.ask",
        description=(
            "Ask what this task, its team and its enterprise have learned about a purpose. "
            "Returns `answer` (which notes apply, cited by id), `evidence` (those notes' "
            "text, layer, kind, trust and source event), `status` (answered, "
            "insufficient_evidence, conflict: notes disagree, unavailable: memory could not "
            "be read -- that is not the same as knowing nothing) and `omitted` (notes that "
            "matched but did not fit). Verified notes only, plus this task's own unverified "
            "ones, marked. `teamId`/`projectId` narrow the search. Read-only."
        ),
        input_schema=INPUT_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
        handler=memory_ask,
        annotations=Annotations(title="Ask memory", read_only=True, idempotent=True),
        gate="memory",
        memoized=True,
        needs_context=True,
    )
)
