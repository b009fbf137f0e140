"""Two concurrent versions of one entry file, settled by the trust state machine.

Both sides of a conflict on ``memories/<kind>/<xx>/<id>.md`` hold the same entry: the path
names the id and the id covers every immutable field, so only the mutable fields can differ —
trust and its verdict, the supersede links, salience, sources, checks and ``created``.

Trust is settled first, by the trust state machine. A side that left trust where the base had
it yields to the side that moved it. When both moved, the state further along wins: states are
ordered by the time of the verdict behind them, then by phase (unverified, then verified or
rejected, then stale), so "promoted" on one side and "promoted, then demoted" on the other
gives stale, and two promotions with different verdicts keep the later verdict on every
machine. A PASS history (verified or stale) against a FAIL (rejected) is a disagreement of the
panel, never settled here. Two unverified adds of one entry (no base: a retried event trained
on two clones) join by ``join``'s rule instead: the earlier ``created``, the union of sources.
Links merge (a merge never unmakes a link); the other fields merge three-way and otherwise
follow the side whose trust won. The result is checked against both
sides: it must equal a side or be reachable from it by one legal arrow, or the merge is a
conflict.

What cannot be settled is left as a conflict: standard ``<<<<<<<`` markers naming the reason
are written into the file (which then no longer parses, so the pre-commit hook refuses it) and
the driver exits non-zero.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConflictError, EntryError, KeylessError, TrussError
from ..format.entryfile import parse, serialize
from ..format.join import can_join, join
from ..model import LEGAL_TRANSITIONS, TRUST_RULE, Entry, Trust
from ..signing.trustpolicy import TrustPolicy
from ..trust.verdict import Verdict, check_verdict

# How far along the trust arrows a state is, within one verdict's lifetime.
_PHASE = {Trust.UNVERIFIED: 0, Trust.VERIFIED: 1, Trust.REJECTED: 1, Trust.STALE: 2}
_PASS_HISTORY = (Trust.VERIFIED, Trust.STALE)
_LINKS = ("supersedes", "superseded_by")
_THREE_WAY = ("salience", "created", "checks")


@dataclass(frozen=True)
class MergeResult:
    """The merged file text (or the text with conflict markers) and how it was reached."""

    text: bytes
    clean: bool
    reason: str = ""
    notes: tuple[str, ...] = ()


def merge_entry(
    base: bytes | None,
    ours: bytes,
    theirs: bytes,
    path: str | None = None,
    policy: TrustPolicy | None = None,
) -> MergeResult:
    """Merge three versions of one entry file; never returns an illegal state as clean.

    With ``policy``, a keyless (sigstore) verdict a side brings is verified offline against
    it first: one that does not verify is a conflict naming its rule, never merged in."""
    try:
        a = parse(ours, path)
    except EntryError as exc:
        return _conflict(ours, theirs, f"our side does not parse ({exc.message})", path)
    try:
        b = parse(theirs, path)
    except EntryError as exc:
        return _conflict(ours, theirs, f"their side does not parse ({exc.message})", path)
    o: Entry | None = None
    if base:
        try:
            o = parse(base, path)
        except EntryError:
            o = None  # a corrupt base only costs us the three-way view
    if policy is not None:
        for side, name in ((a, "our"), (b, "their")):
            refused = _keyless_refusal(o, side, policy)
            if refused:
                return _conflict(ours, theirs, f"{name} side's {refused}", path)
    try:
        merged, notes = merge_entries(o, a, b)
    except ConflictError as exc:
        return _conflict(ours, theirs, exc.message, path)
    return MergeResult(serialize(merged).encode(), True, "", tuple(notes))


def _keyless_refusal(base: Entry | None, side: Entry, policy: TrustPolicy) -> str:
    """Why a keyless verdict new on ``side`` does not verify ("" when it does, or is none)."""
    verdict = side.provenance.verified_by
    if not verdict or "bundle" not in verdict:
        return ""
    if base is not None and base.provenance.verified_by == verdict:
        return ""
    outcome = "FAIL" if side.trust is Trust.REJECTED else "PASS"
    try:
        check_verdict(Verdict.from_dict(verdict), side.id, outcome, policy)
    except KeylessError as exc:
        return f"keyless verdict does not verify: [{exc.rule}] {exc.detail}"
    except TrussError as exc:
        return f"keyless verdict does not verify: {exc.message}"
    return ""


def merge_entries(base: Entry | None, ours: Entry, theirs: Entry) -> tuple[Entry, list[str]]:
    """The merged entry and notes on how each disputed field was settled.

    Raises ``ConflictError`` (with the reason) when the two sides cannot be reconciled.
    """
    if ours.id != theirs.id:
        raise ConflictError(
            f"the two sides hold different entries ({ours.id} and {theirs.id}) at one path"
        )
    if base is not None and base.id != ours.id:
        base = None
    if base is None and can_join((ours, theirs)):
        joined = join((ours, theirs))
        if joined == ours == theirs:
            return joined, []
        return joined, [
            f"joined two adds of one entry: created {joined.created} (the earlier), the "
            "union of sources; no trust change"
        ]
    notes: list[str] = []
    win, lose = _trust_winner(base, ours, theirs)
    if _state(win) != _state(lose):
        notes.append(
            f"trust: kept {_describe(win)} over {_describe(lose)} (the later verdict, or the "
            "further state along unverified -> verified -> stale)"
        )
    merged = win
    for name in _LINKS:
        value, note = _merge_link(name, base, win, lose)
        link: dict[str, Any] = {name: value}
        merged = dataclasses.replace(merged, **link)
        if note:
            notes.append(note)
    for name in _THREE_WAY:
        if base is None:
            continue
        mine, other, was = getattr(win, name), getattr(lose, name), getattr(base, name)
        if mine == was and other != was:
            field: dict[str, Any] = {name: other}
            merged = dataclasses.replace(merged, **field)
    if base is not None:
        mine, other, was = (e.provenance.sources for e in (win, lose, base))
        if mine == was and other != was:
            prov = dataclasses.replace(merged.provenance, sources=other)
            merged = dataclasses.replace(merged, provenance=prov)
    _check_legal(merged, {"our": ours, "their": theirs})
    return merged, notes


def _verdict_id(entry: Entry) -> str:
    verdict = entry.provenance.verified_by
    if not verdict:
        return ""
    claimed = verdict.get("verdict_id")
    if isinstance(claimed, str) and claimed:
        return claimed
    text = json.dumps(dict(verdict), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _verdict_time(entry: Entry) -> str:
    verdict: Mapping[str, Any] | None = entry.provenance.verified_by
    value = verdict.get("time") if verdict else None
    return value if isinstance(value, str) else ""


def _state(entry: Entry) -> tuple[Trust, str]:
    return entry.trust, _verdict_id(entry)


def _progress(entry: Entry) -> tuple[str, str, int]:
    return _verdict_time(entry), _verdict_id(entry), _PHASE[entry.trust]


def _describe(entry: Entry) -> str:
    vid = _verdict_id(entry)
    return entry.trust.value + (f" (verdict {vid[:12]})" if vid else "")


def _trust_winner(base: Entry | None, a: Entry, b: Entry) -> tuple[Entry, Entry]:
    """(winner, loser): whose trust and verdict the merged entry carries."""
    if _state(a) == _state(b):
        # Same belief on both sides: pick by text so every machine picks the same file.
        first, second = sorted((a, b), key=serialize)
        return first, second
    if base is not None:
        if _state(a) == _state(base):
            return b, a
        if _state(b) == _state(base):
            return a, b
    trusts = {a.trust, b.trust}
    if Trust.REJECTED in trusts and trusts & set(_PASS_HISTORY):
        passed, failed = (a, b) if b.trust is Trust.REJECTED else (b, a)
        raise ConflictError(
            f"the panel disagrees: one side is {_describe(failed)}, the other "
            f"{_describe(passed)}; keep one side (git checkout --ours/--theirs) and have the "
            "panel re-check the entry"
        )
    win = max((a, b), key=_progress)
    return win, (b if win is a else a)


def _merge_link(
    name: str, base: Entry | None, win: Entry, lose: Entry
) -> tuple[str | None, str | None]:
    mine, other = getattr(win, name), getattr(lose, name)
    if mine == other:
        return mine, None
    was = getattr(base, name) if base is not None else None
    if base is not None and mine == was:
        return other, None
    if base is not None and other == was:
        return mine, None
    if mine is None:
        return other, None  # a merge never unmakes a link one side made
    if other is None:
        return mine, None
    return mine, f"{name}: kept {mine} (the side whose trust won); the other side said {other}"


def _check_legal(merged: Entry, sides: Mapping[str, Entry]) -> None:
    for label, side in sides.items():
        if side == merged or side.trust is merged.trust:
            continue
        if (side.trust, merged.trust) not in LEGAL_TRANSITIONS:
            raise ConflictError(
                f"merging would move {label} side's {side.trust.value} to "
                f"{merged.trust.value}, which the trust rules do not allow ({TRUST_RULE})"
            )


def _conflict(ours: bytes, theirs: bytes, reason: str, path: str | None) -> MergeResult:
    reason = " ".join(reason.split())
    where = path or "the file"

    def ended(data: bytes) -> bytes:
        return data if data.endswith(b"\n") or not data else data + b"\n"

    text = (
        f"<<<<<<< ours (truss-files could not merge this entry: {reason})\n".encode()
        + ended(ours)
        + b"=======\n"
        + ended(theirs)
        + (
            f">>>>>>> theirs (keep one side, or a state both sides can reach ({TRUST_RULE}); "
            f"then `git add {where}`)\n"
        ).encode()
    )
    return MergeResult(text, False, reason)


def merge_files(
    base: Path, ours: Path, theirs: Path, path: str, policy: TrustPolicy | None = None
) -> MergeResult:
    """The merge driver (``%O %A %B %P``): merge into ``ours`` in place.

    Files that are not entries on either side (a README under memories/, say) get git's own
    three-way text merge, so the driver is never worse than no driver. ``policy``: the one
    keyless verdicts are checked by (the branch being merged into).
    """
    a, b = ours.read_bytes(), theirs.read_bytes()
    o = base.read_bytes() if base.exists() else b""
    if not _looks_like_entry(a) and not _looks_like_entry(b):
        return _merge_text(base, ours, theirs)
    result = merge_entry(o or None, a, b, path, policy)
    ours.write_bytes(result.text)
    return result


def _looks_like_entry(data: bytes) -> bool:
    try:
        parse(data, None)
    except EntryError:
        return False
    return True


def _merge_text(base: Path, ours: Path, theirs: Path) -> MergeResult:
    proc = subprocess.run(
        ["git", "merge-file", "-L", "ours", "-L", "base", "-L", "theirs", ours, base, theirs],
        capture_output=True,
        check=False,
    )
    text = ours.read_bytes()
    if proc.returncode == 0:
        return MergeResult(text, True, "", ("not an entry file: merged as text",))
    reason = "not an entry file, and git's text merge left conflicts"
    return MergeResult(text, False, reason)
