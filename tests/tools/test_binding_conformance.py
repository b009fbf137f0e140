"""The memory binding against the installed SDK's own ``BetaLocalFilesystemMemoryTool``.

Each script runs twice at test time: through the SDK's local-filesystem tool in a temp dir
and through our ``memory`` tool (one run, so its own unverified writes are visible). Every
output is compared text for text. The SDK is read at run time, so an SDK upgrade that changes
a text fails here. The only differences allowed are listed in ``ALLOWED`` below, each with
the step kinds it applies to; nothing else is normalised.
"""

from __future__ import annotations

import atexit
import contextlib
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.tools_support import memory, promote
from truss_files.facade import MemoryStore
from truss_files.tools.binding import FOLDER_SIZE
from truss_files.tools.write import is_tombstone

anthropic_tools = pytest.importorskip("anthropic.lib.tools")
from anthropic.lib.tools import ToolError  # noqa: E402
from anthropic.lib.tools._beta_builtin_memory_tool import (  # noqa: E402
    BetaLocalFilesystemMemoryTool,
)

# -- the allowed differences, in one place --------------------------------------------------
#
# 1. Trust marks (CONTRACTS.md, memory_20250818: the only three). A run's own unverified
#    files carry " [unverified]" at the end of their listing line and "[unverified] " before
#    a viewed file's header line, and a listing that shows any ends with one paragraph that
#    starts "[unverified]". Removed from our output before comparing.
# 2. Folder sizes. The SDK lists a folder with its file system's st_size (4.0K on ext4, other
#    numbers on tmpfs, btrfs, overlayfs); ours always show 4K, ext4's. The size column of
#    lines naming a folder is not compared; file sizes are.
# 3. Refused where the SDK would not refuse or would crash: paths with "..", backslashes,
#    percent-encoding, NUL or control characters, look-alike characters or over 512
#    characters (test_memory_tool_attacks.py), identity/ and principals/, a file over the
#    64 KiB body limit (so the 999,999-line limit is never reached here), a text starting
#    with the tombstone marker, a kind folder's own name as a file, and two paths naming one
#    memory (lesson/ and lessons/, x and x.md). Each refusal is a message the model can act
#    on; ``test_refusals_where_the_sdk_differs`` pins them.


def _strip_marks(text: str) -> str:
    text = text.split("\n\n[unverified] ")[0]
    text = text.replace(" [unverified]\n", "\n")
    text = re.sub(r" \[unverified\]$", "", text)
    return text.removeprefix("[unverified] ")


_FOLDER_LINE = re.compile(r"^[0-9.]+[BKMG]\t(.*)$")


def _folder_sizes(text: str, folders: set[str]) -> str:
    """Blank the size of every listing line that names a folder (difference 2)."""
    out = []
    for line in text.split("\n"):
        m = _FOLDER_LINE.match(line)
        if m and (m.group(1).endswith("/") or m.group(1) in folders):
            line = "<folder>\t" + m.group(1)
        out.append(line)
    return "\n".join(out)


def normalise(text: str, step: dict[str, Any]) -> str:
    text = _strip_marks(text)
    if step["command"] == "view" and text.startswith("Here're the files"):
        text = _folder_sizes(text, {step["path"]})
    return text


def _folder_on_disk(tmp_path: Path) -> Path:
    """A new folder for the SDK where a folder's ``st_size`` is 4096, as on ext4 and most local
    file systems: the SDK prints it, our tool prints 4K (tools/binding.py). ``make pytest``
    keeps scratch folders on a tmpfs, which sizes a folder by its entries (40B)."""
    for parent in (tmp_path, Path("/var/tmp"), Path.cwd()):
        with contextlib.suppress(OSError):
            folder = Path(tempfile.mkdtemp(prefix="truss-sdk-", dir=parent))
            if folder.stat().st_size == FOLDER_SIZE:
                return folder
            folder.rmdir()
    return tmp_path / "sdk"


_SDK_FOLDERS: dict[Path, Path] = {}  # a test's tmp_path -> the SDK's folder for that test


def sdk_tool(tmp_path: Path) -> Callable[[dict[str, Any]], tuple[bool, str]]:
    """The SDK's tool over one folder per test (the same folder on every call in a test)."""
    if tmp_path not in _SDK_FOLDERS:
        root = _SDK_FOLDERS[tmp_path] = _folder_on_disk(tmp_path)
        if not root.is_relative_to(tmp_path):
            atexit.register(shutil.rmtree, root, True)
    tool = BetaLocalFilesystemMemoryTool(str(_SDK_FOLDERS[tmp_path] / "sdk"))

    def run(step: dict[str, Any]) -> tuple[bool, str]:
        try:
            return True, str(tool.call(step))
        except ToolError as exc:
            return False, str(exc)

    return run


def ours(store: MemoryStore, run: str = "R1") -> Callable[[dict[str, Any]], tuple[bool, str]]:
    def call(step: dict[str, Any]) -> tuple[bool, str]:
        done = memory(store, run, **step)
        return done.ok, done.text

    return call


def compare(store: MemoryStore, tmp_path: Path, script: list[dict[str, Any]]) -> None:
    theirs, mine = sdk_tool(tmp_path), ours(store)
    for number, step in enumerate(script, 1):
        ok_sdk, text_sdk = theirs(step)
        ok_ours, text_ours = mine(step)
        where = f"step {number}: {step}"
        assert ok_ours is ok_sdk, f"{where}\nSDK: {text_sdk!r}\nours: {text_ours!r}"
        assert normalise(text_ours, step) == normalise(text_sdk, step), where


def c(path: str, text: str) -> dict[str, Any]:
    return {"command": "create", "path": path, "file_text": text}


def v(path: str, view_range: list[int] | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"command": "view", "path": path}
    if view_range is not None:
        step["view_range"] = view_range
    return step


def sr(path: str, old: str, new: str) -> dict[str, Any]:
    return {"command": "str_replace", "path": path, "old_str": old, "new_str": new}


def ins(path: str, line: int, text: str) -> dict[str, Any]:
    return {"command": "insert", "path": path, "insert_line": line, "insert_text": text}


def rm(path: str) -> dict[str, Any]:
    return {"command": "delete", "path": path}


def mv(old: str, new: str) -> dict[str, Any]:
    return {"command": "rename", "old_path": old, "new_path": new}


TEXT = "Retry flaky tests once.\nThen file a bug.\nLink the CI run.\n"

SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "files and views": [
        v("/memories"),
        c("/memories/notes.md", TEXT),
        c("/memories/notes.md", "again"),
        v("/memories/notes.md"),
        v("/memories/notes.md", [2, 3]),
        v("/memories/notes.md", [2, -1]),
        v("/memories/notes.md", [0, 1]),
        v("/memories/notes.md", [3, 9]),
        v("/memories/missing.md"),
        v("/memories/lessons"),
        c("/memories/no-newline.txt", "one\ntwo"),
        v("/memories/no-newline.txt"),
        c("/memories/empty.md", ""),
        v("/memories/empty.md"),
        v("/memories"),
        v("/memories/"),
    ],
    "folders at depth": [
        c("/memories/lessons/ci.md", "abc\n"),
        c("/memories/lessons/deep/er/x.md", "1234567"),
        c("/memories/project/a/b/c/d.md", "d"),
        c("/memories/project/top.md", "t" * 2000),
        c("/memories/decisions/db.md", "Use Postgres.\n"),
        c("/memories/.hidden.md", "not listed"),
        v("/memories"),
        v("/memories/lessons"),
        v("/memories/lessons/deep"),
        v("/memories/project"),
        v("/memories/project/a"),
        v("/memories/lesson"),
        v("/memories/lessons/ci.md"),
        v("/memories/.hidden.md"),
        v("/memories/lessons/deep/er/x.md"),
    ],
    "str_replace": [
        c("/memories/a.md", "alpha\nbeta\ngamma\ndelta\nepsilon\nzeta\n"),
        sr("/memories/a.md", "nope", "x"),
        sr("/memories/a.md", "a\n", "A\n"),
        sr("/memories/a.md", "delta", "DELTA"),
        sr("/memories/a.md", "zeta\n", "zeta\neta\n"),
        sr("/memories/a.md", "alpha", "ALPHA"),
        sr("/memories/a.md", "ALPHA\n", ""),
        v("/memories/a.md"),
        sr("/memories/missing.md", "a", "b"),
        c("/memories/dir/x.md", "x"),
        sr("/memories/dir", "a", "b"),
        sr("/memories", "a", "b"),
        c("/memories/multi.md", "Hello\nMiddle\nHello\nHello there"),
        sr("/memories/multi.md", "Hello", "Hi"),
        sr("/memories/multi.md", "l", "L"),
    ],
    "insert": [
        c("/memories/i.md", "one\ntwo"),
        ins("/memories/i.md", 0, "zero"),
        v("/memories/i.md"),
        ins("/memories/i.md", 3, "three\n"),
        v("/memories/i.md"),
        ins("/memories/i.md", 4, "four\n\n"),
        v("/memories/i.md"),
        ins("/memories/i.md", 2, "1.5"),
        ins("/memories/i.md", 6, "x"),
        ins("/memories/i.md", -1, "x"),
        ins("/memories/missing.md", 0, "x"),
        c("/memories/d/x.md", "x"),
        ins("/memories/d", 0, "x"),
        v("/memories/i.md", [4, -1]),
    ],
    "delete and rename": [
        c("/memories/a.md", "A\n"),
        c("/memories/dir/b.md", "B\n"),
        c("/memories/dir/sub/c.md", "C\n"),
        c("/memories/other.md", "O\n"),
        rm("/memories/a.md"),
        rm("/memories/a.md"),
        v("/memories/a.md"),
        rm("/memories"),
        mv("/memories", "/memories/x"),
        mv("/memories/missing.md", "/memories/y.md"),
        mv("/memories/other.md", "/memories/dir/b.md"),
        mv("/memories/other.md", "/memories/dir"),
        mv("/memories/other.md", "/memories/new/place/o.md"),
        v("/memories/new/place/o.md"),
        v("/memories/other.md"),
        mv("/memories/dir", "/memories/moved"),
        v("/memories/moved"),
        v("/memories/moved/sub/c.md"),
        v("/memories/dir/b.md"),
        rm("/memories/moved"),
        v("/memories/moved/b.md"),
        v("/memories/new"),
        c("/memories/a.md", "again\n"),
        v("/memories/a.md"),
    ],
    "emptied folders": [
        c("/memories/dir/a.md", "A\n"),
        c("/memories/dir/sub/b.md", "B\n"),
        c("/memories/lessons/deep/x.md", "x"),
        c("/memories/other.md", "O\n"),
        c("/memories/third.md", "T\n"),
        rm("/memories/dir/sub/b.md"),
        v("/memories/dir/sub"),
        v("/memories/dir"),
        rm("/memories/dir/a.md"),
        v("/memories/dir"),
        v("/memories/dir/sub"),
        v("/memories"),
        mv("/memories/lessons/deep/x.md", "/memories/x.md"),
        v("/memories/lessons"),
        v("/memories/lessons/deep"),
        v("/memories/lesson"),
        v("/memories/lessons/deep/x.md"),
        v("/memories"),
        c("/memories/dir", "x"),
        c("/memories/dir/sub", "x"),
        sr("/memories/dir/sub", "a", "b"),
        ins("/memories/lessons/deep", 0, "x"),
        mv("/memories/x.md", "/memories/dir/sub"),
        mv("/memories/x.md", "/memories/lessons"),
        c("/memories/dir/sub/new.md", "N\n"),
        v("/memories/dir"),
        mv("/memories/other.md", "/memories/lessons/deep/o.md"),
        v("/memories/lessons"),
        rm("/memories/dir/sub/new.md"),
        rm("/memories/dir/sub"),
        v("/memories/dir/sub"),
        v("/memories/dir"),
        mv("/memories/third.md", "/memories/dir/t.md"),
        rm("/memories/dir"),
        v("/memories/dir"),
        rm("/memories/lessons/deep/o.md"),
        mv("/memories/lessons/deep", "/memories/moved"),
        rm("/memories/lessons"),
        v("/memories"),
    ],
    "errors": [
        v("/etc/passwd"),
        c("/tmp/x.md", "x"),
        v("memories/x.md"),
        v("/memories/../../etc/passwd"),
        c("/memories/../x.md", "x"),
        c("/memories", "x"),
        c("/memories/f.md", "x"),
        v("/memories/f.md"),
        v("/memories/f.md", [2, 2]),
    ],
    "CRLF and trailing blanks": [
        c("/memories/crlf.txt", "line1\r\nline2\r\nline3\r\n"),
        v("/memories/crlf.txt"),
        sr("/memories/crlf.txt", "line2", "LINE2"),
        v("/memories/crlf.txt"),
        ins("/memories/crlf.txt", 1, "Inserted"),
        v("/memories/crlf.txt"),
        c("/memories/ws.md", "trailing spaces   \n\n\n\ttab\n\n"),
        v("/memories/ws.md"),
        v("/memories"),
        c("/memories/unicode.md", "naïve café — ünïcödé\n"),
        v("/memories"),
    ],
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_same_texts_as_the_sdk(store: MemoryStore, tmp_path: Path, name: str) -> None:
    compare(store, tmp_path, SCRIPTS[name])


def test_the_bytes_are_kept_exactly(store: MemoryStore) -> None:
    """CRLF, a trailing newline and trailing blanks survive the store, as in the SDK's file."""
    text = "line1\r\nline2  \r\n\r\n"
    assert memory(store, command="create", path="/memories/crlf.txt", file_text=text).ok
    [entry] = store.list_entries()
    assert entry.body == text and entry.memory_path == "/memories/crlf.txt"
    # The committed file holds the bytes too, so a fresh process reads the same.
    fresh = MemoryStore(store.git.workdir or store.git.git_dir)
    assert fresh.get(entry.id).body == text
    # An empty file is a file too; and the history with both audits clean.
    assert memory(store, command="create", path="/memories/empty.md", file_text="").ok
    from truss_files.trust.audit import audit

    assert audit(store.git).ok


def test_the_line_limit_is_the_sdks(tmp_path: Path) -> None:
    """The SDK refuses to view more than 999,999 lines; our body limit (64 KiB) refuses such
    a file at create already (difference 3), so the line check can never be reached."""
    from truss_files.model import MAX_BODY
    from truss_files.tools.binding import MAX_LINES

    ok, text = sdk_tool(tmp_path)(c("/memories/huge.txt", "\n".join(["l"] * (MAX_LINES + 1))))
    assert ok
    ok, text = sdk_tool(tmp_path)(v("/memories/huge.txt"))
    assert not ok and text.endswith("exceeds maximum line limit of 999,999 lines.")
    assert MAX_LINES + 1 > MAX_BODY  # a 999,999-line file is over the body limit here


def test_non_utf8_text_is_refused_before_it_is_stored(store: MemoryStore, tmp_path: Path) -> None:
    """The SDK refuses to view a file that is not UTF-8. Here every file is an entry, which
    is UTF-8 by construction: text that cannot be UTF-8 (a lone surrogate) is refused as
    invalid input, and nothing is written."""
    lone = "bad \ud800 text"
    done = memory(store, command="create", path="/memories/b.md", file_text=lone)
    assert not done.ok and done.error is not None and done.error["code"] == "invalid_input"
    assert store.list_entries() == []
    root = tmp_path / "sdk" / "memories"
    BetaLocalFilesystemMemoryTool(str(tmp_path / "sdk"))
    (root / "binary.dat").write_bytes(b"\xff\xfe\x80 not utf-8")
    # Newer SDKs answer a ToolError; 2.14 lets the UnicodeDecodeError out. Either way the
    # file cannot be read, which is what cannot happen here.
    try:
        ok, _ = sdk_tool(tmp_path)(v("/memories/binary.dat"))
    except UnicodeDecodeError:
        ok = False
    assert not ok


def test_an_emptied_folder_stays_as_in_the_sdk(store: MemoryStore, tmp_path: Path) -> None:
    """A folder whose last file is deleted stays, empty, for the run that deleted it at
    once and for every run once its tombstone is verified (which names the folder); the
    texts are the SDK's, folder size included. Until then other runs still see the file."""
    sdk = sdk_tool(tmp_path)
    for step in (c("/memories/dir/sub/x.md", "x\n"), rm("/memories/dir/sub/x.md")):
        assert sdk(step)[0]
    want = {path: sdk(v(path))[1] for path in ("/memories/dir", "/memories/dir/sub")}
    assert want["/memories/dir/sub"].endswith("items:\n4K\t/memories/dir/sub")
    assert memory(store, "R0", **c("/memories/dir/sub/x.md", "x\n")).ok
    [note] = store.list_entries()
    promote(store, note.id)
    assert memory(store, "R1", **rm("/memories/dir/sub/x.md")).ok
    [stone] = [e for e in store.list_entries() if is_tombstone(e)]
    assert stone.memory_path == "/memories/dir/sub"
    for path, text in want.items():
        assert memory(store, "R1", **v(path)).text == text
        assert "/memories/dir/sub/x.md" in memory(store, "R2", **v(path)).text
    promote(store, stone.id)
    for run in ("R2", None):
        for path, text in want.items():
            assert memory(store, run, **v(path)).text == text
        assert "does not exist" in memory(store, run, **v("/memories/dir/sub/x.md")).text
    # A file goes into it again, by create and by rename.
    assert memory(store, "R2", **c("/memories/top.md", "t\n")).ok
    assert memory(store, "R2", **mv("/memories/top.md", "/memories/dir/sub/t.md")).ok
    assert memory(store, "R2", **c("/memories/dir/n.md", "n\n")).ok
    assert memory(store, "R2", **v("/memories/dir")).text.split("\n")[1:4] == [
        "4K\t/memories/dir",
        "2B\t/memories/dir/n.md [unverified]",
        "4K\t/memories/dir/sub/",
    ]


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        (
            "/memories/lessons/ci.md",
            "/memories/lesson/ci.md",
            "File /memories/lesson/ci.md already exists as /memories/lessons/ci.md: both "
            "paths name one memory.",
        ),
        (
            "/memories/notes.md",
            "/memories/notes",
            "File /memories/notes already exists as /memories/notes.md: both paths name one "
            "memory.",
        ),
    ],
)
def test_refusals_where_the_sdk_differs(
    store: MemoryStore, first: str, second: str, message: str
) -> None:
    """Difference 3: two paths naming one memory are one file at a time; the refusal names
    the other path. The first file is left as it was, still visible only at its own path."""
    assert memory(store, command="create", path=first, file_text="one\n").ok
    refused = memory(store, command="create", path=second, file_text="two\n")
    assert refused.text.startswith(message)
    assert "does not exist" in memory(store, command="view", path=second).text
    assert "     1\tone" in memory(store, command="view", path=first).text
    kind_folder = memory(store, command="create", path="/memories/playbooks", file_text="x")
    assert "names a kind of memory, which is a folder" in kind_folder.text
    tomb = memory(
        store, command="create", path="/memories/t.md", file_text="<!-- truss:tombstone -->"
    )
    assert not tomb.ok and "marks deletions" in tomb.text
