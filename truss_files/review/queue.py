"""The review queue: the entries waiting for a verdict, what each would change, the votes
recorded on it so far, and one person's decision on one entry.

A person reviewing memory needs, per pending entry, what a panel run has: the body, where it
came from, what it would push aside if it passed (the conflict policy decides that, so the
queue asks it the way the store will) and whether anyone has judged it before. A decision
is a verdict signed with the reviewer's panel key and the promote or reject it carries --
one signed commit, the same transition ``verdict sign | promote`` makes, so the audit
cannot tell a queue decision from a hand-made one.

The queue comes newest session first: a person reviewing between an agent's sessions wants
what the last one wrote. A session is the run an entry was produced by (``produced_by``
``run:<run-id>/<n>``; each host session is a child run of its project's agent run, so each
has its own); entries written outside a run form one group of their own. Groups are ordered
by their newest entry, newest first, and keep the oldest-first order inside; ``--limit``
takes from the front of that order.

"Votes so far" are those the store recorded: a verdict that decided the entry once and was
reverted since, or a failed re-check's verdict in a demote commit. An undecided panel run
(abstentions) commits nothing, so it leaves no votes to show.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import TransitionError, UsageError
from ..format.entryfile import parse
from ..format.quorum import FAIL, PASS
from ..format.trailers import parse_trailers
from ..model import Entry, Kind, Trust, merged_notes
from ..signing import PublicKey
from ..trust.authority import may_retire, run_of

if TYPE_CHECKING:
    import pygit2

    from ..store.store import Skipped, Store
    from ..trust.verdict import Verdict

__all__ = [
    "QueueDecision",
    "Pending",
    "Queue",
    "Rival",
    "Rivals",
    "Vote",
    "by_session",
    "decide",
    "pending",
    "reviewer",
]


@dataclass(frozen=True)
class Vote:
    """One reviewer's vote inside a verdict the store recorded for the entry."""

    reviewer: str
    kind: str
    vote: str
    note: str
    verdict: str  # the verdict's id
    outcome: str  # the verdict's outcome (what the panel decided)
    signer: str  # who signed the verdict
    commit: str  # the commit that recorded it

    def to_dict(self) -> dict[str, str]:
        return {
            "reviewer": self.reviewer,
            "kind": self.kind,
            "vote": self.vote,
            "note": self.note,
            "verdict": self.verdict,
            "outcome": self.outcome,
            "signer": self.signer,
            "commit": self.commit,
        }


@dataclass(frozen=True)
class Rival:
    """A verified entry a PASS would turn stale. ``body`` is None when the read gate holds
    verified bodies back (a history the audit refuses)."""

    id: str
    body: str | None


@dataclass(frozen=True)
class Pending:
    entry: Entry
    supersedes: tuple[Rival, ...]
    votes: tuple[Vote, ...]

    @property
    def session(self) -> str | None:
        """The run (session) that produced the entry, None for one written outside a run."""
        return run_of(self.entry.provenance.produced_by)

    def to_dict(self) -> dict[str, Any]:
        """The queue as ``review --format json`` prints it (a shape harnesses depend on)."""
        e = self.entry
        return {
            "session": self.session,
            "id": e.id,
            "kind": e.kind.value,
            "key": e.key,
            "body": e.body,
            "author": e.author,
            "produced_by": e.provenance.produced_by,
            "created": e.created,
            "supersedes": [r.id for r in self.supersedes],
            "votes": [v.to_dict() for v in self.votes],
        }


@dataclass(frozen=True)
class Queue:
    items: tuple[Pending, ...]
    total: int  # pending entries matching the filter, before --limit
    withheld: str | None  # why verified bodies (rivals) are held back, else None
    skipped: tuple[str, ...] = ()  # files under memories/ that do not parse

    def sessions(self) -> list[tuple[str | None, tuple[Pending, ...]]]:
        """The items as consecutive (session, items) groups, in queue order."""
        groups: list[tuple[str | None, list[Pending]]] = []
        for item in self.items:
            if not groups or groups[-1][0] != item.session:
                groups.append((item.session, []))
            groups[-1][1].append(item)
        return [(session, tuple(items)) for session, items in groups]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"pending": [p.to_dict() for p in self.items]}
        if self.total > len(self.items):
            data["more"] = self.total - len(self.items)
        if self.withheld:
            data["withheld"] = self.withheld
        if self.skipped:
            data["skipped"] = list(self.skipped)
        return data


@dataclass(frozen=True)
class QueueDecision:
    entry: Entry  # as it is after the commit (verified or rejected)
    verdict: Verdict
    commit: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.entry.id,
            "trust": self.entry.trust.value,
            "verdict": self.verdict.id,
            "outcome": self.verdict.outcome,
            "signer": self.verdict.signer,
            "commit": self.commit,
        }

    def line(self) -> str:
        return (
            f"{self.entry.id[:12]} is now {self.entry.trust.value}: {self.verdict.outcome} "
            f"signed by {self.verdict.signer}, commit {self.commit[:12]}"
        )


def pending(
    store: Store,
    *,
    kind: Kind | None = None,
    limit: int | None = None,
    within: Mapping[str, str] | None = None,
) -> Queue:
    """The unverified entries (of ``kind``), newest session first and oldest first within
    a session (``by_session``), at most ``limit`` of them. Reads
    only: nothing in the repository changes. A file under memories/ that does not parse is
    left out and named in ``skipped`` (the audit names the commit that brought it in).
    ``within``: scope fields every entry must hold (a tenant, over HTTP) -- the queue's
    entries and the rivals it names alike."""
    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit}: give a number of entries, 1 or more")
    read = store.open_read(Trust.UNVERIFIED)
    snap = read.snap
    skipped: list[Skipped] = []
    everything = list(store.iter_entries(snap, skipped=skipped))  # one walk, not one per entry
    if within:
        everything = [e for e in everything if all(e.scope.get(k) == v for k, v in within.items())]
    entries = by_session(
        e for e in everything if e.trust is Trust.UNVERIFIED and (kind is None or e.kind is kind)
    )
    total = len(entries)
    if limit is not None:
        entries = entries[:limit]
    votes = recorded_votes(store, [e.id for e in entries])
    rivals = Rivals(everything, str(store.config(snap).get("policy", "conflict", "verified-wins")))
    items = tuple(
        Pending(
            e,
            tuple(Rival(r.id, None if read.withheld else r.body) for r in rivals.of(e)),
            votes.get(e.id, ()),
        )
        for e in entries
    )
    return Queue(items, total, read.withheld, tuple(s.path for s in skipped))


def by_session(entries: Iterable[Entry]) -> list[Entry]:
    """``entries`` grouped by the run that produced them, the group with the newest entry
    first, oldest first inside each group."""
    groups: dict[str | None, list[Entry]] = {}
    for e in sorted(entries, key=lambda e: (e.created, e.id)):
        groups.setdefault(run_of(e.provenance.produced_by), []).append(e)
    newest_first = sorted(groups.values(), key=lambda g: (g[-1].created, g[-1].id), reverse=True)
    return [e for group in newest_first for e in group]


class Rivals:
    """Which verified entries a PASS turns stale under conflict ``policy``, as the store's
    promote decides it: a correction's target and the notes a merged note merged (of its own
    layer: ``authority.may_retire``), then the verified entries of the same kind and key
    (none under keep-both-flagged; none under latest-wins when one of them is newer, for
    then the promoted entry is the one that turns stale)."""

    def __init__(self, entries: Iterable[Entry], policy: str) -> None:
        self.policy = policy
        self.verified: dict[str, Entry] = {}
        self.by_key: dict[tuple[Kind, str], list[Entry]] = {}
        for e in entries:
            if e.trust is Trust.VERIFIED:
                self.verified[e.id] = e
                self.by_key.setdefault((e.kind, e.key), []).append(e)
        for same in self.by_key.values():
            same.sort(key=lambda e: (e.created, e.id))

    def of(self, entry: Entry) -> list[Entry]:
        found: list[Entry] = []
        named = [entry.supersedes] if entry.kind is Kind.CORRECTION and entry.supersedes else []
        # What the promotion retires by name (a correction's target, the notes a merged
        # note merged): the rule Store.promote applies, shown before anyone votes.
        for target_id in [*named, *merged_notes(entry)]:
            target = self.verified.get(target_id)
            if (
                target is not None
                and target.id != entry.id
                and not target.superseded_by
                and (target_id in named or target.kind is entry.kind)
                and may_retire(entry, target)
                and target not in found
            ):
                found.append(target)
        rivals = [e for e in self.by_key.get((entry.kind, entry.key), []) if e.id != entry.id]
        if not rivals or self.policy == "keep-both-flagged":
            return found
        newest = rivals[-1]
        if self.policy == "latest-wins" and (newest.created, newest.id) > (
            entry.created,
            entry.id,
        ):
            return found
        return found + [r for r in rivals if r.id not in {f.id for f in found}]


def recorded_votes(store: Store, ids: Sequence[str]) -> dict[str, tuple[Vote, ...]]:
    """The votes of every verdict the branch recorded for each of ``ids``, oldest first.

    One walk over the branch: only commits carrying a ``Truss-Verdict`` trailer (promote,
    reject, a failed re-check's demote) can hold one, and for those the verdict is read from
    the entry file the commit wrote (or the commit's ``Truss-Verdict-Json``)."""
    wanted = set(ids)
    if not wanted:
        return {}
    import pygit2  # a heavy module, kept off `review --help`; the store has loaded it anyway

    repo = store.git.repo
    tip = store.git.tip()
    if tip is None:
        return {}
    found: dict[str, list[Vote]] = {}
    seen: set[tuple[str, str]] = set()
    order = pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE
    for commit in repo.walk(tip.id, order):
        fields = parse_trailers(commit.message)
        if not fields.get("Truss-Verdict"):
            continue
        for verdict in _verdicts_of(repo, commit, fields):
            entry = str(verdict.get("entry", ""))
            verdict_id = str(verdict.get("verdict_id", ""))
            if entry not in wanted or (entry, verdict_id) in seen:
                continue
            seen.add((entry, verdict_id))
            found.setdefault(entry, []).extend(_votes(verdict, str(commit.id)))
    return {k: tuple(v) for k, v in found.items()}


def _verdicts_of(
    repo: pygit2.Repository, commit: pygit2.Commit, fields: Mapping[str, list[str]]
) -> Iterable[Mapping[str, Any]]:
    """The verdicts ``commit`` recorded: in its trailer, or in the entry files it changed."""
    for text in fields.get("Truss-Verdict-Json", []):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            continue  # the audit names a malformed trailer; the queue shows what it can read
        if isinstance(data, dict):
            yield data
    ids = set(fields.get("Truss-Verdict", []))
    parent = commit.parents[0].tree if commit.parents else None
    for path in _changed(parent, commit.tree):
        if not path.startswith("memories/") or not path.endswith(".md"):
            continue
        try:
            entry = parse(repo[commit.tree[path].id].data, path)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - an unreadable file is the audit's to name
            continue
        verified = entry.provenance.verified_by
        if verified and verified.get("verdict_id") in ids:
            yield verified


def _changed(old: pygit2.Tree | None, new: pygit2.Tree) -> list[str]:
    if old is None:
        return []
    return [d.new_file.path for d in old.diff_to_tree(new).deltas]


def _votes(verdict: Mapping[str, Any], commit: str) -> list[Vote]:
    votes = verdict.get("votes") or []
    out = []
    for v in votes:
        if not isinstance(v, Mapping):
            continue
        evidence = v.get("evidence")
        note = ""
        if isinstance(evidence, Mapping):
            note = str(evidence.get("note") or evidence.get("rationale") or "")
        elif isinstance(evidence, str):
            note = evidence
        out.append(
            Vote(
                reviewer=str(v.get("reviewer", "?")),
                kind=str(v.get("kind", "?")),
                vote=str(v.get("vote", "?")),
                note=note,
                verdict=str(verdict.get("verdict_id", "")),
                outcome=str(verdict.get("outcome", "")),
                signer=str(verdict.get("signer", "")),
                commit=commit,
            )
        )
    return out


def reviewer(store: Store) -> str:
    """The principal whose key the store signs with; refused unless it holds the panel role,
    before anyone is asked to judge an entry their verdict could not decide."""
    principal, roles = store.policy().roles_of(PublicKey.from_line(store.signer.public_line))
    if "panel" not in roles:
        raise UsageError(
            f"{principal} does not hold the panel role, so a verdict signed with this key "
            "would be refused; review with a panel key (--key PATH), or ask an operator to "
            f"run `truss-files roles grant panel {principal}`"
        )
    return principal


def decide(store: Store, ref: str, outcome: str, *, note: str = "") -> QueueDecision:
    """Sign ``outcome`` (PASS or FAIL) on the unverified entry ``ref`` with the store's key
    (it must hold the panel role) and promote or reject it: one signed commit."""
    if outcome not in (PASS, FAIL):
        raise UsageError(f"a decision is {PASS} or {FAIL}, not {outcome!r}")
    entry = store.get(ref)
    if entry.trust is not Trust.UNVERIFIED:
        raise TransitionError(
            f"entry {entry.id} is {entry.trust.value}, not pending: the queue decides "
            "unverified entries (`truss-files log` shows how it got there)"
        )
    verdict = store.sign_verdict(entry.id, outcome, note=note)
    decided = store.promote if outcome == PASS else store.reject
    after = decided(entry.id, verdict)
    return QueueDecision(after, verdict, _commit_of(store, verdict.id))


def _commit_of(store: Store, verdict_id: str) -> str:
    """The commit that recorded ``verdict_id``: the tip, unless a writer landed after it."""
    tip = store.git.tip()
    commit = tip
    for _ in range(64):
        if commit is None:
            break
        if verdict_id in parse_trailers(commit.message).get("Truss-Verdict", []):
            return str(commit.id)
        commit = commit.parents[0] if commit.parents else None
    return str(tip.id) if tip is not None else ""
