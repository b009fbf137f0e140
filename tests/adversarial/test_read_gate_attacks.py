"""Attacks on the reads: a hand-made commit in the local repository that sets a trust the
audit rejects must never be served, by any face; honest history keeps being served.

Every attack is real: real git (``git commit --no-verify``, ``git reset``), real keys from
the fixtures, real processes for the concurrent readers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.support import console
from tests.support.gated import search
from truss_files.errors import UntrustedHistory
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.format import entryfile
from truss_files.model import Entry, Trust
from truss_files.recall.pipeline import Filter
from truss_files.tools import Outcome, ToolSession
from truss_files.trust.audit import audit
from truss_files.trust.readgate import CACHE_NAME, FORMAT

SCRIPT = Path(sys.executable).parent / "truss-files"
GitRunner = Callable[..., str]


def promote(store: MemoryStore, entry_id: str) -> Entry:
    return store.promote(entry_id, store.sign_verdict(entry_id, "PASS", note="checked"))


def tool(store: MemoryStore, name: str, inp: dict[str, Any], run_id: str = "R1") -> Outcome:
    session = ToolSession(store, flags=("memory", "memory_write"), run_id=run_id)
    return session.call(name, inp)


def cli_run(store: MemoryStore, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--store", str(store.git.workdir), *args])
    return result.exit_code, result.stdout, result.stderr


def record(store: MemoryStore) -> dict[str, str]:
    text = (store.git.git_dir / "truss" / CACHE_NAME).read_text()
    lines = text.split("\n")
    assert lines[0] == FORMAT and lines[-1] == ""
    return dict(line.partition(" ")[::2] for line in lines[1:-1])


def forge_verified(store: MemoryStore, git: GitRunner, entry: Entry) -> str:
    """Edit an unverified entry's file to ``trust: verified`` and commit it by hand, bypassing
    every hook: no signature, no verdict. Returns the forged commit."""
    work = store.git.workdir
    assert work is not None
    path = work / entry.path
    text = path.read_text()
    assert "\ntrust: unverified\n" in text
    path.write_text(text.replace("\ntrust: unverified\n", "\ntrust: verified\n"))
    git(work, "commit", "--no-verify", "-q", "-am", "make it verified")
    return git(work, "rev-parse", "HEAD").strip()


@pytest.fixture
def honest(store: MemoryStore) -> tuple[Entry, Entry]:
    """A verified entry and an unverified one, both written through the store, and a query
    that warmed the index and the audit record."""
    good = promote(store, store.write("lesson", "flaky", "Retry the flaky network suite once.").id)
    draft = store.write("lesson", "flaky-draft", "Flaky network: just disable the suite.")
    assert [h.entry.id for h in search(store.git.workdir, "flaky network", Filter()).hits] == [
        good.id
    ]
    return good, draft


def test_a_forged_promotion_is_refused_by_every_read(
    store: MemoryStore, git: GitRunner, honest: tuple[Entry, Entry]
) -> None:
    good, draft = honest
    forged = forge_verified(store, git, draft)
    assert not audit(store.git).ok  # the attack is real: the audit rejects it
    head_before = git(store.git.workdir, "rev-parse", "HEAD").strip()

    # The Python API.
    with pytest.raises(UntrustedHistory) as caught:
        search(store.git.workdir, "flaky network", Filter())
    message = caught.value.message
    assert forged[:12] in message and "[signed]" in message
    assert "truss-files audit" in message and "git reset --keep" in message

    # The CLI: query (click and the click-free path), show, list.
    code, out, err = cli_run(store, "query", "flaky network", "--format", "json")
    assert code == 1 and json.loads(out)["error"]["code"] == "untrusted_history", err
    fast = console.run(
        [str(SCRIPT), "--store", str(store.git.workdir), "query", "flaky network"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert fast.returncode == 1 and forged[:12] in fast.stdout + fast.stderr
    assert draft.body not in fast.stdout and "entries" not in json.loads(fast.stdout)
    assert cli_run(store, "show", draft.id)[0] == 1
    assert cli_run(store, "show", good.id)[0] == 1
    assert cli_run(store, "list", "--trust", "verified")[0] == 1
    code, out, err = cli_run(store, "list", "--format", "json")
    assert code == 0 and json.loads(out) == [] and "withheld" in err

    # The tools.
    for name, inp in (
        ("memory_query", {"query": "flaky network"}),
        ("memory_view", {"id": draft.id}),
        ("read_memory", {"query": "flaky network"}),
        ("read_memory", {"id": good.id}),
        ("memory", {"command": "view", "path": "/memories"}),
    ):
        outcome = tool(store, name, inp)
        assert not outcome.ok, (name, outcome.payload)
        assert outcome.payload["error"]["code"] == "untrusted_history"
        assert forged[:12] in outcome.payload["error"]["message"]

    # At min_trust unverified nothing above unverified leaves, and the reply says why.
    low = tool(store, "memory_query", {"query": "flaky network", "min_trust": "unverified"})
    assert low.ok and low.payload["entries"] == [] and forged[:12] in low.payload["withheld"]
    viewed = tool(store, "memory_view", {"ids": [draft.id, good.id], "min_trust": "unverified"})
    assert viewed.ok and viewed.payload["entries"] == []
    assert sorted(viewed.payload["filtered"]) == sorted([draft.id, good.id])

    # Nothing in the store was lost or changed by the refusals.
    assert git(store.git.workdir, "rev-parse", "HEAD").strip() == head_before
    assert git(store.git.workdir, "status", "--porcelain") == ""
    git(store.git.workdir, "fsck", "--no-progress")
    assert store.get(draft.id).trust is Trust.VERIFIED  # what the forger wrote, still there


def test_a_signed_commit_with_a_fabricated_verdict_is_refused(
    store: MemoryStore, signed_commit: Callable[..., str], honest: tuple[Entry, Entry]
) -> None:
    """Signed by a real operator key, but the verdict was made for another entry."""
    good, draft = honest
    lifted = store.get(good.id).provenance.verified_by
    forged_entry = entryfile.parse(
        entryfile.serialize(store.get(draft.id))
        .replace("trust: unverified", "trust: verified")
        .encode(),
        draft.path,
    )
    import dataclasses

    forged_entry = dataclasses.replace(
        forged_entry, provenance=dataclasses.replace(forged_entry.provenance, verified_by=lifted)
    )
    forged = signed_commit(
        store,
        {draft.path: entryfile.serialize(forged_entry).encode()},
        message="truss: promote\n\nTruss-Op: promote",
    )
    with pytest.raises(UntrustedHistory, match=r"\[verdict\]") as caught:
        search(store.git.workdir, "flaky network", Filter())
    assert forged[:12] in caught.value.message
    outcome = tool(store, "memory_view", {"id": draft.id})
    assert outcome.payload["error"]["code"] == "untrusted_history"


def test_the_honest_path_serves_after_an_incremental_audit(
    store: MemoryStore, honest: tuple[Entry, Entry]
) -> None:
    good, draft = honest
    before = record(store)
    assert before["clean"] == str(store.git.tip().id)
    promoted = promote(store, draft.id)
    found = tool(store, "memory_query", {"query": "flaky network"})
    assert found.ok and {e["id"] for e in found.payload["entries"]} == {good.id, promoted.id}
    assert "withheld" not in found.payload
    after = record(store)
    assert after["clean"] == str(store.git.tip().id) != before["clean"]
    assert after["root"] == before["root"] and "bad" not in after


def test_a_reset_or_rewritten_history_is_audited_again(
    store: MemoryStore, git: GitRunner, honest: tuple[Entry, Entry]
) -> None:
    good, draft = honest
    work = store.git.workdir
    clean = git(work, "rev-parse", "HEAD").strip()
    forged = forge_verified(store, git, draft)
    with pytest.raises(UntrustedHistory):
        search(work, "flaky", Filter())
    assert record(store)["bad"].startswith(forged)
    # Taking the commit off the branch serves again (an ancestor of a clean commit is clean).
    git(work, "reset", "-q", "--hard", clean)
    assert [h.entry.id for h in search(work, "flaky", Filter()).hits] == [good.id]
    # A rewrite that is no descendant of the audited commit: reset back before it, forge.
    later = promote(store, store.write("fact", "ci", "The flaky suite runs nightly.").id)
    assert search(work, "nightly", Filter()).hits[0].entry.id == later.id
    assert record(store)["clean"] == git(work, "rev-parse", "HEAD").strip()
    git(work, "reset", "-q", "--hard", clean)
    rewritten = forge_verified(store, git, draft)
    with pytest.raises(UntrustedHistory) as caught:
        search(work, "flaky", Filter())
    assert rewritten[:12] in caught.value.message


@pytest.mark.parametrize(
    "damage",
    ["garbage", "cut short", "other format", "foreign ids"],
)
def test_a_corrupt_record_is_ignored_and_rebuilt(
    store: MemoryStore, git: GitRunner, honest: tuple[Entry, Entry], damage: str
) -> None:
    good, draft = honest
    path = store.git.git_dir / "truss" / CACHE_NAME
    text = path.read_text()
    forged = forge_verified(store, git, draft)
    damaged = {
        "garbage": "\x00\xff not a record",
        "cut short": text[: len(text) // 2],
        "other format": text.replace(FORMAT, "truss-audited 0"),
        "foreign ids": text.replace("clean ", "clean zz"),
    }[damage]
    path.write_bytes(damaged.encode("utf-8", "surrogateescape"))
    with pytest.raises(UntrustedHistory):
        search(store.git.workdir, "flaky", Filter())
    assert record(store)["bad"].startswith(forged)  # rewritten whole
    git(store.git.workdir, "reset", "-q", "--hard", "HEAD~1")
    path.write_text("garbage again")
    assert [h.entry.id for h in search(store.git.workdir, "flaky", Filter()).hits] == [good.id]
    assert record(store)["clean"] == git(store.git.workdir, "rev-parse", "HEAD").strip()


def test_concurrent_readers_in_processes_keep_the_record_whole(
    store: MemoryStore, git: GitRunner, honest: tuple[Entry, Entry]
) -> None:
    good, draft = honest
    work = store.git.workdir
    for round_ in range(3):
        # New commits, no warm record: every reader audits and writes it at once.
        for i in range(3):
            store.write("fact", f"note-{round_}-{i}", f"flaky network note {round_} {i}")
        (store.git.git_dir / "truss" / CACHE_NAME).unlink()
        readers = [
            subprocess.Popen(
                [str(SCRIPT), "--store", str(work), "query", "flaky network", "--format", "json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        for reader in readers:
            out, err = reader.communicate(timeout=120)
            assert reader.returncode == 0, err
            assert [e["id"] for e in json.loads(out)["entries"]] == [good.id]
        assert record(store)["clean"] == git(work, "rev-parse", "HEAD").strip()
    leftovers = [p.name for p in (store.git.git_dir / "truss").iterdir() if p.suffix == ".tmp"]
    assert leftovers == []
    forged = forge_verified(store, git, draft)
    done = console.run(
        [str(SCRIPT), "--store", str(work), "query", "flaky network"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1 and forged[:12] in done.stdout + done.stderr


def test_a_refused_branch_keeps_refusing_without_auditing_again(
    store: MemoryStore, git: GitRunner, honest: tuple[Entry, Entry]
) -> None:
    """The refusal is recorded by commit: the next reader process refuses from the record,
    importing no pygit2, as a warm query does."""
    _good, draft = honest
    forged = forge_verified(store, git, draft)
    with pytest.raises(UntrustedHistory):
        search(store.git.workdir, "flaky", Filter())
    probe = (
        "import sys, json\n"
        "from truss_files.faces.cli.main import main\n"
        "sys.argv = ['truss-files', '--store', sys.argv[1], 'query', 'flaky network']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n"
        "print(json.dumps([code, 'pygit2' in sys.modules]), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(store.git.workdir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert json.loads(done.stderr.strip().splitlines()[-1]) == [1, False]
    assert forged[:12] in done.stdout


def test_a_runs_own_notes_stay_readable_at_unverified(
    store: MemoryStore, git: GitRunner, honest: tuple[Entry, Entry]
) -> None:
    """At min_trust unverified the run reads its own notes back (written before the forgery),
    and nothing above unverified comes with them; a write on the forged history is refused
    (``untrusted_history``) and stores nothing."""
    good, draft = honest
    wrote = tool(store, "write_memory", {"kind": "lesson", "key": "own", "body": "flaky own note"})
    assert wrote.ok and wrote.payload["trust"] == "unverified"
    forge_verified(store, git, draft)
    forged = store.snapshot().oid
    again = tool(store, "write_memory", {"kind": "lesson", "key": "own2", "body": "flaky again"})
    assert again.payload["error"]["code"] == "untrusted_history"
    assert store.snapshot().oid == forged
    found = tool(store, "memory_query", {"query": "flaky", "min_trust": "unverified"})
    assert found.ok and "withheld" in found.payload
    assert [e["id"] for e in found.payload["entries"]] == [wrote.payload["id"]]
    assert {e["trust"] for e in found.payload["entries"]} == {"unverified"}
    refused = tool(store, "memory_query", {"query": "flaky"})
    assert refused.payload["error"]["code"] == "untrusted_history"
    assert good.id not in json.dumps(found.payload)
