"""Attacks on the gates an operator installs: the server's pre-receive and the client's
pre-push under the pre-commit framework.

Reported (issue 20, items 5 and 6): after the README's ``git init --bare`` (whose default
branch is ``master``) and ``hooks install --server``, force-pushing ``main`` back past two
promotions and ``git push origin :main`` were both accepted, because only the bare
repository's default branch was protected; and under the pre-commit framework a first push
(for which pre-commit sets no ``PRE_COMMIT_TO_REF``) of a forged, unsigned ``trust: verified``
commit passed. Every attack runs the real git binary, the installed console script and (for
pre-push) the real pre-commit framework, and checks the server kept what it had.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from truss_files.store import MemoryStore

SCRIPT = Path(sys.executable).with_name("truss-files")
PRE_COMMIT = Path(sys.executable).with_name("pre-commit")


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {done.stdout}{done.stderr}")
    return done


def tip(repo: Path, ref: str = "refs/heads/main") -> str:
    return git(repo, "rev-parse", "--verify", "-q", ref, check=False).stdout.strip()


def promoted_store(store: MemoryStore) -> Path:
    """A store whose main holds a write and two promotions on top of init."""
    for key in ("one", "two"):
        entry = store.write("fact", key, f"The {key} fact holds.")
        store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="checked"))
    work = store.git.workdir
    assert work is not None
    return Path(work)


def readme_server(tmp_path: Path, work: Path, *protect: str) -> Path:
    """The README's server: ``git init --bare`` with git's own default branch (master), then
    ``hooks install --server --root <the store's root>`` through the console script."""
    bare = tmp_path / "memory.git"
    git(tmp_path, "-c", "init.defaultBranch=master", "init", "-q", "--bare", str(bare))
    assert git(bare, "symbolic-ref", "HEAD").stdout.strip() == "refs/heads/master"
    root = git(work, "config", "truss.root").stdout.strip()
    extra = [arg for name in protect for arg in ("--protect", name)]
    done = subprocess.run(
        [str(SCRIPT), "--store", str(bare), "hooks", "install", "--server", "--root", root] + extra,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "every branch whose history holds the trust root" in done.stdout + done.stderr
    git(work, "remote", "add", "origin", str(bare))
    assert git(work, "push", "-q", "origin", "main").returncode == 0
    return bare


def test_force_push_past_promotions_and_deleting_main_are_refused(
    store: MemoryStore, tmp_path: Path
) -> None:
    work = promoted_store(store)
    bare = readme_server(tmp_path, work)
    published = tip(bare)

    back = git(work, "push", "-f", "origin", "HEAD~2:refs/heads/main", check=False)
    assert back.returncode != 0
    assert "rejected refs/heads/main" in back.stderr and "[non-fast-forward]" in back.stderr
    assert tip(bare) == published

    gone = git(work, "push", "origin", ":main", check=False)
    assert gone.returncode != 0
    assert "[protected-delete]" in gone.stderr
    assert tip(bare) == published


def test_every_branch_that_reaches_the_root_is_protected_and_others_are_not(
    store: MemoryStore, tmp_path: Path
) -> None:
    work = promoted_store(store)
    bare = readme_server(tmp_path, work, "release/*")
    # A second store branch, named by nobody: it holds the root, so it is the store's history.
    git(work, "push", "-q", "origin", "main:refs/heads/topic")
    held = tip(bare, "refs/heads/topic")
    assert git(work, "push", "origin", ":topic", check=False).returncode != 0
    assert git(work, "push", "-f", "origin", "HEAD~1:topic", check=False).returncode != 0
    assert tip(bare, "refs/heads/topic") == held

    # A branch with no store history (an orphan of plain files) is the team's to rewrite.
    git(work, "switch", "-q", "--orphan", "notes")
    (work / "NOTES.txt").write_text("first\n")
    git(work, "add", "NOTES.txt")
    git(work, "commit", "-q", "-m", "notes")
    first = tip(work, "refs/heads/notes")
    (work / "NOTES.txt").write_text("second\n")
    git(work, "commit", "-q", "-am", "notes again")
    git(work, "push", "-q", "origin", "notes")
    assert git(work, "push", "-q", "-f", "origin", f"{first}:refs/heads/notes").returncode == 0
    assert tip(bare, "refs/heads/notes") == first
    assert git(work, "push", "-q", "origin", ":notes").returncode == 0
    assert tip(bare, "refs/heads/notes") == ""

    # A --protect pattern protects a branch of plain files too.
    git(work, "push", "-q", "origin", f"{first}:refs/heads/release/1")
    assert git(work, "push", "origin", ":release/1", check=False).returncode != 0
    assert tip(bare, "refs/heads/release/1") == first


def _forge_verified(work: Path) -> str:
    """A hand-made, unsigned commit that relabels a verified-pending entry as verified."""
    files = git(work, "ls-files", "memories/").stdout.split()
    unverified = [f for f in files if "trust: unverified" in (work / f).read_text()]
    assert unverified
    path = work / unverified[0]
    path.write_text(path.read_text().replace("trust: unverified", "trust: verified"))
    git(work, "commit", "-q", "--no-verify", "-am", "promote\n\nTruss-Op: promote")
    return tip(work, "HEAD")


def _pre_commit_repo(store: MemoryStore, tmp_path: Path) -> tuple[Path, Path]:
    """The store's work tree with the README's local pre-commit config installed for
    pre-push, and an empty bare remote it has never pushed to."""
    work = Path(str(store.git.workdir))
    bindir = Path(sys.executable).parent
    (work / ".pre-commit-config.yaml").write_text(
        "repos:\n  - repo: local\n    hooks:\n"
        "      - {id: truss-push, name: truss-files push audit, entry: truss-files hook "
        "pre-push, language: system, pass_filenames: false, stages: [pre-push]}\n"
    )
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    done = subprocess.run(
        [str(PRE_COMMIT), "install", "-t", "pre-push"],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(work, "remote", "add", "origin", str(remote))
    return work, remote


def _push_with_pre_commit(
    work: Path, tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    return subprocess.run(
        ["git", "push", "origin", *args],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_a_first_push_under_pre_commit_is_audited_not_waved_through(
    store: MemoryStore, tmp_path: Path
) -> None:
    store.write("fact", "pending", "Waiting for the panel.")
    work, remote = _pre_commit_repo(store, tmp_path)
    forged = _forge_verified(work)

    pushed = _push_with_pre_commit(work, tmp_path, "main")

    assert pushed.returncode != 0, pushed.stdout + pushed.stderr
    out = pushed.stdout + pushed.stderr
    assert f"commit {forged[:12]}" in out and "[signed]" in out
    assert tip(remote) == ""


def test_a_new_branch_under_pre_commit_is_audited_and_a_clean_push_passes(
    store: MemoryStore, tmp_path: Path
) -> None:
    store.write("fact", "pending", "Waiting for the panel.")
    work, remote = _pre_commit_repo(store, tmp_path)
    clean = _push_with_pre_commit(work, tmp_path, "main")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert tip(remote) == tip(work, "HEAD")

    git(work, "switch", "-q", "-c", "topic")
    forged = _forge_verified(work)
    pushed = _push_with_pre_commit(work, tmp_path, "topic")
    assert pushed.returncode != 0
    assert f"commit {forged[:12]}" in pushed.stdout + pushed.stderr
    assert tip(remote, "refs/heads/topic") == ""
