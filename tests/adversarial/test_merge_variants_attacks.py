"""Variants of the merge rollback the first fixes were not tested with: octopus merges (three
parents, in every order that matters), one signed by an agent key, and the same rollback
pushed to refs outside refs/heads (another namespace, a tag, an annotated tag, a run ledger's
ref) to slip it past the gate. Every variant is performed for real with git and refused by
``audit`` and by the server's pre-receive gate; the server keeps its history.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest

from truss_files.facade import MemoryStore
from truss_files.git.gitstore import Identity
from truss_files.model import Trust
from truss_files.signing import Ed25519Signer
from truss_files.trust.audit import audit

GitRunner = Callable[..., str]
MALLORY = Identity("Mallory", "mallory@example.test")


def _rollback(store: MemoryStore, git: GitRunner) -> tuple[Path, str, str, str, str, str]:
    """Promote an entry (commit V), demote it, push; then the tree of HEAD with V's version of
    the entry file. Returns (work tree, path, head, V, root, tree)."""
    work = store.git.workdir
    assert work is not None
    root = git(work, "rev-list", "--max-parents=0", "HEAD").split()[0]
    entry = store.write("lesson", "db", "Use the primary database for reads.")
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="checked"))
    verified_at = git(work, "rev-parse", "HEAD").strip()
    store.demote(entry.id, "contradicted by the load test")
    git(work, "push", "-q", "origin", "main")
    head = git(work, "rev-parse", "HEAD").strip()
    git(work, "checkout", verified_at, "--", entry.path)
    tree = git(work, "write-tree").strip()
    git(work, "reset", "-q", "--hard")
    return work, entry.path, head, verified_at, root, tree


def _commit(
    store: MemoryStore,
    git: GitRunner,
    tree: str,
    parents: list[str],
    signer: Ed25519Signer | None,
) -> str:
    work = store.git.workdir
    message = "Merge an older belief\n\nTruss-Op: merge"
    if signer is None:
        args = [x for p in parents for x in ("-p", p)]
        return git(work, "commit-tree", tree, *args, "-m", message).strip()
    oid = store.git.make_commit(
        pygit2.Oid(hex=tree), [pygit2.Oid(hex=p) for p in parents], message, signer, MALLORY
    )
    return str(oid)


def _gate_refuses(work: Path, server: Path, git: GitRunner, src: str, ref: str) -> None:
    before = git(server, "for-each-ref").splitlines()
    done = git(work, "push", "--porcelain", "origin", f"{src}:{ref}", check=False)
    assert "[remote rejected]" in done, done
    assert git(server, "for-each-ref").splitlines() == before


@pytest.mark.parametrize(
    "order",
    [("head", "v", "root"), ("head", "root", "v"), ("root", "head", "v"), ("v", "head", "root")],
)
def test_an_unsigned_octopus_merge_rolls_nothing_back(
    clone: Callable[[str], MemoryStore], server: Path, git: GitRunner, order: tuple[str, ...]
) -> None:
    store = clone("work")
    work, path, head, verified_at, root, tree = _rollback(store, git)
    named = {"head": head, "v": verified_at, "root": root}
    merge = _commit(store, git, tree, [named[n] for n in order], signer=None)
    git(work, "update-ref", "refs/heads/main", merge)
    git(work, "reset", "-q", "--hard")
    assert store.snapshot().read(path) == store.snapshot(verified_at).read(path)
    report = audit(store.git)
    assert (merge, "", "signed") in {(v.commit, v.path, v.rule) for v in report.violations}
    _gate_refuses(work, server, git, merge, "refs/heads/main")
    assert git(server, "rev-parse", "main").strip() == head


def test_an_octopus_merge_signed_by_an_agent_rolls_nothing_back(
    clone: Callable[[str], MemoryStore],
    server: Path,
    git: GitRunner,
    add_signer: Callable[..., str],
) -> None:
    store = clone("work")
    agent = Ed25519Signer.generate("agent@example.test")
    add_signer(store, agent, "agent@example.test", ("agent",))
    work, path, head, verified_at, root, tree = _rollback(store, git)
    merge = _commit(store, git, tree, [head, verified_at, root], signer=agent)
    git(work, "update-ref", "refs/heads/main", merge)
    git(work, "reset", "-q", "--hard")
    rules = {(v.commit, v.rule) for v in audit(store.git).violations}
    # stale -> verified under an agent key: a panel-only move, signed without the panel role.
    assert (merge, "role") in rules, rules
    _gate_refuses(work, server, git, merge, "refs/heads/main")


@pytest.mark.parametrize(
    "ref", ["refs/foo/x", "refs/tags/t", "refs/truss/runs/R-1", "refs/notes/x", "annotated"]
)
def test_the_rollback_cannot_land_on_a_ref_outside_refs_heads(
    clone: Callable[[str], MemoryStore], server: Path, git: GitRunner, ref: str
) -> None:
    """Any ref the gate accepts would hide its commits from later pushes (the gate skips
    what existing refs reach), so every ref is judged, not only branches."""
    store = clone("work")
    work, path, head, verified_at, root, tree = _rollback(store, git)
    merge = _commit(store, git, tree, [head, verified_at], signer=None)
    if ref == "annotated":
        git(work, "tag", "-a", "-m", "a release", "v1", merge)
        _gate_refuses(work, server, git, "refs/tags/v1", "refs/tags/v1")
    else:
        _gate_refuses(work, server, git, merge, ref)
    # The server still believes the demotion and audits clean.
    served = MemoryStore(server, signer=store.signer)
    assert audit(served.git).ok
    entry_id = Path(path).stem
    assert served.get(entry_id).trust is Trust.STALE
