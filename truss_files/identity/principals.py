"""Principals (L1): ``principals/<principal>.md``, what the agent knows of one user.

A principal's file is written by that principal's own key (whatever roles it holds) or by an
operator's, in one signed commit; the audit (``audit.check_identity``) holds every commit to
that rule. Names are those of ``.truss/allowed_signers``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import NotFound, UsageError
from ..format.proposal import check_principal, normalize_text, principal_path
from ..format.trailers import trailers
from ..git.gitstore import Plan, Snapshot
from ..model import Trust
from .changes import roles

if TYPE_CHECKING:
    from ..store.store import Store


def set_principal(store: Store, name: str, text: str) -> dict[str, Any]:
    path = principal_path(name)
    data = normalize_text(text, f"the new {path}").encode()
    who, held = roles(store)
    if who != name and "operator" not in held:
        raise UsageError(
            f"{who} may write only principals/{check_principal(who)}.md; {path} is written by "
            f"{name}'s own key or an operator's"
        )

    def plan(now: Snapshot) -> Plan:
        if now.read(path) == data:
            raise UsageError(f"{path} already holds this text; nothing to change")
        message = f"truss: set {path}\n\n" + trailers(op="principal-set", principal=name)
        return Plan({path: data}, message)

    done = store._apply(plan, set())
    assert done is not None
    return {"principal": name, "path": path, "commit": str(done[0].id)}


def show_principal(store: Store, name: str, snap: Snapshot | None = None) -> dict[str, Any]:
    path = principal_path(name)
    snap = store.open_read(Trust.VERIFIED, snap).snap
    data = snap.read(path)
    if data is None:
        raise NotFound(
            f"no {path}; write it with `truss-files principal set {name} FILE` (that "
            "principal's key or an operator's)"
        )
    return {"principal": name, "path": path, "text": data.decode("utf-8", "replace")}
