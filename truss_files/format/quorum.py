"""The quorum that turns a panel's votes into PASS, FAIL or undecided, and the votes themselves.

The rule, for a panel of N that needs K PASS votes: PASS when at least K reviewers vote PASS;
FAIL when so many vote FAIL that K PASS votes are no longer possible (at least N - K + 1);
otherwise undecided -- abstentions (a hang, a crash, a garbled answer) never count either
way, so a panel whose reviewers could not judge leaves the entry unverified. PASS and FAIL
cannot both hold: that would need more than N votes.

Requirements stand beside the quorum: the checks an entry names and the reviewers a layer
above truss.toml adds (config/settings.py) each must PASS, besides the quorum of the reviewers the
signed truss.toml configures, so a writer's or a contract's reviewers can make a PASS harder,
never easier. A requirement's FAIL is the panel's FAIL; its abstention leaves it undecided.
A verdict marks such votes ``"required": true``; its ``K-of-N`` counts the others.

A value: the settings validate quorum text with it and a verdict checks its tally with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigError

__all__ = [
    "ABSTAIN",
    "FAIL",
    "PASS",
    "QUORUM_HELP",
    "VOTES",
    "Quorum",
    "parse_quorum_text",
    "tally",
    "with_requirements",
]

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


def with_requirements(outcome: str | None, required: Sequence[str]) -> str | None:
    """The panel's outcome once the requirements' votes are in: any FAIL fails it, and it
    passes only when the quorum passed and every requirement voted PASS."""
    if FAIL in required:
        return FAIL
    if outcome == PASS and any(vote != PASS for vote in required):
        return None
    return outcome


def parse_quorum_text(text: str) -> tuple[int, int] | None:
    """``(K, N)`` from a verdict's ``K-of-N`` quorum text; None for any other wording."""
    match = re.fullmatch(r"(\d+)-of-(\d+)", text)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2))
