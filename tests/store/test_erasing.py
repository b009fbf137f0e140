"""Erasure carried out: history rewritten without the entry, the record signed, the audit
clean, everything else keeping its id, trust, verdict and signature, and the text gone from
ledgers, caches and usage lines. One erased store is shared by the module."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import GIT_ENV
from tests.support.erasing import SECRET, make_store
from truss_files.errors import UsageError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.format.trailers import parse_trailers
from truss_files.model import Entry, Trust
from truss_files.signing import Ed25519Signer
from truss_files.store.erasing import Erased
from truss_files.tools import ToolSession
from truss_files.trust.attest import NOTES_REF
from truss_files.trust.audit import audit
from truss_files.trust.erasures import record_path


def git_out(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


@dataclass
class World:
    store: MemoryStore
    work: Path
    gone: Entry
    kept: Entry
    early: Entry
    before: list[str]  # commits (newest first) before the erasure
    kept_base: str  # the last commit before the first one holding the entry
    erased: Erased


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("erasing")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(base / "home"))
        for name, value in GIT_ENV.items():
            mp.setenv(name, value)
        store, _ = make_store(base)
        work = store.git.workdir
        assert work is not None
        early = store.write("fact", "before", "Written before the erased entry.")
        kept_base = str(store.git.tip().id)  # type: ignore[union-attr]
        gone = store.write("fact", "alice", SECRET)
        store.promote(gone.id, store.sign_verdict(gone.id, "PASS", note="ok"))
        kept = store.write("fact", "after", "Unrelated, written after.")
        store.promote(kept.id, store.sign_verdict(kept.id, "PASS", note="ok"))
        git_out(work, "tag", "-a", "v1", "-m", "a release")
        # An attestation on a commit the erasure replaces (its content is not checked here).
        git_out(work, "notes", f"--ref={NOTES_REF}", "add", "-m", "{}", "HEAD~1")
        session = ToolSession(store, flags=("memory",), run_id="R-erase", durable=True)
        assert session.call("memory_query", {"query": "privacy lane"}).error is None
        store.query("privacy lane")
        before = git_out(work, "rev-list", "main").split()
        erased = store.erase([gone.id[:10]], "GDPR request 114")
        yield World(store, work, gone, kept, early, before, kept_base, erased)


def test_the_entry_is_gone_and_everything_else_keeps_its_id_trust_and_verdict(
    world: World,
) -> None:
    store = world.store
    ids = {e.id for e in store.iter_entries()}
    assert world.gone.id not in ids and {world.kept.id, world.early.id} <= ids
    kept = store.get(world.kept.id)
    assert kept.trust is Trust.VERIFIED and kept.provenance.verified_by is not None
    assert not (world.work / world.gone.path).exists()
    assert git_out(world.work, "status", "--porcelain") == ""
    report = audit(store.git, environ=store.environ)
    assert report.ok, report.violations


def test_commits_before_the_first_erased_one_are_untouched(world: World) -> None:
    after = git_out(world.work, "rev-list", "main").split()
    cut = world.before.index(world.kept_base)
    assert after[-(len(world.before) - cut) :] == world.before[cut:]
    assert world.erased.record.base == world.kept_base
    assert set(world.erased.record.rewritten) == set(world.before[:cut])


def test_each_rewritten_commit_names_its_original_and_signer(world: World) -> None:
    repo = world.store.git.repo
    record = world.erased.record
    for old, new in record.rewritten.items():
        commit = repo[new]
        fields = parse_trailers(commit.message)  # type: ignore[attr-defined]
        assert fields["Truss-Rewritten-From"] == [old]
        assert fields["Truss-Original-Signer"] == ["operator@example.test"]
        assert commit.message.split("\n\n")[0].startswith("truss: ")  # type: ignore[attr-defined]
        assert commit.gpg_signature[0] is not None  # type: ignore[attr-defined]
    tag = git_out(world.work, "rev-parse", "v1^{commit}").strip()
    assert tag == record.rewritten[world.before[0]]


def test_the_record_says_who_when_which_and_why_never_the_text(world: World) -> None:
    data = (world.work / record_path(world.erased.record.id)).read_text()
    raw = json.loads(data)
    assert raw["by"] == "operator@example.test" and raw["ids"] == [world.gone.id]
    assert raw["reason"] == "GDPR request 114" and raw["old_tip"] == world.before[0]
    assert "Privacy" not in data and "refs/truss/runs/R-erase" in raw["ledgers"]


def test_ledgers_caches_and_usage_no_longer_hold_it(world: World) -> None:
    git_dir = world.store.git.git_dir
    ledger = git_out(world.work, "log", "-p", "refs/truss/runs/R-erase")
    assert "Privacy Lane" not in ledger and world.gone.id not in ledger
    assert f'"erased": "{world.erased.record.id}"' in ledger
    usage = git_dir / "truss" / "usage"
    assert world.gone.id not in (usage.read_text() if usage.exists() else "")
    assert world.erased.attestations == 1
    assert git_out(world.work, "notes", f"--ref={NOTES_REF}", "list") == ""
    leftovers = [p.name for p in (git_dir / "truss").iterdir()]
    assert all(n in ("usage", "runs", "pending") or n.endswith(".lock") for n in leftovers)


def test_the_cli_erases_and_says_so(tmp_path: Path, store: MemoryStore) -> None:
    gone = store.write("fact", "bob", "Bob Example's phone is 555-0100.")
    other = store.write("fact", "carol", "Carol prefers tea.")
    argv = ["--store", str(store.git.workdir), "--key", str(tmp_path / "operator_key")]
    result = CliRunner().invoke(
        cli, [*argv, "erase", gone.id, "--reason", "asked", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["ids"] == [gone.id] and out["rewritten"] >= 1
    fresh = MemoryStore(store.git.workdir, signer=store.signer)  # type: ignore[arg-type]
    assert {e.id for e in fresh.iter_entries()} == {other.id}
    assert audit(fresh.git).ok


def test_member_erases_every_entry_by_or_about_them(store: MemoryStore) -> None:
    about = store.write("fact", "desk", "Alice sits by the window.", scope={"member": "alice"})
    bob = store.write("fact", "bob", "Bob sits by the door.", scope={"member": "bob"})
    done = store.erase([], "left the company", member="alice")
    assert done.record.ids == (about.id,)
    assert {e.id for e in store.iter_entries()} == {bob.id}
    assert audit(store.git).ok


def test_an_entry_that_quotes_the_text_must_be_named_too(store: MemoryStore) -> None:
    gone = store.write("fact", "alice", SECRET)
    store.write("lesson", "quote", f"Never store things like: {SECRET}")
    before = str(store.git.tip().id)  # type: ignore[union-attr]
    with pytest.raises(UsageError, match="name them in the erasure too"):
        store.erase([gone.id], "asked")
    assert str(store.git.tip().id) == before  # type: ignore[union-attr]


def test_a_second_erasure_rewrites_the_first_ones_commits_and_audits_clean(
    store: MemoryStore,
) -> None:
    first = store.write("fact", "a", "The first text to erase.")
    second = store.write("fact", "b", "The second text to erase.")
    kept = store.write("fact", "c", "Kept.")
    one = store.erase([second.id], "one")
    later = store.write("fact", "d", "Written after the first erasure.")
    two = store.erase([first.id], "two")
    # The first erasure's record commit is among those the second rewrote.
    assert one.commit in two.record.rewritten
    assert {e.id for e in store.iter_entries()} == {kept.id, later.id}
    assert audit(store.git).ok
    records = sorted((store.git.workdir / ".truss" / "erasures").iterdir())  # type: ignore[operator]
    assert [p.stem for p in records] == sorted([one.record.id, two.record.id])


def test_a_second_operator_erases_after_the_first(
    store: MemoryStore, add_signer: Callable[..., str], tmp_path: Path
) -> None:
    other = Ed25519Signer.generate("ops2@example.test")
    add_signer(store, other, "ops2@example.test", ("operator",))
    first = store.write("fact", "a", "The first text to erase.")
    second = store.write("fact", "b", "The second text to erase.")
    store.erase([second.id], "one")
    as_other = MemoryStore(store.git.workdir, signer=other, environ=store.environ)  # type: ignore[arg-type]
    two = as_other.erase([first.id], "two")
    assert two.record.by == "ops2@example.test"
    assert audit(store.git).ok
