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
from truss_files.git.bulkpack import Added, PackWriter
from truss_files.git.gitstore import Snapshot
from truss_files.model import Trust
from truss_files.signing import Ed25519Signer
from truss_files.trust.audit import Vouched, audit, check_commit, samples_of

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


def test_a_vouched_file_is_taken_as_checked_only_at_the_blob_vouched_for(
    store: MemoryStore,
    signed_commit: Commit,
    agent_key: Ed25519Signer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a bulk import vouches for (the files it made from entries it checked) is not
    read again; a file whose blob is not the one vouched for is read and judged as ever, and
    the layer and author rule still judges each (layer, author) the writer made."""
    mine = "agent:agent@example.test"  # the agent key's own name: no trainer role needed
    made = [store.new_entry("fact", "v", f"vouched {i}", author=mine) for i in range(6)]
    landed = dataclasses.replace(made[5], trust=Trust.VERIFIED)  # not what was vouched for
    changes = {e.path: entryfile.serialize(e).encode() for e in made[:5]}
    changes[landed.path] = entryfile.serialize(landed).encode()
    sha = signed_commit(
        store, changes, signer=agent_key, message="truss: write 6 entries\n\nTruss-Op: write"
    )
    commit = store.git.repo[sha]
    assert isinstance(commit, pygit2.Commit)
    blobs = {e.path: pygit2.hash(entryfile.serialize(e).encode()) for e in made}
    parsed: list[str] = []
    real = entryfile.parse

    def counted(data: bytes | str, path: str | None = None, **kw: bool) -> object:
        parsed.append(str(path))
        return real(data, path, **kw)

    monkeypatch.setattr(entryfile, "parse", counted)
    found = check_commit(store.git.repo, commit, False, vouched=Vouched(blobs, samples_of(made)))
    assert [(v.path, v.rule) for v in found] == [(landed.path, "lands-unverified")]
    assert parsed == [landed.path]
    # Unvouched, every file is read.
    parsed.clear()
    assert [(v.path, v.rule) for v in check_commit(store.git.repo, commit, False)] == [
        (landed.path, "lands-unverified")
    ]
    assert sorted(parsed) == sorted(changes)
    # In another's name: the sample stands for every entry of that shape.
    other = [dataclasses.replace(e, author="agent:mallory") for e in made[:5]]
    found = check_commit(store.git.repo, commit, False, vouched=Vouched(blobs, samples_of(other)))
    assert ("author", other[0].path) in {(v.rule, v.path) for v in found}


def test_a_commit_of_exactly_the_tree_git_built_is_checked_without_a_walk_and_no_more(
    store: MemoryStore,
    signed_commit: Commit,
    agent_key: Ed25519Signer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bulk import vouches for the tree git fast-import built on its base: a commit of that
    very tree on that base is taken whole (no file read, no diff walked); one file more, or
    the same files on another parent, and the files are found and judged as ever."""
    mine = "agent:agent@example.test"
    made = [store.new_entry("fact", "w", f"whole {i}", author=mine) for i in range(5)]
    files = {e.path: entryfile.serialize(e).encode() for e in made}
    base = store.git.tip()
    assert base is not None
    with PackWriter(store.git.git_dir, str(base.id)) as pack:
        for path, data in files.items():
            pack.add(path, data)
        tree = pack.finish()
    assert tree is not None
    added = Added(store.git.repo, base.tree, tree)
    vouched = Vouched(added, samples_of(made), base.tree, tree)
    message = "truss: write 5 entries\n\nTruss-Op: write"
    sha = signed_commit(store, files, signer=agent_key, message=message)
    commit = store.git.repo[sha]
    assert isinstance(commit, pygit2.Commit) and commit.tree_id == tree  # git's trees agree
    parsed: list[str] = []
    real = entryfile.parse

    def counted(data: bytes | str, path: str | None = None, **kw: bool) -> object:
        parsed.append(str(path))
        return real(data, path, **kw)

    monkeypatch.setattr(entryfile, "parse", counted)
    assert vouched.whole(base.tree, commit)  # taken whole: no diff walked
    assert check_commit(store.git.repo, commit, False, vouched=vouched) == []
    assert parsed == []
    # One file more than git built, beside the vouched ones: read and refused.
    landed = dataclasses.replace(
        store.new_entry("fact", "w", "slipped in", author=mine), trust=Trust.VERIFIED
    )
    bad = signed_commit(
        store,
        {landed.path: entryfile.serialize(landed).encode()},
        signer=agent_key,
        message=message,
    )
    late = store.git.repo[bad]
    assert isinstance(late, pygit2.Commit)
    found = check_commit(store.git.repo, late, False, vouched=vouched)
    assert [(v.path, v.rule) for v in found] == [(landed.path, "lands-unverified")]
    assert parsed == [landed.path]
    assert not vouched.whole(late.parents[0].tree, late)  # another tree: walked, as ever
    # The same tree on another parent is no whole commit of what was vouched for either.
    assert not vouched.whole(late.tree, commit)
