"""A panel of N reviewers: each judges the entry, the quorum (``quorum``) decides; beside
them, requirements (an entry's checks, reviewers a layer above truss.toml added) must each
PASS (``quorum.with_requirements``).

An empty panel is an error, never a pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..format.quorum import ABSTAIN, FAIL, PASS, VOTES, Quorum, tally, with_requirements

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
        required = sum(1 for b in self.ballots if b.required)
        quorum = self.quorum + (f" and {required} required" if required else "")
        return f"{result} ({', '.join(parts)}; quorum {quorum})"

    def reasons(self) -> list[str]:
        """One line per reviewer that did not vote PASS: what it said and why."""
        return [f"{b.reviewer}: {b.vote} ({b.reason})" for b in self.ballots if b.vote != PASS]


@dataclass(frozen=True)
class Panel:
    """N reviewers under a quorum, and requirements that must each PASS besides. Reviewers
    run one after another (they share a checkout), requirements first."""

    reviewers: tuple[Reviewer, ...]
    quorum: Quorum = Quorum()
    required: tuple[Reviewer, ...] = ()

    def __post_init__(self) -> None:
        if not self.reviewers and not self.required:
            raise ConfigError(
                "the panel has no reviewers; an empty panel is not a pass. Name a check of "
                "truss.toml's [panel.checks] in the entry's checks:, or add [panel.reviewers] "
                "to truss.toml"
            )
        # Fail before any reviewer runs when the quorum cannot fit this panel.
        if self.reviewers:
            self.quorum.need(len(self.reviewers))

    def run(self, subject: Subject, on_ballot: Callable[[Ballot], None] | None = None) -> Decision:
        if not self.reviewers:  # the requirements alone: each must PASS
            return Panel(self.required, Quorum("unanimous")).run(subject, on_ballot)
        required: list[Ballot] = []
        ballots: list[Ballot] = []
        for reviewer in (*self.required, *self.reviewers):
            ballot = reviewer.review(subject)
            if len(required) < len(self.required):
                ballot = replace(ballot, required=True)
                required.append(ballot)
            else:
                ballots.append(ballot)
            if on_ballot is not None:
                on_ballot(ballot)
        outcome = with_requirements(
            self.quorum.decide([b.vote for b in ballots]), [b.vote for b in required]
        )
        return Decision(outcome, (*required, *ballots), self.quorum.text(len(ballots)))
