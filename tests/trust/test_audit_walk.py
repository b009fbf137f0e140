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
