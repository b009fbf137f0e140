"""Reads as of a date or a commit: the store as it was then -- its entries, their trust
labels, its truss.toml -- through the same read gate as a read of the tip."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from truss_files.errors import UsageError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.format.scope import Reader
from truss_files.git.gitstore import Snapshot
from truss_files.model import Entry, Trust
from truss_files.signing.trustpolicy import CONFIG_PATH
from truss_files.store.asof import parse_date
from truss_files.tools import ToolSession


def promote(store: MemoryStore, entry_id: str) -> Entry:
    return store.promote(entry_id, store.sign_verdict(entry_id, "PASS", note="checked"))


def tip(store: MemoryStore) -> str:
    commit = store.git.tip()
    assert commit is not None
    return str(commit.id)


def iso(store: MemoryStore, commit: str) -> str:
    seconds = store.git.commit(commit).commit_time
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cli_json(store: MemoryStore, *args: str) -> tuple[int, dict[str, object]]:
    argv = ["--store", str(store.git.workdir), *args, "--format", "json"]
    result = CliRunner().invoke(cli, argv)
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture
def history(store: MemoryStore) -> dict[str, str]:
    """A belief that changed: verified at ``then``, stale at the tip, with a newer entry
    written after; a second apart, so a time names one commit."""
    old = promote(store, store.write("decision", "deploy", "Deploy on Tuesdays.").id)
    then = tip(store)
    time.sleep(1.1)
    store.demote(old.id, "we moved to continuous deploys")
    new = promote(store, store.write("decision", "deploy-new", "Deploy on every merge.").id)
    return {"old": old.id, "new": new.id, "then": then, "now": tip(store)}


def test_query_at_a_commit_answers_with_the_labels_of_then(
    store: MemoryStore, history: dict[str, str]
) -> None:
    now = [h.entry.id for h in store.query("deploy")]
    assert now == [history["new"]]
    then = store.query("deploy", at=history["then"])
    assert [(h.entry.id, h.entry.trust) for h in then] == [(history["old"], Trust.VERIFIED)]
    # The tip's read is untouched by the read into the past.
    assert [h.entry.id for h in store.query("deploy")] == now


def test_view_at_shows_the_entry_as_it_was(store: MemoryStore, history: dict[str, str]) -> None:
    assert store.view([history["old"]]) == []  # stale now: below the verified floor
    (entry,) = store.view([history["old"]], at=history["then"])
    assert entry.trust is Trust.VERIFIED
    assert store.view([history["new"]], at=history["then"]) == []  # not written yet


def test_a_time_reads_the_last_commit_at_or_before_it(
    store: MemoryStore, history: dict[str, str]
) -> None:
    at = iso(store, history["then"])
    assert store.open_read(at=at).snap.oid == history["then"]
    assert store.open_read(at=iso(store, history["now"])).snap.oid == history["now"]
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    assert store.open_read(at=today).snap.oid == history["now"]  # a day: its end
    with pytest.raises(UsageError, match="history starts later"):
        store.open_read(at="2001-01-01")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2026-11-01", datetime.datetime(2026, 11, 1, 23, 59, 59, 999999, datetime.UTC)),
        ("2026-11-01T09:30:00Z", datetime.datetime(2026, 11, 1, 9, 30, tzinfo=datetime.UTC)),
        ("2026-11-01 09:30", datetime.datetime(2026, 11, 1, 9, 30, tzinfo=datetime.UTC)),
        (
            "2026-11-01T09:30:00+02:00",
            datetime.datetime(2026, 11, 1, 7, 30, tzinfo=datetime.UTC),
        ),
    ],
)
def test_dates_parse(text: str, seconds: datetime.datetime) -> None:
    assert parse_date(text) == seconds


def test_not_a_date_is_a_commit_name_and_a_bad_date_says_so() -> None:
    assert parse_date("abc123de") is None
    with pytest.raises(UsageError, match="not a date"):
        parse_date("2026-13-45")


def test_the_truss_toml_of_then_decides(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    def scope(mode: str) -> Callable[[Snapshot], dict[str, bytes]]:
        def change(snap: Snapshot) -> dict[str, bytes]:
            text = (snap.read(CONFIG_PATH) or b"").decode()
            text = text.split("\n[memory]\n")[0] + f'\n[memory]\nscope = "{mode}"\n'
            return {CONFIG_PATH: text.encode()}

        return change

    signed_commit(store, scope("shared"))
    note = promote(store, store.write("fact", "db", "Postgres 16.", scope={"agent": "a"}).id)
    then = tip(store)
    signed_commit(store, scope("per-agent"))
    reader = Reader(None, "b")  # another agent, under the store's own scope
    assert [h.entry.id for h in store.query("postgres", reader=reader)] == []
    assert [h.entry.id for h in store.query("postgres", reader=reader, at=then)] == [note.id]


def test_cli_query_and_show_at(store: MemoryStore, history: dict[str, str]) -> None:
    code, data = cli_json(store, "query", "deploy", "--at", history["then"][:12])
    assert code == 0
    assert data["at"] == history["then"]
    assert [e["id"] for e in data["entries"]] == [history["old"]]  # type: ignore[index]
    code, shown = cli_json(store, "show", history["old"], "--at", history["then"])
    assert code == 0 and shown["trust"] == "verified"
    code, shown = cli_json(store, "show", history["old"])
    assert code == 0 and shown["trust"] == "stale"


def test_the_read_tools_take_at(store: MemoryStore, history: dict[str, str]) -> None:
    session = ToolSession(store, flags=("memory",))
    found = session.call("memory_query", {"query": "deploy", "at": history["then"]})
    assert found.result is not None, found.error
    assert [e["id"] for e in found.result["entries"]] == [history["old"]]
    viewed = session.call("memory_view", {"id": history["old"], "at": history["then"]})
    assert viewed.result is not None, viewed.error
    assert [e["trust"] for e in viewed.result["entries"]] == ["verified"]
    bad = session.call("memory_query", {"query": "deploy", "at": "someday"})
    assert bad.error is not None


def test_why_shows_each_change_with_its_date(
    store: MemoryStore, history: dict[str, str], tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        cli, ["--store", str(store.git.workdir), "why", history["old"], "--format", "text"]
    )
    assert result.exit_code == 0, result.output
    lines = [
        line
        for line in result.output.splitlines()
        if " promote " in line or " demote " in line or " write " in line
    ]
    assert len(lines) == 3, result.output
    for line in lines:
        assert any(word[:4].isdigit() and "T" in word for word in line.split()), line
