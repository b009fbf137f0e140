"""The erasure record and the audit's rules for the history an erasure rewrote.

An operator's erasure (``store/erase.py``; docs/forgetting.md) replaces every commit from the
first one holding an erased entry. Those commits lose their signatures, so the audit would
refuse them; instead it judges a commit carrying ``Truss-Rewritten-From`` by these rules:

1. a trusted erasure record maps it (``rewritten[original] == this commit``), where trusted
   means: a file ``.truss/erasures/<id>.json`` of the audited tip, added by a commit signed by
   the record's ``by``, a key holding ``operator`` under that commit's parent's policy;
2. it is signed by the record's operator;
3. its changes are judged for roles as if ``Truss-Original-Signer`` had signed them;
4. it erases nothing the record does not say: every entry its trailers name is in its tree
   unless the record lists the id, and where this repository still holds the original commit,
   the rewritten tree is exactly the original's less the erased entries' files.

A commit the record says it rewrote (an original) is refused wherever it turns up in an
audited history: a clone replaying the old history mixes both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pygit2

from ..errors import EntryError, TrussError
from ..format.trailers import parse_trailers
from ..model import Kind, entry_path
from ..signing import verify
from ..signing.trustpolicy import (
    CONFIG_PATH,
    GIT_NAMESPACE,
    SIGNERS_PATH,
    TRUSTED_ROOT_PATH,
    TrustPolicy,
)

__all__ = [
    "ERASURES_DIR",
    "Erasures",
    "Record",
    "erased_tree",
    "erasure_problems",
    "record_path",
]

ERASURES_DIR = ".truss/erasures"
REWRITTEN_FROM = "Truss-Rewritten-From"
ORIGINAL_SIGNER = "Truss-Original-Signer"
UNSIGNED = "-"  # the original signer of a commit that carried no signature


def record_path(erasure_id: str) -> str:
    return f"{ERASURES_DIR}/{erasure_id}.json"


@dataclass(frozen=True)
class Record:
    """One erasure: who, when, which ids and why -- never the text -- and the commit map."""

    id: str
    by: str
    at: str
    ids: tuple[str, ...]
    reason: str
    base: str | None
    old_tip: str
    rewritten: Mapping[str, str]
    ledgers: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "by": self.by,
            "at": self.at,
            "ids": list(self.ids),
            "reason": self.reason,
            "base": self.base,
            "old_tip": self.old_tip,
            "rewritten": dict(self.rewritten),
            "ledgers": dict(self.ledgers),
        }

    def render(self) -> bytes:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True).encode() + b"\n"

    @staticmethod
    def make_id(by: str, at: str, ids: Iterable[str], old_tip: str) -> str:
        seed = json.dumps([by, at, sorted(ids), old_tip]).encode()
        return hashlib.sha256(b"truss-erasure-v1\0" + seed).hexdigest()[:24]

    @classmethod
    def parse(cls, data: bytes, path: str) -> Record:
        try:
            raw = json.loads(data)
            rewritten = {str(k): str(v) for k, v in dict(raw["rewritten"]).items()}
            ledgers = {str(k): str(v) for k, v in dict(raw.get("ledgers") or {}).items()}
            return cls(
                id=path.rsplit("/", 1)[-1].removesuffix(".json"),
                by=str(raw["by"]),
                at=str(raw["at"]),
                ids=tuple(str(i) for i in raw["ids"]),
                reason=str(raw["reason"]),
                base=None if raw.get("base") is None else str(raw["base"]),
                old_tip=str(raw["old_tip"]),
                rewritten=rewritten,
                ledgers=ledgers,
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise EntryError(
                f"{path}: not an erasure record ({exc}); it holds by, at, ids, reason, base, "
                "old_tip and rewritten"
            ) from exc


def _tree_records(repo: pygit2.Repository, tree: pygit2.Tree) -> Iterator[tuple[str, bytes]]:
    try:
        folder = tree[ERASURES_DIR]
    except KeyError:
        return
    obj = repo[folder.id]
    if not isinstance(obj, pygit2.Tree):
        return
    for item in obj:
        blob, name = repo[item.id], item.name or ""
        if name.endswith(".json") and isinstance(blob, pygit2.Blob):
            yield f"{ERASURES_DIR}/{name}", blob.data


def _holds(tree: pygit2.Tree, path: str) -> bool:
    try:
        tree[path]
    except KeyError:
        return False
    return True


def policy_of(commit: pygit2.Commit) -> TrustPolicy:
    def read(path: str) -> bytes | None:
        try:
            blob = commit.tree[path]
        except KeyError:
            return None
        data = blob.data if isinstance(blob, pygit2.Blob) else None
        return data

    return TrustPolicy.from_files(read(SIGNERS_PATH), read(CONFIG_PATH), read(TRUSTED_ROOT_PATH))


def signer_of(policy: TrustPolicy, commit: pygit2.Commit) -> tuple[tuple[str, ...], set[str]]:
    """Every principal of the key that signed ``commit`` and the roles they hold under
    ``policy``; ``TrussError`` when it is unsigned or the key is not listed."""
    signature, payload = commit.gpg_signature
    if signature is None:
        raise TrussError(f"commit {str(commit.id)[:12]} is unsigned")
    key = verify(signature.decode("ascii", "replace"), payload, GIT_NAMESPACE)
    _, held = policy.roles_of(key, GIT_NAMESPACE)
    return tuple(policy.signers.principals_for(key, GIT_NAMESPACE)), held


def held_by(policy: TrustPolicy, principal: str) -> set[str]:
    """The roles ``principal`` holds under ``policy`` (truss.toml [roles])."""
    return {role for role, members in policy.config.roles().items() if principal in members}


class Erasures:
    """The erasure records of one audited tip: which commit each rewrote.

    A record is trusted (``trusted``) once the commit that added it checks out; that walk
    down the first parents is made only when a rewritten commit asks for its record, so an
    incremental audit of new commits above an old erasure costs one tree lookup. The refusal
    of a replayed original uses every record the tip holds: it only ever refuses."""

    def __init__(
        self,
        repo: pygit2.Repository | None = None,
        tip: pygit2.Commit | None = None,
        claimed: Iterable[tuple[str, bytes, Record]] = (),
        problems: Iterable[str] = (),
    ) -> None:
        self.repo, self.tip = repo, tip
        self.claimed = list(claimed)
        self.problems = list(problems)  # records that are not trusted, and why
        self.checked: dict[str, str | None] = {}
        self.by_new: dict[str, Record] = {}
        self.originals: dict[str, Record] = {}
        for _, _, record in self.claimed:
            for old, new in record.rewritten.items():
                self.by_new[new] = record
                self.originals[old] = record

    @classmethod
    def at(cls, repo: pygit2.Repository, tip: pygit2.Commit | None) -> Erasures:
        """The records in ``tip``'s tree; each is trusted when the commit that added it
        (walking first parents down from ``tip``) is signed by its ``by`` holding operator
        under that commit's parent's policy."""
        if tip is None:
            return cls()
        found = list(_tree_records(repo, tip.tree))
        if not found:
            return cls()
        claimed: list[tuple[str, bytes, Record]] = []
        problems: list[str] = []
        for path, data in found:
            try:
                claimed.append((path, data, Record.parse(data, path)))
            except EntryError as exc:
                problems.append(exc.message)
        return cls(repo, tip, claimed, problems)

    def trusted(self, record: Record) -> bool:
        if record.id not in self.checked:
            problem = None
            if self.repo is not None and self.tip is not None:
                path, data, _ = next(c for c in self.claimed if c[2].id == record.id)
                problem = _record_problem(self.repo, self.tip, path, data, record)
                if problem:
                    self.problems.append(f"{path}: {problem}")
            self.checked[record.id] = problem
        return self.checked[record.id] is None

    @property
    def records(self) -> list[Record]:
        """The trusted records."""
        return [r for _, _, r in self.claimed if self.trusted(r)]

    def replayed(self, commit: pygit2.Commit) -> Record | None:
        """The record that says it rewrote ``commit`` (an original of the erased history)."""
        return self.originals.get(str(commit.id))


def _record_problem(
    repo: pygit2.Repository, tip: pygit2.Commit, path: str, data: bytes, record: Record
) -> str | None:
    commit = tip
    while commit.parents:
        parent = commit.parents[0]
        if not _holds(parent.tree, path):
            break
        commit = parent
    else:
        return "no commit of the history adds it"
    try:
        if commit.tree[path].id != pygit2.hash(data):
            return "changed after the commit that added it"
        principals, held = signer_of(policy_of(commit.parents[0]), commit)
    except (TrussError, KeyError) as exc:
        return f"the commit that adds it ({str(commit.id)[:12]}) does not verify: {exc}"
    fields = parse_trailers(commit.message)
    if fields.get(REWRITTEN_FROM):
        # A later erasure rewrote the commit that added this record: re-signed by that
        # erasure's operator (whose record must map it), originally signed by ``by``.
        signer = (fields.get(ORIGINAL_SIGNER) or [UNSIGNED])[0]
        if signer != record.by:
            return f"names {record.by} as its operator but was first signed by {signer}"
    elif record.by not in principals:
        return (
            f"names {record.by} as its operator but is signed by {', '.join(principals)} "
            f"({str(commit.id)[:12]})"
        )
    if "operator" not in held:
        return f"signed by {', '.join(principals)}, who does not hold the operator role"
    return None


def entry_ids_named(message: str) -> list[str]:
    """The entry ids a commit's trailers name (``Truss-Entry``)."""
    return parse_trailers(message).get("Truss-Entry", [])


def _find_entry(tree: pygit2.Tree, entry_id: str) -> bool:
    return any(_holds(tree, entry_path(kind, entry_id)) for kind in Kind)


def erased_tree(repo: pygit2.Repository, tree: pygit2.Tree, ids: Iterable[str]) -> pygit2.Oid:
    """``tree`` less the files of the entries ``ids`` (of any kind); emptied folders go."""
    paths = [entry_path(kind, i) for i in ids for kind in Kind]
    return _drop(repo, tree, [p for p in paths if _holds(tree, p)])


def _drop(repo: pygit2.Repository, tree: pygit2.Tree, paths: list[str]) -> pygit2.Oid:
    if not paths:
        return tree.id
    builder = repo.TreeBuilder(tree)
    nested: dict[str, list[str]] = {}
    for path in paths:
        head, _, rest = path.partition("/")
        if rest:
            nested.setdefault(head, []).append(rest)
        elif builder.get(head) is not None:
            builder.remove(head)
    for head, rests in nested.items():
        sub = repo[tree[head].id]
        assert isinstance(sub, pygit2.Tree)
        oid = _drop(repo, sub, rests)
        if len(repo[oid]) == 0:  # type: ignore[arg-type]
            builder.remove(head)
        else:
            builder.insert(head, oid, pygit2.enums.FileMode.TREE)
    return builder.write()


def erasure_problems(
    repo: pygit2.Repository,
    commit: pygit2.Commit,
    policy: TrustPolicy,
    erasures: Erasures | None,
) -> tuple[list[tuple[str, str]], tuple[str, ...] | None, set[str] | None]:
    """The erasure rules for one commit: (rule, message) problems, and for a rewritten
    commit that an operator's record maps, the original signer's principals and roles to judge
    its changes by (None: judge it by its own signature, as any commit)."""
    erasures = erasures or Erasures()
    out: list[tuple[str, str]] = []
    replayed = erasures.replayed(commit)
    if replayed is not None:
        out.append(
            (
                "erasure-replayed",
                f"erasure {replayed.id} rewrote this commit; a history holding it and the "
                "erasure replays what was erased. Drop it (`truss-files sync` adopts the "
                "erasure)",
            )
        )
    fields = parse_trailers(commit.message)
    originals = fields.get(REWRITTEN_FROM)
    if not originals:
        return out, None, None
    original = originals[0]
    record = erasures.by_new.get(str(commit.id))
    if (
        record is None
        or record.rewritten.get(original) != str(commit.id)
        or not erasures.trusted(record)
    ):
        why = "; ".join(erasures.problems)
        out.append(
            (
                "erasure-unmapped",
                f"rewritten from {original[:12]}, but no operator-signed erasure record of "
                "the audited tip maps that commit to this one" + (f" ({why})" if why else ""),
            )
        )
        return out, None, None
    try:
        principals, held = signer_of(policy, commit)
    except TrussError as exc:
        out.append(("erasure-signer", f"erasure {record.id}: {exc}"))
        return out, None, None
    if record.by not in principals or "operator" not in held:
        out.append(
            (
                "erasure-signer",
                f"erasure {record.id} is {record.by}'s; this rewritten commit is signed by "
                f"{', '.join(principals)} ({', '.join(sorted(held)) or 'no role'})",
            )
        )
        return out, None, None
    erased = set(record.ids)
    # An entry an earlier erasure took is absent from every commit after it, rewritten again.
    before = {i for earlier in erasures.records for i in earlier.ids}
    for entry_id in entry_ids_named(commit.message):
        if entry_id not in erased | before and not _find_entry(commit.tree, entry_id):
            out.append(
                (
                    "erasure-scope",
                    f"names entry {entry_id[:12]} in its trailers, which its tree lacks and "
                    f"erasure {record.id} does not list: a rewrite removed more than its "
                    "record says",
                )
            )
    try:
        was = repo[original].peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        was = None
    if was is not None and erased_tree(repo, was.tree, erased) != commit.tree.id:
        out.append(
            (
                "erasure-tree",
                f"its tree is not {original[:12]}'s less the entries erasure {record.id} "
                "lists: the record's map does not match what was rewritten",
            )
        )
    signer = (fields.get(ORIGINAL_SIGNER) or [UNSIGNED])[0]
    return out, (signer,), held_by(policy, signer) if signer != UNSIGNED else set()
