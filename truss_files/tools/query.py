"""The read tools: memory_query, memory_view and read_memory.

Read-only: they never create, edit, promote, reject or stale an entry. Both default to
``min_trust: verified``; a caller may widen to stale or unverified, never to rejected. Inside
a run, the run's own unverified writes are visible too, marked. Ranking is the recall
pipeline's (filter first, then BM25 over the candidates only), in the recall mode of the
layered settings (``recall_mode``).

When the branch's history fails the audit (a commit that bypassed the hooks), a read above
unverified is refused (``UntrustedHistory``, code ``untrusted_history``); at ``min_trust:
unverified`` only unverified entries are served and the optional ``withheld`` field says why
(``readgate``).

Neither picks a winner silently: when two or more live verified entries share the kind and key
of an entry returned (``keep-both-flagged`` leaves them so), the output gains the optional
``conflicts`` field — ``[{"kind", "key", "ids": [oldest first]}]``, as the CLI's ``query``
reports it — naming every side, also those not returned. No conflict, no field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, NotFound, UsageError
from ..format import entryfile
from ..format.views import entry_view
from ..git.usage import record
from ..model import Entry, Kind, Trust
from ..recall.bounds import MAX_QUERY_CHARS, MAX_QUERY_TERMS
from ..recall.engine import RecallResult, conflicts_snapshot, run_deleted_snapshot
from ..recall.pipeline import Filter
from ..recall.query import answer, document, query_filter
from ..store.asof import Judged
from .registry import Annotations, Tool, register

if TYPE_CHECKING:
    from ..config.tipconfig import ConfigLike
    from .dispatch import Call

RECALL_MODES = ("exact", "semantic", "hybrid")
KINDS = [k.value for k in Kind]
FLOORS = ["verified", "stale", "unverified"]
DEFAULT_LIMIT = 32
MAX_IDS = 100

_FLOOR = {
    "type": "string",
    "enum": FLOORS,
    "default": "verified",
    "description": "Lowest trust to return (verified > stale > unverified). Rejected entries "
    "are never returned.",
}
_REVALIDATE = {
    "type": "boolean",
    "default": False,
    "description": "In a durable run, skip the recorded answer and read the store again.",
}
_AT = {
    "type": "string",
    "maxLength": 100,
    "description": "Read the store as it was then: a date (2026-11-01, the end of that day "
    "UTC) or a commit id of its history. Omit for now.",
}
_QUERY_PROPS: dict[str, Any] = {
    "query": {
        "type": "string",
        "description": f"What to look for, in plain words: at most {MAX_QUERY_CHARS:,} "
        f"characters and {MAX_QUERY_TERMS} distinct words (a longer query is refused).",
    },
    "contains": {"type": "string", "description": "Same as query."},
    "kind": {"type": "string", "enum": KINDS, "description": "Only entries of this kind."},
    "key": {"type": "string", "description": "Only entries with exactly this key."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": DEFAULT_LIMIT},
    "min_trust": _FLOOR,
    "at": _AT,
    "revalidate": _REVALIDATE,
}
_VIEW_PROPS: dict[str, Any] = {
    "id": {"type": "string", "description": "An entry id, or a unique prefix of 8+ hex."},
    "ids": {
        "type": "array",
        "items": {"type": "string"},
        "maxItems": MAX_IDS,
        "description": "More entry ids.",
    },
    "min_trust": _FLOOR,
    "at": _AT,
    "revalidate": _REVALIDATE,
}


# Result shapes (MCP's outputSchema), which agents depend on; optional fields may be added.
_STRING_OR_NULL = {"type": ["string", "null"]}
_ENTRY_OUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "kind": {"type": "string", "enum": KINDS},
        "key": {"type": "string"},
        "body": {"type": "string"},
        "trust": {"type": "string", "enum": FLOORS},
        "score": {"type": "number"},
        "ledger_ref": _STRING_OR_NULL,
        "provenance": {"type": "object"},
    },
    "required": ["id", "kind", "key", "body", "trust"],
}
_CONFLICTS_OUT = {"type": "array", "items": {"type": "object"}}
QUERY_OUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "recall_mode": {"type": "string", "enum": list(RECALL_MODES)},
        "min_trust": {"type": "string", "enum": FLOORS},
        "entries": {"type": "array", "items": _ENTRY_OUT},
        "withheld": {"type": "string"},
        # Nothing at the floor matched but this many entries below it do (min_trust widens).
        "below_floor": {"type": "integer", "minimum": 1},
        "conflicts": _CONFLICTS_OUT,
    },
    "required": ["min_trust", "entries"],
}
VIEW_OUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "min_trust": {"type": "string", "enum": FLOORS},
        "entries": {"type": "array", "items": _ENTRY_OUT},
        "filtered": {"type": "array", "items": {"type": "string"}},
        "missing": {"type": "array", "items": {"type": "string"}},
        "withheld": {"type": "string"},
        "conflicts": _CONFLICTS_OUT,
    },
    "required": ["min_trust", "entries"],
}


def store_recall_mode(config: ConfigLike) -> str:
    """``[recall] mode`` of truss.toml alone (default exact)."""
    mode = config.get("recall", "mode", "exact")
    if mode not in RECALL_MODES:
        raise ConfigError(
            f"truss.toml: recall.mode '{mode}' is unknown; use one of: {', '.join(RECALL_MODES)}"
        )
    return str(mode)


def recall_mode(call: Call) -> str:
    """``recall.mode`` from the layered settings: truss.toml → user config → ``[agents.NAME]``
    → contract. When no layer above truss.toml is in play (no user config file, agent or
    contract: one stat and two environment lookups), truss.toml decides alone and the
    settings module is not even imported — the cold read path stays as it was."""
    if call.session.has_settings_layers():
        return call.settings().recall_mode
    return store_recall_mode(call.config)


def _recall(call: Call, text: str, flt: Filter, limit: int, at: str | None = None) -> RecallResult:
    """The one query assembly (``recall.query.answer``) over this call's snapshot, or cold at
    the branch tip before the store is open (no pygit2): the filter first — trust floor, kind,
    key, the run's own unverified writes let through, tombstones left out — then ranking in
    the recall mode of the settings, then the usage note under the session's face. ``at``:
    the store as it was then (``Store.open_read``), judged by the gate of the tip."""
    # A run's own pending deletes hide what they delete from that run, as its memory view does.
    # Own notes and deletes are proven by signature (``authority``): the run's principal.
    view = call.run_view()
    flt = dataclasses.replace(
        flt,
        visible_run=call.run_id,
        own_principal=view.principal if view is not None else None,
        shared_runs=view.shared if view is not None else frozenset(),
        skip_marked=True,
        reader=call.reader(),
        run_deletes=True,
    )
    layered = call.session.has_settings_layers()
    where: Any = (call.store, call.snapshot()) if call.store_open else call.path
    gate = None
    if at is not None:
        past = call.store.open_read(flt.min_trust, at=at)
        where, gate = (call.store, past.snap), Judged(past.withheld)
    return answer(
        text,
        flt,
        limit,
        at=where,
        gate=gate,
        usage=call.path,
        origin=call.session.origin,
        # No layer above truss.toml: truss.toml decides alone, and the settings module is not
        # even imported -- the cold read path stays as it was.
        mode=None if layered else store_recall_mode(call.config),
        salience=None if layered else str(call.config.get("policy", "salience", "off")),
        settings=call.settings if layered else None,
    )


def _query_text(inp: Mapping[str, Any]) -> str:
    query, contains = inp.get("query"), inp.get("contains")
    if query is not None and contains is not None and query != contains:
        raise UsageError("`query` and `contains` are the same field; give one of them")
    text = query if query is not None else contains
    if not isinstance(text, str) or not text.strip():
        raise UsageError(
            'give `query` (words to look for), e.g. {"query": "flaky ci retries"}; '
            "to fetch entries by id use memory_view"
        )
    return text


def memory_query(call: Call, inp: Mapping[str, Any]) -> dict[str, Any]:
    text = _query_text(inp)
    floor = Trust.floor(inp.get("min_trust", "verified"))
    kind = Kind.parse(inp["kind"]) if inp.get("kind") else None
    flt = query_filter(floor, kind=kind, key=inp.get("key"))
    return document(_recall(call, text, flt, int(inp.get("limit", DEFAULT_LIMIT)), _at(inp)))


def memory_view(call: Call, inp: Mapping[str, Any]) -> dict[str, Any]:
    refs: list[str] = []
    if inp.get("id") is not None:
        refs.append(inp["id"])
    refs.extend(inp.get("ids") or [])
    if not refs:
        raise UsageError(
            "give `id` or `ids` (entry ids, or unique prefixes of 8+ hex); to search by words "
            "use memory_query"
        )
    floor = Trust.floor(inp.get("min_trust", "verified"))
    at = _at(inp)
    if at is None:
        snap, withheld = call.store.open_read(floor, call.snapshot())
        gate: Any = call.store.gate
    else:
        snap, withheld = call.store.open_read(floor, at=at)
        gate = Judged(withheld)
    flt = Filter(
        min_trust=floor, ceiling=Trust.UNVERIFIED if withheld else None, reader=call.reader()
    )
    entries: list[dict[str, Any]] = []
    shown: list[Entry] = []
    filtered: list[str] = []
    missing: list[str] = []
    seen: set[str] = set()

    # The run's own pending deletes: gone for this run, as in its memory view and queries.
    deleted: frozenset[str] = frozenset()
    run_view = call.run_view()
    if run_view is not None:
        deleted = run_deleted_snapshot(call.store, snap, run_view, gate=gate)

    for ref in refs:
        try:
            path = call.store.resolve(ref, snap)
        except NotFound:
            if ref not in missing:
                missing.append(ref)
            continue
        entry = entryfile.parse(snap.read(path) or b"", path)
        if not flt.reader_sees(entry):
            # Another agent's note under memory.scope: not even its existence is told.
            if ref not in missing:
                missing.append(ref)
            continue
        if entry.id in seen:
            continue
        seen.add(entry.id)
        if entry.id not in deleted and (
            flt.admits(entry) or (call.own_unverified(entry) and flt.reader_sees(entry))
        ):
            entries.append(entry_view(entry))
            shown.append(entry)
        else:
            filtered.append(entry.id)
    record(call.path, [e.id for e in shown], call.session.origin)
    out: dict[str, Any] = {
        "min_trust": floor.value,
        "entries": entries,
        "filtered": filtered,
        "missing": missing,
    }
    if withheld:
        out["withheld"] = withheld
    if any(e.trust is Trust.VERIFIED and e.superseded_by is None for e in shown):
        conflicts = conflicts_snapshot(call.store, snap, shown, gate=gate)
        if conflicts:
            out["conflicts"] = [c.to_dict() for c in conflicts]
    return out


def _at(inp: Mapping[str, Any]) -> str | None:
    at = inp.get("at")
    if at is None:
        return None
    if not isinstance(at, str) or not at.strip():
        raise UsageError('`at` is a date or a commit id, e.g. {"at": "2026-11-01"}')
    return at


def read_memory(call: Call, inp: Mapping[str, Any]) -> dict[str, Any]:
    by_id = inp.get("id") is not None or bool(inp.get("ids"))
    by_text = inp.get("query") is not None or inp.get("contains") is not None
    if by_id and by_text:
        raise UsageError("give either `query` (to search) or `id` (to fetch), not both")
    if by_id:
        return memory_view(call, {k: v for k, v in inp.items() if k in _VIEW_PROPS})
    return memory_query(call, {k: v for k, v in inp.items() if k in _QUERY_PROPS})


register(
    Tool(
        name="memory_query",
        description=(
            "Search durable memory (lessons, decisions, facts, playbooks, ...) by words. "
            "Returns the best-matching entries at or above a trust floor, verified only by "
            "default, each with its id, kind, key, body, trust, score and provenance "
            "(ledger_ref names the event that produced it). If verified entries disagree on "
            "one kind and key, `conflicts` names them all. Read-only. Use it when earlier "
            "experience may help with the task at hand; cite entries by id."
        ),
        input_schema={
            "type": "object",
            "properties": _QUERY_PROPS,
            "additionalProperties": False,
        },
        handler=memory_query,
        annotations=Annotations(title="Search memory", read_only=True, idempotent=True),
        gate="memory",
        memoized=True,
        output_schema=QUERY_OUT,
    )
)

register(
    Tool(
        name="memory_view",
        description=(
            "Fetch memory entries by id (or a unique prefix of 8+ hex characters). Returns "
            "the entries at or above the trust floor (verified by default); `filtered` lists "
            "ids that exist but are below the floor, rejected or deleted by this run, "
            "`missing` ids not found; "
            "`conflicts`, if present, names verified entries that disagree on one kind and key. "
            "Read-only."
        ),
        input_schema={"type": "object", "properties": _VIEW_PROPS, "additionalProperties": False},
        handler=memory_view,
        annotations=Annotations(title="View memory entries", read_only=True, idempotent=True),
        gate="memory",
        memoized=True,
        output_schema=VIEW_OUT,
    )
)

register(
    Tool(
        name="read_memory",
        description=(
            "Read durable memory: give `query` to search (as memory_query) or `id`/`ids` to "
            "fetch entries (as memory_view). Verified entries only unless min_trust widens "
            "it. Read-only."
        ),
        input_schema={
            "type": "object",
            "properties": {**_QUERY_PROPS, **_VIEW_PROPS},
            "additionalProperties": False,
        },
        handler=read_memory,
        annotations=Annotations(title="Read memory", read_only=True, idempotent=True),
        gate="memory",
        memoized=True,
        # Either shape: a search's or a fetch's (both hold min_trust and entries).
        output_schema={
            "type": "object",
            "properties": {**VIEW_OUT["properties"], **QUERY_OUT["properties"]},
            "required": ["min_trust", "entries"],
        },
    )
)
