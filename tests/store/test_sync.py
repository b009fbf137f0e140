"""`truss-files sync` through a bare remote guarded by the pre-receive hook: fast-forwards,
signed merges settled by the driver's rules, compare-and-swap pushes that retry after a lost
race, and two processes writing at once."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest

from truss_files.errors import StoreError
from truss_files.facade import MemoryStore
from truss_files.faces.hooks import install_hooks
from truss_files.format.entryfile import parse, serialize
from truss_files.git.gitstore import GitStore, Identity, Plan
from truss_files.model import Entry, Kind, Provenance, Trust
from truss_files.signing import Ed25519Signer
from truss_files.store.sync import sync
from truss_files.trust.audit import audit

# Where an entry written by hand says it came from (a LedgerRef, as every write names).
BY_HAND = Provenance(produced_by="cli:operator@example.test")


class _Clock:
    def __init__(self, start: int) -> None:
        self.now = datetime.datetime(2026, 11, 29, 12, 0, start, tzinfo=datetime.UTC)

    def __call__(self) -> datetime.datetime:
        self.now += datetime.timedelta(seconds=1)
        return self.now


def _git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout


@pytest.fixture
def server(bare_store: MemoryStore) -> Path:
    install_hooks(bare_store.git.git_dir, server=True)
    return bare_store.git.git_dir


@pytest.fixture
def clone(tmp_path: Path, operator_key: Ed25519Signer) -> Callable[..., MemoryStore]:
    def make(remote: Path, name: str, clock_start: int = 0) -> MemoryStore:
        _git(tmp_path, "clone", "-q", str(remote), name)
        return MemoryStore(tmp_path / name, signer=operator_key, clock=_Clock(clock_start))

    return make


def _entries(path: Path) -> dict[str, Entry]:
    git = GitStore(path)
    return {
        p.rsplit("/", 1)[-1][:-3]: parse(blob.data, p)
        for p, blob in git.snapshot().walk("memories")
    }


def _audit_clean(path: Path) -> int:
    report = audit(GitStore(path))
    assert report.ok, [str(v) for v in report.violations]
    return report.checked


def _tip(store: MemoryStore) -> str:
    tip = store.git.tip()
    assert tip is not None
    return str(tip.id)


def test_push_then_fast_forward_keeps_the_work_tree_clean(
    server: Path, clone: Callable[..., MemoryStore]
) -> None:
    a, b = clone(server, "a"), clone(server, "b")
    entry = a.write("fact", "ff", "Fast-forwards need no merge.")

    pushed = sync(a)
    pulled = sync(b)

    assert (pushed.integrated, pushed.pushed) == ("none", True)
    assert (pulled.integrated, pulled.pushed) == ("fast-forward", False)
    assert _tip(b) == _tip(a) == str(GitStore(server).tip().id)  # type: ignore[union-attr]
    work = b.git.workdir
    assert work is not None
    assert (work / entry.path).read_text() == serialize(entry)
    assert _git(work, "status", "--porcelain") == ""
    assert (
        sync(b).summary().endswith(f"nothing to integrate; nothing to push; now at {_tip(b)[:12]}")
    )


def test_diverged_trust_changes_merge_by_the_state_machine(
    server: Path, clone: Callable[..., MemoryStore]
) -> None:
    a, b = clone(server, "a"), clone(server, "b", clock_start=30)
    entry = a.write("decision", "queue", "Use a Redis queue.")
    a.promote(entry.id, a.sign_verdict(entry.id, "PASS", note="ok"))
    older = a.write("decision", "queue-v0", "Use a cron job.")
    a.promote(older.id, a.sign_verdict(older.id, "PASS", note="ok"))
    sync(a)
    sync(b)
    # A: a newer decision supersedes the entry (stale, superseded_by) ...
    newer = a.write("decision", "queue-v2", "Use the database as the queue.")
    a.promote(newer.id, a.sign_verdict(newer.id, "PASS", note="ok"))
    a.supersede(entry.id, newer.id)
    # ... while B records that the entry supersedes an older one (verified, supersedes).
    b.supersede(older.id, entry.id)

    first = sync(a)
    second = sync(b)

    assert first.pushed and first.integrated == "none"
    assert (second.integrated, second.pushed) == ("merge", True)
    assert second.merged_paths == (entry.path,)
    merged = _entries(server)[entry.id]
    assert merged.trust is Trust.STALE
    assert (merged.superseded_by, merged.supersedes) == (newer.id, older.id)
    tip = GitStore(server).tip()
    assert tip is not None and len(tip.parents) == 2
    assert tip.gpg_signature[0] is not None
    assert "Truss-Op: merge" in tip.message
    _audit_clean(server)
    assert sync(a).integrated == "fast-forward"
    assert _entries(a.git.workdir or Path())[entry.id] == merged


def test_a_lost_race_is_retried_after_merging_the_winner(
    server: Path, clone: Callable[..., MemoryStore]
) -> None:
    a, b = clone(server, "a"), clone(server, "b")
    mine = a.write("fact", "race-a", "A was slower.")
    theirs = b.write("fact", "race-b", "B pushed first.")
    raced: list[int] = []

    def b_wins(attempt: int) -> None:
        if attempt == 1:
            raced.append(attempt)
            assert sync(b).pushed

    result = sync(a, before_push=b_wins)

    assert raced == [1]
    assert result.attempts == 2 and result.pushed and result.integrated == "merge"
    assert {mine.id, theirs.id} <= set(_entries(server))
    _audit_clean(server)


def test_incoming_commits_that_fail_the_audit_stop_the_sync(
    bare_store: MemoryStore, clone: Callable[..., MemoryStore]
) -> None:
    # A remote with no gate: someone pushed a commit signed by a key the store never allowed.
    remote = bare_store.git.git_dir
    stranger = Ed25519Signer.generate("stranger@example.test")
    entry = Entry(
        Kind.FACT, "sneaky", "Trust me.", created="2026-11-29T11:00:00Z", provenance=BY_HAND
    )
    a = clone(remote, "a")
    before = _tip(a)
    bare_store.git.apply(
        lambda _snap: Plan({entry.path: serialize(entry).encode()}, "x\n\nTruss-Op: write"),
        stranger,
        Identity("Stranger", "stranger@example.test"),
    )

    with pytest.raises(StoreError, match=r"refusing to integrate origin: 1 audit violation"):
        sync(a)

    assert _tip(a) == before
    assert entry.id not in _entries(a.git.workdir or Path())


_WORKER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from truss_files.store.sync import sync
    from truss_files.signing import Ed25519Signer
    from truss_files.facade import MemoryStore

    path, key, tag, count = sys.argv[1:]
    store = MemoryStore(path, signer=Ed25519Signer.load(Path(key)))
    ids = []
    for i in range(int(count)):
        entry = store.write("fact", f"{tag}-{i}", f"{tag} wrote fact number {i}.")
        if i % 2 == 0:
            store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note=tag))
        ids.append(entry.id)
        sync(store)
    print(" ".join(ids))
    """
)


def test_two_processes_writing_at_once_both_land_and_audit_clean(
    server: Path, clone: Callable[..., MemoryStore], tmp_path: Path
) -> None:
    a, b = clone(server, "a"), clone(server, "b")
    key = tmp_path / "operator_key"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(store.git.workdir), str(key), tag, "5"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for store, tag in ((a, "left"), (b, "right"))
    ]
    written: set[str] = set()
    for proc in workers:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        written |= set(out.split())

    assert len(written) == 10
    on_server = _entries(server)
    assert written <= set(on_server)
    assert sum(e.trust is Trust.VERIFIED for e in on_server.values()) == 6
    checked = _audit_clean(server)
    # init, 10 writes and 6 promotes at least; how many merges depends on how the races fall.
    assert checked >= 17
    for store in (a, b):
        sync(store)
        assert _tip(store) == str(GitStore(server).tip().id)  # type: ignore[union-attr]


def test_cli_sync_prints_what_it_did(
    server: Path, clone: Callable[..., MemoryStore], tmp_path: Path
) -> None:
    a = clone(server, "a")
    a.write("fact", "cli", "Synced from the command line.")
    proc = subprocess.run(
        [sys.executable, "-m", "truss_files", "--key", str(tmp_path / "operator_key"), "sync"],
        cwd=a.git.workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["pushed"] is True and data["integrated"] == "none"
    assert data["head"] == str(pygit2.Repository(str(server)).head.target)
