"""An erasure crossing between clones: pushed from the repository that made it, adopted by
the others on their next ``sync`` (docs/forgetting.md, "Servers and clones").

``sync`` asks three questions of a remote tip that is not in the local branch's history:
did an erasure made here replace every commit the remote holds beyond us (``pushed_erasure``:
push with a lease on the remote's old tip); would integrating it bring back history an
erasure made here replaced (``replayed_by``: refuse); does it hold an erasure this branch
lacks (``adopted_erasure``). Adopting one moves the branch to it with the local commits made
on the old history since replayed on top (``replay_local``, audited before anything moves),
then does here what the erasing repository did (``adopt``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pygit2

from ..errors import StoreError, TrussError
from ..git.gitstore import Snapshot
from ..model import Kind, entry_path
from ..trust.audit import audit
from ..trust.erasures import Erasures, Record
from .erase import RUNS_PREFIX
from .erasing import (
    clean_caches,
    drop_notes,
    drop_remote_refs,
    forget_objects,
    history_refs,
    rewrite_ledgers,
)

if TYPE_CHECKING:
    from .store import Store

__all__ = ["adopt", "adopted_erasure", "pushed_erasure", "replay_local", "replayed_by"]


def pushed_erasure(
    repo: pygit2.Repository, local: pygit2.Commit, theirs: pygit2.Commit
) -> Record | None:
    """The erasure of ``local`` that rewrote the remote's whole tip: every commit the remote
    holds beyond ``local`` is one the record replaced (so a push may overwrite them)."""
    for record in Erasures.at(repo, local).records:
        if str(theirs.id) not in record.rewritten:
            continue
        if all(str(c.id) in record.rewritten for c in _beyond(repo, theirs, local)):
            return record
    return None


def replayed_by(repo: pygit2.Repository, local: pygit2.Commit, theirs: pygit2.Commit) -> str | None:
    """Why integrating ``theirs`` would bring back history an erasure of ``local`` replaced."""
    erasures = Erasures.at(repo, local)
    if not erasures.originals:
        return None
    for commit in _beyond(repo, theirs, local):
        record = erasures.replayed(commit)
        if record is not None:
            return (
                f"commit {str(commit.id)[:12]} is one erasure {record.id} replaced; the remote "
                "still holds the history it erased, with commits made on it since. Rebase "
                "those commits onto the erasure by hand, then push"
            )
    return None


def adopted_erasure(
    repo: pygit2.Repository, local: pygit2.Commit, theirs: pygit2.Commit
) -> Record | None:
    """The erasure ``theirs`` holds that ``local`` has not adopted yet, when there is one.

    ``StoreError`` (nothing changed) when its record does not verify."""
    have = {claim[2].id for claim in Erasures.at(repo, local).claimed}
    found = Erasures.at(repo, theirs)
    fresh = [claim[2] for claim in found.claimed if claim[2].id not in have]
    if not fresh:
        return None
    trusted = [record for record in fresh if found.trusted(record)]
    if not trusted:
        raise StoreError(
            "the remote's erasure record does not verify; nothing changed locally: "
            + "; ".join(found.problems)
        )
    return trusted[-1]


def replay_local(
    store: Store, record: Record, local: pygit2.Commit, theirs: pygit2.Commit
) -> pygit2.Commit:
    """``theirs`` with the local commits the erasure does not map -- made here since, on the
    old history -- replayed on top, each with its message and author, signed by this store's
    key and audited before anything moves. ``StoreError`` (nothing changed) when one touches
    an erased entry, is a merge, or changes a path the remote changed since."""
    git = store.git
    repo = git.repo
    walker = repo.walk(local.id, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    walker.hide(theirs.id)
    stray = [c for c in walker if str(c.id) not in record.rewritten]
    if not stray:
        return theirs
    erased = {entry_path(kind, i) for i in record.ids for kind in Kind}
    head = theirs
    identity = None
    for commit in stray:
        short = str(commit.id)[:12]
        if len(commit.parents) != 1:
            raise StoreError(
                f"local merge commit {short} was made on the history erasure {record.id} "
                "replaced; nothing changed locally: move it aside (git branch), reset to the "
                "remote (`git reset --hard @{u}`), re-apply what it brought, and sync"
            )
        parent = commit.parents[0]
        changes: dict[str, bytes | None] = {}
        for delta in parent.tree.diff_to_tree(commit.tree).deltas:
            path = delta.old_file.path if delta.status_char() == "D" else delta.new_file.path
            if path in erased:
                raise StoreError(
                    f"local commit {short} changes {path}, an entry erasure {record.id} "
                    f"({record.by}, {record.at}) erased; nothing changed locally. Drop that "
                    "commit (move it aside, `git reset --hard @{u}`) and sync"
                )
            if Snapshot(repo, parent).blob_id(path) != Snapshot(repo, head).blob_id(path):
                raise StoreError(
                    f"local commit {short} changes {path}, which the remote changed too "
                    f"before erasure {record.id}; nothing changed locally. Move the commit "
                    "aside, `git reset --hard @{u}`, re-apply it, and sync"
                )
            blob = repo[delta.new_file.id] if delta.status_char() != "D" else None
            changes[path] = blob.data if isinstance(blob, pygit2.Blob) else None
        tree = git.write_tree(head.tree, changes) or repo.TreeBuilder().write()
        if identity is None:
            identity = store.identity(store.principal())
        content: str = repo.create_commit_string(  # type: ignore[assignment]
            commit.author, identity.signature(), commit.message, tree, [head.id]
        )
        armored = store.signer.sign(content.encode("utf-8"), "git")
        made = repo[repo.create_commit_with_signature(content, armored, "gpgsig")]
        assert isinstance(made, pygit2.Commit)
        head = made
    report = audit(git, f"{theirs.id}..{head.id}", environ=store.environ, attestations=False)
    if not report.ok:
        raise StoreError(
            f"the local commits replayed onto erasure {record.id} would fail the audit; "
            "nothing changed locally:\n" + "\n".join(f"  {v}" for v in report.violations[:20])
        )
    return head


def adopt(store: Store, record: Record) -> list[str]:
    """What an erasing repository did, done here once the branch has moved to the erasure:
    tags and branches onto its map, run ledgers scrubbed, attestations of replaced commits,
    remote-tracking refs of the old history, caches and usage lines dropped, reflogs expired
    and the objects pruned. Returns what it did, one line each."""
    git = store.git
    repo = git.repo
    done: list[str] = []
    ids = set(record.ids)
    for name, target in history_refs(repo).items():
        new = record.rewritten.get(str(target.id))
        if new is None or name == git.branch:
            continue
        repo.references[name].set_target(pygit2.Oid(hex=new), "truss-files: erasure adopted")
        done.append(f"moved {name} onto erasure {record.id}")
    try:
        identity = store.identity(store.principal())
        ledgers = _rewrite_ledgers_for(store, ids, record.id, identity, record)
    except TrussError as exc:
        raise StoreError(f"could not rewrite the run ledgers holding erased text: {exc}") from exc
    for ref, (old, new) in ledgers.items():
        git.update_ref(ref, pygit2.Oid(hex=old), pygit2.Oid(hex=new), "truss-files: erasure")
        done.append(f"rewrote {ref}")
    for ref in drop_remote_refs(repo, set(record.rewritten)):
        done.append(f"dropped {ref}")
    removed = drop_notes(git, dict(store.environ), set(record.rewritten))
    if removed:
        done.append(f"removed {removed} attestation(s) of replaced commits")
    clean_caches(git.git_dir, ids, [ref.removeprefix(RUNS_PREFIX) for ref in ledgers])
    forget_objects(git, dict(store.environ))
    return done


def _rewrite_ledgers_for(
    store: Store, ids: set[str], erasure_id: str, identity: Any, record: Record
) -> dict[str, tuple[str, str]]:
    # The texts are read from the old tip, still at hand until the objects are pruned.
    try:
        old = store.snapshot(record.old_tip)
    except TrussError:
        old = None
    return rewrite_ledgers(store, ids, erasure_id, identity, old)


def _beyond(
    repo: pygit2.Repository, tip: pygit2.Commit, hide: pygit2.Commit
) -> list[pygit2.Commit]:
    walker = repo.walk(tip.id)
    walker.hide(hide.id)
    return list(walker)
