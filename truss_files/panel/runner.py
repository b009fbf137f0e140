"""Running the panel over entries: ``verify`` (unverified → verified / rejected) and
``recheck`` (verified → stale on a failed re-check; a named stale entry → verified on a pass).

Each decision is its own signed commit made through the store (a compare-and-swap on the
branch), so a run killed halfway leaves every decided entry decided and every other entry
exactly as it was. Reviewers run in a private checkout of the commit the run started from.

Conflict policy ``panel-arbitrated``: when an entry passes review while a live verified entry
holds its kind and key, the promotion is held and arbiters (``[panel] arbiters``, else the
judges among the entry's reviewers) are asked, unanimously, whether the new entry should
replace the rival. PASS: it is promoted and the rival turns stale (as verified-wins). FAIL:
the rival stands and the new entry is rejected, on a FAIL verdict holding the arbiters'
votes. Undecided, or nobody to ask: the entry stays unverified and the report says why.
Without a rival it is promoted under keep-both-flagged, so a rival verified concurrently is
flagged to readers, never silently superseded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..config.settings import settings_for
from ..errors import ConfigError, ConflictError, TransitionError, UntrustedHistory, UsageError
from ..format.trailers import parse_trailers
from ..model import Entry, Trust
from ..signing import PublicKey
from ..trust.authority import ARBITRATED, conflict_policy, resolve_check
from ..trust.verdict import Verdict
from .build import build_reviewer, is_judge
from .panel import FAIL, PASS, Decision, Panel, Quorum
from .report import EntryOutcome, Report
from .reviewers import CheckReviewer, RefusedCheck, Reviewer, Subject
from .workspace import Workspace

if TYPE_CHECKING:
    from ..config.settings import Settings
    from ..git.gitstore import Snapshot
    from ..store.store import Store

__all__ = ["EntryOutcome", "Report", "failed_recheck", "recheck", "reviewers_for", "verify"]
OnStart = Callable[[int], None]
# (the reviewers truss.toml configures, decided under the quorum; the requirements)
Reviewers = tuple[Sequence[Reviewer], Sequence[Reviewer]]
OnDone = Callable[[EntryOutcome], None]


def reviewers_for(
    entry: Entry,
    settings: Settings,
    *,
    checks_only: bool = False,
    defined: Mapping[str, str] | None = None,
) -> tuple[list[Reviewer], list[Reviewer]]:
    """The entry's panel: the reviewers the signed truss.toml configures for its kind
    (decided under the quorum), and the requirements that must each PASS besides: the
    checks the entry names in ``checks:``, once each (unless ``panel.entry_checks =
    false``), and the reviewers a layer above truss.toml added (``Settings.panel_for``).

    A name runs the command ``defined`` (truss.toml's ``[panel.checks]`` at the commit the
    run reads) gives it; any other name or text runs nothing and abstains with the reason
    (``authority.resolve_check``). Without ``defined`` no check is defined."""
    required: list[Reviewer] = []
    named: set[str] = set()
    if settings.entry_checks:
        for name in dict.fromkeys(entry.checks):
            check = resolve_check(name, defined or {})
            if check.command is None:
                required.append(RefusedCheck(name, check.refusal or "not run"))
            else:
                required.append(CheckReviewer(check.command, settings.timeout, check.name))
                named.add(check.command)
    own, added = settings.panel_for(entry.kind)
    for spec in added:
        if not (checks_only and spec.type != "check") and spec.command not in named:
            required.append(build_reviewer(spec, settings.timeout))
    panel = [
        build_reviewer(spec, settings.timeout)
        for spec in own
        if not (checks_only and spec.type != "check")
    ]
    return panel, required


def _require_panel(store: Store) -> None:
    key = PublicKey.from_line(store.signer.public_line)
    principal, roles = store.policy().roles_of(key)
    if "panel" not in roles:
        raise UsageError(
            f"{principal} does not hold the panel role, so verdicts signed with this key "
            "would be refused; run with a panel key (--key PATH) or ask an operator to add "
            f"{principal} to [roles] panel in truss.toml"
        )


def _require_on(settings: Settings, action: str) -> None:
    if settings.verification == "off":
        raise UsageError(
            f'the verification policy is off (policy.verification = "off", from '
            f"{settings.source('policy.verification')}), so {action} does not run the panel "
            "and entries stay unverified. Set it to lazy, eager or tiered to verify"
        )


class _Run:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        on_done: OnDone | None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.policy = settings.policy
        self.on_done = on_done
        snap = store.snapshot()
        self.snap = snap
        # The checks an entry may name: the signed truss.toml of the commit this run reads,
        # never a layer the person running it (or a contract) supplies; none at all on a
        # history the audit refuses.

        self.checks = operator_checks(store, snap)
        self.workspace = Workspace(
            store.git.repo,
            snap.oid,
            workdir=settings.workdir(store.git.workdir),
            environ=store.environ,
        )

    def outcome(
        self,
        entry: Entry,
        status: str,
        message: str,
        *,
        trust: Trust | None = None,
        verdict: Verdict | None = None,
        decision: Decision | None = None,
    ) -> EntryOutcome:
        votes: tuple[dict[str, str], ...] = ()
        details: tuple[str, ...] = ()
        if decision is not None:
            votes = tuple(
                {"reviewer": b.reviewer, "kind": b.kind, "vote": b.vote, "reason": b.reason}
                for b in decision.ballots
            )
            details = tuple(
                f"{b.reviewer}: {b.vote} ({b.reason})"
                + (f"\n        {b.detail.strip()[-300:]}" if b.detail.strip() else "")
                for b in decision.ballots
                if b.vote != PASS
            )
        return EntryOutcome(
            entry.id,
            entry.kind.value,
            entry.key,
            status,
            (trust or entry.trust).value,
            message,
            verdict.id if verdict else None,
            decision.quorum if decision else None,
            votes,
            details,
        )

    def run(
        self, entries: Sequence[Entry], one: Callable[[Entry], EntryOutcome], action: str
    ) -> Report:
        outcomes = []
        with self.workspace:
            for entry in entries:
                try:
                    result = one(entry)
                except TransitionError as exc:
                    # Another verifier decided it between our read and our commit.
                    result = self.outcome(entry, "skipped", f"decided elsewhere: {exc.message}")
                outcomes.append(result)
                if self.on_done is not None:
                    self.on_done(result)
        return Report(action, tuple(outcomes))

    def decide(self, entry: Entry, reviewers: Reviewers) -> Decision | EntryOutcome:
        try:
            panel = Panel(tuple(reviewers[0]), self.settings.quorum, tuple(reviewers[1]))
        except ConfigError as exc:
            return self.outcome(entry, "error", exc.message)
        return panel.run(Subject(entry, self.workspace))

    def sign(
        self,
        entry: Entry,
        outcome: str,
        decision: Decision,
        label: str,
        arbitration: Mapping[str, Any] | None = None,
    ) -> Verdict:
        return self.store.sign_verdict(
            entry.id,
            outcome,
            votes=decision.votes,
            quorum=decision.quorum,
            policy=label,
            arbitration=arbitration,
        )

    # -- verify ---------------------------------------------------------------------------

    def verify_one(self, entry: Entry) -> EntryOutcome:
        kind = entry.kind.value
        if entry.trust is not Trust.UNVERIFIED:
            return self.outcome(
                entry,
                "skipped",
                f"already {entry.trust.value}; verify decides unverified entries (recheck "
                "re-runs the checks of verified ones)",
            )
        if not self.policy.runs_on_verify(entry.kind):
            return self.outcome(
                entry,
                "skipped",
                f"verification is off for kind {kind} (policy.tiered.{kind}, from "
                f"{self.settings.source(f'policy.tiered.{kind}')})",
            )
        reviewers = reviewers_for(entry, self.settings, defined=self.checks)
        if not any(reviewers):
            return self.outcome(
                entry,
                "no-reviewers",
                f"no reviewers configured for kind {kind}; add [panel.reviewers] {kind} = "
                '[{type = "check", command = "..."}] (or a judge) to truss.toml, or name a '
                "check of truss.toml's [panel.checks] in the entry's checks:. An empty panel "
                "never passes",
            )
        decided = self.decide(entry, reviewers)
        if isinstance(decided, EntryOutcome):
            return decided
        label = self.policy.label(entry.kind)
        if decided.outcome is None:
            return self.outcome(
                entry, "undecided", f"{decided.summary()}; stays unverified", decision=decided
            )
        if decided.outcome == FAIL:
            verdict = self.sign(entry, FAIL, decided, label)
            new = self.store.reject(entry.id, verdict)
            return self.outcome(
                entry,
                "rejected",
                decided.summary(),
                trust=new.trust,
                verdict=verdict,
                decision=decided,
            )
        return self.promote(entry, decided, label, reviewers, "promoted")

    def promote(
        self,
        entry: Entry,
        decided: Decision,
        label: str,
        reviewers: Reviewers,
        status: str,
    ) -> EntryOutcome:
        conflict = self.settings.conflict
        note = ""
        arbitration: dict[str, Any] | None = None
        if ARBITRATED in (conflict, conflict_policy(self.store.config().raw)):
            # The store enforces it too (a PASS supersedes a verified rival only with the
            # arbiters' decision in the verdict); here the arbiters are asked.
            conflict = ARBITRATED
            rivals = [
                e
                for e in self.store.same_key(entry, self.store.snapshot())
                if e.trust is Trust.VERIFIED and e.superseded_by is None
            ]
            if rivals:
                rival = max(rivals, key=lambda e: (e.created, e.id))
                settled = self.arbitrate(entry, rival, decided, reviewers)
                if isinstance(settled, EntryOutcome):
                    return settled
                arbitration = settled
                note = f"; arbiters chose it over {rival.id[:12]}"
        verdict = self.sign(entry, PASS, decided, label, arbitration)
        try:
            new = self.store.promote(entry.id, verdict, conflict=conflict)
        except ConflictError as exc:  # a rival turned verified while the panel ran
            return self.outcome(
                entry, "undecided", f"{exc.message}; stays unverified", decision=decided
            )
        message = decided.summary() + note
        if new.trust is Trust.STALE and new.superseded_by:
            message += f"; a newer verified entry {new.superseded_by[:12]} holds the key (stale)"
        elif new.supersedes:
            message += f"; supersedes {new.supersedes[:12]}"
        return self.outcome(
            entry, status, message, trust=new.trust, verdict=verdict, decision=decided
        )

    def arbitrate(
        self, entry: Entry, rival: Entry, review: Decision, reviewers: Reviewers
    ) -> EntryOutcome | dict[str, Any]:
        """The arbiters' decision (for the PASS verdict) when they choose the new entry;
        otherwise the outcome that holds."""
        arbiters: list[Reviewer] = [
            build_reviewer(s, self.settings.timeout) for s in self.settings.arbiters
        ]
        if not arbiters:
            arbiters = [r for r in reviewers[0] if is_judge(r)]  # truss.toml's, not added ones
        held = f"passed review ({review.summary()}) but verified {rival.id[:12]} holds its key"
        if not arbiters:
            return self.outcome(
                entry,
                "undecided",
                f"{held}; conflict policy panel-arbitrated needs [panel] arbiters (judge "
                "commands) or a judge reviewer for this kind; stays unverified",
                decision=review,
            )
        panel = Panel(tuple(arbiters), Quorum("unanimous"))
        decided = panel.run(Subject(entry, self.workspace, "arbitrate", rival))
        if decided.outcome == PASS:
            return {"rival": rival.id, "quorum": decided.quorum, "votes": list(decided.votes)}
        if decided.outcome is None:
            return self.outcome(
                entry,
                "undecided",
                f"{held}; arbitration {decided.summary()}; stays unverified",
                decision=decided,
            )
        verdict = self.sign(entry, FAIL, decided, "panel-arbitrated")
        new = self.store.reject(entry.id, verdict)
        return self.outcome(
            entry,
            "rejected",
            f"{held}; arbiters kept {rival.id[:12]} ({decided.summary()})",
            trust=new.trust,
            verdict=verdict,
            decision=decided,
        )

    # -- recheck --------------------------------------------------------------------------

    def recheck_one(self, entry: Entry, named: bool) -> EntryOutcome:
        if entry.trust is Trust.STALE:
            if not named:
                return self.outcome(entry, "skipped", "stale; name it to re-check it")
            if entry.superseded_by:
                return self.outcome(
                    entry,
                    "skipped",
                    f"superseded by {entry.superseded_by[:12]}; re-check that entry instead",
                )
        elif entry.trust is not Trust.VERIFIED:
            return self.outcome(
                entry,
                "skipped",
                f"{entry.trust.value}; recheck re-runs verified (or named stale) entries",
            )
        if not self.policy.runs_on_verify(entry.kind):
            return self.outcome(entry, "skipped", f"verification is off for kind {entry.kind}")
        reviewers = reviewers_for(entry, self.settings, checks_only=True, defined=self.checks)
        if not any(reviewers):
            return self.outcome(
                entry,
                "no-checks",
                "no checks to re-run: the entry has no checks: and no check reviewer is "
                f"configured for kind {entry.kind.value}",
            )
        decided = self.decide(entry, reviewers)
        if isinstance(decided, EntryOutcome):
            return decided
        if decided.outcome is None:
            return self.outcome(entry, "undecided", decided.summary(), decision=decided)
        if entry.trust is Trust.STALE:
            if decided.outcome == PASS:
                return self.promote(entry, decided, "recheck", reviewers, "reverified")
            return self.outcome(entry, "still-stale", decided.summary(), decision=decided)
        if decided.outcome == PASS:
            return self.outcome(entry, "holds", decided.summary(), decision=decided)
        verdict = self.sign(entry, FAIL, decided, "recheck")
        reason = "re-check failed: " + "; ".join(decided.reasons())
        new = self.store.demote(entry.id, reason[:300], verdict=verdict)
        return self.outcome(
            entry,
            "demoted",
            decided.summary(),
            trust=new.trust,
            verdict=verdict,
            decision=decided,
        )


def _select(
    store: Store, ids: Iterable[str] | None, everything: bool, trust: Trust, flag: str
) -> list[Entry]:
    snap = store.snapshot()
    ids = list(ids or ())
    if ids and everything:
        raise UsageError(f"give IDs or {flag}, not both")
    if ids:
        seen: dict[str, Entry] = {}
        for ref in ids:
            entry = store.get(ref, snap)
            seen.setdefault(entry.id, entry)
        return list(seen.values())
    if not everything:
        raise UsageError(f"say which entries: give IDs or {flag}")
    return store.list_entries(trust=trust, snap=snap)


def verify(
    store: Store,
    ids: Iterable[str] | None = None,
    *,
    pending: bool = False,
    settings: Settings | None = None,
    on_start: OnStart | None = None,
    on_done: OnDone | None = None,
) -> Report:
    """Run the panel over the named (or all pending) unverified entries."""
    settings = settings or settings_for(store)
    _require_on(settings, "verify")
    entries = _select(store, ids, pending, Trust.UNVERIFIED, "--pending")
    _require_panel(store)
    if on_start is not None:
        on_start(len(entries))
    run = _Run(store, settings, on_done)
    return run.run(entries, run.verify_one, "verify")


def recheck(
    store: Store,
    ids: Iterable[str] | None = None,
    *,
    all_verified: bool = False,
    settings: Settings | None = None,
    on_start: OnStart | None = None,
    on_done: OnDone | None = None,
) -> Report:
    """Re-run the checks of verified entries (``--all``) or of the named verified or stale
    ones: a FAIL demotes to stale with the FAIL verdict in the commit; a named stale entry
    that passes is verified again."""
    settings = settings or settings_for(store)
    _require_on(settings, "recheck")
    named = bool(ids)
    entries = _select(store, ids, all_verified, Trust.VERIFIED, "--all")
    _require_panel(store)
    if on_start is not None:
        on_start(len(entries))
    run = _Run(store, settings, on_done)
    return run.run(entries, lambda e: run.recheck_one(e, named), "recheck")


def failed_recheck(store: Store, ref: str) -> Verdict | None:
    """The FAIL verdict of the latest re-check that demoted this entry, from its commit."""
    for item in reversed(store.log(ref)):
        if item.op != "demote":
            continue
        fields = parse_trailers(store.git.commit(item.commit).message)
        found = fields.get("Truss-Verdict-Json")
        return Verdict.from_json(found[0], f"commit {item.commit[:12]}") if found else None
    return None


def operator_checks(store: Store, snap: Snapshot) -> dict[str, str]:
    """The checks a panel run reading ``snap`` may run: truss.toml's ``[panel.checks]``
    there, once the history up to ``snap`` audits clean, so that truss.toml is the one an
    operator signed (an agent's hand-made commit could edit it). Otherwise
    ``UntrustedHistory``: the run starts no reviewer at all, since its configured reviewers
    come from the same file."""
    try:
        store.open_read(Trust.VERIFIED, snap)
    except UntrustedHistory as exc:
        raise UntrustedHistory(
            f"{exc.message} The panel runs no reviewer on it: the commands truss.toml "
            "names are the operator's only when the history up to it audits clean"
        ) from None
    return store.defined_checks(snap)
