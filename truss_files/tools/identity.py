"""``identity_propose``: the one tool through which an agent asks to amend its identity.

Served only when the store's signed truss.toml says ``[tools] identity = true`` (no flag
opens it), and only in a durable run: the call is recorded on the run's signed ledger, and
the proposal names that run and the call's LedgerRef, so every amendment traces back to a
deliberate, signed tool call. It proposes a whole new ``identity/self.md``; what happens
next is ``[identity] policy``'s (see ``context/identity.py``). core.md is out of its reach.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..format.proposal import MAX_IDENTITY
from .registry import Annotations, Tool, register

if TYPE_CHECKING:
    from .dispatch import Call


def identity_propose(call: Call, inp: Mapping[str, Any]) -> dict[str, Any]:
    # identity.amend proposes through the settings, the store and the panel: off the cold path.
    from ..identity.amend import propose

    if call.run_id is None or not call.session.durable:
        raise UsageError(
            "identity_propose is recorded on a durable run's ledger; call it in a durable run "
            "(truss-files tool identity_propose --run RUN_ID --durable)"
        )
    done = propose(
        call.store,
        inp["text"],
        settings=call.settings(),
        run=call.run_id,
        call=call.ledger_ref(),
    )
    call.refresh()
    result = done.to_dict()
    result["ledger_ref"] = done.proposal.call
    return result


register(
    Tool(
        name="identity_propose",
        description=(
            "Propose a new version of your identity/self.md (voice, persona, learned "
            "preferences): give the whole new `text`. It never changes at once: an operator "
            "approves it, or a panel checks it against your core identity, depending on the "
            "store's policy, and it takes effect from the next run. Your core identity "
            "(mandate, boundaries, safety) cannot be changed this way."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "text": {
                    "type": "string",
                    "maxLength": MAX_IDENTITY,
                    "description": "The whole proposed identity/self.md, in markdown.",
                },
            },
            "required": ["text"],
            "additionalProperties": False,
        },
        # MCP's outputSchema: the stored proposal (Proposed.to_dict) and the call that made it.
        output_schema={
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "status": {"type": "string"},
                "policy": {"type": "string"},
                "commit": {"type": ["string", "null"]},
                "run": {"type": ["string", "null"]},
                "call": {"type": ["string", "null"]},
                "ledger_ref": {"type": ["string", "null"]},
                "verification": {"type": "object"},
                "note": {"type": "string"},
            },
            "required": ["id", "status"],
        },
        handler=identity_propose,
        annotations=Annotations(title="Propose an identity amendment", read_only=False),
        gate="identity",
    )
)
