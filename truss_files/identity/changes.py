"""Identity (L0) under ``[identity] policy``: show, propose, approve, decline, set and log.

Every change is one signed commit with ``Truss-Op`` trailers, made through the store's
verified compare-and-swap path, so ``truss-files revert`` undoes it and the audit (``audit.
check_identity``) judges it by the policy of its parent:

    locked       no proposals; an operator changes self.md with ``identity set``
    propose      a proposal waits for an operator's ``identity approve`` or ``decline``
    self_amend   the panel judges a proposal against core (``judge.py``): PASS writes self.md,
                 FAIL keeps the proposal, failed, for the audit

A proposal records the git blob id of the self.md it amends; it is applied only while that
self.md is still in force, so an old proposal can never be replayed over newer amendments.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pygit2

from ..config.settings import settings_for
from ..errors import EntryError, NotFound, TransitionError, UsageError
from ..format.proposal import (
    APPLIED,
    CORE_PATH,
    PENDING,
    PROPOSALS_DIR,
    SELF_PATH,
    Proposal,
    normalize_text,
    parse,
    proposal_path,
    serialize,
)
from ..format.trailers import parse_trailers, trailers
from ..git.gitstore import Plan, Snapshot
from ..model import Trust
from ..signing import PublicKey

if TYPE_CHECKING:
    from ..config.settings import Settings
    from ..store.store import Store

IDENTITY_FILES = {"core": CORE_PATH, "self": SELF_PATH}


def show(store: Store, snap: Snapshot | None = None) -> dict[str, Any]:
    """core.md and self.md in force at ``snap`` (the branch tip), through the read gate: an
    identity read from a history the audit rejects is refused."""
    snap = store.open_read(Trust.VERIFIED, snap).snap
    return {
        "commit": snap.oid,
        "core": _text(snap, CORE_PATH),
        "self": _text(snap, SELF_PATH),
    }


def _text(snap: Snapshot, path: str) -> str:
    return (snap.read(path) or b"").decode("utf-8", "replace")


def roles(store: Store) -> tuple[str, set[str]]:
    return store.policy().roles_of(PublicKey.from_line(store.signer.public_line))


def require_operator(store: Store, action: str) -> str:
    principal, held = roles(store)
    if "operator" not in held:
        raise UsageError(
            f"{principal} does not hold the operator role; only an operator may {action}. "
            "Sign with an operator's key (--key PATH)"
        )
    return principal


# -- proposals -------------------------------------------------------------------------------


def iter_proposals(snap: Snapshot) -> Iterator[Proposal]:
    """Every proposal file that parses (the audit reports the others)."""
    for path, blob in snap.walk(PROPOSALS_DIR):
        try:
            yield parse(blob.data, path)
        except EntryError:
            continue


def proposals(
    store: Store, *, status: str | None = PENDING, snap: Snapshot | None = None
) -> list[Proposal]:
    """Proposals with ``status`` (None: all), oldest first."""
    snap = snap or store.snapshot()
    found = [p for p in iter_proposals(snap) if status is None or p.status == status]
    return sorted(found, key=lambda p: (p.created, p.id))


def find(snap: Snapshot, ref: str) -> Proposal:
    """A proposal by id or a unique prefix of 8+ hex characters."""
    ref = ref.strip().lower()
    if len(ref) < 8 or any(c not in "0123456789abcdef" for c in ref):
        raise UsageError(f"'{ref}' is not a proposal id; give the id or 8+ of its characters")
    matches = [n[:-3] for n in snap.listdir(PROPOSALS_DIR) if n.startswith(ref)]
    if not matches:
        raise NotFound(f"no proposal {ref}; list them with `truss-files identity proposals`")
    if len(matches) > 1:
        raise UsageError(f"proposal id {ref} is ambiguous ({', '.join(matches)})")
    path = proposal_path(matches[0])
    return parse(snap.read(path) or b"", path)


def _decide(
    store: Store,
    ref: str,
    status: str,
    *,
    need: set[str],
    by: str,
    verdict: dict[str, Any] | None = None,
    check: Callable[[Proposal, Snapshot], None] | None = None,
    extra: dict[str, str] | None = None,
) -> tuple[Proposal, str]:
    """One signed commit that moves a pending proposal to ``status`` (and, for approved or
    passed, writes its text to self.md)."""
    snap = store.snapshot()
    proposal_id = find(snap, ref).id
    result: list[Proposal] = []

    def plan(now: Snapshot) -> Plan:
        proposal = find(now, proposal_id)
        if proposal.status != PENDING:
            raise TransitionError(
                f"proposal {proposal.id[:12]} is {proposal.status}; a decision is final "
                "(revert its commit to reopen it)"
            )
        changes: dict[str, bytes | None] = {}
        if status in APPLIED:
            current = now.blob_id(SELF_PATH) or ""
            if proposal.base != current:
                raise TransitionError(
                    f"proposal {proposal.id[:12]} amends another identity/self.md (blob "
                    f"{proposal.base[:12] or 'none'}; in force now {current[:12] or 'none'}): "
                    "applying it would undo the amendments since. Decline it and propose again"
                )
            changes[SELF_PATH] = proposal.text.encode()
        if check is not None:
            check(proposal, now)
        decided = proposal.decided(status, by, verdict)
        changes[proposal.path] = serialize(decided)
        result[:] = [decided]
        op = {
            "approved": "identity-approve",
            "declined": "identity-decline",
            "passed": "identity-amend",
            "failed": "identity-reject",
        }[status]
        fields = {"op": op, "proposal": proposal.id, **(extra or {})}
        if status in APPLIED:
            fields["path"] = SELF_PATH
        verb = {"approved": "approve", "declined": "decline", "passed": "pass", "failed": "fail"}
        message = f"truss: {verb[status]} identity proposal {proposal.id[:12]}\n\n"
        return Plan(changes, message + trailers(**fields))

    done = store._apply(plan, need)
    assert done is not None
    return result[0], str(done[0].id)


def approve(store: Store, ref: str, *, settings: Settings | None = None) -> dict[str, Any]:
    """An operator's approval: self.md becomes the proposal's text, in one signed commit."""
    principal = require_operator(store, "approve an identity proposal")
    settings = settings or settings_for(store)
    if settings.identity_policy == "locked":
        raise UsageError(
            '[identity] policy is "locked": proposals are not applied; an operator uses '
            "`truss-files identity set self FILE`"
        )
    proposal, commit = _decide(store, ref, "approved", need={"operator"}, by=principal)
    return {"id": proposal.id, "status": proposal.status, "commit": commit}


def decline(store: Store, ref: str) -> dict[str, Any]:
    principal = require_operator(store, "decline an identity proposal")
    proposal, commit = _decide(store, ref, "declined", need={"operator"}, by=principal)
    return {"id": proposal.id, "status": proposal.status, "commit": commit}


def set_identity(store: Store, which: str, text: str) -> dict[str, Any]:
    """An operator's change of core.md or self.md, under any policy."""
    if which not in IDENTITY_FILES:
        raise UsageError(f"'{which}' is not an identity file; use core or self")
    path = IDENTITY_FILES[which]
    require_operator(store, f"set {path}")
    data = normalize_text(text, f"the new {path}").encode()

    def plan(now: Snapshot) -> Plan:
        if now.read(path) == data:
            raise UsageError(f"{path} already holds this text; nothing to change")
        message = f"truss: set {path}\n\n" + trailers(op="identity-set", path=path)
        return Plan({path: data}, message)

    done = store._apply(plan, {"operator"})
    assert done is not None
    return {"path": path, "commit": str(done[0].id)}


# -- history ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Amendment:
    commit: str
    op: str
    signer: str
    path: str
    diff: str
    proposal: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "op": self.op,
            "signer": self.signer,
            "path": self.path,
            "diff": self.diff,
            "proposal": self.proposal,
        }


def log(store: Store) -> list[Amendment]:
    """Every commit on the branch that changed core.md or self.md, oldest first."""
    tip = store.git.tip()
    if tip is None:
        return []
    repo = store.git.repo
    found = []
    walker = repo.walk(tip.id, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    for commit in walker:
        snap = Snapshot(repo, commit)
        parent = Snapshot(repo, commit.parents[0] if commit.parents else None)
        for path in (CORE_PATH, SELF_PATH):
            if snap.blob_id(path) == parent.blob_id(path):
                continue
            fields = parse_trailers(commit.message)
            before = _text(parent, path).splitlines()
            after = _text(snap, path).splitlines()
            diff = "\n".join(
                difflib.unified_diff(before, after, f"a/{path}", f"b/{path}", lineterm="")
            )
            found.append(
                Amendment(
                    str(commit.id),
                    (fields.get("Truss-Op") or ["?"])[0],
                    store._signer_of(commit),
                    path,
                    diff,
                    next(iter(fields.get("Truss-Proposal", [])), None),
                )
            )
    return found
