"""A belief's life after the write: usage recorded by every read face, salience folded from
it in one signed commit, eviction under budgets (revertible, nothing deleted), consolidation
of the notes train flagged. Real stores, real keys, real processes (concurrent writers, a
``truss-files serve`` on 127.0.0.1)."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.http_support import Served, served_fixture  # noqa: F401 - the fixture
from tests.tools.test_tools_enterprise import ctx, src, trained
from truss_files.config.settings import load_settings
from truss_files.errors import ConfigError, UsageError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.format.trailers import parse_trailers
from truss_files.git.gitstore import Snapshot
from truss_files.git.usage import read_usage, record, usage_path
from truss_files.model import Trust, merged_notes
from truss_files.store.belief import consolidate, evict, fold, salience_update
from truss_files.tools import ToolSession
from truss_files.tools.train import train
from truss_files.trust.audit import audit

MARKER = 'conflict = "verified-wins"'


def _toml(store: MemoryStore, signed_commit: Callable[..., str], extra: str) -> None:
    def changes(snap: Snapshot) -> dict[str, bytes | None]:
        text = (snap.read("truss.toml") or b"").decode()
        return {"truss.toml": (text + "\n" + extra + "\n").encode()}

    signed_commit(store, changes)


def _tip(store: MemoryStore) -> str:
    tip = store.git.tip()
    assert tip is not None
    return str(tip.id)


def _trailers(store: MemoryStore) -> dict[str, list[str]]:
    return parse_trailers(store.git.commit(_tip(store)).message)


def _pass(store: MemoryStore, entry_id: str) -> None:
    store.promote(entry_id, store.sign_verdict(entry_id, "PASS"))


def _cli(store: MemoryStore, tmp_path: Path, *args: str) -> tuple[int, str]:
    base = ["--store", str(store.git.workdir), "--key", str(tmp_path / "operator_key")]
    out = CliRunner().invoke(cli, [*base, *args])
    return out.exit_code, out.output


# --------------------------------------------------------------------------- usage


def test_every_read_face_records_what_it_returned(store: MemoryStore, tmp_path: Path) -> None:
    a = store.write("fact", "a", "the cache lives in redis")
    b = store.write("fact", "b", "the queue lives in kafka")
    store.query("redis cache", min_trust="unverified")
    store.view([b.id], min_trust="unverified")
    code, out = _cli(store, tmp_path, "query", "redis", "--min-trust", "unverified")
    assert code == 0, out
    session = ToolSession(store)
    hit = session.call("memory_query", {"query": "kafka", "min_trust": "unverified"})
    assert hit.error is None
    seen = session.call("memory_view", {"id": a.id, "min_trust": "unverified"})
    assert seen.error is None
    lines = Path(usage_path(store.git.git_dir)).read_text().splitlines()
    faces = [line.split()[1] for line in lines]
    assert faces == ["api", "api", "cli", "tool", "tool"]
    used = read_usage(store.git.git_dir)
    assert used[a.id].uses == 3 and used[b.id].uses == 2
    # Outside git: no commit was made by reading.
    assert parse_trailers(store.git.commit(_tip(store)).message)["Truss-Op"] == ["write"]


def test_usage_off_records_nothing_and_a_broken_file_never_fails_a_read(
    store: MemoryStore,
) -> None:
    store.write("fact", "a", "the cache lives in redis")
    path = Path(usage_path(store.git.git_dir))
    store.environ = {**store.environ, "TRUSS_USAGE": "off"}
    assert store.query("redis", min_trust="unverified").hits
    assert not path.exists()
    store.environ = {k: v for k, v in store.environ.items() if k != "TRUSS_USAGE"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir()  # cannot be opened for appending
    assert store.query("redis", min_trust="unverified").hits
    path.rmdir()
    path.write_bytes(b"garbage\n\xff\xfe 1 2\n12 api " + b"0" * 32 + b"\n17 cli trunc")
    assert read_usage(store.git.git_dir) == {"0" * 32: (1, 12.0)}


def test_concurrent_writers_never_tear_a_line(store: MemoryStore, tmp_path: Path) -> None:
    ids = [f"{n:032x}" for n in range(150)]  # more than one line's worth per record
    script = tmp_path / "rec.py"
    script.write_text(
        "import sys\nfrom truss_files.git.usage import record\n"
        f"ids = {ids!r}\n"
        "for _ in range(40):\n    record(sys.argv[1], ids, 'p')\n"
    )
    procs = [
        subprocess.Popen([sys.executable, str(script), str(store.git.git_dir)]) for _ in range(4)
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    used = read_usage(store.git.git_dir)
    assert {used[i].uses for i in ids} == {160}
    for line in Path(usage_path(store.git.git_dir)).read_text().splitlines():
        parts = line.split()
        assert parts[1] == "p" and all(len(p) == 32 for p in parts[2:])


def _git_files(store: MemoryStore) -> set[str]:
    """The git dir's own files (objects, refs, index, logs) and any lock anywhere: what a
    commit or a locked write would touch. ``truss/`` holds the caches reads keep."""
    root = Path(store.git.git_dir)
    found = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    return {p for p in found if not p.startswith("truss/") or p.endswith(".lock")}


def _http_note(server: Served, task: str, body: str, event: str) -> str:
    trained = server.train(task, {"body": body, "source": {"eventId": event, "revision": "1"}})
    assert trained.status == 200 and trained.body["status"] == "accepted", trained.raw
    return str(trained.body["entry"]["id"])


def test_a_query_over_http_records_usage_outside_git_and_salience_update_folds_it(
    served: Callable[..., Served], store: MemoryStore, tmp_path: Path, git: Callable[..., str]
) -> None:
    server = served()
    asked_for = _http_note(server, "T-1", "The release check needs the preview URL.", "e-1")
    idle = _http_note(server, "T-2", "The release check needs the preview URL too.", "e-2")
    usage = Path(usage_path(store.git.git_dir))
    assert not usage.exists()  # writes record no use
    tip, files = _tip(store), _git_files(store)
    for _ in range(3):
        asked = server.ask("T-1", purpose="what does the release check need")
        assert asked.status == 200 and [e["id"] for e in asked.body["evidence"]] == [asked_for]
    lines = usage.read_text().splitlines()
    assert [line.split()[1:] for line in lines] == [["http", asked_for]] * 3
    # Outside git: no commit, no object, no ref moved, no lock left.
    assert _tip(store) == tip and _git_files(store) == files
    # One signed commit folds it: the note asked for three times rises above its twin.
    code, out = _cli(store, tmp_path, "salience", "update", "--format", "json")
    assert code == 0, out
    done = json.loads(out)
    assert done["commit"] == _tip(store) != tip and _trailers(store)["Truss-Op"] == ["salience"]
    assert {asked_for, idle} <= {c["id"] for c in done["changes"]}
    assert store.get(asked_for).salience > store.get(idle).salience
    work = store.git.workdir
    assert work is not None
    signers = "gpg.ssh.allowedSignersFile=.truss/allowed_signers"
    git(work, "-c", signers, "verify-commit", done["commit"])  # fails the test unless good
    assert audit(store.git).ok


def test_usage_off_for_the_server_records_nothing_over_http(
    served: Callable[..., Served], store: MemoryStore
) -> None:
    server = served(env={**os.environ, "TRUSS_USAGE": "off"})
    note = _http_note(server, "T-1", "The release check needs the preview URL.", "e-1")
    asked = server.ask("T-1", purpose="what does the release check need")
    assert asked.status == 200 and [e["id"] for e in asked.body["evidence"]] == [note]
    assert not Path(usage_path(store.git.git_dir)).exists()
    assert read_usage(store.git.git_dir) == {}


# --------------------------------------------------------------------------- salience


def test_salience_update_folds_use_age_and_trust_in_one_signed_commit(
    store: MemoryStore,
) -> None:
    used = store.write("fact", "used", "deploys go through the blue green switch")
    idle = store.write("fact", "idle", "deploys go through the blue green switch!")
    _pass(store, used.id)
    _pass(store, idle.id)
    for _ in range(6):
        record(store.git.git_dir, [used.id], "api")
    dry = salience_update(store, dry_run=True)
    tip = _tip(store)
    assert dry.commit is None and {c.id for c in dry.changes} == {used.id, idle.id}
    assert _tip(store) == tip
    done = salience_update(store)
    assert done.commit == _tip(store) != tip
    assert _trailers(store)["Truss-Op"] == ["salience"]
    high, low = store.get(used.id).salience, store.get(idle.id).salience
    assert high > low and store.get(used.id).trust is Trust.VERIFIED
    assert audit(store.git).ok
    assert salience_update(store).commit is None  # nothing moved: no commit
    # Signed by the panel key, like any change of an entry file.
    item = store.log(used.id)[-1]
    assert item.op == "salience" and item.signer == "operator@example.test"


def test_fold_reads_use_age_and_trust() -> None:
    from truss_files.git.usage import Use
    from truss_files.model import Entry, Kind

    now = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
    fresh = Entry(Kind.FACT, "k", "b", created="2026-12-01T00:00:00Z", trust=Trust.VERIFIED)
    old = Entry(Kind.FACT, "k", "b", created="2025-12-01T00:00:00Z", trust=Trust.VERIFIED)
    assert fold(fresh, None, now) == 0.55 and fold(old, None, now) == 0.3
    assert fold(old, Use(8, now.timestamp()), now) > fold(fresh, None, now)
    stale = Entry(Kind.FACT, "k", "b", created="2026-12-01T00:00:00Z", trust=Trust.STALE)
    assert fold(stale, None, now) < fold(fresh, None, now)


def test_prior_ranks_by_salience_and_cli_and_tools_read_the_same_layered_setting(
    store: MemoryStore, tmp_path: Path
) -> None:
    a = store.write("fact", "a", "rotate the signing keys yearly")
    b = store.write("fact", "b", "rotate the signing keys yearly.")
    for _ in range(8):
        record(store.git.git_dir, [b.id], "api")
    salience_update(store)
    assert store.get(b.id).salience > store.get(a.id).salience

    def cli_order() -> list[str]:
        code, out = _cli(
            store, tmp_path, "query", "rotate signing keys", "--min-trust", "unverified",
            "--format", "json",
        )  # fmt: skip
        assert code == 0, out
        return [e["id"] for e in json.loads(out)["entries"]]

    def tool_order() -> list[str]:
        found = ToolSession(store).call(
            "memory_query", {"query": "rotate signing keys", "min_trust": "unverified"}
        )
        assert found.result is not None
        return [e["id"] for e in found.result["entries"]]

    off_cli, off_tool = cli_order(), tool_order()
    assert off_cli == off_tool
    # The user's layer (above truss.toml) turns the prior on: both faces honour it.
    config = Path(os.environ["TRUSS_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text('[policy]\nsalience = "prior"\n')
    assert cli_order() == tool_order() == [b.id, a.id]
    assert [h.entry.id for h in store.query("rotate signing keys", min_trust="unverified").hits][
        0
    ] == b.id


# --------------------------------------------------------------------------- eviction


def test_evict_moves_what_is_over_budget_to_stale_in_one_revertible_commit(
    store: MemoryStore, signed_commit: Callable[..., str], tmp_path: Path
) -> None:
    facts = [store.write("fact", f"k{n}", f"fact number {n}") for n in range(4)]
    for fact in facts:
        _pass(store, fact.id)
    lesson = store.write("lesson", "l", "a lesson with no budget")
    _pass(store, lesson.id)
    _toml(store, signed_commit, "[policy.eviction]\nfact = {max_entries = 2}")
    tip = _tip(store)
    code, out = _cli(store, tmp_path, "evict", "--dry-run", "--format", "json")
    assert code == 0, out
    dry = json.loads(out)
    assert dry["dry_run"] and dry["count"] == 2 and dry["commit"] is None
    assert _tip(store) == tip
    code, out = _cli(store, tmp_path, "evict", "--format", "json")
    assert code == 0, out
    done = json.loads(out)
    gone = {c["id"] for c in done["changes"]}
    assert gone == {c["id"] for c in dry["changes"]} and len(gone) == 2
    assert done["commit"] == _tip(store)
    fields = _trailers(store)
    assert fields["Truss-Op"] == ["evict"] and fields["Truss-Reason"] == ["evicted"]
    for fact in facts:
        now = store.get(fact.id)  # every file is still there
        assert now.trust is (Trust.STALE if fact.id in gone else Trust.VERIFIED)
    assert store.get(lesson.id).trust is Trust.VERIFIED
    assert audit(store.git).ok
    code, out = _cli(store, tmp_path, "revert", done["commit"])
    assert code == 0, out
    assert all(store.get(f.id).trust is Trust.VERIFIED for f in facts)
    assert audit(store.git).ok


def test_evict_by_age_and_salience_and_refusals(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    old = store.write("fact", "old", "written long ago")
    low = store.write("fact", "low", "nobody reads this", salience=0.05)
    fine = store.write("fact", "fine", "read and recent", salience=0.9)
    for entry in (old, low, fine):
        _pass(store, entry.id)
    with pytest.raises(UsageError, match="no eviction budget"):
        evict(store)
    later = datetime.datetime(2026, 11, 29, 11, 0, 0, tzinfo=datetime.UTC)
    later += datetime.timedelta(days=40)
    settings = load_settings(
        {"policy": {"eviction": {"default": {"max_age_days": 30, "min_salience": 0.1}}}}
    )
    done = evict(store, settings=settings, now=later, dry_run=True)
    assert {c.id for c in done.changes} == {old.id, low.id, fine.id}  # all older than 30 days
    settings = load_settings({"policy": {"eviction": {"fact": {"min_salience": 0.1}}}})
    done = evict(store, settings=settings)
    assert [c.id for c in done.changes] == [low.id] and "min_salience" in done.changes[0].why
    for bad in ({"max_entries": 0}, {"min_salience": 2}, {"keep": 1}, 5):
        with pytest.raises(ConfigError, match="policy.eviction"):
            load_settings({"policy": {"eviction": {"fact": bad}}})


# --------------------------------------------------------------------------- consolidation


def test_consolidate_merges_flagged_notes_and_verifying_supersedes_them(
    store: MemoryStore, tmp_path: Path
) -> None:
    base = "the nightly job fails when the artifact cache is full and must be pruned"
    first = trained(store, ctx(), base, source=src("e1"))["entry"]["id"]
    _pass(store, first)
    close = train(store, ctx(), {"body": base + " weekly", "source": src("e2")})
    assert close["status"] == "consolidating"
    second = close["entry"]["id"]
    assert _trailers(store)["Truss-Consolidating"] == [first]
    tip = _tip(store)
    code, out = _cli(store, tmp_path, "consolidate", "--dry-run", "--format", "json")
    assert code == 0, out
    assert json.loads(out)["count"] == 1 and _tip(store) == tip
    done = consolidate(store)
    (change,) = done.changes
    merged = store.get(change.id)
    assert merged.trust is Trust.UNVERIFIED
    assert sorted(merged_notes(merged)) == sorted([first, second])
    assert base in merged.body and "weekly" in merged.body
    assert consolidate(store).commit is None  # the same merged note: nothing new
    _pass(store, merged.id)
    assert store.get(first).trust is Trust.STALE
    assert store.get(first).superseded_by == merged.id
    assert store.get(second).superseded_by == merged.id
    assert store.get(second).trust is Trust.UNVERIFIED
    assert consolidate(store).changes == ()  # merged notes do not merge again
    assert audit(store.git).ok


def test_memory_store_offers_the_same_operations(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    entry = store.write("fact", "k", "kept warm by use")
    _pass(store, entry.id)
    store.query("kept warm", min_trust="unverified")
    assert store.salience_update().commit == _tip(store)
    budget = load_settings({"policy": {"eviction": {"fact": {"min_salience": 0.99}}}})
    done = store.evict(settings=budget)
    assert [c.id for c in done.changes] == [entry.id] and store.get(entry.id).trust is Trust.STALE
    assert store.consolidate(dry_run=True).changes == ()
    assert audit(store.git).ok
