"""Crash recovery: a write killed between moving the branch and syncing the work tree.

A write journals the paths it is about to sync (``.git/truss/pending/<owner>.json``)
*before* the branch moves, and removes the record once the work tree and index follow. A
record whose owner died (``kill -9`` between the two) is replayed by the next write, or by
``truss-files repair``: each path is brought to the branch tip's content when everything the
work tree and index hold there is a version the store itself wrote (the journal's before or
after), so a user's own edit is never overwritten. Without the replay, ``git status`` shows
the new entries as staged deletions and the user's next ``git commit`` deletes them from the
branch.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pygit2

from ..errors import ConflictError
from ..signing.trustpolicy import is_store_path
from .gitlocks import owner_alive, owner_tag
from .worktree import WorkTree, stage, staged_id, tmp_leftover

PENDING = "pending"
_GITLINK = pygit2.enums.FileMode.COMMIT


# -- the journal -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PendingSync:
    """One write's promise to sync ``paths`` after moving ``ref`` from ``base`` to ``new``."""

    owner: str
    ref: str
    base: str | None
    new: str
    paths: tuple[str, ...]


def journal(git_dir: Path, ref: str, base: str | None, new: str, paths: Iterable[str]) -> Path:
    """Record a sync to come; the caller removes the file once the work tree follows."""
    folder = git_dir / "truss" / PENDING
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{owner_tag()}.{secrets.token_hex(4)}.json"
    head = json.dumps({"ref": ref, "base": base, "new": new})[:-1]
    # No fsync: a killed process's page cache survives it; a power cut is not this file's care.
    # Written path by path as they come (a bulk import's come from its tree, in tree order):
    # a million paths are never a list or one string in memory.
    with path.open("w") as handle:
        handle.write(head + ', "paths": [')
        for n, one in enumerate(paths):
            handle.write((", " if n else "") + json.dumps(one))
        handle.write("]}")
    return path


def abandon(record: Path) -> None:
    """Hand a record over to the next write or ``repair`` (this process gave up syncing)."""
    with contextlib.suppress(OSError):
        record.rename(record.with_name("0-0." + record.name.split(".", 1)[1]))


def orphans(git_dir: Path) -> list[tuple[Path, PendingSync | None]]:
    """Records whose owner is gone, oldest first; None for a record cut short by the kill
    (written before the ref moved, so nothing moved)."""
    folder = git_dir / "truss" / PENDING
    try:
        names = sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out: list[tuple[Path, PendingSync | None]] = []
    for path in names:
        owner = path.name.split(".", 1)[0]
        if owner_alive(owner):
            continue
        try:
            raw = json.loads(path.read_text())
            found: PendingSync | None = PendingSync(
                owner, raw["ref"], raw["base"], raw["new"], tuple(raw["paths"])
            )
        except (OSError, ValueError, KeyError, TypeError):
            found = None
        out.append((path, found))
    return out


def has_pending(git_dir: Path) -> bool:
    folder = git_dir / "truss" / PENDING
    return folder.is_dir() and any(folder.iterdir())


# -- putting paths back in step ----------------------------------------------------------------


@dataclass(frozen=True)
class Repaired:
    """What one recovery or repair did."""

    fixed: tuple[str, ...]
    kept: tuple[str, ...]  # paths left alone: they hold edits the store never wrote
    notes: tuple[str, ...]


def put_in_step(
    repo: pygit2.Repository,
    tree: WorkTree,
    want: Mapping[str, bytes | None],
    ours: Mapping[str, set[str | None]],
    *,
    force: bool = False,
) -> Repaired:
    """Give each path of ``want`` that content (None: absent) in the work tree and index.

    A path is changed only when its work tree file and its index entry each hold nothing or
    a version in ``ours[path]`` (versions the store wrote), unless ``force``: an edit the store
    never wrote is kept, and reported."""
    repo.index.read(force=False)
    fixed: list[str] = []
    kept: list[str] = []
    notes: list[str] = []
    to_stage: dict[str, bool] = {}
    for path, data in want.items():
        target = None if data is None else str(pygit2.hash(data))
        try:
            disk = tree.blob_id(path)
        except ConflictError as exc:
            kept.append(path)
            notes.append(str(exc))
            continue
        staged = staged_id(repo, path)
        if disk == target and staged == target:
            continue
        allowed = ours.get(path, set()) | {None, target}
        if not force and (disk not in allowed or staged not in allowed):
            kept.append(path)
            notes.append(
                f"{path}: the work tree or index holds an edit the store never wrote; kept. "
                "Commit it through truss-files, or discard it with `truss-files repair --force`"
            )
            continue
        if disk != target:
            if data is None:
                tree.remove(path)
            else:
                tree.write(path, data)
        to_stage[path] = data is not None
        fixed.append(path)
    if to_stage:
        _stage_retrying(repo, to_stage)
    return Repaired(tuple(fixed), tuple(kept), tuple(notes))


def _stage_retrying(repo: pygit2.Repository, paths: Mapping[str, bool]) -> None:
    for attempt in range(20):
        try:
            stage(repo, paths)
            return
        except pygit2.GitError:
            time.sleep(0.01 * (attempt + 1))
    raise ConflictError(
        f"{Path(repo.path) / 'index.lock'} stayed locked, so the index could not be brought in "
        "step; when no git command is running, run `truss-files repair` again"
    )


def blob_at(repo: pygit2.Repository, commit: str | None, path: str) -> pygit2.Blob | None:
    if commit is None:
        return None
    try:
        obj = repo[commit].peel(pygit2.Commit).tree[path]
    except (KeyError, ValueError, pygit2.GitError):
        return None
    blob = repo[obj.id]
    return blob if isinstance(blob, pygit2.Blob) else None


def recover(repo: pygit2.Repository, tree: WorkTree, branch: str) -> list[str]:
    """Replay the journal records of dead writers; one line per record says what happened.

    The caller holds ``worktree.lock`` (no live writer of ours syncs meanwhile)."""
    notes: list[str] = []
    git_dir = Path(repo.path)
    for record, pending in orphans(git_dir):
        if pending is None or pending.ref != branch:
            record.unlink(missing_ok=True)
            continue
        ref = repo.references.get(pending.ref)
        tip = str(ref.resolve().target) if ref is not None else None
        want: dict[str, bytes | None] = {}
        ours: dict[str, set[str | None]] = {}
        for path in pending.paths:
            blob = blob_at(repo, tip, path)
            want[path] = blob.data if blob is not None else None
            ours[path] = {
                str(b.id) for c in (pending.base, pending.new) if (b := blob_at(repo, c, path))
            }
        done = put_in_step(repo, tree, want, ours)
        for path in pending.paths:
            with contextlib.suppress(ConflictError):
                tree.remove(path, leftovers_of=pending.owner)
        record.unlink(missing_ok=True)
        landed = tip is not None and (tip == pending.new or repo.descendant_of(tip, pending.new))
        pid = pending.owner.split("-")[0]
        kept = f"; kept {len(done.kept)} with local edits" if done.kept else ""
        notes.append(
            f"truss-files: recovered from an interrupted write (process {pid}, commit "
            f"{pending.new[:12]} {'landed' if landed else 'never landed'}): "
            f"{len(done.fixed)} of {len(pending.paths)} store paths brought back in step with "
            f"the branch{kept}"
        )
        notes.extend(f"truss-files: {n}" for n in done.notes)
    return notes


def repair_all(
    repo: pygit2.Repository, tree: WorkTree, tip: pygit2.Commit | None, *, force: bool
) -> Repaired:
    """Every store path whose work tree or index differs from ``tip``, put back in step.

    Without ``force`` a path is changed only when what it holds is absent or a version of that
    path in the branch's recent history (so nothing unrecorded is lost); our own temporary
    files of dead writers are removed, and other untracked files are only reported."""
    want: dict[str, bytes | None] = {}
    notes: list[str] = []
    leftovers: list[str] = []
    for path, flags in repo.status().items():
        if not is_store_path(path) or flags & pygit2.enums.FileStatus.IGNORED:
            continue
        if flags == pygit2.enums.FileStatus.WT_NEW:
            owner = tmp_leftover(path.rpartition("/")[2])
            if owner is not None and not owner_alive(owner):
                with contextlib.suppress(OSError):
                    tree.remove(path)
                leftovers.append(path)
            else:
                notes.append(
                    f"{path}: untracked under the store; kept (write it with truss-files, or "
                    "remove it)"
                )
            continue
        blob = blob_at(repo, str(tip.id) if tip is not None else None, path)
        want[path] = blob.data if blob is not None else None
    ours = history_versions(repo, tip, set(want)) if want and not force else {}
    done = put_in_step(repo, tree, want, ours, force=force)
    return Repaired(done.fixed + tuple(leftovers), done.kept, tuple(notes) + done.notes)


def history_versions(
    repo: pygit2.Repository, tip: pygit2.Commit | None, paths: set[str], depth: int = 1000
) -> dict[str, set[str | None]]:
    """The blob ids each path had in the last ``depth`` first-parent commits."""
    out: dict[str, set[str | None]] = {p: set() for p in paths}
    commit = tip
    for _ in range(depth):
        if commit is None:
            break
        for path in paths:
            with contextlib.suppress(KeyError):
                out[path].add(str(commit.tree[path].id))
        commit = commit.parents[0] if commit.parents else None
    return out


# -- store paths follow the branch -------------------------------------------------------------

# Reflog entries of the branch read for its recent tips (the tip before a ref moved behind us).
RECENT_TIPS = 16


def follow_branch(
    repo: pygit2.Repository, tree: WorkTree, tip: pygit2.Commit, synced: str | None
) -> Repaired | None:
    """Store paths follow the branch: every store path whose index entry differs from ``tip``'s
    tree, or whose work tree file may (it changed between ``synced``, the tip the store last
    followed, and ``tip``), is put back to ``tip``'s version, whoever moved the ref.

    Entries are never deleted (the audit's ``no-delete``), so a store path deleted or changed
    in the index or work tree behind the branch is never anyone's intended edit: it is what a
    ref moved behind the store leaves (``git update-ref``, ``git reset --soft``, a crash,
    another tool), and the user's next plain ``git commit`` would record it, deleting an entry
    another clone wrote. So:

    - a path the branch holds and the index or work tree lacks gets the branch's version;
    - a path held at another version (or held where the branch holds none) gets the branch's
      version (or goes) when what is there is a version git keeps in a commit the branch
      pointed at: ``synced``, the branch's recent reflog tips, or the tip's first-parent
      history. Nothing is replaced that git does not hold;
    - anything else is an edit nobody recorded (an operator's hand edit of ``truss.toml``
      in progress): kept and named, as ``repair`` keeps it (``--force`` discards it).

    Only store paths (``config.is_store_path``: ``memories/``, ``identity/``, ``principals/``,
    ``.truss/`` and ``truss.toml``, the files only a signed store commit may change); any
    other file, staged or not, is never touched. Cost: one diff of the index to ``tip``'s tree
    and, when ``synced`` names another commit, one diff of its tree to ``tip``'s (only subtrees
    whose ids differ are walked); only the paths they name are then looked at, one by one.

    None, touching nothing, while the index holds unresolved conflicts."""
    index = repo.index
    index.read(force=False)
    if index.conflicts is not None:
        return None
    paths: set[str] = set()
    before = _commit(repo, synced)
    diffs = [index.diff_to_tree(tip.tree)]
    if before is not None and before.id != tip.id:
        diffs.append(before.tree.diff_to_tree(tip.tree))
    for diff in diffs:
        for delta in diff.deltas:
            # A gitlink names another repository's commit, no file here: reads skip it, the
            # audit reports it, and nothing here may put one back.
            if _GITLINK not in (delta.old_file.mode, delta.new_file.mode):
                paths.update((delta.old_file.path, delta.new_file.path))
    want: dict[str, bytes | None] = {}
    looking: dict[str, set[str]] = {}
    for path in sorted(p for p in paths if is_store_path(p)):
        blob = blob_at(repo, str(tip.id), path)
        want[path] = blob.data if blob is not None else None
        target = str(blob.id) if blob is not None else None
        try:
            held = {tree.blob_id(path), staged_id(repo, path)} - {None, target}
        except ConflictError:
            continue  # a link on the way: put_in_step keeps it and says so
        if held:
            looking[path] = {h for h in held if h is not None}
    if not want:
        return Repaired((), (), ())
    ours = _recorded(repo, _pointed_at(repo, tip, before), looking)
    return put_in_step(repo, tree, want, ours)


def _commit(repo: pygit2.Repository, rev: str | None) -> pygit2.Commit | None:
    if rev is None:
        return None
    try:
        return repo[rev].peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        return None  # gone (a gc after a reset): the other sources still answer


def _pointed_at(
    repo: pygit2.Repository, tip: pygit2.Commit, synced: pygit2.Commit | None, depth: int = 1000
) -> Iterator[pygit2.Commit]:
    """Commits the branch pointed at, nearest first: the tip the store last followed, the
    branch's recent reflog tips, then the tip's first-parent history."""
    if synced is not None:
        yield synced
    ref = repo.references.get("HEAD")
    name = ref.target if ref is not None and isinstance(ref.target, str) else None
    for rev in _reflog_tips(Path(repo.path), name) if name else []:
        found = _commit(repo, rev)
        if found is not None:
            yield found
    commit: pygit2.Commit | None = tip
    for _ in range(depth):
        if commit is None:
            return
        yield commit
        commit = commit.parents[0] if commit.parents else None


def _reflog_tips(git_dir: Path, ref: str) -> list[str]:
    """The old and new ids of ``ref``'s last ``RECENT_TIPS`` reflog entries, newest first,
    read from the end of the file (a busy store's reflog holds a line per write)."""
    common = git_dir
    with contextlib.suppress(OSError):
        common = git_dir / (git_dir / "commondir").read_text().strip()
    try:
        with open(common / "logs" / ref, "rb") as handle:
            size = handle.seek(0, 2)
            start = max(0, size - 512 * RECENT_TIPS)
            handle.seek(start)
            lines = handle.read().splitlines()
    except OSError:
        return []
    if start:
        lines = lines[1:]  # the first line read may be cut
    out: list[str] = []
    for line in reversed(lines[-RECENT_TIPS:]):
        for rev in line.split(b" ", 2)[:2]:
            text = rev.decode("ascii", "replace")
            if len(text) == 40 and text.strip("0") and text not in out:
                out.append(text)
    return out


def _recorded(
    repo: pygit2.Repository, commits: Iterable[pygit2.Commit], looking: Mapping[str, set[str]]
) -> dict[str, set[str | None]]:
    """Which of the blob ids ``looking[path]`` one of ``commits`` holds at that path; the walk
    stops once every id is found (an unrecorded edit costs the whole walk, for its path only)."""
    found: dict[str, set[str | None]] = {path: set() for path in looking}
    todo = {path: set(ids) for path, ids in looking.items() if ids}
    seen: set[pygit2.Oid] = set()
    for commit in commits:
        if not todo:
            break
        if commit.id in seen:
            continue
        seen.add(commit.id)
        for path in list(todo):
            try:
                held = str(commit.tree[path].id)
            except KeyError:
                continue
            if held in todo[path]:
                found[path].add(held)
                todo[path].discard(held)
                if not todo[path]:
                    del todo[path]
    return found
