"""Notes kept elsewhere, read as import records: a ``MEMORY.md``/``CLAUDE.md`` list, an
Anthropic ``/memories`` folder, a mem0 export.

Each reader only *parses*: it yields records -- the fields of one ``import`` line
(kind, key, body, source, ...) and where in which file it came from -- and the import path
that checks and stores JSON lines stores these the same way (one commit, every entry
unverified, all or nothing). ``source`` is always ``import:<file>:<line>``, so each entry's
``produced_by`` says which file and which line it was read from.

What each reader takes:

- ``memory-md``: every list item (``-``, ``*``, ``+`` or ``1.``) is one note, its indented
  continuation lines joined to it. The key is the file's stem, the headings above the item
  (as slugs) and the item's number under its heading: ``claude/build-and-test/2``.
- ``anthropic-memories``: every file below the folder is one note at ``/memories/<its
  path>`` (the memory tool's path, which names its kind and key); its text is kept as is.
- ``mem0``: ``{"results": [{"id", "memory", "metadata", "created_at", ...}]}`` (what
  ``Memory.get_all`` returns; a bare list of the same objects too). Each memory is a
  ``fact`` keyed ``mem0/<id>``; ``user_id``/``agent_id`` become scope fields.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from ..errors import UsageError

__all__ = ["FORMATS", "Record", "read_records", "source_ref"]

FORMATS: Final = ("jsonl", "memory-md", "anthropic-memories", "mem0")

# A folder import stops here: a /memories folder is a few hundred notes, and a path given
# by mistake (a home folder) should fail fast rather than read every file under it.
MAX_FILES: Final = 10_000


@dataclass(frozen=True)
class Record:
    """One note to import: ``fields`` as a JSON line gives them, from ``name`` line ``line``."""

    name: str
    line: int
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.name}:{self.line}"


def source_ref(name: str, line: int) -> str:
    """The LedgerRef of a note read from line ``line`` of ``name``: ``import:<file>:<line>``
    (spaces and other characters a ref may not hold percent-encoded)."""
    return f"import:{quote(name, safe='/._-~+@')}:{line}"


def read_records(fmt: str, path: str) -> Iterator[Record]:
    """The records of ``path`` (a file; for ``anthropic-memories`` a folder) in format
    ``fmt`` (not ``jsonl``, which the import command reads line by line itself)."""
    if fmt == "memory-md":
        yield from _memory_md(_read_text(path), path)
    elif fmt == "anthropic-memories":
        yield from _anthropic_folder(path)
    elif fmt == "mem0":
        yield from _mem0(_read_text(path), path)
    else:
        raise UsageError(f"unknown import format '{fmt}'; use one of: {', '.join(FORMATS)}")


def _read_text(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise UsageError(
            f"{path}: is a folder; give a file (a folder is --from anthropic-memories)"
        ) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror})") from exc
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{path}: not UTF-8 (byte {exc.start + 1}); save the file as UTF-8, e.g. with "
            "iconv -t UTF-8"
        ) from None


# -- MEMORY.md / CLAUDE.md ---------------------------------------------------------------------

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"^(\s*)(?:[-*+]|\d{1,9}[.)])\s+(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def slug(text: str) -> str:
    """A heading or file name as a key part: lower case, words joined by '-'."""
    text = unicodedata.normalize("NFKC", text).lower()
    words = re.findall(r"\w+", text)
    return "-".join(words)[:60] or "notes"


def _memory_md(text: str, name: str) -> Iterator[Record]:
    stem = slug(Path(name).stem)
    headings: list[str] = []
    counts: dict[tuple[str, ...], int] = {}
    note: list[str] = []
    start = 0
    fenced = False

    def flush() -> Iterator[Record]:
        if not note:
            return
        body = "\n".join(note).strip()
        note.clear()
        if not body:
            return
        path = tuple(headings)
        counts[path] = counts.get(path, 0) + 1
        key = "/".join([stem, *path, str(counts[path])])
        yield Record(
            name,
            start,
            {"kind": "fact", "key": key, "body": body, "source": source_ref(name, start)},
        )

    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            # A fence indented under an item is part of it; one at the margin ends it.
            if not fenced and not line[:1].isspace():
                yield from flush()
            fenced = not fenced
            if note:
                note.append(line.strip())
            continue
        if fenced:
            if note:
                note.append(line)
            continue
        heading = _HEADING.match(line)
        if heading:
            yield from flush()
            level = len(heading.group(1))
            del headings[level - 1 :]
            headings.extend(["notes"] * (level - 1 - len(headings)))
            headings.append(slug(heading.group(2)))
            continue
        item = _ITEM.match(line)
        if item and len(item.group(1).expandtabs(4)) < 2:
            yield from flush()  # a top-level item starts a note
            start = number
            note.append(item.group(2))
            continue
        if note and line.strip() and line[:1].isspace():
            note.append(line.strip())  # a nested item or an indented continuation
            continue
        yield from flush()  # a blank line or a plain paragraph ends the item
    yield from flush()


# -- an Anthropic /memories folder ---------------------------------------------------------------


def _anthropic_folder(path: str) -> Iterator[Record]:
    root = Path(path)
    if not root.is_dir():
        raise UsageError(
            f"{path}: not a folder; --from anthropic-memories reads the folder the memory "
            "tool kept (the one that stands for /memories)"
        )
    files: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for file_name in sorted(names):
            if file_name.startswith("."):
                continue
            candidate = Path(folder) / file_name
            if candidate.is_symlink():
                # A link could point anywhere on the machine: a folder import reads only
                # what is in the folder.
                raise UsageError(
                    f"{candidate}: is a symbolic link; copy the file it points to into the "
                    "folder, or remove the link"
                )
            files.append(candidate)
            if len(files) > MAX_FILES:
                raise UsageError(
                    f"{path}: holds more than {MAX_FILES} files; is it the /memories folder?"
                )
    for file in files:
        rel = file.relative_to(root).as_posix()
        name = f"{path.rstrip('/')}/{rel}"
        yield Record(
            name,
            1,
            {
                "memory_path": f"/memories/{rel}",
                "body": _read_text(str(file)),
                "source": source_ref(name, 1),
            },
        )


# -- a mem0 export ------------------------------------------------------------------------------

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"\s*")


def _mem0(text: str, name: str) -> Iterator[Record]:
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{name}:{exc.lineno}: not JSON ({exc.msg})") from exc
    if isinstance(whole, dict) and isinstance(whole.get("results"), list):
        items = whole["results"]
    elif isinstance(whole, list):
        items = whole
    else:
        raise UsageError(
            f'{name}: not a mem0 export; expected {{"results": [...]}} as Memory.get_all '
            "returns it, or a list of memories"
        )
    lines = _element_lines(text, len(items))
    for index, item in enumerate(items):
        line = lines[index]
        where = f"{name}:{line}"
        if not isinstance(item, dict):
            raise UsageError(f"{where}: each memory must be a JSON object")
        memory = item.get("memory")
        if not isinstance(memory, str):
            raise UsageError(f"{where}: needs a string field memory (the memory's text)")
        ident = item.get("id")
        if not isinstance(ident, str | int) or not str(ident).strip():
            raise UsageError(f"{where}: needs an id (mem0's id of the memory)")
        scope = {
            name_: str(item[field_])
            for field_, name_ in (("user_id", "user"), ("agent_id", "agent"), ("run_id", "run"))
            if isinstance(item.get(field_), str | int) and str(item[field_]).strip()
        }
        fields: dict[str, Any] = {
            "kind": "fact",
            "key": f"mem0/{ident}",
            "body": memory,
            "source": source_ref(name, line),
        }
        if scope:
            fields["scope"] = scope
        yield Record(name, line, fields)


def _element_lines(text: str, count: int) -> list[int]:
    """The line each element of the export's list starts on (the list under "results", or
    the top-level list): found by decoding the document value by value, so a memory's text
    that holds "results" or brackets cannot mislead it."""
    pos = _SPACE.match(text).end()  # type: ignore[union-attr]
    if text[pos] == "{":
        pos += 1
        while True:
            pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _SPACE.match(text, pos).end() + 1  # type: ignore[union-attr]  # the ':'
            pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
            if key == "results" and text[pos] == "[":
                break
            _, pos = _DECODER.raw_decode(text, pos)
            pos = _SPACE.match(text, pos).end() + 1  # type: ignore[union-attr]  # the ','
    starts: list[int] = []
    pos += 1  # the '['
    for _ in range(count):
        pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos] == ",":
            pos = _SPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
        starts.append(text.count("\n", 0, pos) + 1)
        _, pos = _DECODER.raw_decode(text, pos)
    return starts
