"""Writes from tools: write_memory, and the entry-writing helpers the memory binding shares.

Every write lands unverified, produced by the calling run (``run:<id>/<seq>``) when there is
one. Nothing here deletes: a deletion is a *tombstone*, an ordinary unverified entry of the
same kind and key whose body starts with ``TOMBSTONE_MARK``. Once a panel verifies it, the
conflict policy supersedes the older verified entries of that key, and the memory tool's view
hides the key. Until then the tombstone is visible only to the run that wrote it.

**The verification policy applies here as on the CLI's ``write``**: both go through the one
front door, ``panel.eager.write_and_verify``, under the call's layered settings --
after the commit, the entries whose kind is eager go to the panel at once, each PASS or FAIL
a second, panel-signed commit. Where the outcome is reported is the face's choice, because
the ``memory`` binding's texts must stay the SDK's word for word:

- ``write_memory`` (JSON) returns the entry's trust *after* the panel, plus the optional
  ``verification`` (the panel's outcome for it) and ``note`` (why the panel could not run —
  say, the writing key lacks the panel role and no ``TRUSS_PANEL_KEY`` is set; the entry then
  stays unverified for ``truss-files verify``): ``Written.result``, as ``truss-files write``
  prints it.
- the ``memory`` binding returns its usual text; the outcome and the note go to
  ``Outcome.note``, which faces show to people (``truss-files tool`` on stderr), never to
  the model. The model learns the result the way it would learn a later ``verify``: its next
  ``view`` shows the entry verified (no ``[unverified]`` mark) or, if rejected, not at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..format.scope import stamp
from ..model import (
    MAX_BODY,
    TOMBSTONE_MARK,
    Entry,
    Kind,
    Provenance,
    body_size,
    check_key,
    normalize_body,
)
from .registry import Annotations, Tool, register

if TYPE_CHECKING:
    from ..panel.eager import Written
    from .dispatch import Call

TOMBSTONE_BODY = (
    TOMBSTONE_MARK + "\nDeleted through the memory tool. Once verified, this entry hides its key "
    "from the memory tool's view."
)


def is_tombstone(entry: Entry) -> bool:
    return entry.body.startswith(TOMBSTONE_MARK)


def new_entry(
    call: Call,
    kind: Kind,
    key: str,
    body: str,
    *,
    tombstone: bool = False,
    memory_path: str | None = None,
) -> Entry:
    """An unverified entry of this call, checked as Store.write checks its input.

    ``memory_path``: the memory tool's file at that path. Its text is kept byte for byte
    (an empty file too), where any other write is stored in canonical form."""
    check_key(key)
    if tombstone:
        text = TOMBSTONE_BODY
    elif memory_path is not None:
        text = body
    else:
        text = normalize_body(body)
        if not text:
            raise UsageError("the text is empty; a memory needs some text (delete removes one)")
    if not tombstone and text.startswith(TOMBSTONE_MARK):
        raise UsageError(f"a memory may not start with {TOMBSTONE_MARK}; that marks deletions")
    if body_size(text) > MAX_BODY:
        raise UsageError(f"the text is {body_size(text)} bytes; the limit is {MAX_BODY}")
    store = call.store
    return Entry(
        kind=kind,
        key=key,
        body=text,
        # Who wrote it, for memory.scope: from the run, never from the tool's input.
        scope=stamp(None, agent=call.agent(), project=call.project()),
        author=f"agent:{store.principal()}",
        created=store._now(),
        provenance=Provenance(produced_by=call.origin_ref()),
        memory_path=memory_path,
    )


def commit_entries(call: Call, entries: Sequence[Entry], summary: str) -> Written:
    """One signed commit adding ``entries`` (all unverified; present ones are left alone),
    then the verification policy on the new ones, through the front door every face uses
    (``panel.eager.write_and_verify``), under this call's layered settings."""
    # The panel and the store's write path load only on a write, never on the cold read
    # path this module is on.
    from ..panel.eager import write_and_verify

    done = write_and_verify(
        call.store, entries, settings=call.settings(), subject=f"truss: {summary}"
    )
    call.produced.extend(e.id for e in entries)
    call.refresh()
    call.notes.extend(f"eager verification: {o.line()}" for o in done.outcomes)
    if done.note:
        call.notes.append(done.note)
    return done


def write_memory(call: Call, inp: Mapping[str, Any]) -> dict[str, Any]:
    """``{"id", "trust"}``, plus ``verification`` and ``note`` when the policy is eager for
    this kind (a shape agents depend on: extended by optional fields only). ``trust`` is the entry's
    trust once the write is done: unverified, unless an eager panel already decided."""
    kind = Kind.parse(inp["kind"])
    entry = new_entry(call, kind, inp["key"], inp["body"])
    done = commit_entries(call, [entry], f"write {kind.value} {inp['key']}")
    return done.result(entry.id)


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
        output_schema={
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "trust": {"type": "string", "enum": ["unverified", "verified", "rejected"]},
                "verification": {"type": "object"},
                "note": {"type": "string"},
            },
            "required": ["id", "trust"],
        },
    )
)
