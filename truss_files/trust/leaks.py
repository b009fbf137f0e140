"""Credentials already in a history: the entry files a commit adds that hold one.

Every library write refuses a credential (store/store.py ``refuse_secrets``); a commit made
with plain ``git commit`` never meets that check. So the pre-commit hook and the server gate
refuse a commit that adds such an entry (rule ``secret``), and ``truss-files audit`` names
each one a history holds, so that an operator can erase it.

It is a finding beside the audit's violations, not one of them: a credential in an entry says
nothing about who signed what or how a belief moved, so the read gate keeps serving verified
memory, and the remedies (demote, reject, erase) stay writes it lets through.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pygit2

from ..errors import TrussError
from ..format import entryfile
from ..format.secrets import Allow, entry_fields, scan_fields
from ..signing.trustpolicy import CONFIG_PATH, StoreConfig

__all__ = ["Leak", "added_entries", "allow_at", "leaks"]

_MEMORIES = "memories/"


@dataclass(frozen=True)
class Leak:
    """One added entry file holding credential-shaped values: where, and the kinds found
    (``places``: ``field 'F', line L, column C: KIND``), never the values."""

    path: str
    entry_id: str
    places: tuple[str, ...]

    def message(self) -> str:
        return (
            f"entry {self.entry_id} holds a credential-shaped value ({'; '.join(self.places)}). "
            "Take it out of the commit (write where the value is kept, not what it is); one "
            f"already pushed is taken out of history with `truss-files erase {self.entry_id[:12]} "
            "--reason TEXT` (docs/secrets.md)"
        )


def allow_at(commit: pygit2.Commit | None) -> Allow:
    """``[secrets] allow`` of truss.toml at ``commit``: an unreadable file allows nothing
    (the audit's own rules report it)."""
    if commit is None:
        return Allow()
    try:
        blob = commit.tree[CONFIG_PATH]
        data = blob.data if isinstance(blob, pygit2.Blob) else None
    except KeyError:
        data = None
    try:
        return Allow.from_config(StoreConfig.parse(data).raw)
    except TrussError:
        return Allow()


def added_entries(
    repo: pygit2.Repository, commit: pygit2.Commit
) -> Iterator[tuple[str, pygit2.Oid]]:
    """(path, blob id) of each file under memories/ that ``commit`` adds: in none of its
    parents (a merge's entry taken from one parent was added by a commit of that parent)."""
    parents = list(commit.parents)
    if not parents:
        tree = commit.tree
        stack: list[tuple[str, pygit2.Tree]] = []
        if _MEMORIES.rstrip("/") in tree:
            top = repo[tree[_MEMORIES.rstrip("/")].id]
            if isinstance(top, pygit2.Tree):
                stack.append((_MEMORIES.rstrip("/"), top))
        while stack:
            prefix, node = stack.pop()
            for item in node:
                child = f"{prefix}/{item.name}"
                obj = repo.get(item.id)  # a gitlink names a commit this repository lacks
                if isinstance(obj, pygit2.Tree):
                    stack.append((child, obj))
                elif isinstance(obj, pygit2.Blob):
                    yield child, item.id
        return
    diff = parents[0].tree.diff_to_tree(commit.tree)
    others = [p.tree for p in parents[1:]]
    for delta in diff.deltas:
        path = delta.new_file.path
        if delta.status_char() not in ("A", "R", "C") or not path.startswith(_MEMORIES):
            continue
        if any(path in tree for tree in others):
            continue
        yield path, delta.new_file.id


def leaks(
    repo: pygit2.Repository,
    commit: pygit2.Commit,
    allow: Allow,
    seen: set[pygit2.Oid] | None = None,
) -> list[Leak]:
    """The entries ``commit`` adds that hold a credential ``allow`` does not name. ``seen``:
    blob ids already scanned (a history scans each text once), added to as it goes."""
    found = []
    for path, oid in added_entries(repo, commit):
        if seen is not None:
            if oid in seen:
                continue
            seen.add(oid)
        blob = repo.get(oid)  # a gitlink names a commit this repository lacks
        if not isinstance(blob, pygit2.Blob):
            continue  # not a text: the audit's own rules name it
        try:
            entry = entryfile.parse(blob.data, path, check_path=False)
        except TrussError:
            continue  # not an entry: the audit's own rules name it
        places = tuple(scan_fields(entry_fields(entry), allow))
        if places:
            found.append(Leak(path, entry.id, places))
    return found
