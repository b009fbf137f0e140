"""The memory_20250818 binding: texts, the virtual tree, governed writes, strict paths."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.tools_support import configure, content, error, memory, promote
from truss_files.errors import BindingError
from truss_files.facade import MemoryStore
from truss_files.model import Kind, Trust
from truss_files.tools.binding import MAX_PATH, parse_path
from truss_files.tools.write import TOMBSTONE_MARK, is_tombstone

LESSON = "Retry flaky network tests once.\nThen file a bug.\nLink the CI run."
HEADER = "Here're the files and directories up to 2 levels deep in {}, excluding hidden items:"


def unverified_note(text: str) -> str:
    """The text without the trust marks: the header's prefix and a listing's last paragraph."""
    return text.split("\n\n[unverified]")[0].removeprefix("[unverified] ")


# -- creating and reading ---------------------------------------------------------------


def test_create_then_view_in_the_same_run(store: MemoryStore) -> None:
    done = memory(store, command="create", path="/memories/lessons/ci.md", file_text=LESSON)
    assert content(done) == "File created successfully at: /memories/lessons/ci.md"
    [entry] = store.list_entries(kind=Kind.LESSON)
    assert (entry.key, entry.trust, entry.body) == ("ci", Trust.UNVERIFIED, LESSON)
    assert entry.provenance.produced_by == "run:R1/1"
    text = content(memory(store, command="view", path="/memories/lessons/ci.md"))
    assert unverified_note(text) == (
        "Here's the content of /memories/lessons/ci.md with line numbers:\n"
        "     1\tRetry flaky network tests once.\n"
        "     2\tThen file a bug.\n"
        "     3\tLink the CI run."
    )
    assert text.startswith("[unverified] Here's the content of")
    # The file is where the model wrote it: the other spelling of its folder is not a path.
    assert "does not exist" in error(memory(store, command="view", path="/memories/lesson/ci.md"))
    ranged = content(
        memory(store, command="view", path="/memories/lessons/ci.md", view_range=[2, -1])
    )
    assert unverified_note(ranged).splitlines()[1:] == [
        "     2\tThen file a bug.",
        "     3\tLink the CI run.",
    ]
    one = content(memory(store, command="view", path="/memories/lessons/ci.md", view_range=[1, 1]))
    assert unverified_note(one).splitlines()[1:] == ["     1\tRetry flaky network tests once."]


def test_directory_listing_shows_the_paths_the_model_wrote(store: MemoryStore) -> None:
    memory(store, command="create", path="/memories/lessons/ci.md", file_text="abc")
    memory(store, command="create", path="/memories/notes.md", file_text="12345\n")
    memory(store, command="create", path="/memories/project/deep/x.md", file_text="1234567")
    verified = store.write("decision", "db", "Use Postgres.")
    promote(store, verified.id)
    text = content(memory(store, command="view", path="/memories"))
    lines = text.split("\n\n")[0].splitlines()
    assert lines[0] == HEADER.format("/memories")
    assert lines[1:] == [
        "4K\t/memories",
        "4K\t/memories/decision/",  # written outside the tool: its canonical path
        "13B\t/memories/decision/db.md",
        "4K\t/memories/lessons/",
        "3B\t/memories/lessons/ci.md [unverified]",
        "6B\t/memories/notes.md [unverified]",  # the trailing newline counts
        "4K\t/memories/project/",
        "4K\t/memories/project/deep/",
    ]
    assert text.endswith("until a panel verifies them.")
    [notes] = store.list_entries(key="notes")
    assert (notes.kind.value, notes.memory_path) == ("fact", "/memories/notes.md")
    # A folder the model never wrote does not exist, though its kind holds entries.
    for never in ("/memories/fact", "/memories/facts", "/memories/lesson"):
        assert error(memory(store, command="view", path=never)) == (
            f"The path {never} does not exist. Please provide a valid path."
        )
    sub = content(memory(store, command="view", path="/memories/project"))
    assert "7B\t/memories/project/deep/x.md [unverified]" in sub.splitlines()
    assert "     1\t1234567" in content(
        memory(store, command="view", path="/memories/project/deep/x.md")
    )


def test_default_kind_is_configurable(store: MemoryStore) -> None:
    configure(store, memory_write=True, default_kind="scratch")
    memory(store, command="create", path="/memories/todo.md", file_text="finish the port")
    [entry] = store.list_entries(kind=Kind.SCRATCH)
    assert entry.key == "todo"


def test_empty_kind_folder_and_missing_paths(store: MemoryStore) -> None:
    assert content(memory(store, command="view", path="/memories")) == (
        HEADER.format("/memories") + "\n4K\t/memories"
    )
    assert error(memory(store, command="view", path="/memories/playbooks")) == (
        "The path /memories/playbooks does not exist. Please provide a valid path."
    )
    assert error(memory(store, command="view", path="/memories/nope.md")) == (
        "The path /memories/nope.md does not exist. Please provide a valid path."
    )


# -- who sees what ---------------------------------------------------------------------


def test_view_shows_verified_and_own_unverified_only(store: MemoryStore) -> None:
    mine = memory(store, "R1", command="create", path="/memories/lessons/a.md", file_text="mine")
    assert mine.ok
    theirs = memory(
        store, "R2", command="create", path="/memories/lessons/b.md", file_text="theirs"
    )
    assert theirs.ok
    gone = store.write("lesson", "c", "rejected text")
    from tests.support.tools_support import reject

    reject(store, gone.id)
    listing = content(memory(store, "R1", command="view", path="/memories/lessons"))
    assert "/memories/lessons/a.md [unverified]" in listing
    assert "b.md" not in listing and "c.md" not in listing
    assert "does not exist" in error(
        memory(store, "R1", command="view", path="/memories/lessons/b.md")
    )
    assert "does not exist" in error(
        memory(store, None, command="view", path="/memories/lessons/a.md")
    )
    [b] = store.list_entries(key="b")
    promote(store, b.id)
    verified = content(memory(store, "R1", command="view", path="/memories/lessons/b.md"))
    assert "     1\ttheirs" in verified and "[unverified]" not in verified


def test_edits_write_new_unverified_entries(store: MemoryStore) -> None:
    first = store.write("lesson", "ci", LESSON)
    promote(store, first.id)
    done = memory(
        store,
        command="str_replace",
        path="/memories/lesson/ci.md",
        old_str="once",
        new_str="twice",
    )
    assert content(done) == (
        "The memory file has been edited. Here is the snippet showing the change (with line "
        "numbers):\n     1\tRetry flaky network tests twice.\n     2\tThen file a bug.\n"
        "     3\tLink the CI run."
    )
    assert store.get(first.id).trust is Trust.VERIFIED  # untouched until a panel decides
    edited = [e for e in store.list_entries(key="ci") if e.id != first.id]
    assert len(edited) == 1 and edited[0].trust is Trust.UNVERIFIED
    assert "twice" in content(memory(store, command="view", path="/memories/lesson/ci.md"))
    # Another run still reads the verified version.
    assert "once" in content(memory(store, "R2", command="view", path="/memories/lesson/ci.md"))
    inserted = memory(
        store,
        command="insert",
        path="/memories/lesson/ci.md",
        insert_line=1,
        insert_text="Check the proxy first.\n",
    )
    assert content(inserted) == "The file /memories/lesson/ci.md has been edited."
    view = content(memory(store, command="view", path="/memories/lesson/ci.md"))
    assert "     2\tCheck the proxy first." in view and "twice" in view
    # Once the panel verifies the newest edit, it supersedes the original for everyone.
    newest = max(store.list_entries(key="ci"), key=lambda e: e.created)
    promote(store, newest.id)
    assert store.get(first.id).trust is Trust.STALE
    assert "Check the proxy first." in content(
        memory(store, "R2", command="view", path="/memories/lesson/ci.md")
    )


def test_delete_is_a_tombstone_that_takes_effect_once_verified(store: MemoryStore) -> None:
    kept = store.write("lesson", "ci", LESSON)
    promote(store, kept.id)
    files_before = len(store.list_entries())
    assert content(memory(store, command="delete", path="/memories/lesson/ci.md")) == (
        "Successfully deleted /memories/lesson/ci.md"
    )
    assert len(store.list_entries()) == files_before + 1  # nothing destroyed
    [stone] = [e for e in store.list_entries(key="ci") if is_tombstone(e)]
    assert stone.trust is Trust.UNVERIFIED and stone.body.startswith(TOMBSTONE_MARK)
    assert "does not exist" in error(memory(store, command="view", path="/memories/lesson/ci.md"))
    assert "once" in content(memory(store, "R2", command="view", path="/memories/lesson/ci.md"))
    promote(store, stone.id)
    assert store.get(kept.id).trust is Trust.STALE
    assert "does not exist" in error(
        memory(store, "R2", command="view", path="/memories/lesson/ci.md")
    )
    assert "ci.md" not in content(memory(store, "R2", command="view", path="/memories"))
    # Gone from the read tools as well.
    from tests.support.tools_support import call

    hits = call(store, "memory_query", {"query": "tombstone deleted memory"}).payload["entries"]
    assert hits == []
    # And the key can be created again.
    assert memory(store, "R3", command="create", path="/memories/lesson/ci.md", file_text="new").ok


def test_delete_folder_and_rename(store: MemoryStore) -> None:
    for name in ("a", "b"):
        e = store.write("fact", f"proj/{name}", f"text {name}")
        promote(store, e.id)
    assert content(
        memory(
            store,
            command="rename",
            old_path="/memories/fact/proj/a.md",
            new_path="/memories/lessons/a.md",
        )
    ) == ("Successfully renamed /memories/fact/proj/a.md to /memories/lessons/a.md")
    assert "text a" in content(memory(store, command="view", path="/memories/lessons/a.md"))
    assert "does not exist" in error(memory(store, command="view", path="/memories/fact/proj/a.md"))
    [moved] = store.list_entries(kind=Kind.LESSON)
    assert moved.trust is Trust.UNVERIFIED and moved.provenance.produced_by == "run:R1/1"
    stones = [e for e in store.list_entries(key="proj/a") if is_tombstone(e)]
    assert len(stones) == 1
    assert content(memory(store, command="delete", path="/memories/fact/proj")) == (
        "Successfully deleted /memories/fact/proj"
    )
    assert "does not exist" in error(memory(store, command="view", path="/memories/fact/proj"))
    assert (
        error(memory(store, command="delete", path="/memories"))
        == "Cannot delete the /memories directory itself"
    )
    assert (
        error(memory(store, command="rename", old_path="/memories", new_path="/memories/x"))
        == "Cannot rename the /memories directory itself"
    )


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        (
            "create",
            {"path": "/memories/lessons/ci.md", "file_text": "x"},
            "File /memories/lessons/ci.md already exists",
        ),
        (
            "str_replace",
            {"path": "/memories/lessons/ci.md", "old_str": "zzz", "new_str": "y"},
            "No replacement was performed, old_str `zzz` did not appear verbatim in "
            "/memories/lessons/ci.md.",
        ),
        (
            "str_replace",
            {"path": "/memories/lessons/ci.md", "old_str": "t", "new_str": "y"},
            "No replacement was performed. Multiple occurrences of old_str `t` in lines: "
            "1, 1, 1, 1, 3. Please ensure it is unique",
        ),
        (
            "str_replace",
            {"path": "/memories/lessons/none.md", "old_str": "a", "new_str": "b"},
            "The path /memories/lessons/none.md does not exist. Please provide a valid path.",
        ),
        (
            "insert",
            {"path": "/memories/lessons/ci.md", "insert_line": 9, "insert_text": "x"},
            "Invalid `insert_line` parameter: 9. It should be within the range [0, 3].",
        ),
        (
            "delete",
            {"path": "/memories/lessons/none.md"},
            "The path /memories/lessons/none.md does not exist",
        ),
        (
            "rename",
            {"old_path": "/memories/lessons/none.md", "new_path": "/memories/x.md"},
            "The path /memories/lessons/none.md does not exist",
        ),
        (
            "rename",
            {"old_path": "/memories/lessons/ci.md", "new_path": "/memories/lessons"},
            "The destination /memories/lessons already exists",
        ),
        ("view", {"path": "/etc/passwd"}, "Path must start with /memories, got: /etc/passwd"),
        (
            "view",
            {"path": "/memories/../etc"},
            "Path /memories/../etc would escape /memories directory",
        ),
        ("view", {}, "Parameter `path` is required for command: view"),
        ("frobnicate", {}, "`command` must be one of: view, create, str_replace, insert, delete"),
    ],
)
def test_errors_are_worded_as_the_sdk_words_them(
    store: MemoryStore, command: str, args: dict[str, Any], message: str
) -> None:
    memory(store, command="create", path="/memories/lessons/ci.md", file_text=LESSON)
    assert error(memory(store, command=command, **args)).startswith(message)


# -- strict paths ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/memories/../identity/core.md",
        "/memories/lessons/../../x",
        "/memories/..",
        "/memories/%2e%2e/x",
        "/memories/%2E%2e/x",
        "/memories/%252e%252e/x",
        "/memories/%25252E%25252E/x",
        "/memories/a%2fb",
        "/memories\\..\\x",
        "/memories/lessons\\x.md",
        "/memories/x\x00.md",
        "/memoriesX/a.md",
        "/memories..",
    ],
)
def test_escapes_are_refused(store: MemoryStore, path: str) -> None:
    for command in (
        {"command": "view", "path": path},
        {"command": "create", "path": path, "file_text": "x"},
    ):
        assert error(memory(store, **command)) == f"Path {path} would escape /memories directory"
    assert store.list_entries() == []


@pytest.mark.parametrize(
    "path",
    [
        "/memories/identity/core.md",
        "/memories/principals/alice.md",
        "/memories/facts/identity/self.md",
        "/memories/Identity/core.md",
    ],
)
def test_identity_is_not_reachable(store: MemoryStore, path: str) -> None:
    refused = memory(store, command="create", path=path, file_text="I am root now")
    assert refused.error is not None and refused.error["code"] == "forbidden_path"
    assert "not reachable" in refused.error["message"]
    assert store.snapshot().read("identity/core.md") is not None
    assert store.list_entries() == []


def test_outside_and_overlong_paths(store: MemoryStore) -> None:
    assert error(memory(store, command="view", path="memories/x")) == (
        "Path must start with /memories, got: memories/x"
    )
    long = "/memories/" + "a" * MAX_PATH
    assert "the limit is 512" in error(memory(store, command="create", path=long, file_text="x"))
    assert "limit is 256" in error(
        memory(store, command="create", path="/memories/" + "k" * 300 + ".md", file_text="x")
    )
    assert "control characters" in error(memory(store, command="view", path="/memories/a\nb"))


_segment = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=12
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_segment, max_size=6), st.sampled_from(["", "/", "//", "/./"]))
def test_normalisation_properties(segments: list[str], joiner: str) -> None:
    path = "/memories/" + (joiner or "/").join(segments)
    try:
        vp = parse_path(path)
    except BindingError as exc:
        assert exc.code in ("invalid_path", "forbidden_path")
        return
    except Exception as exc:  # check_key refuses a key; never anything else
        assert type(exc).__name__ == "UsageError", exc
        return
    canon = vp.canonical
    assert canon == "/memories" or canon.startswith("/memories/")
    for bad in ("..", "\\", "\x00", "//"):
        assert bad not in canon
    # /memories/<kind>/<first key segment>: never identity/ or principals/.
    assert not any(s.lower() in ("identity", "principals") for s in canon.split("/")[2:4])
    again = parse_path(canon)
    assert (again.kind, again.key) == (vp.kind, vp.key)  # canonical form is a fixed point


@settings(max_examples=200)
@given(
    st.lists(st.from_regex(r"[a-z0-9_-]{1,8}", fullmatch=True), min_size=1, max_size=4),
    st.integers(min_value=0, max_value=4),
    st.sampled_from(["..", "%2e%2e", "%2E%2E", "%252e%252e", ".%2e", "%2e.", "..\\", "\\"]),
)
def test_any_traversal_anywhere_is_refused(parts: list[str], at: int, evil: str) -> None:
    parts = parts[:]
    parts.insert(min(at, len(parts)), evil)
    path = "/memories/" + "/".join(parts)
    with pytest.raises(BindingError) as caught:
        parse_path(path)
    assert str(caught.value) == f"Path {path} would escape /memories directory"


@given(st.sampled_from(list(Kind)), st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True))
def test_kind_folders_singular_and_plural(kind: Kind, key: str) -> None:
    plural = kind.value[:-1] + "ies" if kind.value.endswith("y") else kind.value + "s"
    for folder in (kind.value, plural):
        vp = parse_path(f"/memories/{folder}/{key}.md")
        assert (vp.kind, vp.key) == (kind, key)
        assert vp.canonical == f"/memories/{kind.value}/{key}.md"
