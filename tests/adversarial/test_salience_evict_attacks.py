"""Attacks on the belief commits that only rank or retire: ``salience update`` and ``evict``.

A hostile client labels a commit ``Truss-Op: salience`` or ``Truss-Op: evict`` and makes it
carry more than that op may: a changed body of a verified note, a note raised to verified
with no verdict, a deleted file, an agent's key. Each is made past the library
(tests/support/hand_commits.py) or through it with the wrong key, and refused by the library or
named by the audit."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from tests.support.belief_support import tip
from tests.support.hand_commits import commit as hand_commit
from truss_files.errors import TrussError
from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.format.trailers import trailers
from truss_files.model import Entry, Trust
from truss_files.signing import Ed25519Signer
from truss_files.trust.audit import audit


def _verified(store: MemoryStore, key: str = "k", body: str = "holds") -> Entry:
    entry = store.write("fact", key, body)
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS"))
    return store.get(entry.id)


def _flagged(store: MemoryStore, commit: str) -> list[str]:
    return [v.rule for v in audit(store.git).violations if v.commit == commit]


def _labelled(op: str, entry: Entry) -> str:
    return f"truss: {op}\n\n" + trailers(op=op) + "\n" + trailers(entry=entry.id)


def test_a_salience_commit_cannot_change_a_verified_body(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    entry = _verified(store)
    forged = dataclasses.replace(entry, body="something else", salience=0.9)
    commit = hand_commit(
        store,
        operator_key,
        {entry.path: entryfile.serialize(forged).encode()},
        _labelled("salience", entry),
    )
    assert _flagged(store, commit) == ["entry"]


def test_a_salience_commit_cannot_raise_a_note_to_verified(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    entry = store.write("fact", "k", "claims")
    raised = dataclasses.replace(entry, trust=Trust.VERIFIED, salience=0.9)
    commit = hand_commit(
        store,
        operator_key,
        {entry.path: entryfile.serialize(raised).encode()},
        _labelled("salience", entry),
    )
    assert _flagged(store, commit) == ["verdict"]


def test_an_evict_commit_cannot_delete_a_file(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    entry = _verified(store)
    commit = hand_commit(store, operator_key, {entry.path: None}, _labelled("evict", entry))
    assert _flagged(store, commit) == ["no-delete"]


def test_an_agent_key_cannot_sign_a_salience_commit(
    store: MemoryStore,
    add_signer: Callable[..., str],
    store_as: Callable[[Ed25519Signer], MemoryStore],
) -> None:
    entry = _verified(store)
    agent = Ed25519Signer.generate("agent@example.test")
    add_signer(store, agent, "agent@example.test", ("agent",))
    raised = dataclasses.replace(entry, salience=1.0)
    commit = hand_commit(
        store,
        agent,
        {entry.path: entryfile.serialize(raised).encode()},
        _labelled("salience", entry),
    )
    assert _flagged(store, commit) == ["role"]


def test_the_library_refuses_an_agent_s_salience_update_and_evict(
    store: MemoryStore,
    add_signer: Callable[..., str],
    signed_commit: Callable[..., str],
    store_as: Callable[[Ed25519Signer], MemoryStore],
) -> None:
    facts = [_verified(store, f"k{n}", f"fact number {n}") for n in range(3)]
    signed_commit(
        store,
        lambda snap: {
            "truss.toml": (snap.read("truss.toml") or b"")
            + b"\n[policy.eviction]\nfact = {max_entries = 1}\n"
        },
    )
    agent = Ed25519Signer.generate("agent@example.test")
    add_signer(store, agent, "agent@example.test", ("agent",))
    as_agent = store_as(agent)
    assert as_agent.salience_update(dry_run=True).changes, "nothing to fold: no attack"
    assert as_agent.evict(dry_run=True).changes, "nothing over budget: no attack"
    before = tip(store)
    for act in (as_agent.salience_update, as_agent.evict):
        with pytest.raises(TrussError, match="role|may not|not allowed"):
            act()
    assert tip(store) == before
    assert [store.get(f.id) for f in facts] == facts
