"""The store's entries written out: JSON lines that import back with the same ids, a markdown
page for people, or the files of an Anthropic ``/memories`` folder.

An export is a read: it opens the tip (or ``at``, ``Store.open_read``) through the read gate,
so a history the audit rejects yields nothing above unverified, and ``min_trust`` keeps to a
floor as every read does (rejected entries never leave). The memory tool's tombstones
(deletion markers, not notes) stay behind.

A JSON line holds exactly the fields ``import`` reads -- kind, key, body, layer, scope,
author, source, sources, salience, checks, memory_path -- plus ``id``, which import checks
against the id those fields make, and ``trust`` and ``created``, which import ignores: an
imported entry lands unverified, as every write does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from ..errors import UsageError
from ..model import TOMBSTONE_MARK, Entry, Trust

if TYPE_CHECKING:
    from .store import Store

__all__ = [
    "EXPORT_FORMATS",
    "Exported",
    "entries_to_export",
    "memory_files",
    "record",
    "write_create_commands",
    "write_folder",
    "write_jsonl",
    "write_markdown",
]

EXPORT_FORMATS: Final = ("jsonl", "markdown", "anthropic-memories")


@dataclass(frozen=True)
class Exported:
    """What an export read: the entries, the commit they were read at, and the read gate's
    refusal when it held back everything above unverified."""

    entries: tuple[Entry, ...]
    commit: str | None
    withheld: str | None


def entries_to_export(
    store: Store, min_trust: Trust | str = Trust.VERIFIED, *, at: str | None = None
) -> Exported:
    """The entries at or above ``min_trust`` at the tip (or ``at``), oldest first, through
    the read gate."""
    floor = Trust.floor(min_trust)
    read = store.open_read(floor, at=at)
    picked = [
        entry
        for entry in store.iter_entries(read.snap)
        if entry.trust.passes(floor)
        and not (read.withheld and entry.trust is not Trust.UNVERIFIED)
        and not entry.body.startswith(TOMBSTONE_MARK)
    ]
    picked.sort(key=lambda e: (e.created, e.id))
    return Exported(tuple(picked), read.snap.oid, read.withheld)


def record(entry: Entry) -> dict[str, Any]:
    """One entry as a JSON line ``import`` reads back to the same id."""
    out: dict[str, Any] = {
        "id": entry.id,
        "kind": entry.kind.value,
        "key": entry.key,
        "body": entry.body,
        "layer": entry.layer.value,
        "scope": dict(sorted(entry.scope.items())),
        "author": entry.author,
        "source": entry.provenance.produced_by,
        "sources": list(entry.provenance.sources),
        "salience": entry.salience,
        "checks": list(entry.checks),
        "trust": entry.trust.value,
        "created": entry.created,
    }
    if entry.memory_path is not None:
        out["memory_path"] = entry.memory_path
    if out["source"] is None:
        del out["source"]  # an entry from before provenance: import gives it one
    return out


def write_jsonl(entries: Iterable[Entry], out: TextIO) -> int:
    count = 0
    for entry in entries:
        out.write(json.dumps(record(entry), ensure_ascii=False, sort_keys=True) + "\n")
        count += 1
    return count


def write_markdown(exported: Exported, out: TextIO, *, floor: Trust) -> int:
    """A page for people: entries by kind, then key; each with its id, trust and author.
    (``import --from memory-md`` reads a list of notes, not this page.)"""
    at = f" at commit {exported.commit[:12]}" if exported.commit else ""
    out.write(
        f"# Memory export\n\n{len(exported.entries)} entries at or above {floor.value}{at}.\n"
    )
    if exported.withheld:
        out.write(f"\n> {exported.withheld}\n")
    by_kind: dict[str, list[Entry]] = {}
    for entry in exported.entries:
        by_kind.setdefault(entry.kind.value, []).append(entry)
    for kind in sorted(by_kind):
        out.write(f"\n## {kind}\n")
        for entry in sorted(by_kind[kind], key=lambda e: (e.key, e.created, e.id)):
            out.write(f"\n### {entry.key}\n\n{entry.body}\n\n")
            out.write(
                f"<sub>`{entry.id}` · {entry.trust.value} · {entry.layer.value} · "
                f"{entry.author} · {entry.created}</sub>\n"
            )
    return len(exported.entries)


# -- an Anthropic /memories folder ---------------------------------------------------------------


def _safe_parts(path: str) -> list[str] | None:
    """The parts of ``/memories/a/b.md`` below /memories, or None when they could leave the
    folder they are written into (``..``, empty parts, backslashes, NUL, a leading dot)."""
    if not path.startswith("/memories/"):
        return None
    parts = path[len("/memories/") :].split("/")
    for part in parts:
        if not part or part in (".", "..") or part.startswith(".") or "\\" in part:
            return None
        if "\x00" in part or any(ord(c) < 0x20 for c in part):
            return None
    return parts


def memory_files(entries: Iterable[Entry]) -> dict[str, Entry]:
    """Path below /memories -> the entry shown there: the path the memory tool wrote it at,
    else ``/memories/<kind>/<key>.md``; where two entries share a path, the newest. An entry
    whose key would make an unsafe path goes to ``/memories/<kind>/<id>.md``."""
    files: dict[str, Entry] = {}
    for entry in sorted(entries, key=lambda e: (e.created, e.id)):
        path = entry.memory_path
        if path is None or _safe_parts(path) is None:
            key = entry.key if entry.key.endswith(".md") else f"{entry.key}.md"
            path = f"/memories/{entry.kind.value}/{key}"
        if _safe_parts(path) is None:
            path = f"/memories/{entry.kind.value}/{entry.id}.md"
        files[path] = entry
    return dict(sorted(files.items()))


def write_create_commands(entries: Iterable[Entry], out: TextIO) -> int:
    """The folder as the memory tool's ``create`` commands, one JSON object a line
    (``{"command": "create", "path", "file_text"}``): what a harness replays into its own
    memory backend."""
    files = memory_files(entries)
    for path, entry in files.items():
        line = {"command": "create", "path": path, "file_text": entry.body}
        out.write(json.dumps(line, ensure_ascii=False) + "\n")
    return len(files)


def write_folder(entries: Iterable[Entry], folder: str | os.PathLike[str]) -> int:
    """The folder itself: one file per path below ``folder`` (made if missing; files it
    already holds at other paths stay). Refuses a ``folder`` that is a file."""
    root = Path(folder)
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root}: is a file; give a folder to write the /memories files into")
    files = memory_files(entries)
    base = root.resolve()
    for path, entry in files.items():
        parts = _safe_parts(path)
        assert parts is not None  # memory_files keeps only safe paths
        target = root.joinpath(*parts)
        if not target.resolve().is_relative_to(base):
            # A link inside the folder pointing out of it: never written through.
            raise UsageError(f"{target}: leads out of {root} (a symbolic link?); remove it")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(entry.body, encoding="utf-8", newline="")
    return len(files)


def iter_lines(exported: Exported) -> Iterator[str]:
    """The JSON lines of ``exported``, one at a time (for a face that streams)."""
    for entry in exported.entries:
        yield json.dumps(record(entry), ensure_ascii=False, sort_keys=True) + "\n"
