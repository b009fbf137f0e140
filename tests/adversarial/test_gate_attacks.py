"""Attacks on the gates an operator installs: the server's pre-receive and the client's
pre-push under the pre-commit framework.

Reported (issue 20, items 5 and 6): after the docs' ``git init --bare`` (whose default
branch is ``master``) and ``hooks install --server``, force-pushing ``main`` back past two
promotions and ``git push origin :main`` were both accepted, because only the bare
repository's default branch was protected; and under the pre-commit framework a first push
(for which pre-commit sets no ``PRE_COMMIT_TO_REF``) of a forged, unsigned ``trust: verified``
commit passed. The server and the pre-commit config are the docs' own snippets, run as
written (only the server's path is a temp dir); every attack runs the real git binary, the
installed console script and the real pre-commit framework, and checks the server kept what
it had.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import console
from truss_files.facade import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).with_name("truss-files")
PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
OPERATORS = ROOT / "docs" / "operators" / "enforcement.md"  # the operators' page of the docs
README_SERVER = "/srv/git/memory.git"


def readme_block(lang: str, first: str) -> str:
    """The ``lang`` block of the operators' page of the docs whose first line starts with
    ``first``."""
    section = OPERATORS.read_text()
    for found in re.finditer(rf"^```{lang}\n(.*?)^```$", section, re.M | re.S):
        if found.group(1).lstrip().startswith(first):
            return found.group(1)
    raise AssertionError(f"{OPERATORS} has no {lang} block starting {first!r}")


def tool_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment a user has: the venv's console scripts on PATH, pre-commit's cache in
    a temp dir."""
    env = {**os.environ, "PATH": f"{SCRIPT.parent}{os.pathsep}{os.environ['PATH']}"}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    return env | extra


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


def readme_server(tmp_path: Path, work: Path) -> Path:
    """The docs' server block, run by bash as written: ``git init --bare`` with git's own
    default branch (master), then ``hooks install --server --root "$(git -C ~/agent-memory
    config truss.root)" --protect 'release/*'``. Only the server's path is moved into a temp
    dir, and ``~/agent-memory`` is this store. The store then pushes main, as a user does."""
    bare = tmp_path / "srv" / "memory.git"
    bare.parent.mkdir()
    (Path.home() / "agent-memory").symlink_to(work)
    block = readme_block("sh", "git init --bare")
    assert README_SERVER in block and "--server" in block
    # git's own default: no init.defaultBranch (the test home's gitconfig sets main).
    env = tool_env(
        tmp_path,
        GIT_CONFIG_COUNT="1",
        GIT_CONFIG_KEY_0="init.defaultBranch",
        GIT_CONFIG_VALUE_0="master",
    )
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.replace(README_SERVER, str(bare))],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert git(bare, "symbolic-ref", "HEAD").stdout.strip() == "refs/heads/master"
    said = done.stdout + done.stderr
    assert "every branch whose history holds the trust root" in said
    assert "refs/heads/release/*" in said
    git(work, "remote", "add", "origin", str(bare))
    assert git(work, "push", "-q", "origin", "main").returncode == 0
    return bare


# -- the server gate ---------------------------------------------------------------------------


def test_force_push_past_promotions_and_deleting_main_are_refused(
    store: MemoryStore, tmp_path: Path
) -> None:
    work = promoted_store(store)
    bare = readme_server(tmp_path, work)
    published = tip(bare)
    assert published == tip(work, "HEAD")

    back = git(work, "push", "-f", "origin", "HEAD~2:refs/heads/main", check=False)
    assert back.returncode != 0
    assert "rejected refs/heads/main" in back.stderr and "[non-fast-forward]" in back.stderr
    assert "is protected" in back.stderr and "truss-files sync" in back.stderr
    assert tip(bare) == published

    gone = git(work, "push", "origin", ":main", check=False)
    assert gone.returncode != 0
    assert "rejected refs/heads/main" in gone.stderr and "[protected-delete]" in gone.stderr
    assert tip(bare) == published

    # A fast-forward is still a push like any other.
    store.write("fact", "three", "The third fact holds.")
    assert git(work, "push", "-q", "origin", "main").returncode == 0
    assert tip(bare) == tip(work, "HEAD") != published


def test_every_branch_that_reaches_the_root_is_protected_and_others_are_not(
    store: MemoryStore, tmp_path: Path
) -> None:
    work = promoted_store(store)
    bare = readme_server(tmp_path, work)
    # A second store branch, named by nobody: it holds the root, so it is the store's history.
    git(work, "push", "-q", "origin", "main:refs/heads/topic")
    held = tip(bare, "refs/heads/topic")
    gone = git(work, "push", "origin", ":topic", check=False)
    assert gone.returncode != 0 and "[protected-delete]" in gone.stderr
    back = git(work, "push", "-f", "origin", "HEAD~1:topic", check=False)
    assert back.returncode != 0 and "[non-fast-forward]" in back.stderr
    assert tip(bare, "refs/heads/topic") == held
    # The docs' way to retire one: on the server itself, where no push runs the gate.
    git(bare, "branch", "-D", "topic")
    assert tip(bare, "refs/heads/topic") == ""

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

    # The docs' --protect 'release/*' protects a branch of plain files too.
    git(work, "push", "-q", "origin", f"{first}:refs/heads/release/1")
    gone = git(work, "push", "origin", ":release/1", check=False)
    assert gone.returncode != 0 and "rejected refs/heads/release/1" in gone.stderr
    assert tip(bare, "refs/heads/release/1") == first
    assert tip(bare) == tip(work, "refs/heads/main")


def test_the_client_pre_push_refuses_rewriting_a_store_branch_as_the_server_does(
    store: MemoryStore, tmp_path: Path
) -> None:
    """The native pre-push (``truss-files hooks install``) knows store branches too: against
    a remote with no gate at all, rewriting or deleting a branch that holds the root is
    refused before anything is sent."""
    work = promoted_store(store)
    remote = tmp_path / "plain.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(work, "remote", "add", "origin", str(remote))
    done = console.run(
        [str(SCRIPT), "hooks", "install"], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    git(work, "push", "-q", "origin", "main", "main:refs/heads/topic")
    held = tip(remote, "refs/heads/topic")

    back = git(work, "push", "-f", "origin", "HEAD~2:refs/heads/topic", check=False)
    assert back.returncode != 0 and "[non-fast-forward]" in back.stderr
    gone = git(work, "push", "origin", ":topic", check=False)
    assert gone.returncode != 0 and "[protected-delete]" in gone.stderr
    assert tip(remote, "refs/heads/topic") == held


# -- pre-push under the pre-commit framework ---------------------------------------------------


def _forge_verified(work: Path) -> str:
    """A hand-made, unsigned commit that relabels a verified-pending entry as verified."""
    files = git(work, "ls-files", "memories/").stdout.split()
    unverified = [f for f in files if "trust: unverified" in (work / f).read_text()]
    assert unverified
    path = work / unverified[0]
    path.write_text(path.read_text().replace("trust: unverified", "trust: verified"))
    git(work, "commit", "-q", "--no-verify", "-am", "promote\n\nTruss-Op: promote")
    return tip(work, "HEAD")


def _pre_commit_repo(store: MemoryStore, tmp_path: Path, config: str) -> tuple[Path, Path]:
    """The store's work tree with ``config`` as its .pre-commit-config.yaml, installed by the
    docs' `pre-commit install -t pre-commit -t commit-msg -t pre-push`, and an empty bare
    remote it has never pushed to."""
    work = Path(str(store.git.workdir))
    (work / ".pre-commit-config.yaml").write_text(config)
    install = re.search(r"`(pre-commit install [^`]*)`", OPERATORS.read_text())
    assert install is not None and "-t pre-push" in install.group(1)
    done = subprocess.run(
        install.group(1).split(),
        cwd=work,
        capture_output=True,
        text=True,
        env=tool_env(tmp_path),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(work, "remote", "add", "origin", str(remote))
    return work, remote


def _readme_pre_commit(store: MemoryStore, tmp_path: Path) -> tuple[Path, Path]:
    return _pre_commit_repo(store, tmp_path, readme_block("yaml", "repos:"))


def _push_with_pre_commit(
    work: Path, tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "push", "origin", *args],
        cwd=work,
        capture_output=True,
        text=True,
        env=tool_env(tmp_path),
        timeout=300,
    )


def _refused(pushed: subprocess.CompletedProcess[str], forged: str) -> None:
    out = pushed.stdout + pushed.stderr
    assert pushed.returncode != 0, out
    assert f"commit {forged[:12]}" in out and "[signed]" in out, out
    assert "Failed" in out, out


def test_a_first_push_under_pre_commit_is_audited_not_waved_through(
    store: MemoryStore, tmp_path: Path
) -> None:
    store.write("fact", "pending", "Waiting for the panel.")
    work, remote = _readme_pre_commit(store, tmp_path)
    forged = _forge_verified(work)

    _refused(_push_with_pre_commit(work, tmp_path, "main"), forged)
    assert tip(remote) == ""


def test_a_new_branch_under_pre_commit_is_audited_and_a_clean_push_passes(
    store: MemoryStore, tmp_path: Path
) -> None:
    store.write("fact", "pending", "Waiting for the panel.")
    work, remote = _readme_pre_commit(store, tmp_path)
    clean = _push_with_pre_commit(work, tmp_path, "main")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "Passed" in clean.stdout
    assert tip(remote) == tip(work, "HEAD")

    git(work, "switch", "-q", "-c", "topic")
    forged = _forge_verified(work)
    _refused(_push_with_pre_commit(work, tmp_path, "topic"), forged)
    assert tip(remote, "refs/heads/topic") == ""


def test_a_first_push_of_a_branch_not_checked_out_is_audited(
    store: MemoryStore, tmp_path: Path
) -> None:
    """pre-commit names the local ref as git wrote it (``refs/heads/topic``, ``HEAD~1``):
    the hook audits that ref, not whatever HEAD happens to be."""
    store.write("fact", "pending", "Waiting for the panel.")
    work, remote = _readme_pre_commit(store, tmp_path)
    git(work, "switch", "-q", "-c", "topic")
    forged = _forge_verified(work)
    git(work, "switch", "-q", "main")

    _refused(_push_with_pre_commit(work, tmp_path, "topic"), forged)
    _refused(_push_with_pre_commit(work, tmp_path, "topic:refs/heads/main"), forged)
    git(work, "switch", "-q", "topic")
    git(work, "commit", "-q", "--no-verify", "--allow-empty", "-m", "on top")
    _refused(_push_with_pre_commit(work, tmp_path, "HEAD~1:refs/heads/main"), forged)
    assert tip(remote) == "" and tip(remote, "refs/heads/topic") == ""


@pytest.mark.slow  # pre-commit builds its own environment first: TRUSS_SLOW=1
def test_the_published_hooks_file_audits_a_first_push(store: MemoryStore, tmp_path: Path) -> None:
    """This repository's own .pre-commit-hooks.yaml, installed by the real framework
    (``language: python``: pre-commit builds its own environment from a clone)."""
    hook_repo = tmp_path / "hook-repo"
    hook_repo.mkdir()
    for name in (".pre-commit-hooks.yaml", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, hook_repo / name)
    shutil.copytree(
        ROOT / "truss_files",
        hook_repo / "truss_files",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    git(hook_repo, "init", "-q")
    git(hook_repo, "add", "-A")
    git(hook_repo, "commit", "-q", "-m", "the hooks as checked out")
    ids = re.findall(r"^- id: (\S+)", (ROOT / ".pre-commit-hooks.yaml").read_text(), re.M)
    assert "truss-files-audit-push" in ids
    readme = OPERATORS.read_text()
    assert all(f"`{name}`" in readme for name in ids), "the docs name the published ids"
    config = (
        f"repos:\n  - repo: {hook_repo}\n    rev: {tip(hook_repo, 'HEAD')}\n    hooks:\n"
        + "".join(f"      - id: {name}\n" for name in ids)
    )
    store.write("fact", "pending", "Waiting for the panel.")
    work, remote = _pre_commit_repo(store, tmp_path, config)
    forged = _forge_verified(work)

    _refused(_push_with_pre_commit(work, tmp_path, "main"), forged)
    assert tip(remote) == ""


def test_a_push_of_several_branches_is_audited_ref_by_ref_with_the_native_hook_chained(
    store: MemoryStore, tmp_path: Path
) -> None:
    """pre-commit hands its hooks one branch of a multi-branch push; the README's remedy,
    `truss-files hooks install` after `pre-commit install`, keeps pre-commit's hook as
    pre-push.local and audits every ref the push sends."""
    store.write("fact", "pending", "Waiting for the panel.")
    work, remote = _readme_pre_commit(store, tmp_path)
    git(work, "switch", "-q", "-c", "topic")
    forged = _forge_verified(work)
    git(work, "switch", "-q", "main")
    store.write("fact", "clean", "A clean write on main.")
    done = console.run(
        [str(SCRIPT), "hooks", "install"], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (work / ".git" / "hooks" / "pre-push.local").read_text().count("pre-commit")

    for order in (("main", "topic"), ("topic", "main")):
        pushed = _push_with_pre_commit(work, tmp_path, *order)
        out = pushed.stdout + pushed.stderr
        assert pushed.returncode != 0, out
        assert f"rejected refs/heads/topic: commit {forged[:12]}" in out and "[signed]" in out
        assert tip(remote) == "" and tip(remote, "refs/heads/topic") == ""
    assert _push_with_pre_commit(work, tmp_path, "main").returncode == 0
    assert tip(remote) == tip(work, "refs/heads/main")
