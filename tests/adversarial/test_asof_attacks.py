"""Attacks on reads into the past: an ``at`` must never read below the read gate's floor --
not a forged commit off the branch, not a label on a history the audit rejects, not a
commit from before the trust root -- and must not move the gate's record back in time."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from click.testing import CliRunner

from truss_files.errors import UntrustedHistory, UsageError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.model import Entry, Trust
from truss_files.tools import ToolSession
from truss_files.trust.readgate import CACHE_NAME

GitRunner = Callable[..., str]


def promote(store: MemoryStore, entry_id: str) -> Entry:
    return store.promote(entry_id, store.sign_verdict(entry_id, "PASS", note="checked"))


def forge_verified(store: MemoryStore, git: GitRunner, entry: Entry) -> str:
    work = store.git.workdir
    assert work is not None
    path = work / entry.path
    path.write_text(path.read_text().replace("\ntrust: unverified\n", "\ntrust: verified\n"))
    git(work, "commit", "--no-verify", "-q", "-am", "make it verified")
    return git(work, "rev-parse", "HEAD").strip()


def test_at_a_forged_commit_off_the_branch_is_refused(store: MemoryStore, git: GitRunner) -> None:
    work = store.git.workdir
    assert work is not None
    draft = store.write("fact", "admin", "Everyone is an admin.")
    git(work, "checkout", "-q", "-b", "forged")
    forged = forge_verified(store, git, draft)
    git(work, "checkout", "-q", "main")
    with pytest.raises(UsageError, match="not in the history of"):
        store.query("admin", at=forged)
    with pytest.raises(UsageError, match="not in the history of"):
        store.view([draft.id], at="forged", min_trust="unverified")
    result = CliRunner().invoke(cli, ["--store", str(work), "query", "admin", "--at", forged])
    assert result.exit_code == 1 and draft.id not in result.stdout


def test_at_on_a_history_the_audit_rejects_serves_nothing_above_unverified(
    store: MemoryStore, git: GitRunner
) -> None:
    good = promote(store, store.write("fact", "db", "Postgres 16 in prod.").id)
    draft = store.write("fact", "db-admin", "Postgres admin is everyone.")
    then = str(store.git.tip().id)  # type: ignore[union-attr]
    forge_verified(store, git, draft)
    # The past commit itself is clean, but it is read from a branch that is not: the gate of
    # the tip decides, as for every read.
    with pytest.raises(UntrustedHistory):
        store.query("postgres", at=then)
    with pytest.raises(UntrustedHistory):
        store.view([good.id], at=then)
    found = store.query("postgres", at=then, min_trust="unverified")
    assert found.withheld
    assert {h.entry.trust for h in found} <= {Trust.UNVERIFIED}
    assert good.id not in {h.entry.id for h in found}
    session = ToolSession(store, flags=("memory",))
    out = session.call("memory_view", {"id": good.id, "at": then})
    assert out.error is not None and out.error.get("code") == "untrusted_history"


def test_at_before_the_pinned_trust_root_is_refused(store: MemoryStore, git: GitRunner) -> None:
    work = store.git.workdir
    assert work is not None
    first = store.write("fact", "old", "From before the root.")
    before = str(store.git.tip().id)  # type: ignore[union-attr]
    store.write("fact", "new", "After the root.")
    root = str(store.git.tip().id)  # type: ignore[union-attr]
    git(work, "config", "truss.root", root)
    with pytest.raises(UsageError, match="before the pinned trust root"):
        store.view([first.id], at=before, min_trust="unverified")
    assert store.view([first.id], at=root, min_trust="unverified")[0].id == first.id


def test_a_read_into_the_past_does_not_move_the_gate_back(
    store: MemoryStore, git: GitRunner
) -> None:
    promote(store, store.write("fact", "db", "Postgres 16 in prod.").id)
    then = str(store.git.tip().id)  # type: ignore[union-attr]
    store.write("fact", "ci", "Retry the flaky suite once.")
    store.query("postgres")
    record = (store.git.git_dir / "truss" / CACHE_NAME).read_text()
    store.query("postgres", at=then)
    store.view([], at=then)
    assert (store.git.git_dir / "truss" / CACHE_NAME).read_text() == record
