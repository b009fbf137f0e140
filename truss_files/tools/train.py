"""memory.train: store one note from an event, once.

Public entry point, served by the tool registry (``memory.train`` / ``memory_train``) and by
the HTTP face::

    train(store: Store, context: RunContext | None, inp: Mapping[str, Any], *,
          call_id: str | None = None, run_id: str | None = None,
          seq: int | None = None) -> dict[str, Any]

``inp`` is the tool input (``{body, layer?, source?: {eventId, revision}, kind?,
supersedes?: {entryId}}``, checked against ``INPUT_SCHEMA`` here too: a wrong shape raises
``UsageError``). ``call_id`` is the tool call's id (a tool_use id, an HTTP request's
idempotency key): the note's identity when it names no source. ``run_id``/``seq`` name the
run's call when there is one (``produced_by`` of a note without a source). A missing run
context raises ``NoRunContext``. Every rule's refusal is a reply, ``{"status": "failed",
"reason", "usage"}``, never an exception.

Rules:

* One note per (enterprise, task, eventId, revision), or per (enterprise, task, call id)
  without a source: its key is ``event:<eventId>`` (``call:<id>``), its ``produced_by`` and
  ``sources`` ``event:<eventId>#<revision>``. The check runs inside the store's
  compare-and-swap plan, on the tip the commit is made on, so of two processes racing with
  one event exactly one commits and the other answers ``retained`` -- also after a restart:
  the lookup reads git, nothing in memory.
* Nothing is stored on a history the audit rejects (a forged commit on the branch): the
  reply is ``failed``, its reason names the commit and the remedy (the read gate's record).
* A note in the team or enterprise layer, or in a member's name, is signed by a key holding
  the ``trainer`` role (``authority.write_problems``, checked before the branch moves); a
  key without it gets ``failed``, naming ``truss-files roles grant trainer PRINCIPAL``.
* It lands unverified, as one signed commit (``Truss-Op: write``, ``Truss-Event`` or
  ``Truss-Call`` trailers). Author (the run's member, else its signer) and scope (task, team,
  enterprise, project) come from the run.
* Layers: task always; member and role on an original task only (not a clone); team and
  enterprise only under a grant of this task version for that layer whose ``eventPrefix``
  starts the source's event id, never on a clone. Event ids starting ``team:`` or ``gate:``
  are reserved.
* A correction (kind ``correction``) names ``supersedes``: a note this run may read, in the
  layer being written; a team or enterprise note only under a grant whose prefix starts that
  note's event id. The correction carries ``supersedes``; when the panel verifies it, the
  note it names turns stale, superseded by it (``Store`` promote).
* ``consolidating``: the note's word set overlaps a live note of its layer and part (same
  task, team, ...) by Jaccard similarity >= ``CONSOLIDATE_AT`` (0.6): stored, and flagged for
  a later merge. Below it: ``accepted``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from ..errors import NotFound, SecretFound, TrussError, UntrustedHistory, UsageError
from ..format import entryfile
from ..format.secrets import entry_fields, refuse, scan_fields
from ..format.trailers import trailers
from ..format.views import entry_view
from ..git.gitdir import GitDir
from ..model import (
    MAX_BODY,
    Entry,
    Kind,
    Layer,
    Provenance,
    Trust,
    body_size,
    check_key,
    normalize_body,
)
from ..recall.bounds import MAX_QUERY_CHARS, MAX_QUERY_TERMS
from ..recall.engine import Searcher, search_snapshot
from ..recall.pipeline import Filter
from ..recall.tokenize import tokenize
from ..runs.asked import echoes
from ..trust.readgate import check_write
from .registry import Annotations, Tool, register
from .schema import check_input, check_json
from .tenancy import (
    EVENT_ID,
    RESERVED_PREFIXES,
    REVISION,
    event_ref,
    home,
    readable,
    require_context,
    scope_of,
    source_event,
)
from .write import TOMBSTONE_MARK

if TYPE_CHECKING:
    from ..git.gitstore import Plan, Snapshot
    from ..runs.runcontext import RunContext
    from ..store.store import Store
    from .dispatch import Call

__all__ = ["CONSOLIDATE_AT", "INPUT_SCHEMA", "KINDS", "train"]

KINDS: Final = ("fact", "inference", "preference", "correction")
CONSOLIDATE_AT: Final = 0.6
_CALL_ID_CHARS: Final = 128

INPUT_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "body": {
            "type": "string",
            "description": f"The note, in plain words or markdown (at most {MAX_BODY:,} bytes).",
        },
        "layer": {
            "type": "string",
            "enum": [x.value for x in Layer],
            "default": "task",
            "description": "Where the note lives: task (default); member, role (an original "
            "task only); team, enterprise (only under a grant of this task).",
        },
        "source": {
            "type": "object",
            "properties": {
                "eventId": {"type": "string", "maxLength": 200},
                "revision": {"type": "string", "maxLength": 64},
            },
            "required": ["eventId", "revision"],
            "additionalProperties": False,
            "description": "The event this note comes from; training it again is a no-op.",
        },
        "kind": {"type": "string", "enum": list(KINDS), "default": "fact"},
        "supersedes": {
            "type": "object",
            "properties": {"entryId": {"type": "string", "maxLength": 64}},
            "required": ["entryId"],
            "additionalProperties": False,
            "description": "With kind correction: the note this one corrects.",
        },
    },
    "required": ["body"],
    "additionalProperties": False,
}


class _Refused(Exception):
    """A rule refuses the note: the reply is ``failed`` with this reason."""


def train(
    store: Store,
    context: RunContext | None,
    inp: Mapping[str, Any],
    *,
    call_id: str | None = None,
    run_id: str | None = None,
    seq: int | None = None,
) -> dict[str, Any]:
    """The reply of memory.train; see the module docstring."""
    check_json(inp)
    check_input(INPUT_SCHEMA, inp)
    ctx = require_context(context, "memory.train")
    body = normalize_body(str(inp["body"]))
    usage: dict[str, Any] = {"chars": len(body), "commits": 0}
    try:
        _trusted(store)
        entry, key_match = _note(store, ctx, inp, body, call_id, run_id, seq)
        # Before the body is compared with anything or indexed: a credential refuses the
        # call (SecretFound, code "secret") instead of answering "failed" with a 200.
        refuse(list(scan_fields(entry_fields(entry), store.allow())))
        _not_an_echo(store, run_id, body, entry.id)
        similarity, near = _overlap(store, ctx, entry)
        usage["similarity"] = round(similarity, 3)
        # The write commit names the near note, for `truss-files consolidate` to merge.
        stored, made = _commit(
            store, entry, key_match, near if similarity >= CONSOLIDATE_AT else None
        )
    except _Refused as exc:
        return {"status": "failed", "reason": str(exc), "usage": usage}
    usage["commits"] = int(made)
    if not made:
        status = "retained"
    elif similarity >= CONSOLIDATE_AT:
        status = "consolidating"
    else:
        status = "accepted"
    return {"status": status, "entry": _view(stored), "usage": usage}


def _not_an_echo(store: Store, run_id: str | None, body: str, own_id: str) -> None:
    """Refuse a body that is (mostly) the text of evidence an ask gave back to this run
    (``runs.asked``: shingle containment of 0.8 or more); the note this very train makes
    (a retry after an ask returned it) is no echo of itself."""
    if run_id is None:
        return
    found = echoes(GitDir.discover(store.git.git_dir), run_id, body, skip=own_id)
    if found is not None:
        entry_id, share = found
        raise _Refused(
            f"this body is {share:.0%} the text of note {entry_id}, which memory.ask gave back "
            "to this run; train what the run observed, not what an ask returned. Cite the "
            "note by id instead, or train what you learned beyond it"
        )


def _trusted(store: Store) -> None:
    """Refuse on a history the audit rejects: nothing is stored (or said to be) on it."""
    tip = store.git.tip()
    try:
        check_write(store.git, str(tip.id) if tip is not None else None, store.environ)
    except UntrustedHistory as exc:
        raise _Refused(exc.message) from None


def _note(
    store: Store,
    ctx: RunContext,
    inp: Mapping[str, Any],
    body: str,
    call_id: str | None,
    run_id: str | None,
    seq: int | None,
) -> tuple[Entry, tuple[str, str | None]]:
    """The entry to store, and what identifies a repeat of it: (key, produced_by)."""
    kind = Kind(inp.get("kind", "fact"))
    layer = Layer(inp.get("layer", "task"))
    source = inp.get("source")
    _check_body(body)
    event_id = revision = None
    if source is not None:
        event_id, revision = str(source["eventId"]), str(source["revision"])
        _check_event(event_id, revision)
    _check_layer(ctx, layer, event_id)
    produced: str | None
    if event_id is not None and revision is not None:
        key, produced = f"event:{event_id}", event_ref(event_id, revision)
        sources: tuple[str, ...] = (produced,)
        repeat: tuple[str, str | None] = (key, produced)
    else:
        if not call_id or len(call_id) > _CALL_ID_CHARS or not call_id.isprintable():
            raise _Refused(
                "this note names no source and the call has no id, so a retry could store it "
                'twice: give "source": {"eventId": "<the event it comes from>", "revision": '
                '"1"}'
            )
        key = f"call:{call_id}"
        produced = f"run:{run_id}/{seq}" if run_id and seq else store.origin_ref()
        sources = ()
        repeat = (key, None)
    supersedes = _check_supersedes(store, ctx, inp, kind, layer)
    scope = scope_of(ctx, layer)
    author = f"member:{ctx.member}" if ctx.member else f"agent:{store.principal()}"
    try:
        entry = Entry(
            kind=kind,
            key=key,
            body=body,
            layer=layer,
            scope=scope,
            author=author,
            created=store._now(),
            provenance=Provenance(produced_by=produced, sources=sources),
            supersedes=supersedes,
        )
        check_key(entry.key)
    except TrussError as exc:
        raise _Refused(exc.message) from None
    return entry, repeat


def _check_body(body: str) -> None:
    if not body:
        raise _Refused("the body is empty; a note needs the text of what was learned")
    size = body_size(body)
    if size > MAX_BODY:
        raise _Refused(
            f"the body is {size:,} bytes; the limit is {MAX_BODY:,}: split it into several "
            "notes (each with its own event revision) or keep only what future tasks need"
        )
    if body.startswith(TOMBSTONE_MARK[:11]):
        raise _Refused("a note may not start with '<!-- truss:'; that marks machine entries")


def _check_event(event_id: str, revision: str) -> None:
    if event_id.lower().startswith(RESERVED_PREFIXES):
        raise _Refused(
            f"event id '{event_id[:60]}' is reserved: ids starting "
            f"{' or '.join(repr(p) for p in RESERVED_PREFIXES)} belong to the platform; give "
            "the id of the event this note comes from"
        )
    if not EVENT_ID.fullmatch(event_id):
        raise _Refused(
            "source.eventId must be 1-200 characters of letters, digits and ._:/@+=~- "
            "starting with a letter or digit"
        )
    if not REVISION.fullmatch(revision):
        raise _Refused(
            "source.revision must be 1-64 characters of letters, digits and ._:+=~- starting "
            'with a letter or digit, e.g. "1"'
        )


def _check_layer(ctx: RunContext, layer: Layer, event_id: str | None) -> None:
    if layer is Layer.TASK:
        return
    if layer in (Layer.MEMBER, Layer.ROLE):
        if ctx.clone:
            raise _Refused(
                f"a clone of a task cannot write the {layer.value} layer; write it with "
                'layer "task" (the original task may keep it for its member or role)'
            )
        if home(ctx, layer) is None:
            raise _Refused(
                f"this run names no {layer.value}, so there is no {layer.value} layer to write; "
                'use layer "task"'
            )
        return
    _granted(ctx, layer, event_id, "write")


def _granted(ctx: RunContext, layer: Layer, event_id: str | None, what: str) -> None:
    """Raise unless this task version may ``what`` the ``layer`` for ``event_id``."""
    if ctx.clone:
        raise _Refused(
            f"a clone of a task cannot use a grant: it may not {what} the {layer.value} layer; "
            'write to layer "task"'
        )
    grants = ctx.grants_for(layer)
    if not grants:
        raise _Refused(
            f"this task version holds no grant for the {layer.value} layer; write to layer "
            '"task" (a grant comes from the task\'s configuration, not from the input)'
        )
    if event_id is None:
        raise _Refused(
            f"the {layer.value} layer is written only from a granted source event: give "
            '"source": {"eventId", "revision"} with an event id the grant covers'
        )
    if not any(event_id.startswith(g.event_prefix) for g in grants):
        prefixes = ", ".join(repr(g.event_prefix) for g in grants)
        raise _Refused(
            f"the grant for the {layer.value} layer covers event ids starting {prefixes}; "
            f"'{event_id[:60]}' is not one of them: {what} it in layer \"task\" instead"
        )


def _check_supersedes(
    store: Store, ctx: RunContext, inp: Mapping[str, Any], kind: Kind, layer: Layer
) -> str | None:
    wanted = inp.get("supersedes")
    if kind is not Kind.CORRECTION:
        if wanted is not None:
            raise _Refused('only a correction supersedes a note: give "kind": "correction"')
        return None
    if wanted is None:
        raise _Refused(
            'a correction names the note it corrects: give "supersedes": {"entryId": "<id>"} '
            "(find the id with memory.ask)"
        )
    ref = str(wanted["entryId"])
    try:
        target = store.get(ref)
    except (NotFound, UsageError):
        target = None
    if target is None or not readable(ctx, target) or target.trust is Trust.REJECTED:
        raise _Refused(
            f"there is no note {ref[:64]!r} in this run's memory; give the id of a note "
            "memory.ask returned"
        )
    if target.superseded_by is not None:
        raise _Refused(
            f"note {target.id} is already superseded by {target.superseded_by}; correct that one"
        )
    if target.layer is not layer:
        raise _Refused(
            f"note {target.id} is in the {target.layer.value} layer; a correction retires a "
            f'note only in the layer it is written to: give "layer": "{target.layer.value}"'
        )
    if layer in (Layer.TEAM, Layer.ENTERPRISE):
        source = source_event(target)
        _granted(ctx, layer, source[0] if source else None, "retire a note of")
    return target.id


def _overlap(store: Store, ctx: RunContext, entry: Entry) -> tuple[float, str | None]:
    """The highest Jaccard similarity of the note's word set with a live note of its layer
    and part, among the few the recall index ranks closest (so the cost stays bounded)."""
    words = set(tokenize(entry.body))
    area = home(ctx, entry.layer)
    if not words or area is None:
        return 0.0, None
    query = " ".join(list(dict.fromkeys(tokenize(entry.body)))[:MAX_QUERY_TERMS])
    if len(query) > MAX_QUERY_CHARS:
        query = query[:MAX_QUERY_CHARS].rsplit(" ", 1)[0]
    flt = Filter(min_trust=Trust.UNVERIFIED, areas=(area,), skip_marked=True)
    try:
        found = search_snapshot(
            store, store.snapshot(), query, flt, 10, gate=store.gate, mode="exact"
        )
    except TrussError:
        return 0.0, None  # an unreadable index only loses the hint, never the write
    best, near = 0.0, None
    for hit in found.hits:
        other = hit.entry
        if other.id == entry.id or other.superseded_by is not None:
            continue
        theirs = set(tokenize(other.body))
        score = len(words & theirs) / len(words | theirs) if theirs else 0.0
        if score > best:
            best, near = score, other.id
    return best, near


def _commit(
    store: Store, entry: Entry, repeat: tuple[str, str | None], near: str | None = None
) -> tuple[Entry, bool]:
    """One signed commit adding ``entry``, unless a note for the same source is there;
    ``near``: the live note it is a near-duplicate of (``Truss-Consolidating``)."""
    # gitstore (pygit2) stays off the cold read path this module is on.
    from ..git.gitstore import Plan

    found: list[Entry] = []

    def plan(snap: Snapshot) -> Plan:
        found[:] = _stored(store, snap, entry, repeat)
        if found:
            return Plan({}, "")
        source = repeat[1]
        marks = {"event": source} if source else {"call": entry.key[len("call:") :]}
        if near is not None:
            marks["consolidating"] = near
        message = f"truss: train {entry.kind.value} {entry.key[:80]}\n\n" + trailers(
            op="write", entry=entry.id, trust="none -> unverified", **marks
        )
        return Plan({entry.path: entryfile.serialize(entry).encode()}, message)

    try:
        done = store._apply(plan, {"agent", "operator"})
    except SecretFound:
        raise
    except TrussError as exc:
        raise _Refused(f"the note could not be stored: {exc.message}") from exc
    if found:
        return found[0], False
    return entry, done is not None


def _stored(
    store: Store, snap: Snapshot, entry: Entry, repeat: tuple[str, str | None]
) -> list[Entry]:
    """The note already stored for this source (or call) in this task and enterprise.

    Looked up in the recall index's (kind, key) groups at ``snap``'s tree: a walk of every
    note file grows with the store; the index follows
    the tree by its diff. If the index cannot be read, the walk answers instead."""
    key, produced = repeat
    try:
        git = GitDir.discover(store.git.git_dir)
        searcher = Searcher(gate=store.gate, git=git, repo=store.git.repo)
        view = searcher.view(snap.tree_id("memories"), at_tip=False, commit=snap.oid)
        candidates = [e for e in searcher.key_entries(view, key) if e.kind.value in KINDS]
    except (TrussError, OSError):
        candidates = list(_walk(snap, key))
    for other in candidates:
        same = (
            other.key == key
            and other.scope.get("enterprise") == entry.scope.get("enterprise")
            and other.scope.get("task") == entry.scope.get("task")
            and (produced is None or other.provenance.produced_by == produced)
        )
        if same:
            return [other]
    return []


def _walk(snap: Snapshot, key: str) -> Iterator[Entry]:
    needle = entryfile.key_line(key)
    for kind in KINDS:
        for path, blob in snap.walk(f"memories/{kind}"):
            if needle in blob.data and path.endswith(".md"):
                yield entryfile.parse(blob.data, path)


def _view(entry: Entry) -> dict[str, Any]:
    data = entry_view(entry, full=True)
    source = source_event(entry)
    data["sourceEventId"] = source[0] if source else None
    return data


# MCP's outputSchema: a stored note (`entry`) or a refusal (`reason`), with usage either way.
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["accepted", "retained", "consolidating", "failed"]},
        "entry": {
            "type": "object",
            "properties": {"id": {"type": "string"}, "sourceEventId": {"type": ["string", "null"]}},
            "required": ["id"],
        },
        "reason": {"type": "string"},
        "usage": {"type": "object"},
    },
    "required": ["status", "usage"],
}


def memory_train(call: Call, inp: Mapping[str, Any]) -> dict[str, Any]:
    if call.run_id is not None and inp.get("source") is None:
        call.ledger_ref()  # numbers the call in a run without a ledger
    result = train(
        call.store,
        call.context,
        inp,
        call_id=call.call_id,
        run_id=call.run_id,
        seq=call.seq,
    )
    if result["status"] in ("accepted", "consolidating"):
        call.produced.append(result["entry"]["id"])
        call.refresh()
    return result


register(
    Tool(
        name="memory.train",
        description=(
            "Teach memory one note learned from an event: `body` (the note), `source` "
            "{eventId, revision} (the event; training it again changes nothing and answers "
            "`retained`), `kind` (fact, inference, preference, or correction with "
            "`supersedes` {entryId}) and `layer` (task by default; member, role, team and "
            "enterprise only where this task is allowed). The note lands unverified until a "
            "panel checks it. `status`: accepted, retained, consolidating (stored; close to "
            "notes that will be merged) or failed with a `reason` saying what to do instead."
        ),
        input_schema=INPUT_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
        handler=memory_train,
        annotations=Annotations(
            title="Train memory", read_only=False, destructive=False, idempotent=True
        ),
        gate="memory_write",
        needs_context=True,
    )
)
