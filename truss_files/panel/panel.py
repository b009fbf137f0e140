"""A panel of N reviewers and the quorum that turns their votes into PASS, FAIL or undecided.

The rule, for a panel of N that needs K PASS votes: PASS when at least K reviewers vote PASS;
FAIL when so many vote FAIL that K PASS votes are no longer possible (at least N - K + 1);
otherwise undecided — abstentions (a hang, a crash, a garbled answer) never count either
way, so a panel whose reviewers could not judge leaves the entry unverified. PASS and FAIL
cannot both hold: that would need more than N votes. An empty panel is an error, never a pass.

Deliberately free of pygit2 and cryptography: settings validate quorum text with it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from .reviewers import Ballot, Reviewer, Subject

PASS = "PASS"
FAIL = "FAIL"
ABSTAIN = "ABSTAIN"
VOTES = (PASS, FAIL, ABSTAIN)

_K_OF_N = re.compile(r"^\s*(\d+)\s*-?\s*of\s*-?\s*(\d+)\s*$", re.IGNORECASE)
QUORUM_HELP = 'use "unanimous" (default), "majority", a number K (at least K PASS) or "K-of-N"'


@dataclass(frozen=True)
class Quorum:
    """How many PASS votes a panel needs: ``unanimous``, ``majority``, ``K`` or ``K-of-N``."""

    rule: str = "unanimous"  # unanimous | majority | at-least | k-of-n
    k: int = 0
    n: int = 0

    @classmethod
    def parse(cls, value: str | int, source: str = "quorum") -> Quorum:
        if isinstance(value, bool):
            raise ConfigError(f"{source}: quorum must be text or a number; {QUORUM_HELP}")
        if isinstance(value, int):
            if value < 1:
                raise ConfigError(f"{source}: quorum {value} is below 1; {QUORUM_HELP}")
            return cls("at-least", value)
        text = str(value).strip().lower()
        if text in ("unanimous", "all"):
            return cls("unanimous")
        if text == "majority":
            return cls("majority")
        if text.isdigit():
            return cls.parse(int(text), source)
        match = _K_OF_N.match(text)
        if match:
            k, n = int(match.group(1)), int(match.group(2))
            if not 1 <= k <= n:
                raise ConfigError(f"{source}: quorum '{value}' needs 1 <= K <= N; {QUORUM_HELP}")
            return cls("k-of-n", k, n)
        raise ConfigError(f"{source}: quorum '{value}' is not understood; {QUORUM_HELP}")

    def need(self, n: int) -> int:
        """PASS votes needed from a panel of ``n``; raises when the panel cannot meet it."""
        if n < 1:
            raise ConfigError("an empty panel cannot decide anything; configure reviewers")
        if self.rule == "unanimous":
            return n
        if self.rule == "majority":
            return n // 2 + 1
        if self.rule == "k-of-n" and n != self.n:
            raise ConfigError(
                f"quorum {self.k}-of-{self.n} expects {self.n} reviewers but this panel has "
                f'{n}; use quorum = {self.k} (at least {self.k} PASS) or "majority"'
            )
        if self.k > n:
            raise ConfigError(
                f"quorum needs {self.k} PASS votes but this panel has only {n} reviewer(s); "
                "add reviewers or lower the quorum"
            )
        return self.k

    def text(self, n: int) -> str:
        """What a verdict records: ``K-of-N`` for this panel."""
        return f"{self.need(n)}-of-{n}"

    def describe(self) -> str:
        return {
            "unanimous": "unanimous",
            "majority": "majority",
            "at-least": str(self.k),
            "k-of-n": f"{self.k}-of-{self.n}",
        }[self.rule]

    def decide(self, votes: Sequence[str]) -> str | None:
        return tally(votes, self.need(len(votes)))


def tally(votes: Sequence[str], need: int) -> str | None:
    """PASS, FAIL or None (undecided) for ``votes`` when ``need`` PASS votes are required."""
    n = len(votes)
    if votes.count(PASS) >= need:
        return PASS
    if votes.count(FAIL) >= n - need + 1:
        return FAIL
    return None


def parse_quorum_text(text: str) -> tuple[int, int] | None:
    """``(K, N)`` from a verdict's ``K-of-N`` quorum text; None for any other wording."""
    match = re.fullmatch(r"(\d+)-of-(\d+)", text)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2))


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
