"""The git backend, checked with the real git binary: snapshots, path-level tree writes,
signed compare-and-swap commits, work-tree sync, and real processes racing for one branch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest

from truss_files.errors import ConflictError, StoreError, UsageError
from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.git.gitstore import GitStore, Identity, Plan, Snapshot
from truss_files.signing import Ed25519Signer
from truss_files.trust.audit import audit

WHO = Identity("Test Operator", "operator@example.test")


@pytest.fixture(params=["checkout", "bare"])
def any_store(request: pytest.FixtureRequest) -> MemoryStore:
    name = "store" if request.param == "checkout" else "bare_store"
    found: MemoryStore = request.getfixturevalue(name)
    return found


def _repo_dir(store: MemoryStore) -> Path:
    return store.git.workdir or store.git.git_dir


def _signers_file(store: MemoryStore, tmp_path: Path) -> Path:
    if store.git.workdir is not None:
        # The brief's own invocation: the store's checked-out allowed_signers.
        return store.git.workdir / ".truss" / "allowed_signers"
    out = tmp_path / "allowed_signers"
    out.write_bytes(store.snapshot().read(".truss/allowed_signers") or b"")
    return out


def _verify_args(signers: Path) -> list[str]:
    return ["-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={signers}"]


# --------------------------------------------------------------------------- basics


def test_bare_and_checkout_write_and_read(any_store: MemoryStore) -> None:
    assert any_store.git.bare == (any_store.git.workdir is None)
    entry = any_store.write("lesson", "k", "a body")
    snap = any_store.snapshot()
    assert snap.read(entry.path) == entryfile.serialize(entry).encode()
    assert any_store.get(entry.id) == entry
    assert [e.id for e in any_store.list_entries()] == [entry.id]
    assert snap.listdir(f"memories/lesson/{entry.id[:2]}") == [f"{entry.id}.md"]
    assert [p for p, _ in snap.walk("memories")] == [entry.path]
    assert snap.blob_id(entry.path) is not None and snap.tree_id(entry.path) is None
    assert snap.tree_id("memories/lesson") is not None and snap.blob_id("memories") is None
    assert snap.read("memories/nothing.md") is None and snap.listdir("nope") == []


def test_reads_are_snapshots_of_a_commit_not_the_work_tree(
    store: MemoryStore, git: Callable[..., str]
) -> None:
    entry = store.write("fact", "k", "committed text")
    assert store.git.workdir is not None
    disk = store.git.workdir / entry.path
    committed = disk.read_bytes()
    disk.write_text(disk.read_text().replace("committed text", "hand-edited text"))
    (store.git.workdir / "memories" / "fact" / "zz").mkdir()
    (store.git.workdir / "memories" / "fact" / "zz" / "loose.md").write_text("not committed")
    assert store.snapshot().read(entry.path) == committed
    assert store.get(entry.id).body == "committed text"
    assert [e.id for e in store.list_entries()] == [entry.id]
    # Older commits stay readable as they were.
    first = store.git.tip()
    assert first is not None
    later = store.write("fact", "k2", "second")
    old = store.snapshot(str(first.id))
    assert old.read(later.path) is None and old.read(entry.path) == committed
    assert git(store.git.workdir, "status", "--porcelain")  # the hand edit is still there


def test_snapshot_before_the_first_commit_is_empty(tmp_path: Path) -> None:
    pygit2.init_repository(str(tmp_path / "r"), initial_head="main")
    gs = GitStore(tmp_path / "r")
    snap = gs.snapshot()
    assert snap.oid is None and snap.read("truss.toml") is None and list(snap.walk("")) == []


def test_not_a_repository_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="truss-files init"):
        GitStore(tmp_path)


def test_unknown_revision_is_a_usage_error(store: MemoryStore) -> None:
    with pytest.raises(UsageError, match="no commit named"):
        store.snapshot("no-such-rev")


def test_detached_head_refuses_to_write(store: MemoryStore, git: Callable[..., str]) -> None:
    assert store.git.workdir is not None
    git(store.git.workdir, "checkout", "-q", "--detach")
    with pytest.raises(StoreError, match="detached"):
        store.write("fact", "k", "body")


# --------------------------------------------------------------------------- commits


def test_a_write_is_one_commit_touching_only_its_path(
    store: MemoryStore, git: Callable[..., str]
) -> None:
    lesson = store.write("lesson", "l1", "one")
    store.write("decision", "d1", "two")
    fact = store.write("fact", "f1", "three")
    before = store.snapshot()
    untouched = ["memories/lesson", "memories/decision", "identity", ".truss"]
    trees = {p: before.tree_id(p) for p in untouched}
    sibling = f"memories/fact/{fact.id[:2]}"
    blobs = {p: before.blob_id(p) for p in ("truss.toml", lesson.path, fact.path)}
    assert None not in trees.values() and None not in blobs.values()

    new = store.write("fact", "f2", "four")
    if new.id[:2] == fact.id[:2]:  # keep the sibling check meaningful
        new = store.write("fact", "f3", "five")
    after = store.snapshot()
    assert {p: after.tree_id(p) for p in untouched} == trees
    assert after.tree_id(sibling) == before.tree_id(sibling)
    assert {p: after.blob_id(p) for p in blobs} == blobs
    assert after.tree_id("memories/fact") != before.tree_id("memories/fact")

    repo = store.git.workdir
    assert repo is not None
    old, tip = before.oid, after.oid
    assert old is not None and tip is not None
    # Exactly one commit, whose only parent is the old tip, changing only the new file.
    assert git(repo, "rev-list", "--count", f"{old}..{tip}").strip() == "1"
    assert git(repo, "rev-parse", f"{tip}^").strip() == old
    assert git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", old, tip).split() == [
        new.path
    ]
    assert git(repo, "fsck", "--strict", "--no-dangling").strip() == ""


def test_write_tree_deletes_emptied_trees(store: MemoryStore) -> None:
    entry = store.write("scratch", "tmp", "to delete")
    snap = store.snapshot()
    tree = store.git.write_tree(snap.tree, {entry.path: None})
    assert tree is not None
    after = store.git.repo[tree]
    assert isinstance(after, pygit2.Tree)
    assert "memories" not in [e.name for e in after]  # the only entry's folders are gone
    assert store.git.write_tree(None, {}) is None


@pytest.mark.parametrize("kind", ["checkout", "bare"])
def test_commits_are_signed_and_the_real_git_accepts_them(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, git: Callable[..., str]
) -> None:
    store: MemoryStore = request.getfixturevalue("store" if kind == "checkout" else "bare_store")
    entry = store.write("lesson", "signed", "every commit is signed")
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS"))
    repo, signers = _repo_dir(store), _signers_file(store, tmp_path)
    shas = git(repo, "rev-list", "HEAD").split()
    assert len(shas) == 3  # init, write, promote
    for sha in shas:
        commit = store.git.repo[sha]
        assert isinstance(commit, pygit2.Commit)
        assert commit.gpg_signature[0] is not None
        proc = subprocess.run(
            ["git", *_verify_args(signers), "verify-commit", sha],
            cwd=repo,
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert 'Good "git" signature for operator@example.test' in proc.stderr
    shown = git(repo, *_verify_args(signers), "log", "--show-signature", "--format=%H")
    assert shown.count('Good "git" signature for operator@example.test') == 3
    assert "Bad " not in shown and "No signature" not in shown


def test_the_real_git_rejects_a_tampered_commit(
    store: MemoryStore, tmp_path: Path, git: Callable[..., str]
) -> None:
    store.write("lesson", "k", "body")
    repo = store.git.workdir
    assert repo is not None
    raw = git(repo, "cat-file", "commit", "HEAD")
    forged = raw.replace("truss: write lesson k", "truss: write lesson K", 1)
    sha = git(repo, "hash-object", "-t", "commit", "-w", "--stdin", input=forged).strip()
    signers = _signers_file(store, tmp_path)
    proc = subprocess.run(
        ["git", *_verify_args(signers), "verify-commit", sha],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0


def test_commit_messages_carry_truss_trailers(store: MemoryStore, git: Callable[..., str]) -> None:
    entry = store.write("fact", "k", "body")
    verdict = store.sign_verdict(entry.id, "PASS")
    store.promote(entry.id, verdict)
    repo = store.git.workdir
    assert repo is not None

    def trailer(rev: str, key: str) -> list[str]:
        out = git(repo, "log", "-1", f"--format=%(trailers:key={key},valueonly)", rev)
        return [line for line in out.splitlines() if line]

    assert trailer("HEAD~1", "Truss-Op") == ["write"]
    assert trailer("HEAD~1", "Truss-Entry") == [entry.id]
    assert trailer("HEAD~1", "Truss-Trust") == ["none -> unverified"]
    assert trailer("HEAD", "Truss-Op") == ["promote"]
    assert trailer("HEAD", "Truss-Entry") == [entry.id]
    assert trailer("HEAD", "Truss-Trust") == [f"{entry.id} unverified -> verified"]
    assert trailer("HEAD", "Truss-Verdict") == [verdict.id]
    assert trailer("HEAD~2", "Truss-Op") == ["init"]


def test_an_empty_plan_makes_no_commit(store: MemoryStore, operator_key: Ed25519Signer) -> None:
    tip = store.git.tip()
    assert store.git.apply(lambda _s: Plan({}, "nothing"), operator_key, WHO) is None
    assert store.git.tip() == tip


def test_a_failing_check_moves_no_ref(store: MemoryStore, operator_key: Ed25519Signer) -> None:
    tip = store.git.tip()

    def refuse(_commit: pygit2.Commit, _parent: Snapshot) -> None:
        raise ConflictError("refused by check")

    plan = Plan({"memories/x.md": b"x"}, "msg")
    with pytest.raises(ConflictError, match="refused by check"):
        store.git.apply(lambda _s: plan, operator_key, WHO, check=refuse)
    assert store.git.tip() == tip
    assert store.git.workdir is not None
    assert not (store.git.workdir / "memories" / "x.md").exists()


def test_a_lost_race_replans_on_the_new_tip(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    """Another writer moves the branch between our plan and our swap: we retry on its tip."""
    rival = GitStore(_repo_dir(store))
    calls: list[str | None] = []

    def plan(snap: Snapshot) -> Plan:
        calls.append(snap.oid)
        if len(calls) == 1:
            done = rival.apply(lambda _s: Plan({"rival.txt": b"won"}, "rival"), operator_key, WHO)
            assert done is not None
        return Plan({"mine.txt": f"after {snap.oid}".encode()}, "mine")

    done = store.git.apply(plan, operator_key, WHO)
    assert done is not None
    commit, _ = done
    assert len(calls) == 2 and calls[0] != calls[1]
    snap = store.snapshot()
    assert snap.read("rival.txt") == b"won"
    assert snap.read("mine.txt") == f"after {calls[1]}".encode()
    assert [str(p) for p in commit.parent_ids] == [calls[1]]


def test_update_ref_is_compare_and_swap(store: MemoryStore) -> None:
    store.write("fact", "k", "body")
    tip = store.git.tip()
    assert tip is not None
    parent = tip.parents[0]
    ref = "refs/truss/runs/R-1"
    assert store.git.update_ref(ref, None, parent.id, "start")
    assert not store.git.update_ref(ref, None, tip.id, "again from nothing")
    assert not store.git.update_ref(ref, tip.id, tip.id, "wrong old value")
    assert store.git.tip(ref) == parent
    assert store.git.update_ref(ref, parent.id, tip.id, "advance")
    assert store.git.tip(ref) == tip


# --------------------------------------------------------------------------- the work tree


def test_writes_keep_git_status_clean(store: MemoryStore, git: Callable[..., str]) -> None:
    repo = store.git.workdir
    assert repo is not None
    entry = store.write("lesson", "k", "body")
    assert git(repo, "status", "--porcelain") == ""
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS"))
    assert git(repo, "status", "--porcelain") == ""
    store.demote(entry.id, "changed")
    assert git(repo, "status", "--porcelain") == ""
    assert (repo / entry.path).read_bytes() == store.snapshot().read(entry.path)
    assert git(repo, "diff", "--cached", "--name-only") == ""


def _edit(path: Path) -> bytes:
    text = path.read_bytes() + b"\nlocal note\n"
    path.write_bytes(text)
    return text


@pytest.mark.parametrize("how", ["modified", "staged", "staged-then-restored", "deleted"])
def test_local_edits_on_a_touched_path_stop_the_write(
    how: str, store: MemoryStore, git: Callable[..., str]
) -> None:
    repo = store.git.workdir
    assert repo is not None
    entry = store.write("lesson", "k", "body")
    disk = repo / entry.path
    original = disk.read_bytes()
    if how == "deleted":
        disk.unlink()
    else:
        edited = _edit(disk)
        if how.startswith("staged"):
            git(repo, "add", entry.path)
        if how == "staged-then-restored":
            disk.write_bytes(original)  # the work tree matches, the index does not
    tip = store.git.tip()
    verdict = store.sign_verdict(entry.id, "PASS")
    with pytest.raises(ConflictError) as info:
        store.promote(entry.id, verdict)
    assert entry.path in info.value.message
    assert store.git.tip() == tip  # nothing committed
    assert store.get(entry.id).trust.value == "unverified"
    if how == "modified":
        assert disk.read_bytes() == edited  # the person's edit is not clobbered


def test_untracked_file_at_a_new_entry_path_stops_the_write(store: MemoryStore) -> None:
    repo = store.git.workdir
    assert repo is not None
    from truss_files.model import Entry, Kind, Provenance

    probe = Entry(
        kind=Kind.FACT,
        key="k",
        body="body",
        author=f"agent:{store.principal()}",
        created="2026-01-01T00:00:00Z",
        provenance=Provenance(produced_by=f"api:{store.principal()}"),  # as store.write names it
    )
    (repo / probe.path).parent.mkdir(parents=True)
    (repo / probe.path).write_text("someone else's file")
    tip = store.git.tip()
    with pytest.raises(ConflictError, match=probe.id):
        store.write("fact", "k", "body")
    assert store.git.tip() == tip


def test_other_paths_with_local_edits_do_not_block(
    store: MemoryStore, git: Callable[..., str]
) -> None:
    repo = store.git.workdir
    assert repo is not None
    first = store.write("lesson", "a", "one")
    _edit(repo / first.path)
    second = store.write("lesson", "b", "two")
    assert store.get(second.id) == second
    assert git(repo, "status", "--porcelain").split() == ["M", first.path]


# --------------------------------------------------------------------------- races

HOLDER = (
    "import fcntl, sys, time\n"
    "handle = open(sys.argv[1], 'a')\n"
    "fcntl.flock(handle.fileno(), fcntl.LOCK_EX)\n"
    "print('locked', flush=True)\n"
    "time.sleep(120)\n"
)


def test_a_stuck_writer_does_not_block_the_others_for_ever(
    bare_store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    pytest.importorskip("fcntl")
    lock = bare_store.git.git_dir / "truss" / "write.lock"
    lock.parent.mkdir(exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        gs = GitStore(bare_store.git.git_dir)
        gs.LOCK_WAIT = 0.05  # as if the holder waited on a hardware key for minutes
        done = gs.apply(lambda _s: Plan({"memories/x.md": b"x"}, "m"), operator_key, WHO)
        assert done is not None and gs.snapshot().read("memories/x.md") == b"x"
    finally:
        holder.kill()
        holder.wait()


def test_a_plan_that_writes_does_not_wait_on_its_own_lock(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    store.git.LOCK_WAIT = 3600.0  # a re-entrant wait would hang the test, not pass it
    inner = GitStore(_repo_dir(store))
    inner.LOCK_WAIT = 3600.0

    def plan(snap: Snapshot) -> Plan:
        if snap.read("inner.txt") is None:
            assert inner.apply(lambda _s: Plan({"inner.txt": b"i"}, "i"), operator_key, WHO)
        return Plan({"outer.txt": b"o"}, "o")

    assert store.git.apply(plan, operator_key, WHO) is not None
    snap = store.snapshot()
    assert snap.read("inner.txt") == b"i" and snap.read("outer.txt") == b"o"


RACER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from truss_files.signing import Ed25519Signer
    from truss_files.facade import MemoryStore

    repo, key, name, count, go = sys.argv[1:6]
    store = MemoryStore(repo, signer=Ed25519Signer.load(Path(key)))
    while not Path(go).exists():  # start together, so the writers really collide
        time.sleep(0.002)
    for i in range(int(count)):
        store.write("fact", f"{name}-{i}", f"entry {i} from writer {name}")
    """
)


@pytest.mark.parametrize(
    ("kind", "procs", "writes"),
    # Eight writers on one branch starved one another under compare-and-swap alone (a loser's
    # backoff grows while the others keep winning) until local writers queued on a lock.
    [("checkout", 4, 15), ("bare", 8, 6)],
)
def test_racing_processes_lose_no_entry(
    kind: str,
    procs: int,
    writes: int,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    git: Callable[..., str],
) -> None:
    store: MemoryStore = request.getfixturevalue("store" if kind == "checkout" else "bare_store")
    key = tmp_path / "operator_key"
    go = tmp_path / "go"
    repo = _repo_dir(store)
    before = git(repo, "rev-list", "--count", "HEAD").strip()
    running = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(repo), str(key), f"w{n}", str(writes), str(go)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(procs)
    ]
    go.touch()
    for proc in running:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err

    keys = sorted(e.key for e in store.list_entries())
    assert keys == sorted(f"w{n}-{i}" for n in range(procs) for i in range(writes))
    # One commit per write, in one line of history (no merges, nothing overwritten).
    count = int(git(repo, "rev-list", "--count", "HEAD").strip())
    assert count == int(before) + procs * writes
    assert git(repo, "rev-list", "--merges", "HEAD") == ""
    report = audit(store.git)
    assert report.ok, report.violations
    assert report.checked == count
    if kind == "checkout":
        assert git(repo, "status", "--porcelain") == ""
