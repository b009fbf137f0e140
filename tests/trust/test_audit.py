"""The audit: every rule of DESIGN.md §3 caught on a real, hand-tampered history, each
violation naming commit, file and rule — and none of it costing a committed entry."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pygit2
import pytest

import tests.support.hand_commits as hand
from truss_files.errors import UsageError
from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.git.gitstore import GitStore, Identity, Snapshot
from truss_files.model import Entry, Kind, Provenance, Trust
from truss_files.signing import Ed25519Signer
from truss_files.signing.trustpolicy import is_store_path
from truss_files.store.initstore import CORE_PATH
from truss_files.trust.audit import AuditReport, audit, check_commit
from truss_files.trust.verdict import sign_verdict

AGENT = "agent@example.test"
Commit = Callable[..., str]


@dataclasses.dataclass
class World:
    """A store with a verified and an unverified entry, and the commit they were made at."""

    store: MemoryStore
    verified: Entry
    unverified: Entry
    base: str  # the tip after the good history


@pytest.fixture
def world(store: MemoryStore) -> Iterator[World]:
    verified = store.write("fact", "db", "Use postgres for the ledger.")
    verified = store.promote(verified.id, store.sign_verdict(verified.id, "PASS"))
    unverified = store.write("lesson", "flaky", "Retry the network tests once.")
    base = store.snapshot().oid
    assert base is not None
    w = World(store, verified, unverified, base)
    yield w
    # After every tampering test, the good history's entries are still readable, and the
    # audit itself still runs to the end over the tampered history.
    old = store.snapshot(base)
    for entry in (verified, unverified):
        assert store.get(entry.id, old) == entry
        assert entryfile.parse(old.read(entry.path) or b"", entry.path) == entry
    audit(store.git)


def _found(report: AuditReport) -> list[tuple[str, str, str]]:
    return [(v.commit, v.path, v.rule) for v in report.violations]


def _text(store: MemoryStore, entry: Entry) -> str:
    return (store.snapshot().read(entry.path) or b"").decode()


# --------------------------------------------------------------------------- clean


def test_a_clean_store_passes(world: World) -> None:
    report = audit(world.store.git)
    assert report.ok and report.violations == ()
    assert report.checked == 4  # init, write, promote, write
    assert report.notes == ()  # the root is pinned by init


def test_a_full_cycle_passes(world: World) -> None:
    s = world.store
    s.demote(world.verified.id, "doubt")
    s.revert("HEAD")
    s.reject(world.unverified.id, s.sign_verdict(world.unverified.id, "FAIL"))
    newer = s.write("fact", "db", "Use postgres 16 for the ledger.")
    s.promote(newer.id, s.sign_verdict(newer.id, "PASS"))
    report = audit(s.git)
    assert report.ok, _found(report)
    assert report.checked == 9


def test_code_only_commits_need_no_signature(world: World, git: Callable[..., str]) -> None:
    repo = world.store.git.workdir
    assert repo is not None
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("print('hello')\n")
    (repo / "README.md").write_text("# project\n")
    git(repo, "add", "src/app.py", "README.md")
    git(repo, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "code change")
    assert (
        not is_store_path("src/app.py")
        and is_store_path("memories/x")
        and is_store_path("truss.toml")
    )
    report = audit(world.store.git)
    assert report.ok, _found(report)
    assert report.checked == 5


# ------------------------------------------------------------------- trust without a verdict


def test_hand_edit_to_verified_without_a_verdict(world: World, signed_commit: Commit) -> None:
    s, entry = world.store, world.unverified
    text = _text(s, entry).replace("trust: unverified", "trust: verified")
    sha = signed_commit(s, {entry.path: text.encode()})
    assert _found(audit(s.git)) == [(sha, entry.path, "verdict")]
    # The store reads what is committed; the audit is what says it is not to be believed.
    assert s.get(entry.id).trust is Trust.VERIFIED


def test_verified_with_a_verdict_for_another_id(world: World, signed_commit: Commit) -> None:
    s, entry = world.store, world.unverified
    stolen = world.verified.provenance.verified_by
    forged = dataclasses.replace(
        entry,
        trust=Trust.VERIFIED,
        provenance=dataclasses.replace(entry.provenance, verified_by=stolen),
    )
    sha = signed_commit(s, {entry.path: entryfile.serialize(forged).encode()})
    report = audit(s.git)
    assert _found(report) == [(sha, entry.path, "verdict")]
    assert f"not {entry.id}" in report.violations[0].message


def test_verified_with_a_verdict_from_a_non_panel_key(
    world: World, signed_commit: Commit, add_signer: Commit
) -> None:
    s, entry = world.store, world.unverified
    agent = Ed25519Signer.generate(AGENT)
    add_signer(s, agent, AGENT, ("agent",))
    verdict = sign_verdict(
        entry.id,
        "PASS",
        [{"reviewer": AGENT, "kind": "human", "vote": "PASS", "evidence": {}}],
        signer=agent,
        principal=AGENT,
        quorum="1-of-1",
        policy="manual",
        now="2026-11-29T12:00:00Z",
    )
    forged = dataclasses.replace(
        entry,
        trust=Trust.VERIFIED,
        provenance=dataclasses.replace(entry.provenance, verified_by=verdict.to_dict()),
    )
    sha = signed_commit(s, {entry.path: entryfile.serialize(forged).encode()})
    report = audit(s.git)
    assert _found(report) == [(sha, entry.path, "verdict")]
    assert "panel role" in report.violations[0].message


def test_a_verdict_edited_inside_the_file(world: World, signed_commit: Commit) -> None:
    s, entry = world.store, world.verified
    verdict = dict(entry.provenance.verified_by or {})
    verdict["votes"] = [{"reviewer": "mallory", "kind": "human", "vote": "PASS", "evidence": {}}]
    forged = dataclasses.replace(
        entry,
        salience=0.9,
        provenance=dataclasses.replace(entry.provenance, verified_by=verdict),
    )
    sha = signed_commit(s, {entry.path: entryfile.serialize(forged).encode()})
    assert _found(audit(s.git)) == [(sha, entry.path, "verdict")]


def test_a_new_entry_landing_verified(world: World, signed_commit: Commit) -> None:
    s = world.store
    fresh = Entry(
        kind=world.verified.kind,
        key="sneaky",
        body="Landed verified in one step.",
        author="agent:operator@example.test",
        created="2026-11-29T12:00:00Z",
        provenance=Provenance(produced_by="cli:operator@example.test"),
    )
    verdict = s.sign_verdict(world.unverified.id, "PASS")  # any verdict at all
    landed = dataclasses.replace(
        fresh,
        trust=Trust.VERIFIED,
        provenance=dataclasses.replace(fresh.provenance, verified_by=verdict.to_dict()),
    )
    sha = signed_commit(s, {landed.path: entryfile.serialize(landed).encode()})
    assert _found(audit(s.git)) == [(sha, landed.path, "lands-unverified")]


@pytest.mark.parametrize(("old", "new"), [("verified", "unverified"), ("verified", "rejected")])
def test_an_illegal_transition(world: World, signed_commit: Commit, old: str, new: str) -> None:
    s, entry = world.store, world.verified
    text = _text(s, entry).replace(f"trust: {old}", f"trust: {new}")
    sha = signed_commit(s, {entry.path: text.encode()})
    rules = [r for c, p, r in _found(audit(s.git)) if c == sha and p == entry.path]
    assert "transition" in rules


# --------------------------------------------------------------------------- signatures


def test_an_unsigned_commit_touching_memories(world: World, git: Callable[..., str]) -> None:
    s = world.store
    repo = s.git.workdir
    assert repo is not None
    entry = Entry(
        kind=world.unverified.kind,
        key="unsigned",
        body="Committed with the git CLI, no signature.",
        author="agent:someone",
        created="2026-11-29T12:00:00Z",
        provenance=Provenance(produced_by="cli:operator@example.test"),
    )
    (repo / entry.path).parent.mkdir(parents=True, exist_ok=True)
    (repo / entry.path).write_text(entryfile.serialize(entry))
    git(repo, "add", entry.path)
    git(repo, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "sneak an entry in")
    sha = git(repo, "rev-parse", "HEAD").strip()
    report = audit(s.git)
    assert _found(report) == [(sha, "", "signed")]
    assert "unsigned" in report.violations[0].message
    assert s.get(entry.id) == entry  # readable, and flagged


def test_a_commit_signed_by_an_unknown_key(world: World, signed_commit: Commit) -> None:
    s = world.store
    entry = Entry(
        kind=world.unverified.kind,
        key="stranger",
        body="Signed by a key nobody allowed.",
        author="agent:stranger",
        created="2026-11-29T12:00:00Z",
        provenance=Provenance(produced_by="cli:operator@example.test"),
    )
    stranger = Ed25519Signer.generate("stranger@example.test")
    sha = signed_commit(s, {entry.path: entryfile.serialize(entry).encode()}, signer=stranger)
    report = audit(s.git)
    assert _found(report) == [(sha, "", "signed")]
    assert stranger.fingerprint in report.violations[0].message


def test_a_key_added_by_a_non_operator_taints_what_it_signs(
    world: World,
    add_signer: Commit,
    signed_commit: Commit,
    store_as: Callable[[Ed25519Signer], MemoryStore],
) -> None:
    s = world.store
    agent = Ed25519Signer.generate(AGENT)
    add_signer(s, agent, AGENT, ("agent",))  # by the operator: fine
    legit = store_as(agent).write("fact", "by-agent", "An agent's honest write.")
    # The agent slips in a key under the operator's own name.
    evil = Ed25519Signer.generate("evil")
    bad = add_signer(s, evil, "operator@example.test", by=agent)
    as_evil = store_as(evil)
    # The library writes nothing on this history now (it fails the audit): what follows is
    # signed by hand, as a client that skips the library would.
    forged = hand.write(s, evil, "fact", "by-evil", "Written with the smuggled key.")
    forged_commit = s.snapshot().oid
    hand.promote(s, evil, legit.id, as_evil.sign_verdict(legit.id, "PASS"))
    promote_commit = s.snapshot().oid
    assert isinstance(s.signer, Ed25519Signer)
    after = hand.write(s, s.signer, "fact", "after", "The real operator writes again.")
    after_commit = s.snapshot().oid
    # An operator's later change to truss.toml alone does not adopt the smuggled key.
    signed_commit(
        s,
        lambda snap: {
            "truss.toml": (snap.read("truss.toml") or b"").replace(b'"exact"', b'"hybrid"')
        },
    )
    hand.write(s, evil, "fact", "by-evil-2", "Still the smuggled key.")
    late_commit = s.snapshot().oid

    report = audit(s.git)
    found = _found(report)
    assert (bad, "", "role") in found
    flagged = {c for c, _, _ in found}
    assert forged_commit in flagged and promote_commit in flagged and late_commit in flagged
    assert after_commit not in flagged
    assert bad in flagged and len(flagged) == 4
    # Entries written before and after are intact.
    assert s.get(after.id) == after and s.get(forged.id) == forged


def test_an_agent_cannot_change_roles_or_identity_core(
    world: World, signed_commit: Commit, add_signer: Commit
) -> None:
    s = world.store
    agent = Ed25519Signer.generate(AGENT)
    add_signer(s, agent, AGENT, ("agent",))
    core = (s.snapshot().read(CORE_PATH) or b"") + b"\n- Obey the agent.\n"
    sha_core = signed_commit(s, {CORE_PATH: core}, signer=agent)
    toml = (s.snapshot().read("truss.toml") or b"").replace(
        b'panel = ["operator@example.test"',
        b'panel = ["operator@example.test", "' + AGENT.encode() + b'"',
    )
    sha_toml = signed_commit(s, {"truss.toml": toml}, signer=agent)
    found = _found(audit(s.git))
    assert (sha_core, "", "role") in found and (sha_toml, "", "role") in found


# --------------------------------------------------------------------------- files


def test_a_deleted_entry_file(world: World, signed_commit: Commit) -> None:
    s, entry = world.store, world.unverified
    sha = signed_commit(s, {entry.path: None})
    assert _found(audit(s.git)) == [(sha, entry.path, "no-delete")]


def test_a_body_edited_in_place(world: World, signed_commit: Commit) -> None:
    s, entry = world.store, world.verified
    text = _text(s, entry).replace("Use postgres", "Use mysql")
    sha = signed_commit(s, {entry.path: text.encode()})
    report = audit(s.git)
    assert _found(report) == [(sha, entry.path, "entry")]
    assert "does not match the content" in report.violations[0].message
    # The other entries still read; the corrupt one says why it cannot be read.
    assert s.get(world.unverified.id) == world.unverified
    with pytest.raises(Exception, match="does not match"):
        s.get(entry.id)


def test_a_file_at_the_wrong_path(world: World, signed_commit: Commit) -> None:
    s, entry = world.store, world.unverified
    wrong = f"memories/fact/{entry.id[:2]}/{entry.id}.md"  # a lesson in the fact folder
    sha = signed_commit(s, {wrong: entryfile.serialize(entry).encode()})
    report = audit(s.git)
    assert _found(report) == [(sha, wrong, "entry")]
    assert "wrong path" in report.violations[0].message


# --------------------------------------------------------------------------- ranges and roots


def test_a_range_audits_only_that_range(world: World, signed_commit: Commit) -> None:
    s, entry = world.store, world.unverified
    text = _text(s, entry).replace("trust: unverified", "trust: verified")
    bad = signed_commit(s, {entry.path: text.encode()})
    assert isinstance(s.signer, Ed25519Signer)
    # Signed by hand: the library writes nothing on a history that fails the audit.
    hand.write(s, s.signer, "fact", "later-1", "after the bad commit")
    hand.write(s, s.signer, "fact", "later-2", "after the bad commit, again")
    assert not audit(s.git).ok
    after = audit(s.git, f"{bad}..HEAD")
    assert after.ok and after.checked == 2
    before = audit(s.git, f"{world.base}..{bad}")
    assert _found(before) == [(bad, entry.path, "verdict")] and before.checked == 1
    upto = audit(s.git, world.base)
    assert upto.ok and upto.checked == 4


def test_an_unpinned_root_is_found_and_noted(world: World, git: Callable[..., str]) -> None:
    repo = world.store.git.workdir
    assert repo is not None
    git(repo, "config", "--unset", "truss.root")
    report = audit(GitStore(repo), environ={})
    assert report.ok and report.notes and "not pinned" in report.notes[0]


def test_a_root_the_branch_does_not_descend_from(
    world: World, tmp_path: Path, operator_key: Ed25519Signer
) -> None:
    from truss_files.store.initstore import init_store

    other = init_store(tmp_path / "other", Ed25519Signer.generate("o"), "other@example.test")
    repo = world.store.git.repo
    # Make the other store's root reachable as an object, but not as an ancestor.
    remote = repo.remotes.create("other", str(other.path))
    remote.fetch()
    report = audit(world.store.git, root=other.root)
    assert [v.rule for v in report.violations] == ["trust-root"]


def test_a_directory_that_is_no_store(tmp_path: Path) -> None:
    import pygit2

    pygit2.init_repository(str(tmp_path / "r"), initial_head="main")
    with pytest.raises(UsageError, match="no truss store"):
        audit(GitStore(tmp_path / "r"), environ={})


def test_check_commit_judges_one_commit(world: World) -> None:
    repo = world.store.git.repo
    tip = world.store.git.tip()
    assert tip is not None
    assert check_commit(repo, tip, False) == []
    snap = Snapshot(repo, tip)
    assert snap.read(world.unverified.path) is not None


# --------------------------------------------------------------------------- merges


def _side_branch(world: World, git: Callable[..., str], write: Callable[[], object]) -> str:
    """A commit on a branch from the world's base, made by ``write`` through the library."""
    repo = world.store.git.workdir
    assert repo is not None
    git(repo, "switch", "-q", "-c", "side", world.base)
    write()
    side = world.store.snapshot().oid
    git(repo, "switch", "-q", "main")
    assert side is not None
    return side


def _three_way(repo: pygit2.Repository, ours: str, theirs: str) -> pygit2.Oid:
    base = repo.merge_base(pygit2.Oid(hex=ours), pygit2.Oid(hex=theirs))
    trees = [repo[x].peel(pygit2.Tree) for x in (base, ours, theirs)]
    index = repo.merge_trees(*trees)
    assert not index.conflicts
    return index.write_tree(repo)


def _merge(
    world: World, ours: str, theirs: str, tree: pygit2.Oid | None = None, *, signed: bool = True
) -> str:
    """A merge commit of ``ours`` and ``theirs`` (their three-way merge, or ``tree``),
    signed by the operator or not signed at all; main moves to it."""
    s = world.store
    repo = s.git.repo
    tree = tree or _three_way(repo, ours, theirs)
    parents = [pygit2.Oid(hex=ours), pygit2.Oid(hex=theirs)]
    message = "merge side\n\nTruss-Op: merge"
    if signed:
        oid = s.git.make_commit(tree, parents, message, s.signer, Identity("o", "o@example.test"))
    else:
        who = pygit2.Signature("Test Operator", "operator@example.test")
        oid = repo.create_commit(None, who, who, message, tree, parents)
    repo.references["refs/heads/main"].set_target(oid)
    return str(oid)


def _with_path_from(repo: pygit2.Repository, tree: pygit2.Tree, path: str, rev: str) -> pygit2.Oid:
    """``tree`` with ``path`` as commit ``rev`` holds it."""
    index = pygit2.Index()
    index.read_tree(tree)
    old = repo[rev].peel(pygit2.Commit).tree[path]
    index.add(pygit2.IndexEntry(path, old.id, old.filemode))
    return index.write_tree(repo)


@pytest.mark.parametrize("order", ["main-first", "side-first"])
def test_a_merge_of_two_honest_histories_passes(
    world: World, git: Callable[..., str], order: str
) -> None:
    s = world.store
    mine = s.write("fact", "main-side", "Written on main.")
    s.promote(mine.id, s.sign_verdict(mine.id, "PASS"))
    ours = s.snapshot().oid
    assert ours is not None

    def side() -> None:
        e = s.write("fact", "other-side", "Written on the side branch.")
        s.promote(e.id, s.sign_verdict(e.id, "PASS"))
        s.demote(world.verified.id, "doubted on the side")

    theirs = _side_branch(world, git, side)
    first, second = (ours, theirs) if order == "main-first" else (theirs, ours)
    _merge(world, first, second)
    report = audit(s.git)
    assert report.ok, _found(report)
    # Every path comes cleanly from one side, judged there: like a code merge, it needs no
    # signature of its own.
    unsigned = _merge(world, first, second, signed=False)
    assert check_commit(s.git.repo, s.git.commit(unsigned), False) == []


def test_a_merge_that_drops_the_other_sides_entry(world: World, git: Callable[..., str]) -> None:
    s = world.store
    s.write("fact", "main-side", "Written on main.")
    ours = s.snapshot().oid
    assert ours is not None
    lost = Entry(
        Kind.FACT,
        "lost",
        "Only on the side.",
        created="2026-11-29T12:00:00Z",
        provenance=Provenance(produced_by="cli:operator@example.test"),
    )
    theirs = _side_branch(world, git, lambda: s.write_many([lost]))
    kept = s.git.commit(ours).tree.id  # `git merge -s ours`: our tree as it is
    merge = _merge(world, ours, theirs, kept)
    assert _found(audit(s.git)) == [(merge, lost.path, "no-delete")]


def test_a_signed_merge_that_keeps_the_newer_belief_passes_and_an_older_one_does_not(
    world: World, git: Callable[..., str]
) -> None:
    s, entry = world.store, world.verified
    s.demote(entry.id, "doubt")
    ours = s.snapshot().oid
    assert ours is not None
    theirs = _side_branch(world, git, lambda: s.write("fact", "x", "Anything on the side."))
    merged = _merge(world, ours, theirs)  # the three-way merge keeps main's stale entry
    assert audit(s.git).ok and s.get(entry.id).trust is Trust.STALE
    # The side branch's older, verified version of the entry, in an unsigned merge.
    repo = s.git.repo
    tree = _with_path_from(repo, s.git.commit(merged).tree, entry.path, theirs)
    rolled = _merge(world, merged, theirs, tree, signed=False)
    assert s.get(entry.id).trust is Trust.VERIFIED
    # Rolling back to the verified version replays its verdict across the demotion, too.
    assert _found(audit(s.git, f"{merged}..{rolled}")) == [
        (rolled, entry.path, "verdict-replay"),
        (rolled, "", "signed"),
    ]


def test_a_symlink_under_memories(world: World, git: Callable[..., str]) -> None:
    repo = world.store.git.workdir
    assert repo is not None
    link = repo / "memories" / "fact" / "ab" / f"{'ab' * 16}.md"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(repo / world.verified.path)
    git(repo, "add", str(link))
    git(repo, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "a link\n\nTruss-Op: write")
    sha = git(repo, "rev-parse", "HEAD").strip()
    path = str(link.relative_to(repo))
    assert _found(audit(world.store.git)) == [(sha, path, "symlink"), (sha, "", "signed")]
