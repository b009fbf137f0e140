"""Attacks on the floor indexes (one tantivy index per trust floor under .git/truss/recall/):
updaters killed mid-update, a floor index left ahead of the head, its files truncated,
garbled, deleted or replaced by links, the folder itself replaced by a link to a planted
index. Each time the next query must answer what the store holds -- never a crash, never
an entry from elsewhere -- and the store itself is left as it was."""

from __future__ import annotations

import dataclasses
import marshal
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.gated import Searcher
from tests.support.recall_support import check_against_reference, commit_entries, mixed_store
from tests.support.sample import covering
from truss_files.facade import MemoryStore
from truss_files.model import Trust
from truss_files.recall.pipeline import Filter
from truss_files.trust.audit import audit

QUERY = "flaky CI network tests retry postgres"
FLOORS = (Trust.VERIFIED, Trust.STALE, Trust.UNVERIFIED)


def _folder(store: MemoryStore) -> Path:
    return Path(store.git.git_dir) / "truss" / "recall"


def _head(store: MemoryStore) -> dict[str, object]:
    found: dict[str, object] = marshal.loads((_folder(store) / "head").read_bytes())
    return found


def _floor_dir(store: MemoryStore, floor: Trust) -> Path:
    floors = _head(store)["floors"]
    assert isinstance(floors, dict)
    return _folder(store) / floors[floor.value][0]


def _every_floor_answers_right(store: MemoryStore) -> None:
    for floor in FLOORS:
        check_against_reference(store, QUERY, Filter(min_trust=floor), 50)


_CHECK = """
import sys
sys.path[:0] = sys.argv[2:4]
from tests.adversarial.test_recall_floor_attacks import _every_floor_answers_right
from truss_files.facade import MemoryStore
_every_floor_answers_right(MemoryStore(sys.argv[1]))
"""


def _every_floor_answers_right_in_a_child(store: MemoryStore) -> None:
    """``_every_floor_answers_right`` as the first reader after a damage, in a child process:
    a damaged file that crashes its reader (SIGBUS from a mapping) fails the test instead of
    ending pytest."""
    here = Path(__file__).parent
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK, str(store.git.workdir), str(here), str(here.parent.parent)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])


def _notes(store: MemoryStore, n: int, tag: str) -> list:
    rng = random.Random(tag)
    words = QUERY.lower().split() + [f"w{i}" for i in range(40)]
    out = []
    for i in range(n):
        entry = store.new_entry("fact", f"{tag}-{i}", " ".join(rng.choices(words, k=12)))
        trust = rng.choice((Trust.VERIFIED, Trust.UNVERIFIED, Trust.STALE, Trust.REJECTED))
        out.append(dataclasses.replace(entry, trust=trust))
    return out


_UPDATER = """
import sys
from truss_files.trust.readgate import refusal
from truss_files.recall.engine import search
from truss_files.recall.pipeline import Filter
search(sys.argv[1], "flaky", Filter(), gate=refusal)
"""


def test_updaters_killed_mid_update_never_leave_a_wrong_answer(store: MemoryStore) -> None:
    """A query process brings the index up to a commit of a few hundred entries and is
    killed (SIGKILL) at a random moment of its life, twice (a dozen with
    ``TRUSS_SLOW=1``, or ``TRUSS_CRASH_TRIALS``): the next query answers what the store holds
    at every floor."""
    mixed_store(store)
    work = str(store.git.workdir)
    Searcher(work).query(QUERY, Filter())
    rng = random.Random(int(os.environ.get("TRUSS_CRASH_SEED", "13")))
    commit_entries(store, _notes(store, 300, "calibrate"), "truss: import")
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", _UPDATER, work], check=True, timeout=120)
    life = time.monotonic() - start
    killed = 0
    default = "12" if os.environ.get("TRUSS_SLOW") else "2"
    for trial in range(int(os.environ.get("TRUSS_CRASH_TRIALS", default))):
        commit_entries(store, _notes(store, 300, f"t{trial}"), "truss: import")
        proc = subprocess.Popen([sys.executable, "-c", _UPDATER, work])
        time.sleep(rng.uniform(0.3, 1.0) * life)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            killed += 1
        proc.wait(timeout=120)
        check_against_reference(store, QUERY, Filter(min_trust=rng.choice(FLOORS)), 50)
    assert killed, "no updater was ever killed: the trials tested nothing"
    _every_floor_answers_right(store)
    assert audit(store.git).ok


def test_a_floor_index_ahead_of_the_head_is_rebuilt(store: MemoryStore) -> None:
    """The state a crash between a floor's commit and the head's replacement leaves: the
    floor indexes at the new commit, the head naming the old one. The next query rebuilds."""
    mixed_store(store)
    searcher = Searcher(store.git.workdir)
    searcher.query(QUERY, Filter())
    old_head = (_folder(store) / "head").read_bytes()
    store.write("fact", "later", "flaky network tests, written later")
    searcher.query(QUERY, Filter(min_trust=Trust.UNVERIFIED))
    assert searcher.index.stats["op"] == "update"
    (_folder(store) / "head").write_bytes(old_head)  # the floors moved, the head did not
    fresh = Searcher(store.git.workdir)
    found = fresh.query(QUERY, Filter(min_trust=Trust.UNVERIFIED), 50)
    assert fresh.index.stats["op"] == "rebuild"
    assert "later" in {h.entry.key for h in found.hits}
    _every_floor_answers_right(store)


@pytest.mark.parametrize(
    ("floor", "damage", "part"),
    covering(
        (floor, damage, part)
        for floor in (Trust.VERIFIED, Trust.UNVERIFIED)
        for damage in ("truncate", "garble", "delete", "link")
        for part in ("term", "idx", "fieldnorm", "fast", "meta.json")
    ),
)
def test_a_damaged_floor_file_is_rebuilt_not_served(
    store: MemoryStore, tmp_path: Path, floor: Trust, damage: str, part: str
) -> None:
    """One file of a floor index truncated, garbled in place (its length kept), deleted, or
    replaced by a link to a garbled copy: the next query answers right from a rebuilt one."""
    mixed_store(store)
    Searcher(store.git.workdir).query(QUERY, Filter(min_trust=floor))
    folder = _floor_dir(store, floor)
    victims = [p for p in folder.iterdir() if p.name == part or p.suffix == f".{part}"]
    assert victims, sorted(p.name for p in folder.iterdir())
    victim = max(victims, key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    if damage == "truncate":
        victim.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "delete":
        victim.unlink()
    else:
        at = len(data) // 3
        data[at : at + 64] = bytes(b ^ 0x5A for b in data[at : at + 64])
        if damage == "garble":
            victim.write_bytes(bytes(data))
        else:
            copy = tmp_path / "planted"
            copy.write_bytes(bytes(data))
            victim.unlink()
            victim.symlink_to(copy)
    _every_floor_answers_right_in_a_child(store)
    _every_floor_answers_right(store)
    assert _floor_dir(store, floor) != folder  # answered from a new index


def test_a_link_planted_at_a_floor_folder_is_not_followed(
    store: MemoryStore, tmp_path: Path
) -> None:
    """The verified floor's folder replaced by a link to a copy of the unverified floor's
    index (every unverified note in it): nothing of it is served at the verified floor, the
    copy is not touched through the link, and the index is rebuilt in a real folder."""
    mixed_store(store)
    Searcher(store.git.workdir).query(QUERY, Filter())
    planted = tmp_path / "planted-floor"
    shutil.copytree(_floor_dir(store, Trust.UNVERIFIED), planted)  # holds unverified entries
    folder = _floor_dir(store, Trust.VERIFIED)
    shutil.rmtree(folder)
    folder.symlink_to(planted)
    before = sorted(p.name for p in planted.iterdir())
    _every_floor_answers_right_in_a_child(store)
    found = check_against_reference(store, QUERY, Filter(), 50)
    assert all(h.entry.trust is Trust.VERIFIED for h in found.hits)
    assert sorted(p.name for p in planted.iterdir()) == before
    new = _floor_dir(store, Trust.VERIFIED)
    assert new != folder and new.is_dir() and not new.is_symlink()


def _resign(store: MemoryStore, floor: Trust) -> None:
    """The index head rewritten to name the floor's files as they are now: the state a
    damage within one tick of the clock after the floor's commit leaves (its files' times,
    sizes and inodes all as the commit recorded them)."""
    from truss_files.recall.floors import read_opstamp, signature
    from truss_files.recall.index import _Head

    path = _folder(store) / "head"
    head = _Head.load(path.read_bytes())
    assert head is not None
    name, _opstamp, _sign = head.floors[floor.value]
    where = str(_folder(store) / name)
    sign, opstamp = signature(where), read_opstamp(where)
    assert sign is not None and opstamp is not None
    path.write_bytes(
        head._replace(floors={**head.floors, floor.value: (name, opstamp, sign)}).dump()
    )


@pytest.mark.parametrize("part", ["term", "idx", "fieldnorm", "fast", "store"])
def test_bytes_garbled_within_a_tick_of_the_commit_are_never_served(
    store: MemoryStore, part: str
) -> None:
    """A file of a floor index garbled in place (its length kept) so soon after the floor's
    commit that its times are the ones the head recorded: tantivy checks no file's bytes as
    it opens it, but the private copy checks each against the checksum in its footer, so the
    next query answers right from a rebuilt index, never from the garbled bytes."""
    mixed_store(store)
    Searcher(store.git.workdir).query(QUERY, Filter(min_trust=Trust.UNVERIFIED))
    folder = _floor_dir(store, Trust.VERIFIED)
    victim = max(folder.glob(f"*.{part}"), key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    at = len(data) // 3
    data[at : at + 16] = bytes(b ^ 0x5A for b in data[at : at + 16])
    with open(victim, "r+b") as handle:  # in place: the same inode
        handle.write(bytes(data))
    _resign(store, Trust.VERIFIED)
    _every_floor_answers_right_in_a_child(store)
    assert _floor_dir(store, Trust.VERIFIED) != folder  # answered from a new index


def test_an_index_head_garbled_into_other_settings_is_not_believed(store: MemoryStore) -> None:
    """The index head keeps the branch tip's ``[recall]`` settings: one byte of them changed
    in place (``mode = "exact"`` read as ``"exacu"``) still decodes, but its checksum does
    not match, so the head is rebuilt from the tip rather than believed (a config error, or
    another mode, until the branch moves)."""
    mixed_store(store)
    Searcher(store.git.workdir).query(QUERY, Filter())
    path = _folder(store) / "head"
    data = path.read_bytes()
    assert data.count(b"exact") == 1, data
    path.write_bytes(data.replace(b"exact", b"exacu"))
    found = Searcher(store.git.workdir).query(QUERY, Filter())  # the mode from the head
    assert found.mode == "exact" and found.hits
    _every_floor_answers_right(store)
