"""A belief's life after it is written: salience from use, eviction, consolidation.

``salience_update`` folds what the read faces recorded in ``.git/truss/usage`` (``git/usage.py``),
each entry's age and its trust into its ``salience`` (``fold``), in one signed commit
(``Truss-Op: salience``); with ``[policy] salience = "prior"`` queries then rank by it.

``evict`` moves the verified entries over a kind's ``[policy.eviction]`` budget to stale,
reason ``evicted``, in one signed commit (``Truss-Op: evict``) that ``truss-files revert``
undoes; no file is ever deleted. Only verified entries are evicted: an unverified entry is
not yet a belief (and the trust machine has no unverified -> stale), a stale or rejected one
is out already.

``consolidate`` merges the notes memory.train flagged ``consolidating`` (the write commit's
``Truss-Consolidating`` trailer names the near note): one merged, unverified note per group,
its ``sources`` naming every note merged (``entry:<id>``). Once the panel verifies it, the
promotion turns the verified notes it merged stale, superseded by it (``Store`` promote).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pygit2

from ..config.settings import Settings, settings_for
from ..errors import UsageError
from ..format import entryfile
from ..format.trailers import parse_trailers, trailers
from ..git.gitstore import Plan, Snapshot
from ..git.usage import Use, read_usage
from ..model import MERGED_PREFIX, Entry, Kind, Trust, normalize_body
from .store import Store

# How salience is folded (``fold``): use saturates, age decays, trust weighs.
USE_HALF = 4.0  # returns at which use reaches 1 - 1/e of its share
AGE_DAYS = 30.0  # days since the last use (or the write) at which recency falls to 1/e
WEIGHTS = {"use": 0.45, "recency": 0.25, "trust": 0.30}
TRUST_WEIGHT = {Trust.VERIFIED: 1.0, Trust.UNVERIFIED: 0.5, Trust.STALE: 0.2, Trust.REJECTED: 0.0}
NAMED = 100  # a commit names up to this many entries in its trailers; more are counted


def _when(stamp: str) -> datetime.datetime:
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def fold(entry: Entry, use: Use | None, now: datetime.datetime) -> float:
    """An entry's salience from its use, age and trust, in [0, 1], to three places:
    ``0.45 * (1 - e^(-uses/4)) + 0.25 * e^(-days since last use or write / 30) + 0.30 * t``
    where ``t`` is 1 verified, 0.5 unverified, 0.2 stale, 0 rejected."""
    uses = use.uses if use is not None else 0
    last = _when(entry.created).timestamp() if entry.created else now.timestamp()
    if use is not None:
        last = max(last, use.last)
    days = max(0.0, (now.timestamp() - last) / 86400)
    value = (
        WEIGHTS["use"] * (1 - math.exp(-uses / USE_HALF))
        + WEIGHTS["recency"] * math.exp(-days / AGE_DAYS)
        + WEIGHTS["trust"] * TRUST_WEIGHT[entry.trust]
    )
    return round(min(1.0, max(0.0, value)), 3)


@dataclass(frozen=True)
class BeliefChange:
    """One entry a run changes (or, dry, would change)."""

    id: str
    kind: str
    key: str
    before: float | str
    after: float | str
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Done:
    """What ``salience_update``, ``evict`` or ``consolidate`` did (or would do)."""

    op: str
    changes: tuple[BeliefChange, ...]
    commit: str | None
    dry_run: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "dry_run": self.dry_run,
            "commit": self.commit,
            "count": len(self.changes),
            "changes": [c.to_dict() for c in self.changes],
        }


def _named(ids: list[str]) -> str:
    return trailers(entry=ids) if len(ids) <= NAMED else trailers(entries=str(len(ids)))


def _rewrite(
    store: Store,
    op: str,
    subject: str,
    updates: Mapping[str, Entry],
    extra: Mapping[str, str] | None = None,
) -> str | None:
    """One signed commit: ``salience`` sets each entry's salience to the one in
    ``updates``; ``evict`` turns each stale. Read again from the commit's parent on every
    attempt, so a concurrent change of an entry is kept (an entry no longer live verified is
    not evicted)."""

    def plan(snap: Snapshot) -> Plan:
        changes: dict[str, bytes | None] = {}
        moves: list[str] = []
        for eid, want in updates.items():
            data = snap.read(want.path)
            if data is None:
                continue
            old = entryfile.parse(data, want.path)
            if op == "evict":
                if old.trust is not Trust.VERIFIED or old.superseded_by is not None:
                    continue
                new = dataclasses.replace(old, trust=Trust.STALE)
                moves.append(f"{eid} verified -> stale")
            else:
                new = dataclasses.replace(old, salience=want.salience)
            text = entryfile.serialize(new).encode()
            if text != data:
                changes[want.path] = text
        ids = [_id_of(p) for p in changes]
        message = f"truss: {subject}\n\n" + trailers(op=op) + "\n" + _named(ids)
        if moves and len(moves) <= NAMED:
            message += "\n" + trailers(trust=moves)
        if extra:
            message += "\n" + trailers(**extra)
        return Plan(changes, message)

    done = store._apply(plan, {"panel", "operator"})
    return str(done[0].id) if done is not None else None


def _id_of(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".md")


# -- salience ------------------------------------------------------------------------------


def salience_update(
    store: Store, *, dry_run: bool = False, now: datetime.datetime | None = None
) -> Done:
    """Fold use (``.git/truss/usage``), age and trust into every live entry's ``salience``;
    one signed commit (``Truss-Op: salience``) for every entry whose value moves."""
    now = now or store.clock()
    snap = store.snapshot()
    usage = read_usage(store.git.git_dir)
    updates: dict[str, Entry] = {}
    changes: list[BeliefChange] = []
    for entry in store.iter_entries(snap):
        if entry.trust is Trust.REJECTED:
            continue
        value = fold(entry, usage.get(entry.id), now)
        if abs(value - entry.salience) < 0.0005:
            continue
        updates[entry.id] = dataclasses.replace(entry, salience=value)
        uses = usage.get(entry.id)
        changes.append(
            BeliefChange(
                entry.id,
                entry.kind.value,
                entry.key,
                entry.salience,
                value,
                f"{uses.uses if uses else 0} uses",
            )
        )
    commit = None
    if updates and not dry_run:
        commit = _rewrite(store, "salience", f"salience update ({len(updates)} entries)", updates)
    return Done("salience", tuple(changes), commit, dry_run)


# -- eviction ------------------------------------------------------------------------------


def over_budget(
    entries: Iterable[Entry], budget: Mapping[str, Any], now: datetime.datetime
) -> list[tuple[Entry, str]]:
    """The entries of one kind a budget evicts, each with why: older than ``max_age_days``,
    salience below ``min_salience``, then the least salient (oldest first among equals)
    beyond ``max_entries``."""
    live = [e for e in entries if e.trust is Trust.VERIFIED and e.superseded_by is None]
    out: list[tuple[Entry, str]] = []
    keep: list[Entry] = []
    age = budget.get("max_age_days")
    floor = budget.get("min_salience")
    for entry in live:
        days = (now - _when(entry.created)).total_seconds() / 86400 if entry.created else 0.0
        if age is not None and days > age:
            out.append((entry, f"older than max_age_days {age:g} ({days:.0f} days)"))
        elif floor is not None and entry.salience < floor:
            out.append((entry, f"salience {entry.salience:g} below min_salience {floor:g}"))
        else:
            keep.append(entry)
    most = budget.get("max_entries")
    if most is not None and len(keep) > most:
        ranked = sorted(keep, key=lambda e: (e.salience, e.created, e.id))
        for entry in ranked[: len(keep) - most]:
            out.append((entry, f"over max_entries {most} (salience {entry.salience:g})"))
    return out


def evict(
    store: Store,
    *,
    dry_run: bool = False,
    settings: Settings | None = None,
    now: datetime.datetime | None = None,
) -> Done:
    """Move what is over ``[policy.eviction]`` to stale, reason ``evicted``, in one signed
    commit (``Truss-Op: evict``); ``dry_run`` only lists it."""
    settings = settings or settings_for(store)
    now = now or store.clock()
    snap = store.snapshot()
    by_kind: dict[Kind, list[Entry]] = {}
    budgets = {kind: settings.eviction(kind.value) for kind in Kind}
    if not any(budgets.values()):
        raise UsageError(
            "no eviction budget: set [policy.eviction] per kind in truss.toml, e.g. "
            "[policy.eviction] lesson = {max_entries = 1000, max_age_days = 180}"
        )
    for entry in store.iter_entries(snap):
        if budgets[entry.kind]:
            by_kind.setdefault(entry.kind, []).append(entry)
    updates: dict[str, Entry] = {}
    changes: list[BeliefChange] = []
    for kind, entries in sorted(by_kind.items(), key=lambda item: item[0].value):
        for entry, why in over_budget(entries, budgets[kind], now):
            updates[entry.id] = dataclasses.replace(entry, trust=Trust.STALE)
            changes.append(BeliefChange(entry.id, kind.value, entry.key, "verified", "stale", why))
    commit = None
    if updates and not dry_run:
        commit = _rewrite(
            store,
            "evict",
            f"evict {len(updates)} entries over budget",
            updates,
            {"reason": "evicted"},
        )
    return Done("evict", tuple(changes), commit, dry_run)


# -- consolidation -------------------------------------------------------------------------


def flagged_pairs(store: Store) -> Iterator[tuple[str, str]]:
    """(note, near note) for every write memory.train flagged ``consolidating``."""
    tip = store.git.tip()
    if tip is None:
        return
    for commit in store.git.repo.walk(tip.id, pygit2.enums.SortMode.TOPOLOGICAL):
        if "Truss-Consolidating" not in commit.message:
            continue
        fields = parse_trailers(commit.message)
        for entry in fields.get("Truss-Entry", [])[:1]:
            for near in fields.get("Truss-Consolidating", []):
                yield entry, near


def _groups(pairs: Iterable[tuple[str, str]]) -> list[set[str]]:
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        parent[find(a)] = find(b)
    out: dict[str, set[str]] = {}
    for x in list(parent):
        out.setdefault(find(x), set()).add(x)
    return [g for g in out.values() if len(g) > 1]


def merged_body(notes: list[Entry]) -> str:
    """The notes' texts, oldest first, each paragraph once."""
    seen: set[str] = set()
    parts: list[str] = []
    for note in notes:
        for para in note.body.split("\n\n"):
            text = para.strip()
            if text and text not in seen:
                seen.add(text)
                parts.append(text)
    return normalize_body("\n\n".join(parts))


def consolidate(store: Store, *, dry_run: bool = False) -> Done:
    """One merged, unverified note per group of notes train flagged ``consolidating`` (still
    live: unverified or verified, not superseded), its ``sources`` naming each merged note;
    all written in one signed commit. Verifying it supersedes the verified notes it merged."""
    snap = store.snapshot()
    changes: list[BeliefChange] = []
    merged: list[Entry] = []
    for group in _groups(flagged_pairs(store)):
        notes: list[Entry] = []
        for eid in sorted(group):
            try:
                note = store.get(eid, snap)
            except UsageError:
                continue
            if note.trust in (Trust.UNVERIFIED, Trust.VERIFIED) and note.superseded_by is None:
                notes.append(note)
        notes.sort(key=lambda e: (e.created, e.id))
        if len(notes) < 2:
            continue
        first = notes[0]
        notes = [n for n in notes if (n.kind, n.layer) == (first.kind, first.layer)]
        if len(notes) < 2:
            continue
        entry = store.new_entry(
            first.kind,
            first.key,
            merged_body(notes),
            layer=first.layer,
            scope=first.scope,
            sources=[f"{MERGED_PREFIX}{n.id}" for n in notes],
        )
        merged.append(entry)
        changes.append(
            BeliefChange(
                entry.id,
                entry.kind.value,
                entry.key,
                ", ".join(n.id[:12] for n in notes),
                "unverified",
                f"merges {len(notes)} notes",
            )
        )
    commit = None
    if merged and not dry_run:
        before = store.git.tip()
        store.write_many(merged)
        after = store.git.tip()
        if after is not None and (before is None or after.id != before.id):
            commit = str(after.id)
    return Done("consolidate", tuple(changes), commit, dry_run)
