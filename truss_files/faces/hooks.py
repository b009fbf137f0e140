"""Git hooks: thin shims over the audit, at the places git runs hooks.

libgit2 never runs hooks, so the library checks its own commits; these guard commits and
pushes made with the git CLI. Client side (honest clients): ``pre-commit`` validates the
staged store files (parse, path, id, new entries land unverified, verdicts, no new entry
holding a credential: rule ``secret``, trust/leaks.py), ``commit-msg`` wants ``Truss-Op``
trailers on store commits (and judges trust moves with the real message), ``pre-push``
audits the pushed range. Server side, the real gate: ``pre-receive`` judges every new commit
by its parent's policy (and refuses one adding an entry that holds a credential) — reading
the quarantined objects of the push through ``RepositoryOpenFlag.FROM_ENV`` — and refuses
deletions and non-fast-forward updates (but an operator's erasure) of
protected branches: the default branch, the ``truss.protected`` patterns and every branch
whose history holds the pinned trust root (whatever the bare repository's HEAD names).
Under the pre-commit framework a push it names no range for is audited from what the remote
has (or the root), never waved through.

Each installed hook is a two-line shell script that execs ``python -m truss_files hook NAME``
with the interpreter that installed it; a hook that was there before is kept as
``NAME.local`` and runs first, with the same arguments and standard input.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pygit2

from ..errors import StoreError, UsageError
from ..git.gitstore import GitStore, Snapshot
from ..git.recovery import history_versions, orphans
from ..signing.trustpolicy import SIGNERS_PATH, is_store_path
from ..trust.attest import NOTES_REF, notes_of
from ..trust.audit import (
    Erasures,
    Violation,
    check_commit,
    check_commits,
    check_note,
    secret_violations,
)
from ..trust.trustroot import ROOT_CONFIG, find_root, pinned_root

CLIENT_HOOKS = ("pre-commit", "commit-msg", "pre-push")
SERVER_HOOKS = ("pre-receive",)
SHIM_MARK = "truss-files hook shim"
PROTECTED_CONFIG = "truss.protected"
# The checks the signature settles: a staged change is not signed yet.
_UNSIGNED_RULES = frozenset({"signed", "role"})
_ZERO = re.compile(r"^0+$")
_FULL_SHA = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")


# -- installing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    name: str
    path: str
    action: str  # installed, updated or unchanged
    chained: str | None  # the hook that was there before, now NAME.local, run first


@dataclass(frozen=True)
class InstallReport:
    hooks: tuple[Installed, ...]
    notes: tuple[str, ...]


def default_command() -> str:
    """This interpreter, by absolute path, so a hook works whatever PATH git runs it with."""
    return f"{shlex.quote(sys.executable)} -m truss_files"


def shim_text(name: str, command: str | None = None) -> str:
    command = command or default_command()
    return (
        "#!/bin/sh\n"
        f"# {SHIM_MARK}: written by `truss-files hooks install`; re-run that to update it.\n"
        f"# A hook that was here before now lives in {name}.local and runs first.\n"
        f'exec {command} hook {name} --chain "$0.local" -- "$@"\n'
    )


def open_repo(path: str | os.PathLike[str] = ".") -> pygit2.Repository:
    try:
        found = pygit2.discover_repository(str(path))
    except pygit2.GitError as exc:
        raise StoreError(f"{path}: cannot read a git repository here ({exc})") from exc
    if found is None:
        raise StoreError(f"{path} is not inside a git repository")
    return pygit2.Repository(found)


def hooks_dir(repo: pygit2.Repository) -> Path:
    """Where git looks for hooks: core.hooksPath if set, else <git dir>/hooks."""
    try:
        configured = str(repo.config["core.hooksPath"])
    except KeyError:
        configured = ""
    if configured:
        path = Path(os.path.expanduser(configured))
        if not path.is_absolute():
            path = Path(repo.workdir or repo.path) / path
        return path
    return Path(repo.path) / "hooks"


def install_hooks(
    path: str | os.PathLike[str] = ".",
    *,
    server: bool = False,
    command: str | None = None,
    root: str | None = None,
    protect: Sequence[str] = (),
) -> InstallReport:
    """Install the client hooks (or, with ``server``, the pre-receive gate); idempotent."""
    repo = open_repo(path)
    if repo.is_bare and not server:
        raise UsageError(
            f"{repo.path} is a bare repository: it receives pushes, so install the server "
            "hook with `truss-files hooks install --server`"
        )
    folder = hooks_dir(repo)
    folder.mkdir(parents=True, exist_ok=True)
    done = tuple(
        _install_one(folder, name, command) for name in (SERVER_HOOKS if server else CLIENT_HOOKS)
    )
    notes: list[str] = []
    if server:
        notes.extend(_pin_server(repo, root, protect))
    return InstallReport(done, tuple(notes))


def _install_one(folder: Path, name: str, command: str | None) -> Installed:
    target = folder / name
    local = folder / f"{name}.local"
    text = shim_text(name, command)
    action = "installed"
    if target.exists():
        current = target.read_text(errors="replace")
        if SHIM_MARK in current:
            action = "unchanged" if current == text else "updated"
        elif local.exists():
            raise UsageError(
                f"{target} is not ours and {local} exists too; merge them into {local} by "
                "hand, remove the other, and run `truss-files hooks install` again"
            )
        else:
            os.replace(target, local)
    if action != "unchanged":
        target.write_text(text)
    mode = target.stat().st_mode
    target.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return Installed(name, str(target), action, str(local) if local.exists() else None)


def _pin_server(repo: pygit2.Repository, root: str | None, protect: Sequence[str]) -> list[str]:
    notes = []
    cfg = repo.config
    if root:
        try:
            pinned = str(repo.revparse_single(root).peel(pygit2.Commit).id)
        except (KeyError, ValueError, pygit2.GitError) as exc:
            if not _FULL_SHA.match(root):
                raise UsageError(
                    f"no commit named '{root}' in {repo.path}; give the full commit id your "
                    f"store's `git config {ROOT_CONFIG}` prints"
                ) from exc
            pinned = root  # an empty server: the first push brings the root commit
        cfg[ROOT_CONFIG] = pinned
        notes.append(f"pinned the trust root {ROOT_CONFIG} = {pinned}")
    elif pinned_root(repo, {}) is None:
        found = _first_store_commit(repo)
        if found is not None:
            cfg[ROOT_CONFIG] = found
            notes.append(
                f"pinned the trust root {ROOT_CONFIG} = {found} (the first store commit on "
                "the default branch); check it against your own store's `git config "
                f"{ROOT_CONFIG}`"
            )
        else:
            notes.append(
                f"no trust root yet: pushes that touch the store are refused until you run "
                f"`git -C {repo.path} config {ROOT_CONFIG} <root commit>`"
            )
    have = _config_values(repo, PROTECTED_CONFIG)
    for name in protect:
        if name not in have:
            cfg.set_multivar(PROTECTED_CONFIG, f"^{re.escape(name)}$", name)
    names = ", ".join(sorted(protected_branches(repo)))
    notes.append(
        f"protected branches (no deletion, no force-push): {names}, and every branch whose "
        "history holds the trust root"
    )
    return notes


def _first_store_commit(repo: pygit2.Repository) -> str | None:
    try:
        root = find_root(GitStore(repo.path))
    except StoreError:
        return None
    return str(root.id) if root is not None else None


# -- shared helpers ----------------------------------------------------------------------------


def _config_values(repo: pygit2.Repository, name: str) -> list[str]:
    try:
        return [str(item) for item in repo.config.get_multivar(name)]
    except (KeyError, pygit2.GitError):
        return []


def _branch_name(value: str) -> str:
    value = value.strip()
    return value if value.startswith("refs/") else f"refs/heads/{value}"


def protected_branches(repo: pygit2.Repository, remote: str | None = None) -> set[str]:
    """The default branch (the remote's HEAD for a client's push, else this repository's
    HEAD) plus every pattern in ``truss.protected`` (a name, a full ref or a glob; repeatable
    or comma-separated). Adding a branch never unprotects the default one."""
    names = {
        _branch_name(part)
        for value in _config_values(repo, PROTECTED_CONFIG)
        for part in value.replace(",", " ").split()
    }
    default = None
    if remote:
        ref = repo.references.get(f"refs/remotes/{remote}/HEAD")
        target = ref.target if ref is not None else None
        if isinstance(target, str):
            default = target.replace(f"refs/remotes/{remote}/", "refs/heads/", 1)
    if default is None:
        head = repo.references.get("HEAD")
        target = head.target if head is not None else None
        default = target if isinstance(target, str) else "refs/heads/main"
    return names | {default}


def _is_protected(ref: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(ref, p) for p in patterns)


def _reaches_root(repo: pygit2.Repository, ref: str, old_sha: str, root: str | None) -> bool:
    """A store branch: a branch whose history (at its current tip) holds the pinned root.

    The server protects these whatever its default branch is named: a bare repository made
    by ``git init --bare`` points HEAD at ``master`` while the store pushes ``main``."""
    if root is None or not ref.startswith("refs/heads/") or _ZERO.match(old_sha):
        return False
    old = _commit(repo, old_sha)
    start = _commit(repo, root)
    if old is None or start is None:
        return False
    return old.id == start.id or repo.descendant_of(old.id, start.id)


def _commit(repo: pygit2.Repository, sha: str) -> pygit2.Commit | None:
    try:
        return repo[sha].peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        return None


def _head(repo: pygit2.Repository) -> pygit2.Commit | None:
    if repo.head_is_unborn:
        return None
    try:
        return repo.head.peel(pygit2.Commit)
    except pygit2.GitError:
        return None


def check_new_commits(
    repo: pygit2.Repository,
    tip: pygit2.Commit,
    known: Iterable[pygit2.Oid],
    root: str | None,
    seen: set[str] | None = None,
) -> list[Violation]:
    """Judge every commit reachable from ``tip`` but from none of ``known``, oldest first."""
    walker = repo.walk(tip.id, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    for oid in known:
        walker.hide(oid)
    seen = set() if seen is None else seen
    walked: list[pygit2.Commit] = []

    def fresh() -> Iterator[pygit2.Commit]:
        for commit in walker:
            if str(commit.id) not in seen:
                seen.add(str(commit.id))
                walked.append(commit)
                yield commit

    erasures = Erasures.at(repo, tip)
    found = [v for each in check_commits(repo, fresh(), root, erasures=erasures) for v in each]
    # Rule secret: a commit made by hand never met the write path's check (trust/leaks.py).
    return found + [v for commit in walked for v in secret_violations(repo, commit)]


# -- the hooks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class HookResult:
    code: int
    lines: tuple[str, ...]


def _staged(repo: pygit2.Repository, message: str) -> tuple[pygit2.Commit, bool] | None:
    """The commit the index would make, unsigned, and whether it is the store's root;
    None when it changes no store file (or this is no store)."""
    head = _head(repo)
    try:
        tree_id = repo.index.write_tree()
    except pygit2.GitError as exc:
        raise StoreError(f"cannot read the index ({exc}); resolve conflicts first") from exc
    base = Snapshot(repo, head)
    tree = repo[tree_id]
    assert isinstance(tree, pygit2.Tree)
    if base.tree is not None and base.tree.id == tree.id:
        return None
    diff = tree.diff_to_tree(swap=True) if base.tree is None else base.tree.diff_to_tree(tree)
    paths = [d.new_file.path if d.status_char() != "D" else d.old_file.path for d in diff.deltas]
    if not any(is_store_path(p) for p in paths):
        return None
    is_root = base.blob_id(SIGNERS_PATH) is None
    who = pygit2.Signature("truss-files hook", "hook@truss-files.invalid")
    # A merge being concluded (`git merge`, or `git commit` after resolving) has the merged
    # heads as parents too: the audit judges a merge against each parent, so what it takes
    # cleanly from the other branch is not mistaken for this commit's own change.
    parents = [head.id, *_merge_heads(repo)] if head else []
    # A dangling object nothing points at (git gc drops it): check_commit judges commits.
    oid = repo.create_commit(None, who, who, message, tree_id, parents)
    commit = repo[oid]
    assert isinstance(commit, pygit2.Commit)
    return commit, is_root


def _merge_heads(repo: pygit2.Repository) -> list[pygit2.Oid]:
    """The heads ``git merge`` is merging in (``MERGE_HEAD``), none outside a merge."""
    try:
        text = (Path(repo.path) / "MERGE_HEAD").read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return []
    return [pygit2.Oid(hex=line.strip()) for line in text.splitlines() if line.strip()]


def _staged_lines(hook: str, found: list[Violation]) -> list[str]:
    return [f"truss-files {hook}: {v.path or '-'}: [{v.rule}] {v.message}" for v in found]


_REPAIR_HINT = (
    "if a truss-files write was interrupted (a crash, a kill), run `truss-files repair` to "
    "bring the work tree and index back in step with the branch, then commit again"
)


def pre_commit(repo: pygit2.Repository) -> list[str]:
    """Staged store files: parse, path, id, new entries unverified, verdicts, no deletes,
    no older versions put back. Trust moves wait for commit-msg, which knows whether the
    commit is a revert.

    A writer killed between moving the branch and syncing the index leaves the index one
    write behind: its new entries look deleted, its changed entries look rolled back. Those
    refusals name ``truss-files repair``, so the user's next ``git commit`` cannot quietly
    delete an entry."""
    staged = _staged(repo, "")
    if staged is None:
        return []
    commit, is_root = staged
    skip = _UNSIGNED_RULES | {"transition"}
    found = [v for v in check_commit(repo, commit, is_root) if v.rule not in skip]
    found += secret_violations(repo, commit)
    lines = [
        f"{line}; {_REPAIR_HINT}" if v.rule == "no-delete" else line
        for v, line in zip(found, _staged_lines("pre-commit", found), strict=True)
    ]
    return lines + _behind_lines(repo, commit)


def _behind_lines(repo: pygit2.Repository, commit: pygit2.Commit) -> list[str]:
    """Signs of an interrupted write: a journal record of a dead writer, or a staged store
    file that is an older version of itself."""
    lines = []
    if orphans(Path(repo.path)):
        lines.append(
            "truss-files pre-commit: [interrupted-write] a truss-files write was interrupted "
            f"before the index caught up with the branch; {_REPAIR_HINT}"
        )
    head = commit.parents[0] if commit.parents else None
    if head is None:
        return lines
    changed = [
        d.new_file.path
        for d in head.tree.diff_to_tree(commit.tree).deltas
        if d.status_char() == "M" and is_store_path(d.new_file.path)
    ]
    older = history_versions(repo, head.parents[0] if head.parents else None, set(changed))
    for path in changed:
        if str(commit.tree[path].id) in older[path]:
            lines.append(
                f"truss-files pre-commit: {path}: [older-version] the index holds an older "
                f"version of this store file, so this commit would roll it back; "
                f"{_REPAIR_HINT} (to undo a change on purpose, use `truss-files revert`)"
            )
    return lines


def commit_msg(repo: pygit2.Repository, message: str) -> list[str]:
    """Store commits carry ``Truss-Op`` trailers; trust moves are judged with them."""
    staged = _staged(repo, message)
    if staged is None:
        return []
    commit, is_root = staged
    found = [v for v in check_commit(repo, commit, is_root) if v.rule not in _UNSIGNED_RULES]
    lines = _staged_lines("commit-msg", found)
    # A merge needs no trailer: it is judged against each parent by the audit (above), and
    # `git merge`'s own message is what a merge of store branches can finish with.
    merging = len(commit.parents) > 1
    if not merging and not any(line.startswith("Truss-Op: ") for line in message.splitlines()):
        lines.append(
            "truss-files commit-msg: [trailers] this commit changes store files but its message "
            "has no `Truss-Op: <op>` trailer (write, promote, reject, demote, supersede, "
            "revert, config, signers, ...); add one as the last paragraph, or let "
            "truss-files make the commit (`truss-files write`, `promote`, ...; for "
            "allowed_signers and [roles], `truss-files signers add` and `roles grant`)"
        )
    return lines


def _push_updates(stdin: str, environ: Mapping[str, str]) -> list[tuple[str, str, str, str]]:
    updates = []
    for line in stdin.splitlines():
        parts = line.split()
        if len(parts) == 4:
            updates.append((parts[0], parts[1], parts[2], parts[3]))
    if not updates and environ.get("PRE_COMMIT_TO_REF"):
        # The pre-commit framework keeps stdin for itself and passes the range this way.
        updates.append(
            (
                environ.get("PRE_COMMIT_LOCAL_BRANCH", ""),
                environ["PRE_COMMIT_TO_REF"],
                environ.get("PRE_COMMIT_REMOTE_BRANCH", ""),
                environ.get("PRE_COMMIT_FROM_REF", "0" * 40),
            )
        )
    return updates


def _unnamed_push(
    repo: pygit2.Repository, environ: Mapping[str, str]
) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """What a push sends when nobody said: pre-commit passes no range when the whole history
    down to a root commit is new to the remote (a first push, a branch of its own), as it
    keeps stdin and sets no ``PRE_COMMIT_TO_REF``. The local ref it names (what git wrote:
    ``refs/heads/topic``, ``HEAD~2``, a commit id), else HEAD, is then audited back to what
    the remote already has, or to the trust root, so the hook never passes a push it did not
    judge; a name it cannot resolve is refused."""
    local = environ.get("PRE_COMMIT_LOCAL_BRANCH", "").strip()
    remote_ref = environ.get("PRE_COMMIT_REMOTE_BRANCH", "")
    if not local:
        commit = _head(repo)
        return ([("HEAD", str(commit.id), remote_ref, "0" * 40)] if commit else []), []
    commit = _resolve(repo, local)
    if commit is None:
        return [], [
            f"truss-files: rejected {remote_ref or local}: [unaudited] pre-commit named no "
            f"range and the local ref '{local}' does not resolve to a commit here, so "
            "nothing was judged; push a branch by name (`git push origin BRANCH`)"
        ]
    return [(local, str(commit.id), remote_ref, "0" * 40)], []


def _resolve(repo: pygit2.Repository, name: str) -> pygit2.Commit | None:
    try:
        return repo.revparse_single(name).peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        return None


def pre_push(
    repo: pygit2.Repository, remote: str, stdin: str, environ: Mapping[str, str]
) -> list[str]:
    """Audit what a push sends: every commit the remote does not have yet."""
    root = pinned_root(repo, environ)
    protected = protected_branches(repo, remote)
    known = []
    for ref in repo.references:
        if ref.startswith(f"refs/remotes/{remote}/"):
            commit = _commit(repo, str(repo.references[ref].resolve().target))
            if commit is not None:
                known.append(commit.id)
    lines: list[str] = []
    seen: set[str] = set()
    updates = _push_updates(stdin, environ)
    if not updates:
        updates, lines = _unnamed_push(repo, environ)
    for _local_ref, local_sha, remote_ref, remote_sha in updates:
        protected_ref = bool(remote_ref) and (
            _is_protected(remote_ref, protected)
            or _reaches_root(repo, remote_ref, remote_sha, root)
        )
        if _ZERO.match(local_sha):
            if protected_ref:
                lines.append(_delete_line(remote_ref, remote_sha))
            continue
        try:
            pushed = repo[local_sha]
        except (KeyError, ValueError, pygit2.GitError):
            lines.append(
                f"truss-files: rejected {remote_ref or local_sha}: commit {local_sha[:12]}: "
                "[unreadable] the pushed commit is not in this repository, so nothing was "
                "judged; fetch it or push a branch by name"
            )
            continue
        try:
            tip = pushed.peel(pygit2.Commit)
        except (ValueError, pygit2.GitError):
            continue  # a tag of a tree or blob: nothing of the store's
        hide = list(known)
        old = _commit(repo, remote_sha) if not _ZERO.match(remote_sha) else None
        if old is not None:
            hide.append(old.id)
            if (
                protected_ref
                and old.id != tip.id
                and not repo.descendant_of(tip.id, old.id)
                and not _erasure_of(repo, tip, old)
            ):
                lines.append(_force_line(remote_ref, str(old.id), local_sha))
        for v in check_new_commits(repo, tip, hide, root, seen):
            lines.append(_violation_line(remote_ref or local_sha[:12], v))
    return lines


def pre_receive(repo: pygit2.Repository, stdin: str, environ: Mapping[str, str]) -> list[str]:
    """The server's gate: every new commit of every updated ref, and protected branches."""
    root = pinned_root(repo, environ)
    protected = protected_branches(repo)
    known = []
    for name in repo.references:
        commit = _commit(repo, str(repo.references[name].resolve().target))
        if commit is not None:
            known.append(commit.id)
    lines: list[str] = []
    seen: set[str] = set()
    for line in stdin.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        old_sha, new_sha, ref = parts
        if ref == NOTES_REF:
            lines.extend(_notes_lines(repo, ref, old_sha, new_sha))
            continue
        is_protected = _is_protected(ref, protected) or _reaches_root(repo, ref, old_sha, root)
        if _ZERO.match(new_sha):
            if is_protected:
                lines.append(_delete_line(ref, old_sha))
            continue
        try:
            pushed = repo[new_sha]
        except (KeyError, ValueError, pygit2.GitError):
            # Fail closed: an object we cannot read (say, outside the quarantine we were
            # shown) is an object we cannot judge.
            lines.append(
                f"truss-files: rejected {ref}: commit {new_sha[:12]}: [unreadable] the pushed "
                "object is not readable by the hook; nothing was judged, so nothing is accepted"
            )
            continue
        try:
            tip = pushed.peel(pygit2.Commit)
        except (ValueError, pygit2.GitError):
            continue  # a tag of a tree or blob: nothing of the store's
        if is_protected and not _ZERO.match(old_sha):
            old = _commit(repo, old_sha)
            if (
                old is not None
                and old.id != tip.id
                and not repo.descendant_of(tip.id, old.id)
                and not _erasure_of(repo, tip, old)
            ):
                lines.append(_force_line(ref, old_sha, new_sha))
        for v in check_new_commits(repo, tip, known, root, seen):
            lines.append(_violation_line(ref, v))
    if lines and root is None:
        lines.append(
            f"truss-files: this repository pins no trust root; an operator sets it with "
            f"`git config {ROOT_CONFIG} <root commit>` here"
        )
    return lines


def _erasure_of(repo: pygit2.Repository, tip: pygit2.Commit, old: pygit2.Commit) -> bool:
    """The one force-push a protected branch takes: ``tip`` holds an operator-signed erasure
    record whose old tip is the branch as this server has it and whose map covers every
    commit the push drops (each new commit is then judged by the audit's erasure rules)."""
    for record in Erasures.at(repo, tip).records:
        if record.old_tip != str(old.id):
            continue
        walker = repo.walk(old.id)
        walker.hide(tip.id)
        if all(str(c.id) in record.rewritten for c in walker):
            return True
    return False


def _notes_lines(repo: pygit2.Repository, ref: str, old_sha: str, new_sha: str) -> list[str]:
    """The gate for the sigstore attestations: every new or changed note must verify (as the
    audit checks it), and none may disappear."""
    old = {} if _ZERO.match(old_sha) else notes_of(repo, old_sha)
    new = {} if _ZERO.match(new_sha) else notes_of(repo, new_sha)
    lines = [
        f"truss-files: rejected {ref}: commit {cid[:12]}: [sigstore-note-delete] the push "
        "removes this commit's attestation; attestations are only added or replaced"
        for cid in sorted(set(old) - set(new))
    ]
    for cid, blob in sorted(new.items()):
        if old.get(cid) == blob:
            continue
        commit = _commit(repo, cid)
        if commit is None:
            lines.append(
                f"truss-files: rejected {ref}: commit {cid[:12]}: [sigstore-attestation] the "
                "note annotates a commit this repository does not hold; push that commit too"
            )
            continue
        lines.extend(_violation_line(ref, v) for v in check_note(repo, commit, blob))
    return lines


def _violation_line(ref: str, v: Violation) -> str:
    where = f" {v.path}" if v.path else ""
    return f"truss-files: rejected {ref}: commit {v.commit[:12]}{where}: [{v.rule}] {v.message}"


def _delete_line(ref: str, old: str) -> str:
    return (
        f"truss-files: rejected {ref}: commit {old[:12]}: [protected-delete] deleting a "
        f"protected branch ({PROTECTED_CONFIG}); store history is never deleted"
    )


def _force_line(ref: str, old: str, new: str) -> str:
    return (
        f"truss-files: rejected {ref}: commit {new[:12]}: [non-fast-forward] it does not "
        f"descend from {old[:12]}, and {ref} is protected ({PROTECTED_CONFIG}); fetch, merge "
        "(`truss-files sync`) and push again instead of forcing"
    )


_HOOKS: dict[str, Callable[[pygit2.Repository, Sequence[str], str, Mapping[str, str]], list[str]]]
_HOOKS = {
    "pre-commit": lambda repo, args, stdin, env: pre_commit(repo),
    "commit-msg": lambda repo, args, stdin, env: commit_msg(repo, _read_message(args)),
    "pre-push": lambda repo, args, stdin, env: pre_push(
        repo, args[0] if args else env.get("PRE_COMMIT_REMOTE_NAME", "origin"), stdin, env
    ),
    "pre-receive": lambda repo, args, stdin, env: pre_receive(repo, stdin, env),
}
HOOK_NAMES = tuple(_HOOKS)


def _read_message(args: Sequence[str]) -> str:
    if not args:
        raise UsageError("commit-msg needs the message file git passes it")
    try:
        return Path(args[0]).read_text(errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read the commit message {args[0]}: {exc.strerror}") from exc


def run_hook(
    name: str,
    args: Sequence[str],
    *,
    stdin: bytes | None = None,
    chain: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> HookResult:
    """Run the chained hook (if any) and then our check; git reads the exit code.

    ``stdin`` is what git wrote to the hook (pre-push and pre-receive read it): both the
    chained hook and our check see all of it. None leaves the chained hook git's stdin."""
    env = os.environ if environ is None else environ
    if name not in _HOOKS:
        raise UsageError(f"unknown hook '{name}'; use one of {', '.join(HOOK_NAMES)}")
    if chain and os.path.isfile(chain) and os.access(chain, os.X_OK):
        proc = subprocess.run([chain, *args], input=stdin, env=dict(env), check=False)
        if proc.returncode != 0:
            return HookResult(
                proc.returncode, (f"truss-files: {chain} failed (exit {proc.returncode})",)
            )
    # FROM_ENV: GIT_DIR, GIT_INDEX_FILE and, in pre-receive, the quarantine's
    # GIT_OBJECT_DIRECTORY / GIT_ALTERNATE_OBJECT_DIRECTORIES that hold the pushed objects.
    try:
        repo = pygit2.Repository(
            env.get("GIT_DIR") or ".", flags=pygit2.enums.RepositoryOpenFlag.FROM_ENV
        )
    except pygit2.GitError as exc:
        raise StoreError(f"hook {name}: no git repository here ({exc})") from exc
    lines = _HOOKS[name](repo, args, (stdin or b"").decode("utf-8", "replace"), env)
    return HookResult(1 if lines else 0, tuple(lines))
