"""Writes from tools: write_memory, and the entry-writing helpers the memory binding shares.

Every write lands unverified, produced by the calling run (``run:<id>/<seq>``) when there is
one. Nothing here deletes: a deletion is a *tombstone*, an ordinary unverified entry of the
same kind and key whose body starts with ``TOMBSTONE_MARK``. Once a panel verifies it, the
conflict policy supersedes the older verified entries of that key, and the memory tool's view
hides the key. Until then the tombstone is visible only to the run that wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..model import Entry, Kind, Provenance, check_key, normalize_body
from .registry import Annotations, Tool, register

if TYPE_CHECKING:
    from .dispatch import Call

TOMBSTONE_MARK = "<!-- truss:tombstone -->"
TOMBSTONE_BODY = (
    TOMBSTONE_MARK + "\nDeleted through the memory tool. Once verified, this entry hides its key "
    "from the memory tool's view."
)


def is_tombstone(entry: Entry) -> bool:
    return entry.body.startswith(TOMBSTONE_MARK)


def new_entry(call: Call, kind: Kind, key: str, body: str, *, tombstone: bool = False) -> Entry:
    """An unverified entry of this call, checked as MemoryStore.write checks its input."""
    from ..store import MAX_BODY

    check_key(key)
    text = TOMBSTONE_BODY if tombstone else normalize_body(body)
    if not text:
        raise UsageError("the text is empty; a memory needs some text (delete removes one)")
    if not tombstone and text.startswith(TOMBSTONE_MARK):
        raise UsageError(f"a memory may not start with {TOMBSTONE_MARK}; that marks deletions")
    if len(text.encode()) > MAX_BODY:
        raise UsageError(f"the text is {len(text.encode())} bytes; the limit is {MAX_BODY}")
    store = call.store
    return Entry(
        kind=kind,
        key=key,
        body=text,
        author=f"agent:{store.principal()}",
        created=store._now(),
        provenance=Provenance(produced_by=call.ledger_ref()),
    )


def commit_entries(call: Call, entries: Sequence[Entry], summary: str) -> list[Entry]:
    """One signed commit adding ``entries`` (all unverified); present ones are left alone."""
    from .. import entryfile
    from ..gitstore import Plan, Snapshot
    from ..store import trailers

    def plan(snap: Snapshot) -> Plan:
        changes: dict[str, bytes | None] = {
            e.path: entryfile.serialize(e).encode() for e in entries if snap.read(e.path) is None
        }
        if not changes:
            return Plan({}, "")
        message = f"truss: {summary}\n\n" + trailers(
            op="write", entry=[e.id for e in entries], trust="none -> unverified"
        )
        return Plan(changes, message)

    call.store._apply(plan, {"agent", "operator"})
    call.produced.extend(e.id for e in entries)
    call.refresh()
    return list(entries)


def write_memory(call: Call, inp: Mapping[str, Any]) -> dict[str, Any]:
    kind = Kind.parse(inp["kind"])
    entry = new_entry(call, kind, inp["key"], inp["body"])
    commit_entries(call, [entry], f"write {kind.value} {inp['key']}")
    return {"id": entry.id, "trust": entry.trust.value}


register(
    Tool(
        name="write_memory",
        description=(
            "Store a memory entry: `kind` (lesson, decision, fact, ...), a stable `key` and "
            "the `body` text. It lands unverified: only a panel's verdict makes it verified, "
            "and until then only this run sees it. Returns the new entry's id. A newer "
            "entry with the same kind and key supersedes the older once verified."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": [k.value for k in Kind]},
                "key": {
                    "type": "string",
                    "maxLength": 256,
                    "description": "A stable name, e.g. ci-flaky-network-tests.",
                },
                "body": {"type": "string", "description": "The memory, in markdown."},
            },
            "required": ["kind", "key", "body"],
            "additionalProperties": False,
        },
        handler=write_memory,
        annotations=Annotations(title="Write memory", read_only=False, destructive=False),
        gate="memory_write",
    )
)
