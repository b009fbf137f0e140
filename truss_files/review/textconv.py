"""An entry file as a reviewer reads it: the ``diff=truss`` textconv driver.

``git diff`` and ``git log -p`` run ``truss-files textconv FILE`` on both sides and diff the
output, so every field that can change (trust, verdict, links, salience, sources) has a line
of its own and a promotion reads as one changed header line instead of a block of YAML and a
wrapped SSH signature. The body follows unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import EntryError
from ..format.entryfile import parse
from ..model import Entry

ATTRIBUTES_LINE = "memories/**/*.md diff=truss merge=truss"


def verdict_line(verdict: Mapping[str, Any] | None) -> str:
    """``PASS 2/2 by panel@example (verdict 0123456789ab, quorum 2-of-3)`` or ``no verdict``."""
    if not verdict:
        return "no verdict"
    votes = verdict.get("votes") or []
    outcome = str(verdict.get("outcome", "?"))
    agree = sum(1 for v in votes if isinstance(v, Mapping) and v.get("vote") == outcome)
    vid = str(verdict.get("verdict_id") or "?")[:12]
    quorum = verdict.get("quorum")
    tail = f"verdict {vid}" + (f", quorum {quorum}" if quorum else "")
    return f"{outcome} {agree}/{len(votes)} by {verdict.get('signer', '?')} ({tail})"


def reviewers(verdict: Mapping[str, Any] | None) -> list[str]:
    """``alice (human): PASS`` for each vote of a verdict."""
    out = []
    for vote in (verdict or {}).get("votes") or []:
        if isinstance(vote, Mapping):
            out.append(f"{vote.get('reviewer', '?')} ({vote.get('kind', '?')}): {vote.get('vote')}")
    return out


def header(entry: Entry) -> str:
    """One line: kind, key, trust and the verdict summary."""
    line = f"{entry.kind.value} {entry.key!r} — {entry.trust.value}"
    if entry.provenance.verified_by:
        line += f" — {verdict_line(entry.provenance.verified_by)}"
    return line


def render(entry: Entry) -> str:
    prov = entry.provenance
    scope = ", ".join(f"{k}={v}" for k, v in sorted(entry.scope.items())) or "-"
    lines = [
        header(entry),
        f"id {entry.id}",
        f"layer {entry.layer.value} · scope {scope} · author {entry.author}",
        f"created {entry.created} · salience {entry.salience:g}",
        f"produced_by {prov.produced_by or '-'} · sources {', '.join(prov.sources) or '-'}",
        f"supersedes {entry.supersedes or '-'} · superseded_by {entry.superseded_by or '-'}",
    ]
    if entry.checks:
        lines.append("checks " + "; ".join(entry.checks))
    lines.extend(f"vote {r}" for r in reviewers(prov.verified_by))
    lines.append("")
    lines.append(entry.body)
    return "\n".join(lines) + "\n"


def textconv(data: bytes) -> str:
    """The readable form; a file that is not a valid entry is shown as it is, with the error,
    because a textconv that fails makes ``git diff`` fail."""
    try:
        entry = parse(data, None)
    except EntryError as exc:
        text = data.decode("utf-8", "replace")
        return f"(not a valid entry: {exc.message})\n{text}"
    return render(entry)
