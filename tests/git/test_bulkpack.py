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
from truss_files.git.bulkpack import STAGING, PackWriter, sweep


def _objects(git_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(git_dir)) for p in (git_dir / "objects").rglob("*"))


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "repo"), bare=True)


def test_many_blobs_land_in_one_pack_and_read_back_by_id(repo: pygit2.Repository) -> None:
    git_dir = Path(repo.path)
    datas = [f"entry {i}\n".encode() * 20 for i in range(500)]
    with PackWriter(git_dir) as pack:
        oids = [pack.add(data) for data in datas]
        assert pack.add(datas[0]) == oids[0]  # the same bytes again: the same id
        installed = pack.finish()
    assert sorted(p.suffix for p in installed) == [".idx", ".pack"]
    (index,) = (p for p in installed if p.suffix == ".idx")
    shown = subprocess.run(
        ["git", "show-index"], stdin=index.open("rb"), capture_output=True, check=True
    ).stdout
    assert len(shown.splitlines()) == 500  # and they went into the pack once
    assert not [p for p in (git_dir / "objects").iterdir() if len(p.name) == 2]  # none loose
    assert [repo[oid].data for oid in oids] == datas  # the open repository sees the new pack
    assert [str(o) for o in oids] == [str(pygit2.hash(d)) for d in datas]
    assert not list((git_dir / STAGING).iterdir())
    fsck = subprocess.run(["git", "--git-dir", str(git_dir), "fsck", "--full"], capture_output=True)
    assert fsck.returncode == 0, fsck.stderr


def test_a_few_blobs_are_installed_loose_as_git_leaves_them(repo: pygit2.Repository) -> None:
    git_dir = Path(repo.path)
    with PackWriter(git_dir) as pack:
        oid = pack.add(b"one\n")
        pack.finish()
    assert repo[oid].data == b"one\n"
    assert (git_dir / "objects" / str(oid)[:2] / str(oid)[2:]).is_file()


def test_leaving_without_finish_leaves_the_object_store_as_it_was(
    repo: pygit2.Repository,
) -> None:
    git_dir = Path(repo.path)
    before = _objects(git_dir)
    with pytest.raises(RuntimeError), PackWriter(git_dir) as pack:
        oids = [pack.add(b"x" * 1000 + str(i).encode()) for i in range(300)]
        raise RuntimeError("a bad line")
    assert _objects(git_dir) == before
    assert oids[0] not in repo
    assert not list((git_dir / STAGING).iterdir())
    with pytest.raises(StoreError, match="already finished or abandoned"):
        pack.add(b"late")


_KILLED = """
import sys, time
from pathlib import Path
from truss_files.git.bulkpack import PackWriter
pack = PackWriter(Path(sys.argv[1]))
for i in range(3000):
    pack.add(b"a body of some length %d\\n" % i * 40)
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
