"""The audit of one commit takes each changed path's blob from one tree diff (no lookup by
path per entry): a big commit still has every bad file found, each at its own path, and a
big clean one passes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pygit2
import pytest

from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.git.gitstore import Snapshot
from truss_files.model import Trust
from truss_files.trust.audit import audit, check_commit

Commit = Callable[..., str]


def _found(store: MemoryStore) -> list[tuple[str, str, str]]:
    return sorted((v.commit, v.path, v.rule) for v in audit(store.git).violations)


def test_a_big_import_audits_clean_and_each_tampered_file_is_named(
    store: MemoryStore, signed_commit: Commit, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = [store.new_entry("fact", f"k{i % 9}", f"fact {i}") for i in range(1200)]
    store.import_entries(batch)
    tip = store.git.tip()
    assert tip is not None and check_commit(store.git.repo, tip, False) == []
    assert audit(store.git).ok

    # One hand commit rewrites 600 entries (a salience change each, which the panel role
    # may make) and slips three bad files in among them.
    snap = store.snapshot()
    changes: dict[str, bytes | None] = {}
    for entry in batch[:600]:
        changes[entry.path] = entryfile.serialize(dataclasses.replace(entry, salience=0.9)).encode()
    promoted = batch[100]  # verified with no verdict
    text = (
        (snap.read(promoted.path) or b"").decode().replace("trust: unverified", "trust: verified")
    )
    changes[promoted.path] = text.encode()
    edited = batch[400]  # the body edited under its content address
    changes[edited.path] = (snap.read(edited.path) or b"").replace(b"fact 400", b"fact 4000")
    fresh = [store.new_entry("fact", "new", f"added {i}") for i in range(300)]
    for entry in fresh:
        changes[entry.path] = entryfile.serialize(entry).encode()
    landed = dataclasses.replace(fresh[299], trust=Trust.VERIFIED)  # a new entry lands verified
    changes[landed.path] = entryfile.serialize(landed).encode()
    sha = signed_commit(store, changes, message="truss: salience\n\nTruss-Op: salience")

    commit = store.git.repo[sha]
    assert isinstance(commit, pygit2.Commit)
    # Count the lookups by path (the real method runs): the policy files and a handful of
    # others, not one per changed entry.
    looked: list[str] = []
    by_path = Snapshot._obj

    def counted(self: Snapshot, path: str) -> pygit2.Object | None:
        looked.append(path)
        return by_path(self, path)

    monkeypatch.setattr(Snapshot, "_obj", counted)
    rules = sorted((v.path, v.rule) for v in check_commit(store.git.repo, commit, False))
    assert len(looked) < 30, looked[:40]
    monkeypatch.undo()
    assert rules == sorted(
        [(promoted.path, "verdict"), (edited.path, "entry"), (landed.path, "lands-unverified")]
    )
    assert _found(store) == sorted((sha, path, rule) for path, rule in rules)


def test_a_read_that_must_audit_first_says_so_rather_than_look_frozen(
    store: MemoryStore, signed_commit: Commit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit the library did not make (here a hand commit of 200 entries) is audited by
    the next read; when that takes longer than ``SLOW_AUDIT`` the read says what it does."""
    from truss_files.git.gitdir import GitDir
    from truss_files.trust import readgate

    entries = [store.new_entry("fact", "hand", f"hand {i}") for i in range(200)]
    sha = signed_commit(
        store,
        {e.path: entryfile.serialize(e).encode() for e in entries},
        message="truss: write 200 entries\n\nTruss-Op: write",
    )
    said: list[str] = []
    store.git.note = said.append
    monkeypatch.setattr(readgate, "SLOW_AUDIT", 0.0)  # every audit counts as slow here
    assert readgate.refusal(GitDir(store.git.git_dir), sha, store=store.git) is None
    assert len(said) == 1 and f"up to {sha[:12]}" in said[0] and "auditing" in said[0], said
    said.clear()
    assert readgate.refusal(GitDir(store.git.git_dir), sha, store=store.git) is None
    assert said == []  # the verdict is kept: the next read neither audits nor says anything
