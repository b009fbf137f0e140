"""Proposing an amendment to ``identity/self.md``: one signed commit that stores the
proposal, then -- under ``self_amend`` with eager verification -- the panel's judgement at once
(``judge.py``). Apart from ``identity.py`` so that the judge can use its helpers without a
circle between the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config.policy import IDENTITY_KIND
from ..config.settings import settings_for
from ..errors import TransitionError, TrussError, UsageError
from ..format.proposal import SELF_PATH, Proposal, normalize_text, serialize
from ..format.trailers import trailers
from ..git.gitstore import Plan, Snapshot
from ..model import check_ledger_ref
from ..panel.eager import panel_store_for
from .judge import judge_proposals

if TYPE_CHECKING:
    from ..config.settings import Settings
    from ..store.store import Store

__all__ = ["Proposed", "propose"]


@dataclass(frozen=True)
class Proposed:
    """What ``propose`` did: the stored proposal, the policy it ran under, and what the
    panel made of it when the policy judged it at once."""

    proposal: Proposal
    policy: str
    commit: str | None
    judged: Any = None  # judge.Judged, under self_amend with eager verification
    note: str = ""

    @property
    def status(self) -> str:
        return self.judged.status if self.judged is not None else self.proposal.status

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.proposal.id,
            "status": self.status,
            "policy": self.policy,
            "commit": self.commit,
            "run": self.proposal.run,
            "call": self.proposal.call,
        }
        if self.judged is not None:
            data["verification"] = self.judged.to_dict()
        if self.note:
            data["note"] = self.note
        return data


def propose(
    store: Store,
    text: str,
    *,
    settings: Settings | None = None,
    run: str | None = None,
    call: str | None = None,
) -> Proposed:
    """Store a signed proposal for a new ``self.md``. Under ``self_amend`` the panel judges
    it now when verification is eager for kind ``identity``, on ``verify --pending`` when
    lazy, and never when off."""
    settings = settings or settings_for(store)
    mode = settings.identity_policy
    if mode == "locked":
        raise UsageError(
            '[identity] policy is "locked" (from '
            f"{settings.source('identity.policy')}), so no proposal is taken; an operator "
            "changes identity/self.md with `truss-files identity set self FILE`"
        )
    if call is not None:
        check_ledger_ref(call)
    text = normalize_text(text, "the proposed self.md")
    snap = store.snapshot()
    if snap.read(SELF_PATH) == text.encode():
        raise UsageError("the proposed text is identity/self.md as it stands; nothing to amend")
    principal = store.principal(snap)
    proposal = Proposal(
        base=snap.blob_id(SELF_PATH) or "",
        author=principal,
        created=store._now(),
        text=text,
        run=run,
        call=call,
    )

    def plan(now: Snapshot) -> Plan:
        if (now.blob_id(SELF_PATH) or "") != proposal.base:
            raise TransitionError(
                "identity/self.md changed while this proposal was being made; propose again "
                "against the text now in force (truss-files identity show)"
            )
        fields: dict[str, str] = {"op": "identity-propose", "proposal": proposal.id}
        if call:
            fields["ledger_ref"] = call
        message = f"truss: propose identity/self.md ({proposal.id[:12]})\n\n" + trailers(**fields)
        return Plan({proposal.path: serialize(proposal)}, message)

    done = store._apply(plan, {"agent", "operator"})
    commit = str(done[0].id) if done else None
    if mode == "propose":
        return Proposed(
            proposal,
            mode,
            commit,
            note="pending until an operator runs `truss-files identity approve "
            f"{proposal.id[:12]}` (or decline)",
        )
    verification = settings.mode_for(IDENTITY_KIND)
    if verification == "off":
        return Proposed(
            proposal,
            mode,
            commit,
            note="verification is off for identity: nothing is applied; the proposal stays pending",
        )
    if verification == "lazy":
        return Proposed(
            proposal,
            mode,
            commit,
            note="the panel judges it against core on `truss-files verify --pending`",
        )
    # The proposal is committed: a panel that cannot run leaves it pending, never undone.
    try:
        verifier = panel_store_for(store)
        if verifier is None:
            return Proposed(
                proposal,
                mode,
                commit,
                note=f"{principal} does not hold the panel role; the proposal stays pending "
                "until `truss-files verify --pending` runs with a panel key",
            )
        judged = judge_proposals(verifier, [proposal.id], settings=settings)
    except TrussError as exc:
        return Proposed(
            proposal, mode, commit, note=f"the panel did not run: {exc.message}; it stays pending"
        )
    return Proposed(proposal, mode, commit, judged=judged[0] if judged else None)
