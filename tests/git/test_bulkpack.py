"""Bulk writes go into one pack through git fast-import, installed only at the end; a writer
that fails or is killed leaves the object store as it was."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pygit2
import pytest

from truss_files.errors import StoreError
from truss_files.git.bulkpack import STAGING, Added, PackWriter, sweep


def _objects(git_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(git_dir)) for p in (git_dir / "objects").rglob("*"))


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "repo"), bare=True)


def _path(i: int) -> str:
    return f"memories/fact/{i % 7:02x}/note-{i}.md"


def test_many_files_land_in_one_pack_with_the_tree_git_built(repo: pygit2.Repository) -> None:
    git_dir = Path(repo.path)
    datas = [f"entry {i}\n".encode() * 20 for i in range(500)]
    with PackWriter(git_dir) as pack:
        for i, data in enumerate(datas):
            pack.add(_path(i), data)
        pack.add(_path(0), datas[0])  # the same file again: one blob, one path
        tree = pack.finish()
    assert tree is not None
    (index,) = (git_dir / "objects" / "pack").glob("*.idx")
    shown = subprocess.run(
        ["git", "show-index"], stdin=index.open("rb"), capture_output=True, check=True
    ).stdout
    # 500 files, a tree for each of the 7 folders, memories/fact, memories, the root, and the
    # throwaway commit that held them (unreachable: gc drops it).
    assert len(shown.splitlines()) == 500 + 7 + 3 + 1
    assert not [p for p in (git_dir / "objects").iterdir() if len(p.name) == 2]  # none loose
    root = repo[tree]
    assert [root[_path(i)].data for i in range(500)] == datas  # the open repository sees it
    added = Added(repo, None, tree)
    assert len(added) == 500 and sorted(added) == sorted(_path(i) for i in range(500))
    assert added[_path(3)] == pygit2.hash(datas[3])
    assert not list((git_dir / STAGING).iterdir())
    assert list(repo.references) == []  # fast-import's ref was its staging repository's
    fsck = subprocess.run(["git", "--git-dir", str(git_dir), "fsck", "--full"], capture_output=True)
    assert fsck.returncode == 0, fsck.stderr


def test_a_few_files_are_installed_loose_without_the_throwaway_commit(
    repo: pygit2.Repository,
) -> None:
    git_dir = Path(repo.path)
    with PackWriter(git_dir) as pack:
        pack.add("memories/fact/aa/one.md", b"one\n")
        tree = pack.finish()
    assert tree is not None
    blob = pygit2.hash(b"one\n")
    assert repo[tree]["memories/fact/aa/one.md"].id == blob
    assert (git_dir / "objects" / str(blob)[:2] / str(blob)[2:]).is_file()
    kinds = {repo[o].type_str for o in repo.odb}  # type: ignore[attr-defined]
    assert kinds == {"blob", "tree"}


def test_on_a_base_only_the_new_files_count_as_added(repo: pygit2.Repository) -> None:
    git_dir = Path(repo.path)
    with PackWriter(git_dir) as pack:
        for i in range(5):
            pack.add(_path(i), b"old %d\n" % i)
        first = pack.finish()
    assert first is not None
    who = pygit2.Signature("t", "t@example.test", 0, 0)
    base = repo.create_commit("refs/heads/main", who, who, "base", first, [])
    with PackWriter(git_dir, str(base)) as pack:
        pack.add(_path(1), b"old 1\n")  # already there: the same file
        for i in range(5, 9):
            pack.add(_path(i), b"new %d\n" % i)
        tree = pack.finish()
    assert tree is not None
    added = Added(repo, repo[first], tree)  # type: ignore[arg-type]
    assert len(added) == 4
    assert sorted(added) == sorted(_path(i) for i in range(5, 9))
    assert _path(1) not in added and _path(6) in added and "memories/none.md" not in added
    assert dict(added.items())[_path(7)] == pygit2.hash(b"new 7\n")
    assert all(_path(i) in repo[tree] for i in range(9))  # the base's files are kept


def test_nothing_added_is_no_tree_and_a_quoted_path_is_refused(repo: pygit2.Repository) -> None:
    git_dir = Path(repo.path)
    with PackWriter(git_dir) as pack:
        assert pack.finish() is None
    with PackWriter(git_dir) as pack, pytest.raises(StoreError, match="plain store paths"):
        pack.add('"memories/x.md"', b"x")
    assert not list((git_dir / STAGING).iterdir())


def test_leaving_without_finish_leaves_the_object_store_as_it_was(
    repo: pygit2.Repository,
) -> None:
    git_dir = Path(repo.path)
    before = _objects(git_dir)
    with pytest.raises(RuntimeError), PackWriter(git_dir) as pack:
        for i in range(300):
            pack.add(_path(i), b"x" * 1000 + str(i).encode())
        raise RuntimeError("a bad line")
    assert _objects(git_dir) == before
    assert pygit2.hash(b"x" * 1000 + b"0") not in repo
    assert not list((git_dir / STAGING).iterdir())
    with pytest.raises(StoreError, match="already finished or abandoned"):
        pack.add(_path(0), b"late")


_KILLED = """
import sys, time
from pathlib import Path
from truss_files.git.bulkpack import PackWriter
pack = PackWriter(Path(sys.argv[1]))
for i in range(3000):
    pack.add(f"memories/fact/{i % 9}/n{i}.md", b"a body of some length %d\\n" % i * 40)
print("packing", flush=True)
time.sleep(60)
"""


def test_a_killed_writer_leaves_nothing_git_reads_and_the_next_one_sweeps_it(
    repo: pygit2.Repository,
) -> None:
    git_dir = Path(repo.path)
    before = _objects(git_dir)
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED, str(git_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "packing"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (left,) = list((git_dir / STAGING).iterdir())
    deadline = time.monotonic() + 30  # fast-import sees its pipe close and ends on its own
    while any(p.name.startswith("tmp_") for p in left.rglob("*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _objects(git_dir) == before
    assert sweep(git_dir) == [left] and not left.exists()
    assert os.listdir(git_dir / STAGING) == []
