"""Hooks through the real git CLI: a bare "server" with the pre-receive gate, clones pushing to
it, and the client hooks (pre-commit, commit-msg, pre-push) in a store's work tree."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from truss_files.facade import MemoryStore
from truss_files.faces.hooks import SHIM_MARK, install_hooks
from truss_files.format.entryfile import serialize
from truss_files.git.gitstore import Identity, Plan
from truss_files.model import Entry, Kind, Provenance, Trust
from truss_files.signing import Ed25519Signer

REPO = Path(__file__).resolve().parents[2]

# Where an entry written by hand says it came from (a LedgerRef, as every write names).
BY_HAND = Provenance(produced_by="cli:operator@example.test")


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {proc.stdout}{proc.stderr}")
    return proc


def _commit_raw(
    store: MemoryStore, changes: dict[str, bytes | None], signer: Ed25519Signer, op: str = "edit"
) -> str:
    """A hand edit committed through GitStore.apply: signed by ``signer``, checked by nothing."""
    done = store.git.apply(
        lambda _snap: Plan(changes, f"truss: hand edit\n\nTruss-Op: {op}"),
        signer,
        Identity("Test Operator", "operator@example.test"),
    )
    assert done is not None
    return str(done[0].id)


# -- the server (fixtures `server` and `clone` in conftest.py) -------------------------------


def _tip(path: Path, ref: str = "refs/heads/main") -> str:
    return _git(path, "rev-parse", ref).stdout.strip()


def _push(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _git(work, "push", "origin", *args, check=False)


def _remote_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.strip() for line in proc.stderr.splitlines() if line.startswith("remote: ")]


def test_signed_store_commits_are_accepted(
    server: Path, clone: Callable[[str], MemoryStore]
) -> None:
    a = clone("a")
    entry = a.write("lesson", "flaky", "Retry the network tests once.")
    a.promote(entry.id, a.sign_verdict(entry.id, "PASS", note="ok"))
    work = a.git.workdir
    assert work is not None

    pushed = _push(work, "main")

    assert pushed.returncode == 0, pushed.stderr
    assert _tip(server) == _tip(work)


def test_an_unsigned_commit_is_rejected_naming_commit_and_rule(
    server: Path, clone: Callable[[str], MemoryStore]
) -> None:
    a = clone("a")
    work = a.git.workdir
    assert work is not None
    before = _tip(server)
    entry = Entry(
        Kind.FACT,
        "by-hand",
        "Written with an editor.",
        created="2026-11-29T11:00:00Z",
        provenance=BY_HAND,
    )
    target = work / entry.path
    target.parent.mkdir(parents=True)
    target.write_text(serialize(entry))
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "by hand\n\nTruss-Op: write")
    sha = _tip(work)

    pushed = _push(work, "main")

    assert pushed.returncode != 0
    assert (
        f"remote: truss-files: rejected refs/heads/main: commit {sha[:12]}: [signed] commit "
        "touches the store but is unsigned"
    ) in _remote_lines(pushed)
    assert _tip(server) == before


def test_a_forged_verdict_is_rejected(
    server: Path, clone: Callable[[str], MemoryStore], operator_key: Ed25519Signer
) -> None:
    a = clone("a")
    target = a.write("fact", "target", "The build takes ten minutes.")
    other = a.write("fact", "other", "The tests take two minutes.")
    verdict = a.sign_verdict(other.id, "PASS", note="for the other entry")
    # Hand-edited trust: verified, carrying a real verdict that names another id.
    forged = dataclasses.replace(
        target,
        trust=Trust.VERIFIED,
        provenance=dataclasses.replace(target.provenance, verified_by=verdict.to_dict()),
    )
    sha = _commit_raw(a, {target.path: serialize(forged).encode()}, operator_key, "promote")
    work = a.git.workdir
    assert work is not None

    pushed = _push(work, "main")

    assert pushed.returncode != 0
    lines = _remote_lines(pushed)
    assert any(
        line.startswith(
            f"remote: truss-files: rejected refs/heads/main: commit {sha[:12]} "
            f"{target.path}: [verdict] verdict {verdict.id} is for entry {other.id}"
        )
        for line in lines
    ), lines


def test_a_commit_signed_by_an_unknown_key_is_rejected(
    server: Path, clone: Callable[[str], MemoryStore]
) -> None:
    a = clone("a")
    stranger = Ed25519Signer.generate("stranger@example.test")
    entry = Entry(
        Kind.FACT, "sneaky", "Trust me.", created="2026-11-29T11:00:00Z", provenance=BY_HAND
    )
    sha = _commit_raw(a, {entry.path: serialize(entry).encode()}, stranger, "write")
    work = a.git.workdir
    assert work is not None

    pushed = _push(work, "main")

    assert pushed.returncode != 0
    lines = _remote_lines(pushed)
    assert any(
        f"rejected refs/heads/main: commit {sha[:12]}: [signed] key "
        f"{stranger.public_key.fingerprint} is not in .truss/allowed_signers" in line
        for line in lines
    ), lines


def test_force_push_and_deletion_of_protected_branches_are_rejected(
    server: Path, clone: Callable[[str], MemoryStore]
) -> None:
    a = clone("a")
    work = a.git.workdir
    assert work is not None
    a.write("fact", "one", "First.")
    assert _push(work, "main").returncode == 0
    published = _tip(server)
    _git(work, "reset", "-q", "--hard", "HEAD~1")
    a.write("fact", "two", "Rewritten history.")
    rewritten = _tip(work)

    forced = _push(work, "--force", "main")

    assert forced.returncode != 0
    assert any(
        f"rejected refs/heads/main: commit {rewritten[:12]}: [non-fast-forward] it does not "
        f"descend from {published[:12]}" in line
        for line in _remote_lines(forced)
    ), forced.stderr
    assert _tip(server) == published

    deleted = _push(work, ":main")
    assert deleted.returncode != 0
    assert (
        f"remote: truss-files: rejected refs/heads/main: commit {published[:12]}: "
        "[protected-delete] deleting a protected branch (truss.protected); store history is "
        "never deleted"
    ) in _remote_lines(deleted)
    assert _tip(server) == published


def test_configured_protection_and_unprotected_branches(
    server: Path, clone: Callable[[str], MemoryStore]
) -> None:
    a = clone("a")
    work = a.git.workdir
    assert work is not None
    assert _push(work, "HEAD:refs/heads/release", "HEAD:refs/heads/feature").returncode == 0

    release = _push(work, ":release")
    assert release.returncode != 0 and "[protected-delete]" in release.stderr
    # Every branch holding the store's history is the store's, named or not (a branch without
    # it is free to rewrite: tests/adversarial/test_gate_attacks.py).
    feature = _push(work, ":feature")
    assert feature.returncode != 0 and "[protected-delete]" in feature.stderr
    assert _git(server, "rev-parse", "--verify", "-q", "refs/heads/release", check=False).stdout


def test_an_empty_server_takes_the_pinned_store_and_refuses_another(
    tmp_path: Path, store: MemoryStore
) -> None:
    from truss_files.store.initstore import init_store

    work = store.git.workdir
    assert work is not None
    root = _git(work, "config", "truss.root").stdout.strip()
    empty = tmp_path / "empty.git"
    _git(tmp_path, "init", "-q", "--bare", str(empty))
    report = install_hooks(empty, server=True, root=root)
    assert f"pinned the trust root truss.root = {root}" in report.notes
    # Another store, initialised by someone else's key, is not this server's history.
    other_key = Ed25519Signer.generate("mallory@example.test")
    other = init_store(tmp_path / "other", other_key, "mallory@example.test")

    refused = _git(other.path, "push", str(empty), "main", check=False)
    accepted = _git(work, "push", str(empty), "main", check=False)

    assert refused.returncode != 0
    assert f"commit {other.root[:12]}: [policy] no trust policy" in refused.stderr
    assert accepted.returncode == 0, accepted.stderr
    assert _tip(empty) == _tip(work)


def test_server_hook_install_is_idempotent_and_chains_an_existing_hook(
    tmp_path: Path, server: Path, clone: Callable[[str], MemoryStore]
) -> None:
    hooks = server / "hooks"
    (hooks / "pre-receive").unlink()
    marker = tmp_path / "local-ran"
    (hooks / "pre-receive").write_text(f"#!/bin/sh\ncat > {marker}\n")
    (hooks / "pre-receive").chmod(0o755)

    first = install_hooks(server, server=True)
    second = install_hooks(server, server=True)

    assert first.hooks[0].action == "installed"
    assert first.hooks[0].chained == str(hooks / "pre-receive.local")
    assert second.hooks[0].action == "unchanged"
    assert SHIM_MARK in (hooks / "pre-receive").read_text()
    a = clone("a")
    a.write("fact", "chained", "Both hooks see the push.")
    work = a.git.workdir
    assert work is not None
    assert _push(work, "main").returncode == 0
    # The earlier hook read the same ref lines on its stdin.
    assert marker.read_text().split()[2] == "refs/heads/main"


# -- the client hooks ------------------------------------------------------------------------


@pytest.fixture
def hooked(store: MemoryStore) -> Path:
    work = store.git.workdir
    assert work is not None
    report = install_hooks(work)
    assert [h.name for h in report.hooks] == ["pre-commit", "commit-msg", "pre-push"]
    return work


def _stage(work: Path, entry: Entry) -> None:
    target = work / entry.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(serialize(entry))
    _git(work, "add", entry.path)


def test_pre_commit_refuses_a_new_entry_that_does_not_land_unverified(hooked: Path) -> None:
    entry = Entry(
        Kind.FACT,
        "eager",
        "Promoted by hand.",
        trust=Trust.VERIFIED,
        created="2026-11-29T11:00:00Z",
        provenance=BY_HAND,
    )
    _stage(hooked, entry)
    head = _tip(hooked)

    made = _git(hooked, "commit", "-q", "-m", "x\n\nTruss-Op: write", check=False)

    assert made.returncode != 0
    assert f"truss-files pre-commit: {entry.path}: [lands-unverified]" in made.stderr
    assert _tip(hooked) == head


def test_pre_commit_refuses_an_edited_body(store: MemoryStore, hooked: Path) -> None:
    entry = store.write("lesson", "edit-me", "The original text.")
    path = hooked / entry.path
    path.write_text(path.read_text().replace("The original text.", "A quiet rewrite."))
    _git(hooked, "add", entry.path)

    made = _git(hooked, "commit", "-q", "-m", "x\n\nTruss-Op: write", check=False)

    assert made.returncode != 0
    assert f"truss-files pre-commit: {entry.path}: [entry]" in made.stderr
    assert "does not match the content" in made.stderr


def test_commit_msg_wants_trailers_on_store_commits(hooked: Path) -> None:
    entry = Entry(
        Kind.FACT,
        "trailers",
        "Written by hand.",
        created="2026-11-29T11:00:00Z",
        provenance=BY_HAND,
    )
    _stage(hooked, entry)

    bare = _git(hooked, "commit", "-q", "-m", "add a fact", check=False)
    assert bare.returncode != 0
    assert "truss-files commit-msg: [trailers]" in bare.stderr
    assert "Truss-Op: <op>" in bare.stderr

    ok = _git(hooked, "commit", "-q", "-m", "add a fact\n\nTruss-Op: write", check=False)
    assert ok.returncode == 0, ok.stderr
    # Not a store commit: no trailer needed.
    (hooked / "NOTES.txt").write_text("hello\n")
    _git(hooked, "add", "NOTES.txt")
    assert _git(hooked, "commit", "-q", "-m", "notes", check=False).returncode == 0


def test_pre_push_audits_the_pushed_range(store: MemoryStore, hooked: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    _git(tmp_path, "init", "-q", "--bare", str(remote))
    _git(hooked, "remote", "add", "origin", str(remote))
    store.write("fact", "signed", "A signed write.")
    assert _git(hooked, "push", "-q", "origin", "main", check=False).returncode == 0

    entry = Entry(
        Kind.FACT,
        "unsigned",
        "Committed with plain git.",
        created="2026-11-29T11:00:00Z",
        provenance=BY_HAND,
    )
    _stage(hooked, entry)
    _git(hooked, "commit", "-q", "-m", "x\n\nTruss-Op: write")
    sha = _tip(hooked)

    pushed = _git(hooked, "push", "origin", "main", check=False)

    assert pushed.returncode != 0
    assert (
        f"truss-files: rejected refs/heads/main: commit {sha[:12]}: [signed] commit touches "
        "the store but is unsigned"
    ) in pushed.stderr
    assert _tip(remote) != sha


def test_client_install_chains_and_is_idempotent(store: MemoryStore, tmp_path: Path) -> None:
    work = store.git.workdir
    assert work is not None
    hooks = work / ".git" / "hooks"
    marker = tmp_path / "ran"
    (hooks / "pre-commit").write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    (hooks / "pre-commit").chmod(0o755)

    first = {h.name: h for h in install_hooks(work).hooks}
    second = {h.name: h for h in install_hooks(work).hooks}

    assert first["pre-commit"].chained == str(hooks / "pre-commit.local")
    assert {h.action for h in second.values()} == {"unchanged"}
    assert (hooks / "pre-commit.local").read_text().startswith("#!/bin/sh\necho ran")
    (work / "README.txt").write_text("hi\n")
    _git(work, "add", "README.txt")
    _git(work, "commit", "-q", "-m", "readme")
    assert marker.read_text() == "ran\n"

    (hooks / "pre-commit.local").write_text("#!/bin/sh\nexit 7\n")
    (work / "README.txt").write_text("again\n")
    _git(work, "add", "README.txt")
    blocked = _git(work, "commit", "-q", "-m", "readme again", check=False)
    assert blocked.returncode != 0
    assert "pre-commit.local failed (exit 7)" in blocked.stderr


def test_the_checked_in_shims_run_through_path(store: MemoryStore, tmp_path: Path) -> None:
    """hooks/* in this repository: copied into .git/hooks, they find truss-files on PATH."""
    work = store.git.workdir
    assert work is not None
    for name in ("pre-commit", "commit-msg"):
        shutil.copy(REPO / "hooks" / name, work / ".git" / "hooks" / name)
    bin_dir = Path(sys.executable).parent
    # `make test` installs the package, console script included: its absence is a failure.
    assert (bin_dir / "truss-files").exists(), "install the package: pip install -e ."
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    entry = Entry(
        Kind.FACT, "shim", "Via the shim.", created="2026-11-29T11:00:00Z", provenance=BY_HAND
    )
    _stage(work, entry)

    made = subprocess.run(
        ["git", "commit", "-q", "-m", "no trailer"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )

    assert made.returncode != 0
    assert "truss-files commit-msg: [trailers]" in made.stderr
