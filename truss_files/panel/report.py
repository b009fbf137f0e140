"""What a verify or recheck run reports: one ``EntryOutcome`` per entry, and their summary."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

VERIFY_COUNTS = ("promoted", "rejected", "undecided")
RECHECK_COUNTS = ("holds", "demoted", "reverified", "undecided")


@dataclass(frozen=True)
class EntryOutcome:
    """What happened to one entry."""

    id: str
    kind: str
    key: str
    status: str  # promoted rejected undecided no-reviewers skipped error | holds demoted …
    trust: str
    message: str
    verdict: str | None = None
    quorum: str | None = None
    votes: tuple[dict[str, str], ...] = ()
    details: tuple[str, ...] = field(default=(), compare=False)  # local only: output tails

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "key": self.key,
            "status": self.status,
            "trust": self.trust,
            "message": self.message,
            "verdict": self.verdict,
            "quorum": self.quorum,
            "votes": [dict(v) for v in self.votes],
        }

    def line(self) -> str:
        return f"{self.id[:12]}  {self.status:<12} {self.kind}/{self.key}: {self.message}"


@dataclass(frozen=True)
class Report:
    action: str  # verify | recheck
    outcomes: tuple[EntryOutcome, ...]

    def counts(self) -> dict[str, int]:
        base = VERIFY_COUNTS if self.action == "verify" else RECHECK_COUNTS
        counts = dict.fromkeys(base, 0)
        counts.update(Counter(o.status for o in self.outcomes))
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            **self.counts(),
            "entries": [o.to_dict() for o in self.outcomes],
        }

    def text(self) -> str:
        counts = self.counts()
        head = f"{self.action}: " + ", ".join(f"{n} {status}" for status, n in counts.items())
        quiet = ("promoted", "holds")
        lines = [head]
        for o in self.outcomes:
            if o.status not in quiet:
                lines.append("  " + o.line())
                lines.extend("      " + d for d in o.details)
        return "\n".join(lines)
