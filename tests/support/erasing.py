"""Helpers the erasure tests share: a store in a folder of its own (for module-scoped
fixtures), a rewrite that smuggles a file in, and a search for the erased text in every
object and file of a repository."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pygit2

from tests.conftest import GIT_ENV, Clock
from truss_files.facade import MemoryStore
from truss_files.signing import Ed25519Signer
from truss_files.store.erasing import Rewrite
from truss_files.store.initstore import init_store

SECRET = "Alice Example lives at 12 Privacy Lane."


def make_store(base: Path) -> tuple[MemoryStore, Ed25519Signer]:
    """A store at ``base/store`` with its own HOME, initialised by an operator key saved as
    ``base/operator_key``."""
    home = base / "home"
    home.mkdir(parents=True)
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test Operator\n\temail = operator@example.test\n"
        "[init]\n\tdefaultBranch = main\n"
    )
    key = Ed25519Signer.generate("operator@example.test")
    key.save(base / "operator_key")
    init_store(base / "store", key, "operator@example.test")
    env = {**os.environ, **GIT_ENV, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".c")}
    return MemoryStore(base / "store", signer=key, clock=Clock(), environ=env), key


class AddsAFile(Rewrite):
    """Erases honestly, and slips a file into each commit that held the entry."""

    def tree(self, commit: pygit2.Commit) -> pygit2.Oid:
        honest = super().tree(commit)
        if honest == commit.tree.id:
            return honest
        builder = self.repo.TreeBuilder(honest)
        builder.insert(
            "extra.txt", self.repo.create_blob(b"smuggled\n"), pygit2.enums.FileMode.BLOB
        )
        return builder.write()


def found(work: Path, entry_id: str, text: str = "Privacy Lane") -> list[str]:
    """Where the text (or the entry's file) is: every object git holds, reachable or not,
    every file under .git read raw, and the work tree."""
    needles = [text.encode(), f"{entry_id}.md".encode()]
    objects = subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch", "--unordered"],
        cwd=work,
        capture_output=True,
        check=True,
    ).stdout
    hits = ["object database"] if needles[0] in objects else []
    for path in work.rglob("*"):
        if path.is_file() and any(n in path.read_bytes() for n in needles):
            hits.append(str(path.relative_to(work)))
    return hits
