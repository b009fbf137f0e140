"""Erasure, planned: ``erase --dry-run`` finds every place an entry's text lives in the
repository, for an operator, and changes nothing (tests/store/test_erasing.py: the erasure
carried out)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from truss_files.errors import UsageError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.store.erase import plan_erasure
from truss_files.tools import ToolSession

GitRunner = Callable[..., str]
SECRET = "Alice Example lives at 12 Privacy Lane."


def tip(store: MemoryStore) -> str:
    commit = store.git.tip()
    assert commit is not None
    return str(commit.id)


def test_the_plan_finds_every_commit_ref_entry_ledger_and_cache(
    store: MemoryStore, git: GitRunner
) -> None:
    work = store.git.workdir
    assert work is not None
    store.write("fact", "before", "Written before the erased entry.")
    kept = tip(store)
    gone = store.write("fact", "alice", SECRET)
    first = tip(store)
    store.promote(gone.id, store.sign_verdict(gone.id, "PASS", note="ok"))
    quoting = store.write("lesson", "quote", f"Do not store things like: {SECRET}")
    store.write("fact", "after", "Unrelated.")
    git(work, "tag", "v1")
    session = ToolSession(store, flags=("memory",), run_id="R-erase", durable=True)
    assert session.call("memory_query", {"query": "privacy lane"}).error is None
    store.query("privacy lane")  # a usage line names it

    plan = plan_erasure(store, [gone.id[:10]], "GDPR request 114")
    assert plan.ids == (gone.id,)
    assert plan.by == "operator@example.test"
    assert plan.first == (first,)
    kinds: dict[str, set[str]] = {}
    for place in plan.places:
        kinds.setdefault(place.kind, set()).add(place.name)
    assert first in kinds["commit"] and kept not in kinds["commit"]
    # The commit before the first erased one is untouched; every later one is rewritten.
    commits = git(work, "rev-list", "main").split()
    assert plan.rewrite == commits.index(kept)
    assert set(plan.refs) == {"refs/heads/main", "refs/tags/v1"}
    assert kinds["entry"] == {quoting.id}
    assert any(name.startswith("refs/truss/runs/R-erase:memo/") for name in kinds["ledger"])
    assert any(name.endswith("usage") for name in kinds["usage"])
    assert "cache" in kinds and "reflog" in kinds
    # Nothing in the plan holds the text.
    assert SECRET not in json.dumps(plan.to_dict())


def test_dry_run_through_the_cli_changes_nothing(store: MemoryStore, tmp_path: Path) -> None:
    gone = store.write("fact", "alice", SECRET)
    before = tip(store)
    argv = ["--store", str(store.git.workdir), "--key", str(tmp_path / "operator_key"), "erase"]
    result = CliRunner().invoke(
        cli, [*argv, gone.id, "--reason", "asked", "--dry-run", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ids"] == [gone.id]
    assert tip(store) == before and store.get(gone.id).body == SECRET


@pytest.mark.parametrize(
    ("refs", "reason", "said"),
    [
        ([], "r", "name the entries"),
        (["x"], "r", "not an entry id"),
        (["abcdef0123"], "r", "no entry"),
        (["abcdef0123"], " ", "--reason"),
    ],
)
def test_bad_requests_say_what_to_give(
    store: MemoryStore, refs: list[str], reason: str, said: str
) -> None:
    store.write("fact", "k", "Some text.")
    with pytest.raises(UsageError, match=said):
        plan_erasure(store, refs, reason)


def test_member_gathers_every_entry_by_or_about_them(store: MemoryStore) -> None:
    by = store.write(
        "preference",
        "tone",
        "Short answers please.",
        author="member:alice",
        layer="member",
        scope={"member": "alice"},
    )
    about = store.write("fact", "desk", "Sits by the window.", scope={"member": "alice"})
    store.write("fact", "bob", "Bob sits by the door.", scope={"member": "bob"})
    plan = plan_erasure(store, [], "left the company", member="alice")
    assert set(plan.ids) == {by.id, about.id}
    with pytest.raises(UsageError, match="no entry is by or about member carol"):
        plan_erasure(store, [], "r", member="carol")
