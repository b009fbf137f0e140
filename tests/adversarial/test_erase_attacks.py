"""Attacks on erasure: only an operator may erase (an agent's key is refused before
anything is read or changed); an erasure forged by an agent key, one that removes more than
its record lists, a record whose map lies, a rewritten commit no record maps and a history
that replays the erased commits all fail the audit; afterwards the text is in no object and
no file of the repository. (The gate and sync: tests/store/test_erasing_sync.py.)"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest

from tests.conftest import GIT_ENV
from tests.support import console
from tests.support.console import SCRIPT
from tests.support.erasing import SECRET, AddsAFile, found, make_store
from truss_files.errors import Forbidden
from truss_files.facade import MemoryStore
from truss_files.git.gitstore import Plan, Snapshot
from truss_files.model import Entry
from truss_files.signing import AllowedSigners, Ed25519Signer, PublicKey
from truss_files.signing.trustpolicy import CONFIG_PATH, SIGNERS_PATH
from truss_files.store.erase import plan_erasure
from truss_files.store.erasing import Rewrite, build
from truss_files.tools import ToolSession
from truss_files.trust.audit import audit
from truss_files.trust.erasures import record_path


@pytest.mark.parametrize("roles", [("agent",), ("agent", "panel", "trainer"), ()])
def test_an_erasure_by_a_key_without_operator_is_forbidden(
    store: MemoryStore, add_signer: Callable[..., str], tmp_path: Path, roles: tuple[str, ...]
) -> None:
    agent = Ed25519Signer.generate("bot@example.test")
    agent.save(tmp_path / "bot_key")
    add_signer(store, agent, "bot@example.test", roles)
    entry = store.write("fact", "alice", "Alice Example lives at 12 Privacy Lane.")
    before = str(store.git.tip().id)  # type: ignore[union-attr]
    as_agent = MemoryStore(store.git.workdir, signer=agent, environ=store.environ)  # type: ignore[arg-type]
    with pytest.raises(Forbidden, match="operator role"):
        plan_erasure(as_agent, [entry.id], "because")
    for extra in (["--dry-run"], []):
        result = console.run(  # the console script, in a process of its own
            [
                str(SCRIPT),
                "--store",
                str(store.git.workdir),
                "--key",
                str(tmp_path / "bot_key"),
                "erase",
                entry.id,
                "--reason",
                "because",
                "--format",
                "json",
                *extra,
            ],
            text=True,
        )
        assert result.returncode == 1
        assert json.loads(result.stdout)["error"]["code"] == "forbidden"
    assert str(store.git.tip().id) == before  # type: ignore[union-attr]


def test_an_unknown_key_is_forbidden(store: MemoryStore, tmp_path: Path) -> None:
    stranger = Ed25519Signer.generate("nobody@example.test")
    entry = store.write("fact", "alice", "Alice Example lives at 12 Privacy Lane.")
    as_stranger = MemoryStore(store.git.workdir, signer=stranger, environ=store.environ)  # type: ignore[arg-type]
    with pytest.raises(Forbidden, match="not in .truss/allowed_signers"):
        plan_erasure(as_stranger, [entry.id], "because")


# -- forged, overreaching and lying erasures; the old history replayed; the text afterwards ---


@dataclass
class Victim:
    """A store with three entries and an agent key, never changed by the attacks here: each
    forges an erasure's commits (``erasing.build`` moves no ref) and audits them."""

    store: MemoryStore
    agent: Ed25519Signer
    gone: Entry
    also: Entry
    kept: Entry


@pytest.fixture(scope="module")
def victim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Victim]:
    base = tmp_path_factory.mktemp("victim")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(base / "home"))
        for name, value in GIT_ENV.items():
            mp.setenv(name, value)
        store, _ = make_store(base)
        agent = Ed25519Signer.generate("bot@example.test")
        _add_agent(store, agent)
        gone = store.write("fact", "alice", SECRET)
        also = store.write("fact", "bob", "Bob Example's phone is 555-0100.")
        kept = store.write("fact", "carol", "Carol prefers tea.")
        store.promote(kept.id, store.sign_verdict(kept.id, "PASS", note="ok"))
        yield Victim(store, agent, gone, also, kept)


def _add_agent(store: MemoryStore, agent: Ed25519Signer) -> None:
    def plan(snap: Snapshot) -> Plan:
        signers = AllowedSigners.parse((snap.read(SIGNERS_PATH) or b"").decode())
        signers = signers.with_signer(
            "bot@example.test", PublicKey.from_line(agent.public_line), ("git", "truss-verdict")
        )
        toml = (snap.read(CONFIG_PATH) or b"").decode()
        toml = re.sub(
            r"^agent = \[(.*)\]$", r'agent = [\1, "bot@example.test"]', toml, count=1, flags=re.M
        )
        return Plan(
            {SIGNERS_PATH: signers.render().encode(), CONFIG_PATH: toml.encode()},
            "truss: add signer\n\nTruss-Op: signers",
        )

    assert store.git.apply(plan, store.signer, store.identity("operator@example.test"))


def _rules(store: MemoryStore, top: object) -> set[str]:
    report = audit(store.git, str(top), environ=store.environ, attestations=False)
    return {v.rule for v in report.violations}


def _as(store: MemoryStore, signer: Ed25519Signer) -> MemoryStore:
    return MemoryStore(store.git.workdir, signer=signer, environ=store.environ)  # type: ignore[arg-type]


def test_the_honest_erasure_audits_clean(victim: Victim) -> None:
    built = build(victim.store, [victim.gone.id], "asked", "operator@example.test")
    assert _rules(victim.store, built.top) == set()


@pytest.mark.parametrize("by", ["bot@example.test", "operator@example.test"])
def test_an_erasure_forged_by_an_agent_key_fails_the_audit(victim: Victim, by: str) -> None:
    # The agent makes the whole rewrite and the record with its own key, naming itself or
    # the operator as the erasing principal.
    forged = build(_as(victim.store, victim.agent), [victim.gone.id], "mine", by)
    report = audit(victim.store.git, str(forged.top), environ=victim.store.environ)
    rules = {v.rule for v in report.violations}
    assert "erasure-unmapped" in rules and "role" in rules  # the record commit needs operator
    said = " ".join(v.message for v in report.violations)
    assert ("does not hold the operator role" in said) or ("signed by bot@example.test" in said)


def test_a_rewrite_that_erases_more_than_its_record_says_fails(victim: Victim) -> None:
    built = build(
        victim.store,
        [victim.gone.id, victim.also.id],
        "asked",
        "operator@example.test",
        recorded=[victim.gone.id],
    )
    rules = _rules(victim.store, built.top)
    assert "erasure-scope" in rules
    assert "erasure-tree" in rules  # the originals are still here to compare with


def test_a_record_whose_map_lies_fails(victim: Victim) -> None:
    store = victim.store
    # The map names commits whose trees are not the originals less the erased entry.
    built = build(store, [victim.gone.id], "asked", "operator@example.test", rewrite=AddsAFile)
    assert "erasure-tree" in _rules(store, built.top)
    # The map swaps two rewritten commits: each is then mapped from the wrong original.
    honest = build(store, [victim.gone.id], "asked", "operator@example.test")
    olds = list(honest.record.rewritten)
    swapped = dict(honest.record.rewritten)
    swapped[olds[0]], swapped[olds[1]] = swapped[olds[1]], swapped[olds[0]]
    lying = dataclasses.replace(honest.record, rewritten=swapped)
    top = store.git.repo[honest.top]
    parent = top.parents[0]  # type: ignore[attr-defined]
    tree = store.git.write_tree(parent.tree, {record_path(lying.id): lying.render()})
    assert tree is not None
    forged = store.git.make_commit(
        tree, [parent.id], "truss: erase\n\nTruss-Op: erase", store.signer,
        store.identity("operator@example.test"),
    )  # fmt: skip
    assert "erasure-unmapped" in _rules(store, forged)


class _NamesTheAgent(Rewrite):
    """Names the agent as every rewritten commit's original signer."""

    def original_signer(self, commit: pygit2.Commit) -> str:
        return "bot@example.test"


def test_a_rewritten_commit_is_judged_by_its_original_signers_roles(victim: Victim) -> None:
    # The promotion after the erased entry needs the panel role; named as the agent's, it
    # fails as the agent's own promotion would.
    built = build(
        victim.store, [victim.gone.id], "asked", "operator@example.test", rewrite=_NamesTheAgent
    )
    report = audit(victim.store.git, str(built.top), environ=victim.store.environ)
    assert any(v.rule == "role" and "bot@example.test" in v.message for v in report.violations), (
        report.violations
    )


def test_a_rewritten_commit_no_record_maps_fails(victim: Victim) -> None:
    store = victim.store
    tip = store.git.tip()
    assert tip is not None
    message = tip.message.rstrip("\n") + "\nTruss-Rewritten-From: " + "0" * 40 + "\n"
    made = store.git.make_commit(
        tip.tree.id, [tip.parents[0].id], message, store.signer,
        store.identity("operator@example.test"),
    )  # fmt: skip
    assert "erasure-unmapped" in _rules(store, made)


def test_a_history_that_replays_the_erased_commits_fails(victim: Victim) -> None:
    store = victim.store
    honest = build(store, [victim.gone.id], "asked", "operator@example.test")
    old_tip = store.git.tip()
    assert old_tip is not None
    # A clone merges its old history into the erasure: the originals come back.
    top = store.git.commit(str(honest.top))
    merged = store.git.make_commit(
        top.tree.id, [honest.top, old_tip.id], "truss: sync merge\n\nTruss-Op: merge",
        store.signer, store.identity("operator@example.test"),
    )  # fmt: skip
    assert "erasure-replayed" in _rules(store, merged)


def test_afterwards_the_text_is_nowhere_in_the_repository(store: MemoryStore) -> None:
    work = store.git.workdir
    assert work is not None
    gone = store.write("fact", "alice", SECRET)
    store.promote(gone.id, store.sign_verdict(gone.id, "PASS", note="ok"))
    store.write("fact", "after", "Unrelated.")
    session = ToolSession(store, flags=("memory",), run_id="R-leak", durable=True)
    assert session.call("memory_query", {"query": "privacy lane"}).error is None
    store.query("privacy lane")
    assert found(work, gone.id)  # the needle is there to find before
    store.erase([gone.id], "asked")
    assert not found(work, gone.id)
