"""Erasure, planned: every place an entry's text lives in this repository.

An erasure rewrites history (docs/forgetting.md holds the design: the signed erasure record,
the audit's rules for rewritten commits, how clones adopt it). This module is its first half:
the operator's check and the plan -- which commits of which branches and tags hold the
entry's file, where a rewrite would start and how many commits it would make, which other
entries hold the text or link to the id, which run ledgers' calls and memos name the id or
hold the text, which attestations sign commits a rewrite would replace, and which caches
under ``.git/truss/`` would be rebuilt. ``erase --dry-run`` prints it; nothing here writes
(``erasing.py`` carries the plan out).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pygit2

from ..errors import Forbidden, SignatureError, UsageError
from ..model import MERGED_PREFIX, Entry
from ..signing import PublicKey
from ..trust.attest import NOTES_REF

if TYPE_CHECKING:
    from .store import Store

__all__ = ["ErasurePlan", "Place", "plan_erasure", "require_operator"]

RUNS_PREFIX = "refs/truss/runs/"
# The shortest body whose text is looked for inside other entries and ledgers: a shorter one
# ("ok") would be found everywhere and name nothing.
MIN_TEXT = 12


@dataclass(frozen=True)
class Place:
    """One place the erased text (or a pointer to it) lives."""

    kind: str  # commit, ref, entry, link, ledger, attestation, cache, usage, reflog
    name: str  # a commit id, a ref, a path
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "detail": self.detail}


@dataclass(frozen=True)
class ErasurePlan:
    ids: tuple[str, ...]
    reason: str
    by: str
    # The earliest commits holding an erased file: history before them stays as it is.
    first: tuple[str, ...]
    rewrite: int  # commits a rewrite would replace, over every branch and tag
    refs: tuple[str, ...]  # branches and tags whose history a rewrite changes
    places: tuple[Place, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "ids": list(self.ids),
            "reason": self.reason,
            "by": self.by,
            "first": list(self.first),
            "rewrite": self.rewrite,
            "refs": list(self.refs),
            "places": [p.to_dict() for p in self.places],
        }

    def text(self) -> str:
        lines = [
            f"erase {len(self.ids)} entr{'y' if len(self.ids) == 1 else 'ies'} "
            f"(by {self.by}; reason: {self.reason})",
            f"a rewrite would replace {self.rewrite} commit(s) on {', '.join(self.refs) or '-'}"
            + (f", from {', '.join(c[:12] for c in self.first)}" if self.first else ""),
        ]
        lines += [f"  {p.kind:<12} {p.name}  {p.detail}" for p in self.places]
        return "\n".join(lines)


def require_operator(store: Store) -> str:
    """The principal of this process's key when it holds ``operator`` at the tip; otherwise
    ``Forbidden`` (before anything is read or planned)."""
    key = PublicKey.from_line(store.signer.public_line)
    try:
        principal, held = store.policy().roles_of(key)
    except SignatureError as exc:
        raise Forbidden(
            f"your key {key.fingerprint} is not in .truss/allowed_signers; erasing needs the "
            "operator role: ask an operator to run `truss-files erase`"
        ) from exc
    if "operator" not in held:
        raise Forbidden(
            f"{principal} holds {', '.join(sorted(held)) or 'no role'}; erasing needs the "
            "operator role: ask an operator to run `truss-files erase`"
        )
    return principal


def plan_erasure(
    store: Store, refs: Sequence[str], reason: str, *, member: str | None = None
) -> ErasurePlan:
    """Every place the entries ``refs`` (ids or 8+ hex prefixes, any trust) live -- with
    ``member``, also every entry by or about that member (author ``member:M`` or scope
    ``member=M``) -- for an operator; ``Forbidden`` for anyone else."""
    by = require_operator(store)
    if not reason or not reason.strip():
        raise UsageError(
            "give --reason: why these entries are erased (it is recorded; keep the erased "
            "text out of it)"
        )
    if not refs and member is None:
        raise UsageError(
            "name the entries to erase by id (or a unique prefix of 8+ hex), or --member M"
        )
    snap = store.snapshot()
    entries: dict[str, Entry] = {}
    for ref in refs:
        entry = store.get(ref, snap)
        entries[entry.id] = entry
    if member is not None:
        about = [
            e
            for e in store.iter_entries(snap)
            if e.author == f"member:{member}" or e.scope.get("member") == member
        ]
        if not about:
            raise UsageError(
                f"no entry is by or about member {member} (author member:{member} or scope "
                f"member={member}); check the name with `truss-files list --format json`"
            )
        entries.update((e.id, e) for e in about)
    ids = tuple(sorted(entries))
    paths = {e.path for e in entries.values()}
    texts = [e.body for e in entries.values() if len(e.body) >= MIN_TEXT]
    repo = store.git.repo

    places: list[Place] = []
    holding, rewritten, touched_refs, first = _history(repo, paths)
    for commit in holding:
        places.append(Place("commit", commit, "its tree holds an erased entry's file"))
    places += [Place("ref", ref, "its history would be rewritten") for ref in touched_refs]
    places += _other_entries(store, snap, set(ids), texts)
    places += _ledgers(repo, set(ids), texts)
    places += _attestations(repo, rewritten)
    places += _caches(store, set(ids))
    return ErasurePlan(
        ids=ids,
        reason=reason.strip(),
        by=by,
        first=tuple(first),
        rewrite=len(rewritten),
        refs=tuple(touched_refs),
        places=tuple(places),
    )


def _store_refs(repo: pygit2.Repository) -> Iterator[tuple[str, pygit2.Commit]]:
    for name in sorted(repo.references):
        if not name.startswith(("refs/heads/", "refs/tags/")):
            continue
        try:
            commit = repo.references[name].peel(pygit2.Commit)
        except (pygit2.GitError, ValueError, KeyError):
            continue
        yield name, commit


def _holds(commit: pygit2.Commit, paths: set[str]) -> bool:
    tree = commit.tree
    for path in paths:
        try:
            tree[path]
        except KeyError:
            continue
        return True
    return False


def _history(
    repo: pygit2.Repository, paths: set[str]
) -> tuple[list[str], set[str], list[str], list[str]]:
    """Commits holding ``paths``; every commit a rewrite would replace (those and their
    descendants); the refs it would move; the earliest holding commits."""
    holding: list[str] = []
    rewritten: set[str] = set()
    touched: list[str] = []
    seen: dict[str, bool] = {}
    parents: dict[str, list[str]] = {}
    for name, tip in _store_refs(repo):
        walker = repo.walk(
            tip.id, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE
        )
        for commit in walker:
            key = str(commit.id)
            if key in seen:
                continue
            holds = _holds(commit, paths)
            parents[key] = [str(p) for p in commit.parent_ids]
            if holds:
                holding.append(key)
            seen[key] = holds or any(seen.get(str(p), False) for p in commit.parent_ids)
            if seen[key]:
                rewritten.add(key)
        if seen.get(str(tip.id)):
            touched.append(name)
    first = [c for c in holding if not any(p in rewritten for p in parents[c])]
    return holding, rewritten, touched, first


def _other_entries(store: Store, snap: Any, ids: set[str], texts: list[str]) -> list[Place]:
    out: list[Place] = []
    for entry in store.iter_entries(snap):
        if entry.id in ids:
            continue
        if any(text in entry.body for text in texts):
            out.append(
                Place(
                    "entry",
                    entry.id,
                    "its body holds an erased text: name it in the erasure too",
                )
            )
        linked = {entry.supersedes, entry.superseded_by} | {
            s[len(MERGED_PREFIX) :] for s in entry.provenance.sources if s.startswith(MERGED_PREFIX)
        }
        if linked & ids:
            out.append(Place("link", entry.id, "links to an erased id (the id stays; no text)"))
    return out


def needles_of(ids: Iterable[str], texts: Iterable[str]) -> list[bytes]:
    found = [i.encode() for i in ids]
    for text in texts:
        found.append(text.encode("utf-8"))
        found.append(json.dumps(text)[1:-1].encode("utf-8"))  # as a JSON string holds it
        found.append(json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8"))
    return found


def _ledgers(repo: pygit2.Repository, ids: set[str], texts: list[str]) -> list[Place]:
    needles = needles_of(ids, texts)
    out: list[Place] = []
    for name in sorted(repo.references):
        if not name.startswith(RUNS_PREFIX):
            continue
        try:
            tip = repo.references[name].peel(pygit2.Commit)
        except (pygit2.GitError, ValueError, KeyError):
            continue
        hits: set[str] = set()
        for commit in repo.walk(tip.id):
            for path, data in _blobs(repo, commit.tree, ""):
                if path not in hits and any(n in data for n in needles):
                    hits.add(path)
        for path in sorted(hits):
            out.append(Place("ledger", f"{name}:{path}", "a run's call or memo holds it"))
    return out


def _blobs(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str) -> Iterator[tuple[str, bytes]]:
    for item in tree:
        path = f"{prefix}{item.name}"
        obj = repo[item.id]
        if isinstance(obj, pygit2.Tree):
            yield from _blobs(repo, obj, path + "/")
        elif isinstance(obj, pygit2.Blob):
            yield path, obj.data


def _attestations(repo: pygit2.Repository, rewritten: set[str]) -> list[Place]:
    if NOTES_REF not in repo.references:
        return []
    out = []
    for commit in sorted(rewritten):
        try:
            repo.lookup_note(commit, NOTES_REF)
        except KeyError:
            continue
        out.append(Place("attestation", commit, f"a note in {NOTES_REF} signs it"))
    return out


def _caches(store: Store, ids: set[str]) -> list[Place]:
    folder = store.git.git_dir / "truss"
    out: list[Place] = []
    if not folder.is_dir():
        return out
    for name in sorted(os.listdir(folder)):
        path = folder / name
        if name == "usage" and path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            count = sum(1 for line in text.splitlines() if any(i in line for i in ids))
            if count:
                out.append(Place("usage", str(path), f"{count} line(s) name an erased id"))
            continue
        if not name.endswith(".lock") and name != "pending":  # journals: not a cache
            out.append(Place("cache", str(path), "rebuilt from the rewritten tip"))
    out.append(Place("reflog", str(store.git.git_dir / "logs"), "expired, then git gc"))
    return out
