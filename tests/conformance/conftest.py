"""Fixtures of the conformance suite: ``memory``, once per implementation of the seam.

An implementation is built by a function given a fresh folder, one key and its principal;
the store it returns must let that key write, sign verdicts as the panel and act as
operator (what ``truss-files init`` grants its first principal). The suite signs verdicts
with that key through ``panel`` -- the verdict format is part of the contract, whatever
the backing -- and forges others with keys the store has never seen.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from truss_files.memory import Memory
from truss_files.signing import Ed25519Signer
from truss_files.trust.verdict import Verdict, sign_verdict

PRINCIPAL = "keeper@example.test"

Implementation = Callable[[Path, Ed25519Signer, str], Memory]


class Clock:
    """One second per call from a fixed instant, so created times are distinct and ordered
    (a backing that takes a clock is given this one)."""

    def __init__(self) -> None:
        self.now = datetime.datetime(2026, 11, 29, 11, 0, 0, tzinfo=datetime.UTC)

    def __call__(self) -> datetime.datetime:
        self.now += datetime.timedelta(seconds=1)
        return self.now


def git_store(root: Path, key: Ed25519Signer, principal: str) -> Memory:
    """The git store: a real repository initialised by ``key``, as `truss-files init` does."""
    from truss_files import MemoryStore
    from truss_files.store.initstore import init_store

    path = root / "git-store"
    init_store(path, key, principal)
    return MemoryStore(path, signer=key, clock=Clock(), environ=dict(os.environ))


IMPLEMENTATIONS: dict[str, Implementation] = {"git": git_store}


@dataclass(frozen=True)
class Panel:
    """The key the store under test trusts as its panel, and verdicts it signs."""

    key: Ed25519Signer
    principal: str
    _clock: Clock = field(default_factory=Clock)

    def verdict(
        self,
        entry_id: str,
        outcome: str = "PASS",
        *,
        key: Ed25519Signer | None = None,
        principal: str | None = None,
        votes: Sequence[Mapping[str, Any]] | None = None,
    ) -> Verdict:
        """A verdict on ``entry_id``, signed by this panel's key unless ``key`` is given
        (a forgery then: the store has never seen that key)."""
        who = principal or self.principal
        return sign_verdict(
            entry_id,
            outcome,
            [{"reviewer": who, "kind": "human", "vote": outcome, "evidence": {}}]
            if votes is None
            else votes,
            signer=key or self.key,
            principal=who,
            quorum="1-of-1",
            policy="manual",
            now=self._clock().strftime("%Y-%m-%dT%H:%M:%SZ"),
        )


@pytest.fixture
def panel() -> Panel:
    return Panel(Ed25519Signer.generate(PRINCIPAL), PRINCIPAL)


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def memory(request: pytest.FixtureRequest, tmp_path: Path, panel: Panel) -> Memory:
    """A fresh, empty store of each implementation, trusting ``panel``'s key for every role."""
    build = IMPLEMENTATIONS[request.param]
    return build(tmp_path, panel.key, panel.principal)
