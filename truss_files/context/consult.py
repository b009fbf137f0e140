"""Consult at start: a run's first context carries what enterprise memory says about its purpose.

With ``[enterprise] consult_at_start = true`` in truss.toml, the first ``context --run R``
asks ``memory.ask`` the run's purpose (``--purpose TEXT``, else the run context's
``purpose``) as run R, and adds the reply to ``messages`` after the goal ledger: the answer,
then each evidence note with its id, layer, kind and trust, so the model can cite what it
was told. It is the same ask a run would make through the tool (its layers, its budget, its
trust rules), so it records the evidence as given to R and ``memory.train`` in R refuses to
store it back (``runs.asked``). A run without a run context, or without a purpose, consults
nothing: ``consult`` is then null and no block is added. Later contexts of the run do not
ask again; what changed since comes in the delta.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from ..errors import UsageError
from ..tools.ask import ask

if TYPE_CHECKING:
    from ..git.gitstore import Snapshot
    from ..runs.runcontext import RunContext
    from ..store.store import Store

__all__ = ["CONSULT_HEAD", "consult", "consult_text", "enabled"]

CONSULT_HEAD: Final = "Enterprise memory, consulted at the start of this run (memory.ask)"
MAX_PURPOSE: Final = 2000


def enabled(store: Store, snap: Snapshot) -> bool:
    return store.config(snap).get("enterprise", "consult_at_start", False) is True


def consult(
    store: Store, run: str, context: RunContext | None, purpose: str | None
) -> dict[str, Any] | None:
    """The reply of memory.ask to the run's purpose, asked as ``run``; None without a run
    context or a purpose."""
    if purpose is None and context is not None:
        given = context.extra.get("purpose")
        purpose = given if isinstance(given, str) else None
    if context is None or purpose is None or not purpose.strip():
        return None
    if len(purpose) > MAX_PURPOSE:
        raise UsageError(
            f"the purpose is {len(purpose)} characters; the limit is {MAX_PURPOSE}. Say in a "
            "sentence or two what the run is for"
        )
    reply = ask(store, context, {"purpose": purpose}, run_id=run)
    return {"purpose": purpose, **reply}


def consult_text(reply: Mapping[str, Any] | None) -> str:
    """The block a model reads: purpose, status, answer, then the evidence to cite."""
    if reply is None:
        return ""
    lines = [
        f"{CONSULT_HEAD}; purpose: {reply['purpose']!r}; status: {reply.get('status')}.",
        str(reply.get("answer") or "").strip(),
    ]
    evidence = reply.get("evidence") or []
    if evidence:
        lines.append("Evidence (cite by id):")
        for item in evidence:
            body = str(item.get("body", "")).replace("\n", "\n  ")
            mark = " [partial]" if item.get("partial") else ""
            lines.append(
                f"- {item.get('id')} [{item.get('layer')} {item.get('kind')}, "
                f"{item.get('trust')}]{mark}: {body}"
            )
    omitted = reply.get("omitted") or []
    if omitted:
        lines.append(f"({len(omitted)} more notes matched; ask memory.ask for them.)")
    return "\n".join(line for line in lines if line)
