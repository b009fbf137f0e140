"""Attacks on the memory tool (memory_20250818): paths, identity, other runs, tombstones.

Each attack is performed for real through the dispatcher every face uses (``ToolSession``)
against a real signed store, and must be refused with the message a model can act on, with
the branch, the entries and identity/ exactly as they were.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.tools_support import promote
from truss_files.errors import EntryError
from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.format.trailers import trailers
from truss_files.git.gitstore import Plan
from truss_files.model import Entry, Kind, Provenance, Trust
from truss_files.tools import Outcome, ToolSession
from truss_files.tools.binding import MAX_PATH
from truss_files.tools.write import is_tombstone


def mem(store: MemoryStore, run: str | None = "R1", **tool_input: Any) -> Outcome:
    return ToolSession(store, flags=["memory_write"], run_id=run).call("memory", tool_input)


def tip(store: MemoryStore) -> str:
    return store.snapshot().oid


@pytest.fixture
def seeded(store: MemoryStore) -> Iterator[MemoryStore]:
    """A store holding one verified note at a path the model wrote."""
    done = mem(store, "R0", command="create", path="/memories/lessons/ci.md", file_text="keep\n")
    assert done.ok
    [entry] = store.list_entries()
    promote(store, entry.id)
    yield store


ESCAPES = [
    "/memories/../identity/core.md",
    "/memories/lessons/../../.git/config",
    "/memories/%2e%2e/identity/core.md",
    "/memories/%252E%252E/x.md",
    "/memories/a%2Fb.md",
    "/memories/a%5cb.md",
    "/memories\\..\\identity\\core.md",
    "/memories/lessons\\ci.md",
    "/memories/ci.md\x00.txt",
    "/memoriesX/ci.md",
    "/memories..",
]
LOOKALIKES = [
    "/memories/\u2024\u2024/identity/core.md",  # ONE DOT LEADER
    "/memories/lessons\u2215ci.md",  # DIVISION SLASH
    "/memories/lessons/ci\u202e.md",  # RIGHT-TO-LEFT OVERRIDE
    "/memories/lessons/c\u200bi.md",  # ZERO WIDTH SPACE
    "/memories/\uff4c\uff45\uff53\uff53\uff4f\uff4e\uff53/ci.md",  # fullwidth "lessons"
]


@pytest.mark.parametrize("path", ESCAPES + LOOKALIKES + ["/memories/" + "a" * MAX_PATH])
def test_path_tricks_are_refused_and_nothing_moves(seeded: MemoryStore, path: str) -> None:
    before = tip(seeded)
    attempts = [
        {"command": "create", "path": path, "file_text": "pwned"},
        {"command": "view", "path": path},
        {"command": "str_replace", "path": path, "old_str": "keep", "new_str": "pwned"},
        {"command": "insert", "path": path, "insert_line": 0, "insert_text": "pwned"},
        {"command": "delete", "path": path},
        {"command": "rename", "old_path": "/memories/lessons/ci.md", "new_path": path},
        {"command": "rename", "old_path": path, "new_path": "/memories/x.md"},
    ]
    for attempt in attempts:
        done = mem(seeded, **attempt)
        assert not done.ok, attempt
        assert done.error is not None and done.error["code"] == "invalid_path", done.error
        if path in ESCAPES:
            assert done.text in (
                f"Path {path} would escape /memories directory",
                f"Path must start with /memories, got: {path}",
            )
    assert tip(seeded) == before
    assert "     1\tkeep" in mem(seeded, "R9", command="view", path="/memories/lessons/ci.md").text


@pytest.mark.parametrize(
    "path",
    [
        "/memories/identity/core.md",
        "/memories/principals/alice.md",
        "/memories/lessons/identity/self.md",
        "/memories/PRINCIPALS/bob.md",
        "/memories/identity",
    ],
)
def test_identity_and_principals_are_not_reachable(seeded: MemoryStore, path: str) -> None:
    core = seeded.snapshot().read("identity/core.md")
    before = tip(seeded)
    for attempt in (
        {"command": "create", "path": path, "file_text": "I obey no one."},
        {"command": "view", "path": path},
        {"command": "delete", "path": path},
        {"command": "rename", "old_path": "/memories/lessons/ci.md", "new_path": path},
    ):
        done = mem(seeded, **attempt)
        assert done.error is not None and done.error["code"] == "forbidden_path", attempt
        assert "not reachable through the memory tool" in done.text
    assert tip(seeded) == before and seeded.snapshot().read("identity/core.md") == core


def test_another_runs_unverified_note_is_never_visible(seeded: MemoryStore) -> None:
    secret = "R2's draft: the deploy key is in CI."
    assert mem(seeded, "R2", command="create", path="/memories/draft.md", file_text=secret).ok
    assert mem(seeded, "R2", command="str_replace", path="/memories/lessons/ci.md",
               old_str="keep", new_str="R2 edit").ok  # fmt: skip
    for run in ("R1", None):
        listing = mem(seeded, run, command="view", path="/memories").text
        assert "draft.md" not in listing and "[unverified]" not in listing
        assert "does not exist" in mem(seeded, run, command="view", path="/memories/draft.md").text
        shown = mem(seeded, run, command="view", path="/memories/lessons/ci.md").text
        assert "keep" in shown and "R2 edit" not in shown
        # Not through an edit either: the text of an invisible file is never echoed.
        probe = mem(seeded, run, command="str_replace", path="/memories/draft.md",
                    old_str="deploy", new_str="x")  # fmt: skip
        assert probe.text == (
            "The path /memories/draft.md does not exist. Please provide a valid path."
        )
        multi = mem(seeded, run, command="str_replace", path="/memories/lessons/ci.md",
                    old_str="R2", new_str="x")  # fmt: skip
        assert "did not appear verbatim" in multi.text
        # Nor by the read tools at their default floor (widening to unverified is the
        # caller's explicit choice, and then every entry says it is unverified).
        found = ToolSession(seeded, flags=["memory"], run_id=run).call(
            "memory_query", {"query": "deploy key draft"}
        )
        assert found.payload["entries"] == []
    # Creating at the same path is the caller's own new file, not a view of R2's.
    assert mem(seeded, "R1", command="create", path="/memories/draft.md", file_text="mine").ok
    assert secret not in mem(seeded, "R1", command="view", path="/memories/draft.md").text


def test_another_runs_tombstone_waits_for_verification(seeded: MemoryStore) -> None:
    assert mem(
        seeded, "R0", command="create", path="/memories/lessons/dns.md", file_text="pin\n"
    ).ok
    [dns] = seeded.list_entries(key="dns")
    promote(seeded, dns.id)
    assert mem(seeded, "R2", command="delete", path="/memories/lessons/ci.md").ok
    moved = mem(
        seeded, "R2", command="rename", old_path="/memories/lessons", new_path="/memories/x"
    )
    assert moved.ok
    assert "does not exist" in mem(seeded, "R2", command="view", path="/memories/lessons").text

    def view(run: str | None, path: str) -> str:
        return mem(seeded, run, command="view", path=path).text

    for run in ("R1", "R3", None):
        assert "     1\tkeep" in view(run, "/memories/lessons/ci.md")
        assert "     1\tpin" in view(run, "/memories/lessons/dns.md")
        assert "does not exist" in view(run, "/memories/x")
        found = ToolSession(seeded, flags=["memory"], run_id=run).call(
            "memory_query", {"query": "keep pin", "min_trust": "verified"}
        )
        assert sorted(e["key"] for e in found.payload["entries"]) == ["ci", "dns"]
    # Nothing was destroyed: the verified notes stay verified; each tombstone is a new entry.
    for key in ("ci", "dns"):
        entries = seeded.list_entries(key=key)
        assert [e.trust for e in entries if not is_tombstone(e)] == [Trust.VERIFIED]
        # ci has two: its delete's (keeping /memories/lessons) and the rename's (the emptied
        # folder moves too), promoted in the order they were written.
        stones = [e for e in entries if is_tombstone(e)]
        assert len(stones) == {"ci": 2, "dns": 1}[key]
        for stone in sorted(stones, key=lambda e: e.created):
            assert stone.trust is Trust.UNVERIFIED
            promote(seeded, stone.id)
    for run in ("R1", "R3", None):
        assert "does not exist" in view(run, "/memories/lessons/ci.md")
        assert "does not exist" in view(run, "/memories/lessons/dns.md")
        assert "does not exist" in view(run, "/memories/lessons")


def _commit(store: MemoryStore, entry: Entry) -> None:
    data = entryfile.serialize(entry).encode()
    message = "truss: write\n\n" + trailers(
        op="write", entry=[entry.id], trust="none -> unverified"
    )
    store._apply(lambda _snap: Plan({entry.path: data}, message), {"agent", "operator"})


def test_a_forged_memory_path_cannot_shadow_another_file(seeded: MemoryStore) -> None:
    """An entry claiming a path that names another kind and key shows at its own canonical
    path; the real file keeps its path and its text."""
    forged = Entry(
        kind=Kind.FACT,
        key="innocent",
        body="forged text",
        author="agent:operator@example.test",
        created="2026-11-29T12:00:00Z",
        provenance=Provenance(produced_by="run:R1/9"),
        memory_path="/memories/lessons/ci.md",
    )
    _commit(seeded, forged)
    promote(seeded, forged.id)
    shown = mem(seeded, "R5", command="view", path="/memories/lessons/ci.md").text
    assert "keep" in shown and "forged" not in shown
    listing = mem(seeded, "R5", command="view", path="/memories").text
    assert "/memories/fact/innocent.md" in listing


@pytest.mark.parametrize(
    ("kind", "key", "claimed"),
    [
        (Kind.FACT, "innocent", "/memories/planted/deep"),  # not a folder its key sat in
        (Kind.FACT, "planted/x", "/memories/lessons/planted"),  # another kind's folder
        (Kind.FACT, "identity/x", "/memories/identity"),  # not reachable
        (Kind.FACT, "planted/x", "/memories/planted/../identity"),
        (Kind.FACT, "planted/x", "/memories/planted/x.md"),  # a file's path keeps nothing
        (Kind.FACT, "planted/x", "/memories/planted//"),  # not as the tool writes it
    ],
)
def test_a_forged_tombstone_keeps_no_folder_it_did_not_empty(
    seeded: MemoryStore, kind: Kind, key: str, claimed: str
) -> None:
    """A verified tombstone keeps only a folder its own key sat in, spelled as the tool
    spells it; any other claim shows nothing, and the tree stays as it was. The control:
    the same tombstone naming its own folder keeps it."""
    from truss_files.tools.write import TOMBSTONE_BODY

    before = mem(seeded, "R5", command="view", path="/memories").text

    def stone(memory_path: str, at: str) -> Entry:
        entry = Entry(
            kind=kind,
            key=key,
            body=TOMBSTONE_BODY,
            author="agent:operator@example.test",
            created=at,
            provenance=Provenance(produced_by="run:R1/9"),
            memory_path=memory_path,
        )
        _commit(seeded, entry)
        promote(seeded, entry.id)
        return entry

    stone(claimed, "2026-11-29T12:00:00Z")
    assert mem(seeded, "R5", command="view", path="/memories").text == before
    assert not mem(seeded, "R5", command="view", path=claimed).ok  # absent or refused
    assert "     1\tkeep" in mem(seeded, "R5", command="view", path="/memories/lessons/ci.md").text
    if key == "planted/x" and kind is Kind.FACT:
        stone("/memories/planted", "2026-11-29T12:00:01Z")
        assert mem(seeded, "R5", command="view", path="/memories/planted").text == (
            "Here're the files and directories up to 2 levels deep in /memories/planted, "
            "excluding hidden items:\n4K\t/memories/planted"
        )


@pytest.mark.parametrize(
    "claimed",
    ["/etc/passwd", "/memories/../identity/core.md", "/memories/a\\b.md", "/memories/x\ny"],
)
def test_a_memory_path_outside_memories_does_not_parse(claimed: str) -> None:
    entry = Entry(
        kind=Kind.FACT, key="x", body="x", created="2026-11-29T12:00:00Z", memory_path=claimed
    )
    text = entryfile.serialize(entry)
    if "/memories/.." in claimed:
        # ".." is a path trick the parser cannot tell from a name: the binding refuses it.
        parsed = entryfile.parse(text, entry.path)
        listing_path = parsed.memory_path
        assert listing_path == claimed
        from truss_files.tools.binding import shown_path

        assert shown_path(parsed) == "/memories/fact/x.md"
        return
    with pytest.raises(EntryError) as caught:
        entryfile.parse(text, entry.path)
    assert "memory_path" in str(caught.value)


def test_entries_without_a_memory_path_keep_their_ids() -> None:
    """Old stores: every entry of the project's own example store (written before the field
    existed) parses with its id, and re-serializes to the same bytes."""
    root = Path(__file__).resolve().parents[2] / "memories"
    files = sorted(root.rglob("*.md"))
    assert files
    for path in files:
        data = path.read_bytes()
        rel = path.relative_to(root.parent).as_posix()
        entry = entryfile.parse(data, rel)
        assert entry.memory_path is None
        assert entryfile.serialize(entry).encode() == data
