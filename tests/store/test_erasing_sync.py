"""An erasure crosses to the server and the clones: ``sync`` pushes it past the server's gate
(the one force-push a protected branch takes), another clone adopts it on its next ``sync``
and is left holding no trace of the text, a clone that wrote on the old history since has its
commits replayed on top, and one whose commit touched the erased entry is told why it cannot
adopt it. The gate refuses the old history pushed back and an erasure whose rewritten commits
are not what its record says. One server and four clones for the module; the gate is a real
pre-receive hook (a process)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest

from tests.conftest import GIT_ENV, Clock
from tests.support.erasing import SECRET, AddsAFile, found
from truss_files.errors import StoreError
from truss_files.facade import MemoryStore
from truss_files.faces.hooks import install_hooks
from truss_files.git.gitstore import GitStore
from truss_files.model import Entry
from truss_files.signing import Ed25519Signer
from truss_files.store.erasing import Erased, build
from truss_files.store.initstore import init_store
from truss_files.store.sync import SyncResult
from truss_files.trust.audit import audit

pytestmark = pytest.mark.spawns


@dataclass
class Fleet:
    server: Path
    a: MemoryStore  # erases
    b: MemoryStore  # adopts
    c: MemoryStore  # wrote on the old history, adopts with its commit replayed on top
    d: MemoryStore  # promoted the erased entry on the old history: cannot adopt
    env: dict[str, str]
    gone: Entry
    old_tip: str
    c_entry: Entry
    d_tip: str
    lying_push: subprocess.CompletedProcess[str]
    erased: Erased
    pushed: SyncResult
    adopted: SyncResult
    replayed: SyncResult


def run(cwd: Path, *args: str, env: dict[str, str], check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {proc.stderr}")
    return proc.stdout


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    base = tmp_path_factory.mktemp("fleet")
    home = base / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test Operator\n\temail = operator@example.test\n"
        "[init]\n\tdefaultBranch = main\n"
    )
    env = {**os.environ, **GIT_ENV, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".c")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        for name, value in GIT_ENV.items():
            mp.setenv(name, value)
        key = Ed25519Signer.generate("operator@example.test")
        server = base / "server.git"
        pygit2.init_repository(str(server), bare=True, initial_head="main")
        init_store(server, key, "operator@example.test")
        install_hooks(server, server=True)

        def clone(name: str) -> MemoryStore:
            run(base, "clone", "-q", str(server), name, env=env)
            return MemoryStore(base / name, signer=key, clock=Clock(), environ=env)

        a, b, c, d = clone("a"), clone("b"), clone("c"), clone("d")
        install_hooks(base / "a")  # its pre-push takes the erasure's force-push too
        a.write("fact", "early", "Written before the erased entry.")
        gone = a.write("fact", "alice", SECRET)
        a.write("fact", "later", "Written after it.")
        a.sync()
        b.sync()
        c.sync()
        d.sync()
        c_entry = c.write("fact", "from-c", "Written on the old history, never synced.")
        d.promote(gone.id, d.sign_verdict(gone.id, "PASS", note="seen"))
        d_tip = str(d.git.tip().id)  # type: ignore[union-attr]
        old_tip = str(a.git.tip().id)  # type: ignore[union-attr]
        # An erasure whose rewritten commits hold more than the originals less the entry.
        lying = build(a, [gone.id], "asked", "operator@example.test", rewrite=AddsAFile)
        lying_push = subprocess.run(
            # Past its own pre-push (which refuses it too), to the server's gate.
            ["git", "push", "--no-verify", "--force", "origin", f"{lying.top}:refs/heads/main"],
            cwd=base / "a",
            env=env,
            capture_output=True,
            text=True,
        )
        erased = a.erase([gone.id], "GDPR request 114")
        pushed = a.sync()
        adopted = b.sync()
        replayed = c.sync()
        yield Fleet(
            server, a, b, c, d, env, gone, old_tip, c_entry, d_tip, lying_push, erased,
            pushed, adopted, replayed,
        )  # fmt: skip


def tip(store: MemoryStore) -> str:
    return str(store.git.tip().id)  # type: ignore[union-attr]


def test_the_gate_takes_the_erasure_and_sync_pushes_it(fleet: Fleet) -> None:
    assert fleet.pushed.integrated == "erasure" and fleet.pushed.pushed
    assert tip(fleet.a) == fleet.pushed.head == fleet.erased.commit
    assert audit(GitStore(fleet.server), environ=fleet.env).ok
    assert not found(fleet.a.git.workdir, fleet.gone.id)  # type: ignore[arg-type]


def test_an_erasure_whose_commits_are_not_what_its_record_says_is_refused(fleet: Fleet) -> None:
    assert fleet.lying_push.returncode != 0
    assert "[erasure-tree]" in fleet.lying_push.stderr


def test_a_clone_adopts_the_erasure_on_its_next_sync(fleet: Fleet) -> None:
    b = fleet.b
    assert fleet.adopted.integrated == "erasure"
    assert any("adopted erasure" in note for note in fleet.adopted.notes)
    assert tip(b) == fleet.erased.commit
    assert fleet.gone.id not in {e.id for e in b.iter_entries()}
    assert run(b.git.workdir, "status", "--porcelain", env=fleet.env) == ""  # type: ignore[arg-type]
    assert audit(b.git, environ=fleet.env).ok
    assert not found(b.git.workdir, fleet.gone.id)  # type: ignore[arg-type]


def test_a_clone_that_wrote_on_the_old_history_adopts_with_its_commits_on_top(
    fleet: Fleet,
) -> None:
    c = fleet.c
    assert fleet.replayed.integrated == "erasure" and fleet.replayed.pushed
    head = c.git.tip()
    assert head is not None and str(head.parents[0].id) == fleet.erased.commit
    assert str(GitStore(fleet.server).tip().id) == str(head.id)  # type: ignore[union-attr]
    assert fleet.c_entry.id in {e.id for e in c.iter_entries()}
    assert fleet.gone.id not in {e.id for e in c.iter_entries()}
    assert audit(c.git, environ=fleet.env).ok
    assert not found(c.git.workdir, fleet.gone.id)  # type: ignore[arg-type]


def test_a_clone_whose_commit_touched_the_erased_entry_is_told_why(fleet: Fleet) -> None:
    with pytest.raises(StoreError, match="an entry erasure .* erased; nothing changed locally"):
        fleet.d.sync()
    assert tip(fleet.d) == fleet.d_tip


def test_the_old_history_pushed_back_is_refused(fleet: Fleet) -> None:
    work = fleet.d.git.workdir
    assert work is not None
    server_tip = str(GitStore(fleet.server).tip().id)  # type: ignore[union-attr]
    forced = subprocess.run(
        ["git", "push", "--force", "origin", f"{fleet.d_tip}:refs/heads/main"],
        cwd=work, env=fleet.env, capture_output=True, text=True,
    )  # fmt: skip
    assert forced.returncode != 0 and "[non-fast-forward]" in forced.stderr
    # Merged on top of the erasure instead: the replaced commits come back, and are refused.
    run(work, "fetch", "-q", "origin", env=fleet.env)
    theirs = fleet.d.git.commit("refs/remotes/origin/main")
    merged = fleet.d.git.make_commit(
        theirs.tree.id,
        [pygit2.Oid(hex=fleet.d_tip), theirs.id],
        "truss: sync merge\n\nTruss-Op: merge",
        fleet.d.signer,
        fleet.d.identity("operator@example.test"),
    )
    pushed = subprocess.run(
        ["git", "push", "origin", f"{merged}:refs/heads/main"],
        cwd=work, env=fleet.env, capture_output=True, text=True,
    )  # fmt: skip
    assert pushed.returncode != 0 and "[erasure-replayed]" in pushed.stderr
    assert str(GitStore(fleet.server).tip().id) == server_tip  # type: ignore[union-attr]
