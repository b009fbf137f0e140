"""Export and import: JSON lines round-trip with ids unchanged; the other formats' readers
land each note unverified, naming the file and line it came from."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from truss_files.errors import UsageError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.format.imports import read_records, source_ref
from truss_files.model import Trust
from truss_files.store.export import entries_to_export, memory_files, record, write_jsonl
from truss_files.store.initstore import init_store


def run(store: MemoryStore, key: Path, *args: str, input: str | None = None) -> tuple[int, str]:
    argv = ["--store", str(store.git.workdir), "--key", str(key), *args]
    result = CliRunner().invoke(cli, argv, input=input)
    return result.exit_code, result.stdout


def ok(store: MemoryStore, key: Path, *args: str) -> str:
    code, out = run(store, key, *args)
    assert code == 0, out
    return out


@pytest.fixture
def key(tmp_path: Path) -> Path:
    return tmp_path / "operator_key"


@pytest.fixture
def other(tmp_path: Path, operator_key: object, store: MemoryStore) -> MemoryStore:
    """A second, empty store initialised by the same operator."""
    path = tmp_path / "other"
    init_store(path, operator_key, "operator@example.test")  # type: ignore[arg-type]
    return MemoryStore(path, signer=store.signer, environ=store.environ)


def filled(store: MemoryStore) -> dict[str, str]:
    """Entries of every shape export must carry: scope, sources, a memory-tool path, a
    verified one, a rejected one and a superseded pair."""
    a = store.write("fact", "db", "Postgres 16 in prod.", scope={"project": "p-3"})
    b = store.write("lesson", "ci", "Retry the flaky suite once.", sources=[f"git:{'a' * 40}"])
    v = store.write("decision", "deploy", "Deploy on Tuesdays.")
    store.promote(v.id, store.sign_verdict(v.id, "PASS", note="ok"))
    r = store.write("fact", "wrong", "The moon is cheese.")
    store.reject(r.id, store.sign_verdict(r.id, "FAIL", note="no"))
    return {"a": a.id, "b": b.id, "v": v.id, "r": r.id}


def test_jsonl_round_trips_through_import_with_the_same_ids(
    store: MemoryStore, other: MemoryStore, key: Path, tmp_path: Path
) -> None:
    ids = filled(store)
    out = tmp_path / "memory.jsonl"
    ok(store, key, "export", "--min-trust", "unverified", "-o", str(out))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    exported = {line["id"] for line in lines}
    # Rejected entries never leave; everything else at or above the floor does.
    assert exported == {ids["a"], ids["b"], ids["v"]}
    data = json.loads(ok(other, key, "import", str(out), "--format", "json"))
    assert sorted(data["ids"]) == sorted(exported)
    back = {e.id: e for e in other.list_entries()}
    assert set(back) == exported
    # Every entry lands unverified, whatever it was where it came from.
    assert {e.trust for e in back.values()} == {Trust.UNVERIFIED}
    assert back[ids["a"]].scope == {"project": "p-3"}
    assert back[ids["b"]].provenance.sources == (f"git:{'a' * 40}",)
    # Exported again, the lines are the same but for trust and created.
    again = io.StringIO()
    write_jsonl(entries_to_export(other, "unverified").entries, again)
    strip = lambda d: {k: v for k, v in d.items() if k not in ("trust", "created")}  # noqa: E731
    assert sorted(map(strip, map(json.loads, again.getvalue().splitlines())), key=str) == sorted(
        map(strip, lines), key=str
    )


def test_min_trust_keeps_to_its_floor(store: MemoryStore, key: Path) -> None:
    ids = filled(store)
    lines = ok(store, key, "export").splitlines()
    assert [json.loads(line)["id"] for line in lines] == [ids["v"]]


def test_a_memory_tool_file_round_trips_with_its_path_and_bytes(
    store: MemoryStore, other: MemoryStore, key: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "memories"
    (folder / "lessons").mkdir(parents=True)
    (folder / "lessons" / "rust.md").write_text("Scope the guard.\n\n  trailing  \n")
    (folder / "todo.md").write_text("Ship it")
    ok(store, key, "import", "--from", "anthropic-memories", str(folder))
    entries = {e.memory_path: e for e in store.list_entries()}
    rust = entries["/memories/lessons/rust.md"]
    assert rust.kind.value == "lesson" and rust.key == "rust"
    assert rust.body == "Scope the guard.\n\n  trailing  \n"  # kept byte for byte
    assert rust.provenance.produced_by == source_ref(f"{folder}/lessons/rust.md", 1)
    assert entries["/memories/todo.md"].kind.value == "fact"
    out = tmp_path / "m.jsonl"
    ok(store, key, "export", "--min-trust", "unverified", "-o", str(out))
    ok(other, key, "import", str(out))
    assert {e.id for e in other.list_entries()} == {e.id for e in store.list_entries()}
    # And back out as a folder: the same files, the same bytes.
    again = tmp_path / "again"
    ok(
        other,
        key,
        "export",
        "--min-trust",
        "unverified",
        "--format",
        "anthropic-memories",
        "-o",
        str(again),
    )
    assert (again / "lessons" / "rust.md").read_text() == "Scope the guard.\n\n  trailing  \n"
    assert (again / "todo.md").read_text() == "Ship it"


def test_memory_md_notes_land_unverified_with_file_and_line(
    store: MemoryStore, key: Path, tmp_path: Path
) -> None:
    notes = tmp_path / "CLAUDE.md"
    notes.write_text(
        "# Project\n\n"
        "- Run `make test` before pushing.\n"
        "- The API lives in src/api,\n"
        "  its tests in tests/api.\n\n"
        "## Build\n\n"
        "1. Run `uv sync` first.\n"
        "   - then `make`\n"
        "```sh\n- not a note\n```\n"
    )
    ok(store, key, "import", "--from", "memory-md", str(notes))
    got = {e.key: e for e in store.list_entries()}
    assert set(got) == {"claude/project/1", "claude/project/2", "claude/project/build/1"}
    assert got["claude/project/2"].body == "The API lives in src/api,\nits tests in tests/api."
    assert got["claude/project/build/1"].body == "Run `uv sync` first.\n- then `make`"
    assert got["claude/project/1"].provenance.produced_by == source_ref(str(notes), 3)
    assert got["claude/project/build/1"].provenance.produced_by == source_ref(str(notes), 9)
    assert {e.trust for e in got.values()} == {Trust.UNVERIFIED}


def test_mem0_export_lines_point_at_each_memory(tmp_path: Path) -> None:
    path = tmp_path / "mem0 export.json"
    path.write_text(
        '{"count": 2, "note": "results: [not this]",\n'
        ' "results": [\n'
        '  {"id": "m-1", "memory": "Prefers [tables] and \\"results\\"", "user_id": "alice",\n'
        '   "metadata": {"category": "style"}, "created_at": "2024-05-01T10:00:00Z"},\n'
        '  {"id": "m-2",\n   "memory": "Vegetarian", "agent_id": "chef"}\n'
        " ]}\n"
    )
    records = list(read_records("mem0", str(path)))
    assert [r.line for r in records] == [3, 5]
    assert records[0].fields == {
        "kind": "fact",
        "key": "mem0/m-1",
        "body": 'Prefers [tables] and "results"',
        "source": f"import:{str(path).replace(' ', '%20')}:3",
        "scope": {"user": "alice"},
    }
    assert records[1].fields["scope"] == {"agent": "chef"}
    # A bare list of memories is read the same way.
    path.write_text('[{"id": 7, "memory": "x"}]')
    assert [r.fields["key"] for r in read_records("mem0", str(path))] == ["mem0/7"]


def test_mem0_import_through_the_cli(store: MemoryStore, key: Path, tmp_path: Path) -> None:
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps({"results": [{"id": "a", "memory": "Likes tea."}]}))
    ok(store, key, "import", "--from", "mem0", str(path))
    (entry,) = store.list_entries()
    assert (entry.key, entry.body, entry.trust) == ("mem0/a", "Likes tea.", Trust.UNVERIFIED)


@pytest.mark.parametrize(
    ("fmt", "text", "said"),
    [
        ("mem0", "{}", "not a mem0 export"),
        ("mem0", '{"results": [{"id": "a"}]}', ":1: needs a string field memory"),
        ("mem0", '{"results": [\n{"memory": "x"}]}', ":2: needs an id"),
        ("mem0", "{nope", ":1: not JSON"),
    ],
)
def test_bad_foreign_files_say_where(tmp_path: Path, fmt: str, text: str, said: str) -> None:
    path = tmp_path / "in.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=said):
        list(read_records(fmt, str(path)))


def test_a_line_changed_after_export_is_refused_and_nothing_lands(
    store: MemoryStore, other: MemoryStore, key: Path, tmp_path: Path
) -> None:
    filled(store)
    lines = [
        json.loads(x) for x in ok(store, key, "export", "--min-trust", "unverified").splitlines()
    ]
    lines[1]["body"] = "Something else entirely."
    path = tmp_path / "edited.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    code, out = run(other, key, "import", str(path), "--format", "json")
    assert code == 1
    message = json.loads(out)["error"]["message"]
    assert message.startswith(f"{path}:2: the fields make id ") and lines[1]["id"] in message
    assert other.list_entries() == []


def test_export_folder_paths_never_leave_the_folder(store: MemoryStore, tmp_path: Path) -> None:
    sneaky = store.write("fact", "../../outside", "escape attempt")
    files = memory_files([sneaky])
    (path,) = files
    assert ".." not in path.split("/")
    assert path == f"/memories/fact/{sneaky.id}.md"


def test_record_names_every_field_the_id_covers(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "body", scope={"agent": "a"})
    line = record(entry)
    assert set(entry.immutable()) - {"produced_by"} <= set(line)
    assert line["source"] == entry.provenance.produced_by
