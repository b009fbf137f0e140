"""A panel of N reviewers: each judges the entry, the quorum (``quorum``) decides.

An empty panel is an error, never a pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..quorum import ABSTAIN, FAIL, PASS, VOTES, Quorum, tally

if TYPE_CHECKING:
    from .reviewers import Ballot, Reviewer, Subject

__all__ = ["ABSTAIN", "FAIL", "PASS", "VOTES", "Decision", "Panel", "Quorum", "tally"]


@dataclass(frozen=True)
class Decision:
    """What a panel concluded: PASS, FAIL or None (undecided), with every ballot."""

    outcome: str | None
    ballots: tuple[Ballot, ...]
    quorum: str

    @property
    def votes(self) -> list[dict[str, Any]]:
        """The ballots as a verdict records them."""
        return [b.to_vote() for b in self.ballots]

    def summary(self) -> str:
        counts = {v: sum(1 for b in self.ballots if b.vote == v) for v in VOTES}
        parts = [f"{counts[v]} {v}" for v in VOTES if counts[v]]
        result = self.outcome or "undecided"
        return f"{result} ({', '.join(parts)}; quorum {self.quorum})"

    def reasons(self) -> list[str]:
        """One line per reviewer that did not vote PASS: what it said and why."""
        return [f"{b.reviewer}: {b.vote} ({b.reason})" for b in self.ballots if b.vote != PASS]


@dataclass(frozen=True)
class Panel:
    """N reviewers and a quorum. Reviewers run one after another (they share a checkout)."""

    reviewers: tuple[Reviewer, ...]
    quorum: Quorum = Quorum()

    def __post_init__(self) -> None:
        if not self.reviewers:
            raise ConfigError(
                "the panel has no reviewers; an empty panel is not a pass. Name a check of "
                "truss.toml's [panel.checks] in the entry's checks:, or add [panel.reviewers] "
                "to truss.toml"
            )
        # Fail before any reviewer runs when the quorum cannot fit this panel.
        self.quorum.need(len(self.reviewers))

    def run(self, subject: Subject, on_ballot: Callable[[Ballot], None] | None = None) -> Decision:
        ballots = []
        for reviewer in self.reviewers:
            ballot = reviewer.review(subject)
            ballots.append(ballot)
            if on_ballot is not None:
                on_ballot(ballot)
        outcome = self.quorum.decide([b.vote for b in ballots])
        return Decision(outcome, tuple(ballots), self.quorum.text(len(ballots)))
