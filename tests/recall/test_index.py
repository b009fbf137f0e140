"""The recall index cache: where it lives, how it follows writes, how it recovers."""

from __future__ import annotations

import dataclasses
import json
import marshal
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.gated import Searcher, refusal, search
from tests.support.recall_support import (
    check_against_reference,
    mixed_store,
    promote,
    reject,
)
from truss_files.errors import StoreError, UntrustedHistory
from truss_files.facade import MemoryStore
from truss_files.git.gitdir import GitDir
from truss_files.model import Trust, content_id
from truss_files.recall import floors
from truss_files.recall.floors import signature
from truss_files.recall.index import Index
from truss_files.recall.pipeline import Filter

QUERY = "flaky CI network tests retry postgres borrow deploy"


def recall_dir(store: MemoryStore) -> Path:
    return store.git.git_dir / "truss" / "recall"


def everything(store: MemoryStore) -> None:
    for floor in (Trust.VERIFIED, Trust.STALE, Trust.UNVERIFIED):
        check_against_reference(store, QUERY, Filter(min_trust=floor), limit=50)


def test_cache_lives_under_git_and_is_keyed_by_the_memories_tree(
    store: MemoryStore, git: Callable[..., str]
) -> None:
    mixed_store(store)
    found = search(store.git.workdir, "flaky", Filter())
    assert found.hits and found.mode == "exact"
    folder = recall_dir(store)
    assert (folder / "head").is_file() and len(list(folder.glob("floor-*"))) == 4
    assert found.tree == store.snapshot().tree_id("memories")
    head = marshal.loads((folder / "head").read_bytes())
    assert head["tree"] == found.tree and head["tip"][1] == str(store.git.tip().id)
    # Nothing in the work tree, nothing to commit.
    assert git(store.git.workdir, "status", "--porcelain") == ""
    assert folder.is_relative_to(store.git.git_dir)
    assert "recall" not in git(store.git.workdir, "ls-files")


@pytest.mark.heavy  # an index update per write, many writes
def test_writes_update_the_index_incrementally(store: MemoryStore) -> None:
    made = mixed_store(store)
    searcher = Searcher(store.git.workdir)
    searcher.query(QUERY, Filter())
    index = searcher.index
    steps: list[Callable[[], object]] = [
        lambda: store.write("lesson", "new-flaky", "Retry flaky network tests in CI twice."),
        lambda: promote(store, store.list_entries(key="new-flaky")[0]),
        lambda: reject(store, made["u2"]),
        lambda: store.demote(made["v1"].id, "superseded by practice"),
        lambda: store.write_many(
            [store.new_entry("fact", f"bulk-{i}", f"deploy note {i} postgres") for i in range(9)]
        ),
    ]
    for step in steps:
        step()
        searcher.query(QUERY, Filter())
        assert index.stats["op"] == "update", index.stats
        everything(store)
    store.revert("HEAD~1")  # the demotion, undone by a signed revert commit
    searcher.query(QUERY, Filter())
    everything(store)
    # tantivy merges its own segments: each floor keeps a handful, however many updates.
    head = marshal.loads((recall_dir(store) / "head").read_bytes())
    for name, _opstamp, _sign in head["floors"].values():
        meta = json.loads((recall_dir(store) / name / "meta.json").read_text())
        assert len(meta["segments"]) <= 8


def test_incremental_equals_rebuild(store: MemoryStore) -> None:
    mixed_store(store)
    searcher = Searcher(store.git.workdir)
    searcher.query("x", Filter())
    for i in range(20):
        store.write("lesson", f"extra-{i % 7}", f"extra flaky note {i} about postgres retries")
    incremental = searcher.query(QUERY, Filter(min_trust=Trust.UNVERIFIED), 50)
    assert searcher.index.stats["op"] == "update"
    (recall_dir(store) / "head").unlink()
    rebuilt = Searcher(store.git.workdir).query(QUERY, Filter(min_trust=Trust.UNVERIFIED), 50)
    assert [(h.entry.id, h.score) for h in incremental.hits] == [
        (h.entry.id, h.score) for h in rebuilt.hits
    ]


@pytest.mark.parametrize(
    "damage",
    ["delete head", "garbage head", "old tokenizer", "delete floor file", "truncate floor file"],
)
def test_rebuilt_when_missing_corrupt_or_stale_format(store: MemoryStore, damage: str) -> None:
    mixed_store(store)
    search(store.git.workdir, "flaky", Filter())
    folder = recall_dir(store)
    segment = _biggest_floor_file(store)
    if damage == "delete head":
        (folder / "head").unlink()
    elif damage == "garbage head":
        (folder / "head").write_bytes(b"\x00not marshal")
    elif damage == "old tokenizer":
        head = marshal.loads((folder / "head").read_bytes())
        head["tokenizer"] -= 1
        (folder / "head").write_bytes(marshal.dumps(head))
    elif damage == "delete floor file":
        segment.unlink()
    else:
        data = segment.read_bytes()
        segment.write_bytes(data[: len(data) // 2])
    searcher = Searcher(store.git.workdir)
    everything(store)
    searcher.query("flaky", Filter())
    head = marshal.loads((folder / "head").read_bytes())
    for name, _opstamp, sign in head["floors"].values():
        assert signature(str(folder / name)) == sign  # every floor is at the commit named


def test_unreadable_entry_files_are_skipped_and_named(store: MemoryStore) -> None:
    good = promote(store, store.write("lesson", "flaky", "Retry flaky network tests."))
    bad_path = f"memories/lesson/ab/ab{'0' * 30}.md"

    def plan(_snap: object) -> object:
        from truss_files.git.gitstore import Plan

        return Plan({bad_path: b"---\nnot: an entry\n---\nflaky\n"}, "hand edit")

    from truss_files.git.gitstore import Identity

    store.git.apply(plan, store.signer, Identity("T", "t@example.test"))  # type: ignore[arg-type]
    # The audit rejects a commit of an unreadable entry file, so the read gate serves nothing
    # above unverified from this history; below, the index still skips and names the file.
    with pytest.raises(UntrustedHistory, match=r"\[entry\]"):
        search(store.git.workdir, "flaky", Filter())
    found = search(store.git.workdir, "flaky", Filter(min_trust=Trust.UNVERIFIED))
    assert found.hits == [] and found.withheld is not None
    assert bad_path in found.skipped
    assert good.trust is Trust.VERIFIED


def test_warm_query_reads_no_git_object_and_imports_no_heavy_module(store: MemoryStore) -> None:
    mixed_store(store)
    search(store.git.workdir, "flaky", Filter())  # warm the cache
    probe = (
        "import sys, json\n"
        "from truss_files.faces.cli.main import main\n"
        "sys.argv = ['truss-files', '--store', sys.argv[1], 'query', 'flaky network']\n"
        "try:\n    main()\n"
        "except SystemExit:\n    pass\n"
        "heavy = [m for m in ('pygit2', 'yaml', 'numpy', 'cryptography', 'wordllama', 'hashlib') "
        "if m in sys.modules]\n"
        "print(json.dumps(heavy), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(store.git.workdir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["entries"]
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []


def test_returned_entries_carry_the_id_the_index_checked(store: MemoryStore) -> None:
    mixed_store(store)
    found = search(store.git.workdir, "flaky", Filter(min_trust=Trust.UNVERIFIED))
    assert found.hits
    for hit in found.hits:
        seeded = hit.entry.__dict__["_id"]  # set from the segment, not hashed
        assert seeded == content_id(dataclasses.replace(hit.entry))


def test_packed_objects_and_refs_after_git_gc(store: MemoryStore, git: Callable[..., str]) -> None:
    mixed_store(store)
    search(store.git.workdir, "flaky", Filter())
    git(store.git.workdir, "gc", "--quiet")
    assert (store.git.git_dir / "packed-refs").is_file()
    store.write("lesson", "after-gc", "flaky network retries after the repository was packed")
    git(store.git.workdir, "gc", "--quiet")  # the new commit and trees are packed too
    searcher = Searcher(store.git.workdir)
    found = searcher.query("packed repository", Filter(min_trust=Trust.UNVERIFIED))
    assert found.hits[0].entry.key == "after-gc"
    assert searcher.index.stats["op"] == "update"
    everything(store)


def test_bare_repository_and_discovery(bare_store: MemoryStore, tmp_path: Path) -> None:
    promote(bare_store, bare_store.write("fact", "db", "Postgres 16 in production."))
    found = search(bare_store.git.git_dir, "postgres", Filter())
    assert [h.entry.key for h in found.hits] == ["db"]
    assert (bare_store.git.git_dir / "truss" / "recall" / "head").is_file()
    with pytest.raises(StoreError, match="truss-files init"):
        GitDir.discover(tmp_path / "nowhere")
    (tmp_path / "plain").mkdir()
    with pytest.raises(StoreError, match="not inside a git repository"):
        GitDir.discover(tmp_path / "plain")


def test_linked_worktree_shares_the_cache(store: MemoryStore, git: Callable[..., str]) -> None:
    promote(store, store.write("fact", "db", "Postgres 16 in production."))
    other = store.git.workdir.parent / "linked"  # type: ignore[union-attr]
    git(store.git.workdir, "worktree", "add", "-q", "--detach", str(other))
    found = search(other, "postgres", Filter())
    assert [h.entry.key for h in found.hits] == ["db"]
    assert (store.git.git_dir / "truss" / "recall" / "head").is_file()


def test_snapshot_queries_an_older_commit(store: MemoryStore) -> None:
    from tests.support.gated import search_snapshot

    promote(store, store.write("fact", "db", "Postgres 15 in production."))
    old = store.snapshot()
    promote(store, store.write("fact", "db2", "Postgres 16 in production now."))
    then = search_snapshot(store, old, "postgres production", Filter())
    now = search(store.git.workdir, "postgres production", Filter())
    assert [h.entry.key for h in then.hits] == ["db"]
    assert sorted(h.entry.key for h in now.hits) == ["db", "db2"]


def _writer(path: str, n: int, key: str) -> None:
    store = MemoryStore(path)
    for i in range(n):
        store.write("lesson", f"{key}-{i}", f"concurrent flaky note {key} {i}")


def _reader(path: str, rounds: int, out: multiprocessing.Queue[object]) -> None:
    try:
        for _ in range(rounds):
            found = search(path, "concurrent flaky note", Filter(min_trust=Trust.UNVERIFIED), 100)
            if any(h.entry.trust is Trust.REJECTED for h in found.hits):
                out.put("rejected entry returned")
                return
            keys = [(-h.score, h.entry.id) for h in found.hits]
            if keys != sorted(set(keys)) or any(h.score <= 0 for h in found.hits):
                out.put(f"out of order, repeated or not above 0: {keys}")
                return
            verified = search(path, "concurrent flaky note", Filter(), 100)
            if any(h.entry.trust is not Trust.VERIFIED for h in verified.hits):
                out.put("an entry below the floor returned")
                return
        out.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out.put(f"{type(exc).__name__}: {exc}")


def test_concurrent_readers_and_writers(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    mixed_store(store)
    path = str(store.git.workdir)
    search(path, "x", Filter())
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[object] = context.Queue()
    monkeypatch.setenv("TRUSS_KEY", str(Path(path).parent / "operator_key"))
    procs = [context.Process(target=_writer, args=(path, 6, f"w{n}")) for n in range(2)]
    procs += [context.Process(target=_reader, args=(path, 15, results)) for _ in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    assert [results.get(timeout=5) for _ in range(2)] == ["ok", "ok"]
    found = check_against_reference(
        store, "concurrent flaky note", Filter(min_trust=Trust.UNVERIFIED), 100
    )
    assert sum(h.entry.key.startswith(("w0-", "w1-")) for h in found.hits) == 12


def test_each_floor_index_holds_its_floors_entries(store: MemoryStore) -> None:
    """The unverified floor holds every entry but the rejected, the verified floor only the
    verified, the rejected entries' index the rejected alone: counted in the tantivy indexes
    themselves."""
    mixed_store(store)
    view = Index(GitDir.discover(store.git.workdir)).view(gate=refusal)
    entries = list(store.iter_entries())
    for floor in (Trust.VERIFIED, Trust.STALE, Trust.UNVERIFIED):
        want = sum(1 for e in entries if e.trust.passes(floor) and e.trust is not Trust.REJECTED)
        assert view.floor(floor).num_docs == want
    rejected = sum(1 for e in entries if e.trust is Trust.REJECTED)
    assert rejected and view.floor(Trust.REJECTED).num_docs == rejected


def _copied(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files ``floors._private_copy`` copies (and checks) from now on; its
    ``meta.json`` is written from the bytes the file list was read from, never copied."""
    names: list[str] = []
    real = floors._checked_copy

    def spy(fd: int, size: int, target: Any) -> None:
        names.append(Path(target.name).name)
        real(fd, size, target)

    monkeypatch.setattr(floors, "_checked_copy", spy)
    return names


def test_a_floor_reopened_after_a_write_copies_only_the_new_files(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A searcher maps private copies of a floor's files; tantivy never rewrites a file it
    wrote, so the next open of the floor after a write copies only what the write added --
    and answers from the new commit. No copy keeps a name in the temporary directory."""
    mixed_store(store)
    private = tmp_path / "tmp"  # the copies' temporary directory, this test's alone
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    copied = _copied(monkeypatch)
    flt = Filter(min_trust=Trust.UNVERIFIED)
    searcher = Searcher(store.git.workdir)
    searcher.query(QUERY, flt)
    first = set(copied) - {"meta.json"}
    assert first
    copied.clear()
    new = store.write("lesson", "fresh-note", "zqxfresh words only this note holds")
    assert [h.entry.id for h in searcher.query("zqxfresh", flt).hits] == [new.id]
    again = set(copied) - {"meta.json"}
    if floors._REOPEN:
        assert again and not again & first  # only the files the write made
    else:
        assert again >= first  # no descriptor to reopen: every file is copied again
    assert list(private.iterdir()) == []


def test_a_file_changed_in_place_is_copied_again(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept copy is reused only for the very file it was made from: one rewritten in place,
    its size and modification time put back, is copied anew (its change time moved)."""
    mixed_store(store)
    Searcher(store.git.workdir).query(QUERY, Filter())
    folder = _biggest_floor_file(store).parent
    copied = _copied(monkeypatch)
    shutil.rmtree(floors._private_copy(str(folder)))
    shutil.rmtree(floors._private_copy(str(folder)))
    victim = _biggest_floor_file(store)
    if floors._REOPEN:  # the searcher's open kept every file: none is copied again
        assert copied == []
    info = victim.stat()
    victim.write_bytes(victim.read_bytes())
    os.utime(victim, ns=(info.st_atime_ns, info.st_mtime_ns))
    copied.clear()
    shutil.rmtree(floors._private_copy(str(folder)))
    assert victim.name in copied


# -- a damaged, stale, foreign or planted index ---------------------------------------------


def _biggest_floor_file(store: MemoryStore) -> Path:
    """The largest file of the verified floor index the head names."""
    head = marshal.loads((recall_dir(store) / "head").read_bytes())
    folder = recall_dir(store) / head["floors"]["verified"][0]
    files = [p for p in folder.iterdir() if p.name != "meta.json" and not p.name.startswith(".")]
    return max(files, key=lambda p: p.stat().st_size)


@pytest.mark.parametrize("part", ["store", "idx", "term", "fast", "fieldnorm"])
def test_garbage_inside_a_floor_index_is_rebuilt_not_a_crash(store: MemoryStore, part: str) -> None:
    """Random bytes over a file of a floor index (its length unchanged): the answer is the
    reference's, never an exception, a record from the damaged bytes or another answer."""
    made = mixed_store(store)
    Searcher(store.git.workdir).query(QUERY, Filter())
    head = marshal.loads((recall_dir(store) / "head").read_bytes())
    folder = recall_dir(store) / head["floors"]["verified"][0]
    victim = max(folder.glob(f"*.{part}"), key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[: len(data)] = os.urandom(len(data))
    victim.write_bytes(bytes(data))
    found = check_against_reference(store, QUERY, Filter(min_trust=Trust.VERIFIED), limit=50)
    assert all(h.entry.trust is Trust.VERIFIED for h in found.hits)
    assert made["u1"].id not in {h.entry.id for h in found.hits}
    everything(store)


@pytest.mark.parametrize("error", [TypeError, KeyError, ValueError, IndexError])
def test_a_bug_in_the_query_code_is_raised_not_taken_for_damage(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch, error: type[Exception]
) -> None:
    """What the index's files cannot cause is not damage: the error reaches the caller as
    it is, and the index is neither dropped nor rebuilt."""
    from truss_files.recall import engine

    mixed_store(store)
    searcher = Searcher(store.git.workdir)
    searcher.query(QUERY, Filter())
    head = (recall_dir(store) / "head").read_bytes()

    def broken(*args: object, **kwargs: object) -> None:
        raise error("a bug of ours")

    monkeypatch.setattr(engine, "lexical", broken)
    with pytest.raises(error, match="a bug of ours"):
        searcher.query(QUERY, Filter())
    assert (recall_dir(store) / "head").read_bytes() == head


def test_an_index_of_an_older_commit_is_brought_forward(store: MemoryStore, tmp_path: Path) -> None:
    """The cache folder of an earlier commit put back after more writes (a restored backup):
    the answer is the current tree's."""
    made = mixed_store(store)
    search(store.git.workdir, QUERY, Filter())
    old = tmp_path / "old-recall"
    shutil.copytree(recall_dir(store), old)
    promote(store, made["u1"])
    store.write("lesson", "flaky-later", "Quarantine flaky CI network tests, retry later.")
    search(store.git.workdir, QUERY, Filter())
    shutil.rmtree(recall_dir(store))
    shutil.copytree(old, recall_dir(store))
    found = check_against_reference(store, QUERY, Filter(min_trust=Trust.VERIFIED), limit=50)
    assert made["u1"].id in {h.entry.id for h in found.hits}
    everything(store)


def test_an_index_from_another_repository_is_rebuilt(
    store: MemoryStore, bare_store: MemoryStore, tmp_path: Path
) -> None:
    """Another store's cache copied in: its head names a tree this repository lacks, so the
    diff fails and the index is rebuilt from this store's tree."""
    mixed_store(store)
    other = bare_store
    other.write("lesson", "flaky-elsewhere", "Flaky CI network tests retry postgres elsewhere.")
    search(other.git.git_dir, QUERY, Filter(min_trust=Trust.UNVERIFIED))
    shutil.rmtree(recall_dir(store), ignore_errors=True)
    shutil.copytree(recall_dir(other), recall_dir(store))
    everything(store)
    found = search(store.git.workdir, QUERY, Filter(min_trust=Trust.UNVERIFIED), limit=50)
    assert "flaky-elsewhere" not in {h.entry.key for h in found.hits}


def test_a_planted_index_folder_link_is_not_followed(
    store: MemoryStore, bare_store: MemoryStore, tmp_path: Path
) -> None:
    """``.git/truss/recall`` replaced by a link to a forged index: another store's cache whose
    head claims this store's tree. The link is removed, not followed; nothing is written
    through it; the index is rebuilt in a real folder and answers for this store."""
    mixed_store(store)
    tree = Searcher(store.git.workdir).view().tree
    other = bare_store
    other.write("lesson", "planted", "Flaky CI network tests retry postgres borrow deploy.")
    search(other.git.git_dir, QUERY, Filter(min_trust=Trust.UNVERIFIED))
    planted = tmp_path / "planted"
    shutil.copytree(recall_dir(other), planted)
    head = marshal.loads((planted / "head").read_bytes())
    head["tree"] = tree  # the forgery: "this index holds your tree"
    (planted / "head").write_bytes(marshal.dumps(head))
    before = sorted((p.name, p.stat().st_mtime_ns) for p in planted.iterdir())
    shutil.rmtree(recall_dir(store))
    recall_dir(store).symlink_to(planted, target_is_directory=True)
    found = check_against_reference(store, QUERY, Filter(min_trust=Trust.UNVERIFIED), limit=50)
    assert "planted" not in {h.entry.key for h in found.hits}
    assert not recall_dir(store).is_symlink() and recall_dir(store).is_dir()
    assert sorted((p.name, p.stat().st_mtime_ns) for p in planted.iterdir()) == before
    everything(store)


@pytest.mark.parametrize("target", ["head", "floor file"])
def test_a_planted_file_link_is_not_followed(
    store: MemoryStore, tmp_path: Path, target: str
) -> None:
    """The head or a floor index's file replaced by a link to a file elsewhere: opened without
    following links, so it reads as missing and the index is rebuilt; the file linked to is
    unchanged."""
    mixed_store(store)
    search(store.git.workdir, QUERY, Filter())
    folder = recall_dir(store)
    victim = folder / "head" if target == "head" else _biggest_floor_file(store)
    outside = tmp_path / "outside"
    content = victim.read_bytes()
    outside.write_bytes(content)
    victim.unlink()
    victim.symlink_to(outside)
    everything(store)
    assert outside.read_bytes() == content
    assert not (folder / "head").is_symlink()


def test_a_linked_cache_root_is_an_error_that_says_what_to_do(
    store: MemoryStore, tmp_path: Path
) -> None:
    """``.git/truss`` (shared with the read gate) as a link: refused with the fix, not used."""
    mixed_store(store)
    search(store.git.workdir, QUERY, Filter())
    root = store.git.git_dir / "truss"
    moved = tmp_path / "elsewhere"
    shutil.move(str(root), moved)
    root.symlink_to(moved, target_is_directory=True)
    with pytest.raises(StoreError, match="not a plain folder.*remove it"):
        Searcher(store.git.workdir).query(QUERY, Filter())


def test_an_update_that_meets_a_damaged_floor_rebuilds(store: MemoryStore) -> None:
    """A floor index's file damaged in place, then an entry promoted: bringing the index
    forward finds that floor unlike its commit and rebuilds -- the index's own update, no
    query's retry."""
    made = mixed_store(store)
    Searcher(store.git.workdir).query(QUERY, Filter())
    victim = _biggest_floor_file(store)
    data = bytearray(victim.read_bytes())
    data[:32] = b"f" * 32
    victim.write_bytes(bytes(data))
    promote(store, made["u1"])
    index = Index(GitDir.discover(store.git.workdir))
    index.view(gate=refusal)
    assert index.stats["op"] == "rebuild"
    everything(store)


def _rebuilt_hits(store: MemoryStore) -> list[tuple[str, float]]:
    shutil.rmtree(recall_dir(store), ignore_errors=True)
    searcher = Searcher(store.git.workdir)
    found = searcher.query(QUERY, Filter(min_trust=Trust.UNVERIFIED), 50)
    assert searcher.index.stats["op"] == "rebuild"
    return [(h.entry.id, h.score) for h in found.hits]


@pytest.mark.spawns  # the package's parallel rebuild starts worker processes
def test_a_rebuild_in_worker_processes_equals_one_in_process(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from truss_files.recall import bulk

    mixed_store(store)
    for i in range(12):
        store.write("lesson", f"bulk-{i}", f"bulk flaky note {i} about postgres retries")
    monkeypatch.setattr(bulk, "PARALLEL_AT", 10**9)
    alone = _rebuilt_hits(store)
    started: list[object] = []
    real_start = bulk._start

    def counted(git: GitDir) -> object:
        proc = real_start(git)
        started.append(proc)
        return proc

    monkeypatch.setattr(bulk, "PARALLEL_AT", 2)
    monkeypatch.setattr(bulk.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(bulk, "_start", counted)
    assert _rebuilt_hits(store) == alone and alone
    assert len(started) == 2 and all(p.returncode == 0 for p in started)  # type: ignore[attr-defined]
    everything(store)


@pytest.mark.parametrize("how", ["no worker starts", "a worker dies at once", "garbage out"])
def test_a_failed_rebuild_worker_costs_time_not_entries(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    from truss_files.recall import bulk

    mixed_store(store)
    monkeypatch.setattr(bulk, "PARALLEL_AT", 10**9)
    alone = _rebuilt_hits(store)
    code = {"a worker dies at once": "import sys; sys.exit(3)"}.get(
        how, "import sys; sys.stdin.buffer.read(); sys.stdout.buffer.write(b'\\xffjunk')"
    )

    def broken(git: GitDir) -> subprocess.Popen[bytes] | None:
        if how == "no worker starts":
            return None
        return subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    monkeypatch.setattr(bulk, "PARALLEL_AT", 2)
    monkeypatch.setattr(bulk.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(bulk, "_start", broken)
    assert _rebuilt_hits(store) == alone and alone
    everything(store)


def test_a_long_rebuild_says_what_the_query_waits_for(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first query after a big import rebuilds the index: once that has run longer than
    ``SLOW_INDEX`` it says so on stderr, with how far it is; a warm query says nothing."""
    from truss_files.recall import index as index_module

    store.import_entries(
        store.new_entry("fact", f"k{i % 9}", f"postgres note {i}") for i in range(600)
    )
    monkeypatch.setattr(index_module, "SLOW_INDEX", 0.0)  # every pass counts as long here
    monkeypatch.setattr(index_module, "SAY_EVERY", 0.0)
    searcher = Searcher(store.git.workdir)
    said: list[str] = []
    searcher.index.note = said.append
    found = searcher.query("postgres", Filter(min_trust=Trust.UNVERIFIED), 5)
    assert len(found.hits) == 5 and searcher.index.stats["op"] == "rebuild"
    assert said[0].startswith("truss-files: indexing 600 entry files for this query"), said
    assert said[0].endswith(": 256/600"), said
    assert said[1].startswith("truss-files: indexing: 512/600, about ") and "s left" in said[1]
    assert said[-1].startswith("truss-files: indexed 600 entry files in "), said
    said.clear()
    searcher.query("postgres", Filter(min_trust=Trust.UNVERIFIED), 5)
    assert said == []
