"""The panel's judgement of identity proposals against core (``[identity] policy =
"self_amend"``).

The reviewers are those configured for kind ``identity`` (``[panel.reviewers] identity``).
A judge reads one JSON object on stdin -- ``core``, ``self`` (in force now) and ``proposed``,
with the question -- and answers ``{"vote": "PASS"|"FAIL", "rationale": "..."}`` as for
entries; a check's exit status is its vote (``TRUSS_PROPOSAL_ID`` names the proposal); a
model judge of ``[panel.judges]`` gets the question as its instruction and the three texts as
data (panel/modeljudge.py). The
quorum is the panel's. The panel key signs a verdict for the proposal's id whose policy
names the blob id of the core it was judged against, so the audit can tell a verdict
against this core from one against an older core. PASS: self.md becomes the proposed text
and the proposal ``passed``, in one signed commit. FAIL: the proposal is kept ``failed``,
with its verdict, for the audit. Undecided (abstentions): it stays pending.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..config.policy import IDENTITY_KIND
from ..errors import ConfigError, TransitionError, TrussError, UsageError
from ..format.proposal import CORE_PATH, PENDING, SELF_PATH, Proposal, core_label
from ..format.quorum import FAIL, PASS, Quorum, with_requirements
from ..panel.build import build_reviewer
from ..panel.modeljudge import ModelJudge
from ..panel.reviewers import Ballot, CheckReviewer, JudgeReviewer
from ..panel.workspace import Workspace
from ..trust.verdict import check_verdict, sign_verdict
from .changes import _decide, find, proposals, roles

if TYPE_CHECKING:
    from ..config.settings import ReviewerSpec, Settings
    from ..git.gitstore import Snapshot
    from ..store.store import Store

QUESTION = (
    "An agent proposes to replace its identity/self.md (voice, persona, learned preferences) "
    "with 'proposed'. 'core' is its operator-signed mandate, boundaries and safety rules, "
    "which nothing may contradict. Vote PASS only if 'proposed' is consistent with every "
    "rule of 'core'; FAIL if it contradicts, weakens or works around any of them."
)


@dataclass(frozen=True)
class Judged:
    id: str
    status: str  # passed | failed | undecided | no-reviewers | stale-base | error
    message: str
    verdict: str | None = None
    commit: str | None = None
    votes: tuple[dict[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "message": self.message,
            "verdict": self.verdict,
            "commit": self.commit,
            "votes": [dict(v) for v in self.votes],
        }

    def line(self) -> str:
        return f"identity proposal {self.id[:12]}: {self.status} ({self.message})"


def judge_proposals(
    store: Store, ids: Iterable[str] | None = None, *, settings: Settings
) -> list[Judged]:
    """Run the panel over the named (or all pending) proposals; sign with ``store``'s key,
    which must hold the panel role. Nothing runs unless the policy is self_amend and
    verification for kind ``identity`` is not off."""
    if settings.identity_policy != "self_amend":
        raise UsageError(
            f'[identity] policy is "{settings.identity_policy}" (from '
            f"{settings.source('identity.policy')}); the panel judges proposals only under "
            '"self_amend"'
        )
    if settings.mode_for(IDENTITY_KIND) == "off":
        raise UsageError(
            "verification is off for kind identity, so no proposal is judged and nothing is "
            "applied; set [policy] verification (or [policy.tiered] identity) to lazy or eager"
        )
    principal, held = roles(store)
    if "panel" not in held:
        raise UsageError(
            f"{principal} does not hold the panel role, so its verdict would be refused; run "
            "with a panel key (--key PATH)"
        )
    snap = store.snapshot()
    chosen = [find(snap, ref) for ref in ids] if ids is not None else proposals(store, snap=snap)
    specs = settings.panel_for(IDENTITY_KIND)
    out = []
    with Workspace(
        store.git.repo,
        snap.oid,
        workdir=settings.workdir(store.git.workdir),
        environ=store.environ,
    ) as ws:
        for proposal in chosen:
            try:
                out.append(_judge_one(store, proposal, specs, settings, ws, snap))
            except TransitionError as exc:
                out.append(Judged(proposal.id, "skipped", f"decided elsewhere: {exc.message}"))
    return out


def _judge_one(
    store: Store,
    proposal: Proposal,
    specs: tuple[tuple[ReviewerSpec, ...], tuple[ReviewerSpec, ...]],
    settings: Settings,
    ws: Workspace,
    snap: Snapshot,
) -> Judged:
    if proposal.status != PENDING:
        return Judged(proposal.id, "skipped", f"already {proposal.status}")
    if proposal.base != (snap.blob_id(SELF_PATH) or ""):
        return Judged(
            proposal.id,
            "stale-base",
            "written against an older identity/self.md; it cannot apply (an operator "
            "declines it and the agent proposes again)",
        )
    own, added = specs
    if not own and not added:
        return Judged(
            proposal.id,
            "no-reviewers",
            'no reviewers for kind identity; add [panel.reviewers] identity = [{type = "judge", '
            'command = "..."}] to truss.toml. An empty panel never passes',
        )
    material = {
        "task": "identity",
        "proposal": proposal.id,
        "core": (snap.read(CORE_PATH) or b"").decode("utf-8", "replace"),
        "self": (snap.read(SELF_PATH) or b"").decode("utf-8", "replace"),
        "proposed": proposal.text,
    }

    # truss.toml's reviewers decide under the quorum; those a layer above it added must each
    # PASS besides (quorum.with_requirements), or, without truss.toml's, all of them.
    def ballot(spec: ReviewerSpec) -> Ballot:
        return _ballot(spec, settings, ws, material, proposal.id)

    if own:
        quorum_of = settings.quorum
        required = [replace(ballot(spec), required=True) for spec in added]
        counted = [ballot(spec) for spec in own]
    else:
        quorum_of, required, counted = Quorum("unanimous"), [], [ballot(s) for s in added]
    ballots = [*required, *counted]
    votes = tuple(
        {"reviewer": b.reviewer, "kind": b.kind, "vote": b.vote, "reason": b.reason}
        for b in ballots
    )
    try:
        outcome = with_requirements(
            quorum_of.decide([b.vote for b in counted]),
            [b.vote for b in required],
        )
        quorum = quorum_of.text(len(counted))
    except ConfigError as exc:
        return Judged(proposal.id, "error", exc.message, votes=votes)
    if outcome is None:
        return Judged(proposal.id, "undecided", "no quorum; stays pending", votes=votes)
    core_blob = snap.blob_id(CORE_PATH)
    verdict = sign_verdict(
        proposal.id,
        outcome,
        [b.to_vote() for b in ballots],
        signer=store.signer,
        principal=roles(store)[0],
        quorum=quorum,
        policy=core_label(core_blob),
        now=store._now(),
    )

    def check(_proposal: Proposal, now: Snapshot) -> None:
        if now.blob_id(CORE_PATH) != core_blob:
            raise TransitionError("identity/core.md changed while the panel judged; judge again")
        check_verdict(verdict, proposal.id, outcome, store.policy(now))

    status = "passed" if outcome == PASS else "failed"
    decided, commit = _decide(
        store,
        proposal.id,
        status,
        need={"panel", "operator"},
        by=verdict.signer,
        verdict=verdict.to_dict(),
        check=check,
        extra={"verdict": verdict.id},
    )
    what = "applied to identity/self.md" if outcome == PASS else "kept, failed, for the audit"
    assert outcome in (PASS, FAIL)
    return Judged(decided.id, status, what, verdict.id, commit, votes)


def _ballot(
    spec: ReviewerSpec,
    settings: Settings,
    ws: Workspace,
    material: dict[str, Any],
    proposal_id: str,
) -> Ballot:
    reviewer = build_reviewer(spec, settings.timeout)
    if isinstance(reviewer, ModelJudge):
        # The question is ours (the system text); the texts are data, never instructions.
        return reviewer.ask(QUESTION, material, ws.environ)
    request = {
        **material,
        "question": QUESTION,
        "answer_with": {"vote": "PASS | FAIL", "rationale": "why, in a sentence or two"},
    }
    stdin = json.dumps(request, ensure_ascii=False).encode()
    env = ws.env({"TRUSS_PROPOSAL_ID": proposal_id, "TRUSS_ENTRY_KIND": IDENTITY_KIND})
    if isinstance(reviewer, JudgeReviewer):
        return reviewer.ask(ws, stdin, env)
    assert isinstance(reviewer, CheckReviewer)
    return reviewer.run(ws, env)


def judge_pending(store: Store, settings: Settings) -> tuple[list[Judged], str | None]:
    """``verify --pending``'s identity half: judge every pending proposal when the policy
    is self_amend; otherwise nothing, and None. A panel that cannot run says why."""
    if settings.identity_policy != "self_amend":
        return [], None
    if not proposals(store):
        return [], None
    try:
        return judge_proposals(store, settings=settings), None
    except TrussError as exc:
        return [], f"identity proposals not judged: {exc.message}"
