"""Attacks by moving the branch behind the store, each performed with real git processes.

Two clones of one store. Clone B writes an entry; clone A's branch is then moved to B's
commit by hand (``git update-ref``, ``git reset --soft``, ``git fetch && git update-ref``:
what a crash or another tool leaves), so A's index and work tree still hold the old tree and
B's entry looks deleted in ``git status``. Then A's next store operation runs (a write,
``repair``, or a read: ``list``, ``query``), and then the user's ordinary ``git add README.md
&& git commit`` with no hooks installed. The promise: store paths follow the branch, so that
commit keeps every entry and records no store change at all, and the user's own edits to
other files survive. A branch moved back is the other direction: the entries it no longer
holds must not come back in the user's unsigned commit either.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import console
from truss_files.facade import MemoryStore

STORE_ROOTS = ("memories/", "identity/", "principals/", ".truss/", "truss.toml")


def _run(work: Path, key: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return console.run(
        [console.SCRIPT, "--store", str(work), "--key", str(key), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _git(work: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=work, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def _write(work: Path, key: Path, name: str) -> str:
    """``truss-files write`` of a fact; the path of the entry it made in HEAD."""
    done = _run(work, key, "write", "--kind", "fact", "--key", name, "--format", "json", name)
    assert done.returncode == 0, done.stdout + done.stderr
    return _entry_path(work, done)


def _head_files(work: Path, rev: str = "HEAD") -> list[str]:
    return _git(work, "ls-tree", "-r", "--name-only", rev).splitlines()


def _is_store(path: str) -> bool:
    return path == "truss.toml" or path.startswith(STORE_ROOTS[:-1])


def _no_hooks(work: Path) -> None:
    hooks = work / ".git" / "hooks"
    assert not [p for p in hooks.iterdir() if not p.name.endswith(".sample")]


def _user_edits(work: Path) -> None:
    """What a user has going on beside the store: a change staged, one not, one untracked."""
    (work / "NOTES.txt").write_text("staged by the user\n")
    _git(work, "add", "NOTES.txt")
    (work / "README.md").write_text("the user's own readme, not yet added\n")
    (work / "scratch.txt").write_text("untracked, the user's\n")


def _user_commits(work: Path) -> None:
    """The user's ordinary commit, with no hook to stop it."""
    _git(work, "add", "README.md")
    _git(work, "commit", "-q", "-m", "x", "--no-verify")


def _assert_user_edits_kept(work: Path) -> None:
    assert _git(work, "show", "HEAD:NOTES.txt") == "staged by the user\n"
    assert _git(work, "show", "HEAD:README.md") == "the user's own readme, not yet added\n"
    assert (work / "scratch.txt").read_text() == "untracked, the user's\n"
    # The user's commit is the user's change alone: not one store path in it.
    changed = _git(work, "diff", "--name-only", "HEAD~1", "HEAD").splitlines()
    assert changed == ["NOTES.txt", "README.md"], changed
    assert _git(work, "status", "--porcelain").splitlines() == ["?? scratch.txt"]


def _face(face: str, work: Path, key: Path) -> subprocess.CompletedProcess[str]:
    """A's next store operation, through the console script."""
    args = {
        "write": ["write", "--kind", "fact", "--key", "a-next", "--format", "json", "a-next"],
        "repair": ["repair", "--format", "json"],
        "list": ["list", "--format", "json"],
        "query": ["query", "entry", "--min-trust", "unverified", "--format", "json"],
    }[face]
    return _run(work, key, *args)


def _entry_path(work: Path, done: subprocess.CompletedProcess[str]) -> str:
    """The path in HEAD of the entry a JSON ``write`` made."""
    entry_id = json.loads(done.stdout)["id"]
    (path,) = [p for p in _head_files(work) if p.endswith(f"{entry_id}.md")]
    return path


Pair = tuple[Path, Path, Path]


@pytest.fixture
def pair(clone: Callable[[str], MemoryStore], tmp_path: Path) -> Pair:
    """Clones A and B of one store (no hooks in either), the operator's key file."""
    a, b = clone("a").git.workdir, clone("b").git.workdir
    assert a is not None and b is not None
    _no_hooks(a)
    _no_hooks(b)
    return a, b, tmp_path / "operator_key"


def _both_write(a: Path, b: Path, key: Path) -> tuple[str, str]:
    """A writes and pushes; B pulls (as git does it), writes, and changes truss.toml (an
    operator takes a role away): B's tip holds both entries and the change."""
    mine = _write(a, key, "a-entry")
    _git(a, "push", "-q", "origin", "main")
    _git(b, "pull", "-q", "--ff-only")
    theirs = _write(b, key, "b-entry")
    done = _run(b, key, "roles", "revoke", "trainer", "operator@example.test", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    return mine, theirs


MOVES = {
    "update-ref": ("fetch ../b", "update-ref refs/heads/main FETCH_HEAD"),
    "reset-soft": ("fetch ../b", "reset -q --soft FETCH_HEAD"),
    "fetch-origin": ("fetch origin", "update-ref refs/heads/main refs/remotes/origin/main"),
}


@pytest.mark.parametrize(
    ("move", "face"),
    [
        ("update-ref", "write"),
        ("reset-soft", "write"),
        ("fetch-origin", "write"),
        ("update-ref", "list"),
        ("update-ref", "query"),
    ],
)
def test_a_ref_moved_to_another_clones_commit_loses_no_entry_to_a_plain_commit(
    pair: Pair, move: str, face: str
) -> None:
    a, b, key = pair
    mine, theirs = _both_write(a, b, key)
    if move == "fetch-origin":
        _git(b, "push", "-q", "origin", "main")
    for step in MOVES[move]:
        _git(a, *step.split())
    _user_edits(a)
    # The hazard is real: A's index is behind, B's entry looks deleted, truss.toml rolled back.
    status = _git(a, "status", "--porcelain").splitlines()
    assert f"D  {theirs}" in status and "M  truss.toml" in status
    config = _git(a, "show", "HEAD:truss.toml")

    done = _face(face, a, key)
    _user_commits(a)

    held = _head_files(a)
    assert mine in held and theirs in held  # not deleted by the user's commit
    assert _git(a, "show", "HEAD:truss.toml") == config  # nor the role given back
    assert done.returncode == 0, done.stdout + done.stderr
    if face == "write":
        assert _entry_path(a, done) in held
    assert (a / theirs).read_bytes() == _git(a, "show", f"HEAD:{theirs}").encode()
    _assert_user_edits_kept(a)


@pytest.mark.parametrize("face", ["write", "repair", "list"])
def test_a_branch_moved_back_takes_no_dropped_entry_into_a_plain_commit(
    pair: Pair, face: str
) -> None:
    """The other direction: A pulled B's commits, then its branch was moved back past B's
    entry and B's truss.toml change. The store paths follow the branch there too: the user's
    plain commit must not put them back unsigned (a role given back by hand, an entry no key
    signed here); the branch's entries survive, and the audit stays clean."""
    a, b, key = pair
    mine, theirs = _both_write(a, b, key)
    _git(a, "pull", "-q", "--ff-only", "../b", "main")
    _git(a, "update-ref", "refs/heads/main", "HEAD~2")
    _user_edits(a)
    status = _git(a, "status", "--porcelain").splitlines()
    assert f"A  {theirs}" in status and "M  truss.toml" in status
    kept = [p for p in _head_files(a) if _is_store(p)]
    config = _git(a, "show", "HEAD:truss.toml")

    done = _face(face, a, key)
    _user_commits(a)

    held = _head_files(a)
    wrote = [_entry_path(a, done)] if face == "write" else []
    assert [p for p in held if _is_store(p) and p not in kept] == wrote  # B's entry not back
    assert set(kept) <= set(held) and mine in held
    assert _git(a, "show", "HEAD:truss.toml") == config
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (a / theirs).exists()
    _assert_user_edits_kept(a)
    audit = _run(a, key, "audit", "--format", "json")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    # Nothing is lost that git does not keep: B's entry is in A's copy of B's commit.
    b_tip = _git(b, "rev-parse", "HEAD").strip()
    assert _git(a, "cat-file", "-t", f"{b_tip}:{theirs}").strip() == "blob"


def test_an_edit_the_store_never_held_is_kept_while_the_rest_follows(pair: Pair) -> None:
    """Only what git keeps in a commit the branch pointed at is replaced: an operator's hand
    edit of truss.toml in progress (staged, and changed again since) survives the read that
    puts B's entry back, and ``repair`` names it instead of discarding it."""
    a, b, key = pair
    _mine, theirs = _both_write(a, b, key)
    _git(a, "fetch", "-q", "../b", "main")
    _git(a, "update-ref", "refs/heads/main", "FETCH_HEAD")
    edited = (a / "truss.toml").read_text() + "\n# the operator's note, staged\n"
    (a / "truss.toml").write_text(edited)
    _git(a, "add", "truss.toml")
    (a / "truss.toml").write_text(edited + "# and more, not yet staged\n")

    done = _face("list", a, key)

    assert done.returncode == 0, done.stdout + done.stderr
    assert (a / theirs).exists()
    assert (a / "truss.toml").read_text() == edited + "# and more, not yet staged\n"
    assert _git(a, "show", ":truss.toml") == edited
    assert f"D  {theirs}" not in _git(a, "status", "--porcelain").splitlines()
    fixed = _run(a, key, "repair", "--format", "json")
    assert fixed.returncode == 1 and json.loads(fixed.stdout)["kept"] == ["truss.toml"]
