"""The read gate's record after the library's own writes, and range audits from a start the
record vouches for: cheaper, never weaker.

A write through the store moves the record's clean commit to the commit it made only when
the parent was the clean one and the new commit passes the audit's check of one commit; so the
next query process reads the record and imports no pygit2. Every attack here is real: hand
commits with git, a forged file committed through the library's own commit path, a history
grown from before the trust root.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.gated import search
from truss_files.errors import UntrustedHistory
from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.git.gitdir import GitDir
from truss_files.git.gitstore import Plan, Snapshot
from truss_files.model import Entry, Trust
from truss_files.recall.pipeline import Filter
from truss_files.signing import Ed25519Signer
from truss_files.store.initstore import init_store
from truss_files.trust.audit import audit
from truss_files.trust.readgate import CACHE_NAME, FORMAT, refusal

GitRunner = Callable[..., str]

# A query in a new process: its exit code, whether it imported pygit2, and the ids it served.
PROBE = (
    "import sys, json, io, contextlib\n"
    "from truss_files.faces.cli.main import main\n"
    "sys.argv = ['truss-files', '--store', sys.argv[1], 'query', sys.argv[2], '--format', 'json']\n"
    "out = io.StringIO()\n"
    "code = 0\n"
    "with contextlib.redirect_stdout(out):\n"
    "    try:\n        main()\n    except SystemExit as exc:\n        code = exc.code or 0\n"
    "try:\n    ids = [e['id'] for e in json.loads(out.getvalue())['entries']]\n"
    "except (ValueError, KeyError):\n    ids = None\n"
    "print(json.dumps([code, 'pygit2' in sys.modules, ids, out.getvalue()]))\n"
)


def probe(store: MemoryStore, query: str) -> tuple[int, bool, list[str] | None, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(store.git.workdir), query],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr
    code, imported, ids, out = json.loads(lines[-1])
    return code, imported, ids, out + done.stderr


def record(store: MemoryStore) -> dict[str, str]:
    text = (store.git.git_dir / "truss" / CACHE_NAME).read_text()
    lines = text.split("\n")
    assert lines[0] == FORMAT and lines[-1] == ""
    return dict(line.partition(" ")[::2] for line in lines[1:-1])


def tip(store: MemoryStore) -> str:
    commit = store.git.tip()
    assert commit is not None
    return str(commit.id)


def promote(store: MemoryStore, entry_id: str) -> Entry:
    return store.promote(entry_id, store.sign_verdict(entry_id, "PASS", note="checked"))


@pytest.fixture
def warm(store: MemoryStore) -> Entry:
    """A verified entry, and a query that made the record current."""
    good = promote(store, store.write("lesson", "flaky", "Retry the flaky network suite once.").id)
    assert [h.entry.id for h in search(store.git.workdir, "flaky", Filter()).hits] == [good.id]
    assert record(store)["clean"] == tip(store)
    return good


def test_a_write_advances_the_record_and_the_next_query_needs_no_pygit2(
    store: MemoryStore, warm: Entry
) -> None:
    later = promote(store, store.write("lesson", "nightly", "The flaky suite runs nightly.").id)
    assert record(store)["clean"] == tip(store)
    code, imported, ids, out = probe(store, "flaky nightly")
    assert (code, imported) == (0, False), out
    assert ids is not None and set(ids) == {warm.id, later.id}


def test_a_write_on_a_hand_made_commit_does_not_launder_it(
    store: MemoryStore, git: GitRunner, warm: Entry
) -> None:
    """A forged promotion committed by hand, then an honest library write on top of it: the
    write is refused (nothing lands on a history the audit rejects), the record does not move
    past the forgery, and every read refuses it."""
    draft = store.write("lesson", "flaky-draft", "Flaky network: disable the suite.")
    clean = record(store)["clean"]
    assert clean == tip(store)
    work = store.git.workdir
    assert work is not None
    path = work / draft.path
    path.write_text(path.read_text().replace("\ntrust: unverified\n", "\ntrust: verified\n"))
    git(work, "commit", "--no-verify", "-q", "-am", "make it verified")
    forged = git(work, "rev-parse", "HEAD").strip()
    with pytest.raises(UntrustedHistory) as refused:
        store.write("fact", "ci", "The flaky suite runs on every push.")
    assert forged[:12] in refused.value.message and tip(store) == forged
    assert record(store)["clean"] == clean
    code, _imported, ids, out = probe(store, "flaky network")
    assert code == 1 and ids is None and forged[:12] in out
    with pytest.raises(UntrustedHistory):
        search(work, "flaky", Filter())


def test_a_forged_file_through_the_library_commit_path_does_not_advance(
    store: MemoryStore, warm: Entry
) -> None:
    """The commit path checks the signature and roles only; a plan that lands an entry as
    verified with no verdict is signed and moves the branch, but the record stays put and the
    read refuses it."""
    draft = store.new_entry("lesson", "flaky-forged", "Flaky network: the suite is fine.")
    forged = dataclasses.replace(draft, trust=Trust.VERIFIED)
    clean = record(store)["clean"]

    def plan(snap: Snapshot) -> Plan:
        data = entryfile.serialize(forged).encode()
        return Plan({forged.path: data}, "truss: write\n\nTruss-Op: write")

    store._apply(plan, {"agent"})
    assert tip(store) != clean and record(store)["clean"] == clean
    with pytest.raises(UntrustedHistory) as caught:
        search(store.git.workdir, "flaky", Filter())
    assert "lands-unverified" in caught.value.message


def test_a_write_under_another_pinned_root_leaves_the_record(
    store: MemoryStore, git: GitRunner, warm: Entry
) -> None:
    """The root pinned in git config moved since the record was made: the write does not
    vouch for the new commit under the old root; the next read audits from the new one."""
    work = store.git.workdir
    assert work is not None
    clean = record(store)["clean"]
    git(work, "config", "truss.root", clean)
    store.write("fact", "ci", "The flaky suite runs on every push.")
    assert record(store)["clean"] == clean
    assert refusal(GitDir.discover(work), tip(store)) is None
    assert record(store) == {"root": clean, "clean": tip(store)}


def test_a_history_grown_from_before_the_root_is_refused(
    tmp_path: Path, operator_key: Ed25519Signer, git: GitRunner
) -> None:
    """A store adopted into a repository with earlier commits: a forged history grown from
    a commit older than the trust root never reads as clean, even after that older commit was
    read once (an ancestor of a clean commit, but not a descendant of the root)."""
    path = tmp_path / "adopted"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README").write_text("before the store\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "before the store")
    before = git(path, "rev-parse", "HEAD").strip()
    init_store(path, operator_key, "operator@example.test")
    store = MemoryStore(path, signer=operator_key)
    good = promote(store, store.write("lesson", "flaky", "Retry the flaky network suite.").id)
    assert [h.entry.id for h in search(path, "flaky", Filter()).hits] == [good.id]
    root = record(store)["root"]
    # Read the pre-root commit, then grow a history from it with the store's files copied in
    # (its own signed allowed_signers and roles) and the entry forged to verified.
    git(path, "checkout", "-q", "-b", "side", before)
    assert refusal(GitDir.discover(path), before) is not None
    assert record(store).get("clean") != before
    git(path, "checkout", "-q", "main", "--", ".")
    git(path, "commit", "--no-verify", "-q", "-m", "copy the store")
    assert "\ntrust: verified\n" in (path / good.path).read_text()
    forged = git(path, "rev-parse", "HEAD").strip()
    with pytest.raises(UntrustedHistory) as caught:
        search(path, "flaky", Filter())
    assert forged[:12] in caught.value.message and "trust-root" in caught.value.message
    # The range audit of that history finds the root missing; even a caller that wrongly
    # vouches for the pre-root start gets a refusal (no trust policy to judge by).
    report = audit(store.git, f"{before}..{forged}", root=root)
    assert [v.rule for v in report.violations] == ["trust-root"]
    report = audit(store.git, f"{before}..{forged}", root=root, start_audited=True)
    assert not report.ok and {v.commit for v in report.violations} == {forged}


def test_a_range_whose_start_is_no_ancestor_is_judged_whole(
    store: MemoryStore, git: GitRunner, warm: Entry
) -> None:
    """``audit A..B`` where A is not an ancestor of B: an orphan history B with a forged
    verified entry is refused whether or not the caller vouches for A."""
    work = store.git.workdir
    assert work is not None
    start = tip(store)
    root = record(store)["root"]
    git(work, "checkout", "-q", "--orphan", "forged")
    git(work, "commit", "--no-verify", "-q", "-m", "all of it, unsigned")
    forged = git(work, "rev-parse", "HEAD").strip()
    for vouched in (False, True):
        report = audit(store.git, f"{start}..{forged}", root=root, start_audited=vouched)
        assert [v.rule for v in report.violations] == ["trust-root"], report
    # A range that holds the root proves descent without the whole walk, and stays exact.
    report = audit(store.git, f"{root}..{start}", root=root, start_audited=True)
    assert report.ok and report.checked == len(list(store.git.repo.walk(start))) - 1
