"""Attacks on child runs (runs/links.py): a parent one has no right to, a cycle, re-parenting,
and links forged outside the library. Real git, real keys: the victim is the store's first
principal, the attacker a second principal holding the agent role."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.tools_support import call, configure
from truss_files.errors import Forbidden, UsageError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.git.gitdir import GitDir
from truss_files.runs.links import PARENT_PREFIX, children, parent, run_view
from truss_files.signing import Ed25519Signer

NOTE = {"command": "create", "path": "/memories/notes/found.md", "file_text": "Child found X."}


@pytest.fixture
def attacker(
    store: MemoryStore, add_signer: Callable[..., str], store_as: Callable[..., MemoryStore]
) -> MemoryStore:
    configure(store, memory_write=True)
    key = Ed25519Signer.generate("agent2@example.test")
    add_signer(store, key, "agent2@example.test", ("agent",))
    return store_as(key)


def test_a_link_is_one_signed_commit_that_git_itself_verifies(
    store: MemoryStore, tmp_path: Path, git: Callable[..., str]
) -> None:
    store.context("C-1", parent="P-1")
    link = parent(store, "C-1")
    assert link is not None and link.run == "P-1" and link.principal == "operator@example.test"
    commit = store.git.tip(PARENT_PREFIX + "C-1")
    assert commit is not None and commit.gpg_signature[0] is not None
    assert "Truss-Op: run-link" in commit.message
    assert [c.run for c in children(store, "P-1")] == ["C-1"]
    # git's own check, with the store's allowed_signers.
    workdir = Path(store.git.workdir)
    git(workdir, "config", "gpg.format", "ssh")
    git(workdir, "config", "gpg.ssh.allowedSignersFile", str(workdir / ".truss/allowed_signers"))
    done = subprocess.run(
        ["git", "-C", str(workdir), "verify-commit", PARENT_PREFIX + "C-1"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "Good" in done.stderr


def test_another_principals_run_takes_no_child_of_ours(
    store: MemoryStore, attacker: MemoryStore
) -> None:
    # A durable parent: its ledger names the victim.
    assert call(store, "memory_query", {"query": "x"}, run_id="P-dur", durable=True).ok
    refused = call(attacker, "memory_query", {"query": "x"}, run_id="C-evil", parent="P-dur")
    assert refused.error is not None and refused.error["code"] == "forbidden"
    assert "belongs to operator@example.test" in refused.error["message"]
    # A parent started by context: its start record names the victim's key.
    store.context("P-ctx")
    with pytest.raises(Forbidden):
        attacker.context("C-evil2", parent="P-ctx")
    # A parent known by its children: they were linked by the victim.
    store.context("C-good", parent="P-kids")
    with pytest.raises(Forbidden):
        attacker.context("C-evil3", parent="P-kids")
    assert [c.run for c in children(store, "P-kids")] == ["C-good"]
    assert parent(store, "C-evil3") is None and parent(store, "C-evil") is None


def test_a_cycle_is_refused(store: MemoryStore) -> None:
    store.context("B", parent="A")  # A has not started yet: that is allowed
    with pytest.raises(UsageError, match="cycle"):
        store.context("A", parent="B")
    store.context("C", parent="B")
    with pytest.raises(UsageError, match="cycle"):
        store.context("A", parent="C")
    with pytest.raises(UsageError, match="its own parent"):
        store.context("Z", parent="Z")
    assert parent(store, "A") is None


def test_a_run_is_never_re_parented_after_its_first_call(store: MemoryStore) -> None:
    store.context("R-ctx")
    with pytest.raises(UsageError, match="first call"):
        store.context("R-ctx", parent="P")
    assert call(store, "memory_query", {"query": "x"}, run_id="R-tool").ok
    late = call(store, "memory_query", {"query": "x"}, run_id="R-tool", parent="P")
    assert late.error is not None and "first call" in late.error["message"]
    assert call(store, "memory_query", {"query": "x"}, run_id="R-dur", durable=True).ok
    late = call(store, "memory_query", {"query": "x"}, run_id="R-dur", durable=True, parent="P")
    assert late.error is not None and "first call" in late.error["message"]
    # A child stays with its parent: the same parent again is fine, another is refused.
    store.context("C-1", parent="P")
    store.context("C-1", parent="P")
    store.context("C-1")
    with pytest.raises(UsageError, match="already a child of P"):
        store.context("C-1", parent="Q")
    assert [c.run for c in children(store, "P")] == ["C-1"]


def test_forged_links_share_nothing(store: MemoryStore, attacker: MemoryStore) -> None:
    """A cache file the old links used, an unsigned commit, and a commit the attacker signed
    whose file names the victim: none links C to P, so none shares the victim's notes."""
    assert call(store, "memory", NOTE, run_id="P-1").ok
    cache = GitDir.discover(store.git.git_dir).cache_str
    os.makedirs(os.path.join(cache, "runs", "parent"), exist_ok=True)
    Path(cache, "runs", "parent", "C-x").write_text("P-1 operator@example.test\n")
    assert parent(store, "C-x") is None

    repo = store.git.repo
    body = {"child": "C-y", "parent": "P-1", "principal": "operator@example.test"}
    blob = repo.create_blob(json.dumps(body).encode())
    builder = repo.TreeBuilder()
    builder.insert("link.json", blob, 0o100644)
    who = store.identity("operator@example.test").signature()
    unsigned = repo.create_commit(None, who, who, "forged", builder.write(), [])
    repo.references.create(PARENT_PREFIX + "C-y", unsigned)
    repo.references.create("refs/truss/children/P-1/C-y", unsigned)
    assert parent(store, "C-y") is None
    assert children(store, "P-1") == []

    # Signed, but by the attacker, naming the victim as the link's principal.
    tree = attacker.git.write_tree(
        None, {"link.json": json.dumps({**body, "child": "C-z"}).encode()}
    )
    assert tree is not None
    signed = attacker.git.make_commit(
        tree, [], "forged", attacker.signer, attacker.identity("agent2@example.test")
    )
    repo.references.create(PARENT_PREFIX + "C-z", signed)
    repo.references.create("refs/truss/children/P-1/C-z", signed)
    assert parent(store, "C-z") is None
    for run in ("C-x", "C-y", "C-z"):
        assert run_view(store, run, "operator@example.test").shared == frozenset()
        found = call(store, "memory_query", {"query": "child found"}, run_id=run)
        assert found.ok and found.payload["entries"] == []
    assert run_view(store, "P-1", "operator@example.test").shared == frozenset()


def test_cli_context_and_tool_take_parent(store: MemoryStore, tmp_path: Path) -> None:
    configure(store, memory_write=True)
    runner = CliRunner()
    base = ["--store", str(store.git.workdir), "--key", str(tmp_path / "operator_key")]
    made = runner.invoke(
        cli,
        [*base, "tool", "memory", "--memory-write", "--run", "C-1", "--parent", "P-1"],
        input=json.dumps(NOTE),
    )
    assert made.exit_code == 0, made.output
    ctx = runner.invoke(cli, [*base, "context", "--run", "P-1"])
    assert ctx.exit_code == 0, ctx.output
    [l4] = [m for m in json.loads(ctx.output)["messages"] if m["layer"] == "L4"]
    assert "run C-1:" in l4["content"][0]["text"] and "Child found X." in l4["content"][0]["text"]
    bad = runner.invoke(cli, [*base, "context", "--run", "C-1", "--parent", "P-2"])
    assert bad.exit_code == 1
    assert json.loads(bad.output)["error"]["code"] == "invalid_input"
