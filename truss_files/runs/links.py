"""Child runs: which run a run was started under, as a signed record beside the run ledgers.

``context --run C --parent P`` and ``tool … --run C --parent P`` link child ``C`` to parent
``P`` at C's first call. The link is one signed commit (as every call of a run ledger is),
outside the store's branch, under two refs::

    refs/truss/parent/<C>         the link: created once (compare-and-swap from nothing)
    refs/truss/children/<P>/<C>   the same commit, so P finds its children without a scan

Its tree holds ``link.json`` (``{"child", "parent", "principal", "time"}``) and its message
``Truss-Op: run-link`` trailers. Whose link it is comes from the commit's verified signature
(a key of a principal holding ``agent``), never from the file: a record anyone could write
(a cache file, an unsigned or hand-made commit, a commit whose file names another principal
or another run) links nothing.

The rules, each refused with what to do instead: a run is its own parent never; a run that
has made its first call on its own (a start record, a ledger, a tool call) is never
re-parented, nor a child moved to another parent; a parent whose runs another principal
recorded (its ledger, its start, its own link, its other children) takes no child of ours;
and no link closes a cycle. Whose notes a link shares, and with whom, is decided in
``authority`` (a run's own notes): only notes signed by the viewing run's principal, through
links that same principal signed.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING, Final, NamedTuple

from ..errors import Forbidden, SignatureError, TrussError, UsageError
from ..format.trailers import stamp, trailers
from ..git.gitdir import GitDir
from ..trust.authority import RunView
from .ledger import RUN_REF_PREFIX, RunLedger, check_run_id
from .start import load_start

if TYPE_CHECKING:
    from ..store.store import Store

__all__ = [
    "CHILDREN_PREFIX",
    "PARENT_PREFIX",
    "RunLink",
    "children",
    "key_principal",
    "link",
    "link_run",
    "mark_seen",
    "parent",
    "run_view",
]

PARENT_PREFIX: Final = "refs/truss/parent/"
CHILDREN_PREFIX: Final = "refs/truss/children/"
MAX_DEPTH: Final = 64  # a chain of parents deeper than this is refused as a likely cycle


class RunLink(NamedTuple):
    """A signed parent-child link between two runs, seen from one of them."""

    run: str  # the other run (the parent, or a child)
    principal: str  # whose key signed the link


def _read(store: Store, ref: str, child: str) -> tuple[str, str] | None:
    """``(parent, principal)`` of the signed link commit at ``ref`` for ``child``; None when
    there is none or it proves nothing (unsigned, another's file, another run)."""
    try:
        commit = store.git.tip(ref)
    except TrussError:
        return None
    if commit is None:
        return None
    try:
        signature, payload = commit.gpg_signature
        if signature is None:
            return None
        principal, _ = store.policy().check_signature(
            signature.decode("ascii", "replace"), payload, "git", {"agent"}
        )
        data = json.loads(commit.tree["link.json"].data)  # type: ignore[union-attr]
    except (SignatureError, KeyError, ValueError, TypeError, AttributeError):
        return None
    if not isinstance(data, dict) or data.get("child") != child:
        return None
    found = data.get("parent")
    if data.get("principal") != principal or not isinstance(found, str):
        return None
    return found, principal


def parent(store: Store, run: str) -> RunLink | None:
    """The parent ``run`` was linked to, and by whom; None for a run started on its own."""
    found = _read(store, PARENT_PREFIX + run, run)
    return RunLink(*found) if found is not None else None


def children(store: Store, run: str) -> list[RunLink]:
    """The runs linked to ``run`` as their parent, first linked first."""
    prefix = f"{CHILDREN_PREFIX}{run}/"
    out: list[tuple[int, str, RunLink]] = []
    for name in store.git.repo.references:
        if not name.startswith(prefix):
            continue
        child = name[len(prefix) :]
        found = _read(store, name, child)
        mine = parent(store, child)
        # The children ref is a finding aid: the child's own link must say the same.
        if found is None or mine is None or mine.run != run or found[0] != run:
            continue
        commit = store.git.tip(name)
        when = commit.commit_time if commit is not None else 0
        out.append((when, child, RunLink(child, found[1])))
    out.sort(key=lambda x: (x[0], x[1]))
    return [x[2] for x in out]


def _seen_path(git: GitDir, run: str) -> str:
    return os.path.join(git.cache_str, "runs", "seen", run)


def mark_seen(git: GitDir, run: str) -> None:
    """Note (a cache file: no store opened) that ``run`` made a call on its own, without a
    parent: it can no longer get one."""
    path = _seen_path(git, check_run_id(run))
    if os.path.exists(path):
        return
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))


def _started(store: Store, run: str) -> bool:
    if store.git.tip(RUN_REF_PREFIX + run) is not None or os.path.exists(
        _seen_path(GitDir.discover(store.git.git_dir), run)
    ):
        return True
    try:
        return load_start(store, run) is not None
    except TrussError:
        return True  # a damaged start record: the run started, whatever it recorded


def _owners(store: Store, run: str) -> set[str]:
    """Whose run ``run`` is, as far as signed or recorded facts say."""
    found: set[str] = set()
    up = parent(store, run)
    if up is not None:
        found.add(up.principal)
    found.update(c.principal for c in children(store, run))
    if store.git.tip(RUN_REF_PREFIX + run) is not None:
        found.add(RunLedger(store, run).verified().principal)
    with contextlib.suppress(TrussError):
        start = load_start(store, run)
        if start is not None and start.owner is not None:
            found.add(start.owner)
    return found


def link(store: Store, child: str, parent_run: str, principal: str) -> bool:
    """Record ``child`` as a child of ``parent_run``, signed by this store's key (of
    ``principal``). True when this call made the link, False when it was there already."""
    check_run_id(child)
    check_run_id(parent_run)
    if child == parent_run:
        raise UsageError(f"run {child} cannot be its own parent; give --parent another run id")
    known = parent(store, child)
    if known is not None:
        if known.run != parent_run:
            raise UsageError(
                f"run {child} is already a child of {known.run}; a run's parent is set at its "
                f"first call. Start a new run id to work under {parent_run}"
            )
        return False
    if _started(store, child):
        raise UsageError(
            f"run {child} already made its first call without a parent; a run's parent is set "
            f"at its first call. Start a new run id with --parent {parent_run}"
        )
    for owner in _owners(store, parent_run):
        if owner != principal:
            raise Forbidden(
                f"run {parent_run} belongs to {owner}, not {principal}; a child run is "
                "started with a key of its parent's principal"
            )
    seen = {child}
    up: str | None = parent_run
    for _ in range(MAX_DEPTH):
        if up is None:
            break
        if up in seen:
            raise UsageError(
                f"linking {child} under {parent_run} would make a cycle ({parent_run} descends "
                f"from {child}); give --parent a run that is not {child}'s own descendant"
            )
        seen.add(up)
        above = parent(store, up)
        up = above.run if above is not None else None
    else:
        raise UsageError(f"run {parent_run} has more than {MAX_DEPTH} ancestors; link higher up")
    return _record(store, child, parent_run, principal)


def _record(store: Store, child: str, parent_run: str, principal: str) -> bool:
    git = store.git
    body = {"child": child, "parent": parent_run, "principal": principal}
    body["time"] = stamp(store.clock())
    files: dict[str, bytes | None] = {
        "link.json": json.dumps(body, indent=2, sort_keys=True).encode() + b"\n"
    }
    tree = git.write_tree(None, files)
    assert tree is not None
    subject = f"truss: run {child} is a child of {parent_run}"
    message = subject + "\n\n" + trailers(op="run-link", run=child, parent=parent_run)
    oid = git.make_commit(tree, [], message, store.signer, store.identity(principal))
    if not git.update_ref(PARENT_PREFIX + child, None, oid, subject):
        known = parent(store, child)  # another process linked it first: the same parent?
        if known is None or known.run != parent_run:
            raise UsageError(
                f"run {child} was linked elsewhere while this call ran; start a new run id"
            )
        return False
    git.update_ref(f"{CHILDREN_PREFIX}{parent_run}/{child}", None, oid, subject)
    return True


def link_run(store: Store, child: str, parent_run: str, principal: str | None) -> bool:
    """``link`` for a call signed by ``principal`` (the calling key's): refused without a key."""
    check_run_id(parent_run)
    if principal is None:
        raise Forbidden(
            f"run {child} cannot be linked to {parent_run}: no key of a principal in "
            ".truss/allowed_signers signs this call; pass --key or set user.signingkey"
        )
    return link(store, child, parent_run, principal)


def key_principal(store: Store) -> str | None:
    """The principal of the key this store signs with, None without a usable one."""
    try:
        return store.principal()
    except TrussError:
        return None


def run_view(store: Store, run: str, principal: str | None) -> RunView:
    """The run as ``principal`` sees it: its parent, the parent's other children and its own
    children, through links ``principal`` signed (a link anyone else signed shares nothing:
    the stranger's notes are not signed by ``principal``, and ours are not shown to a run
    whose principal is the stranger)."""
    if principal is None:
        return RunView(run, None)
    shared: set[str] = set()
    up = parent(store, run)
    if up is not None and up.principal == principal:
        shared.add(up.run)
        shared.update(c.run for c in children(store, up.run) if c.principal == principal)
    shared.update(c.run for c in children(store, run) if c.principal == principal)
    shared.discard(run)
    return RunView(run, principal, frozenset(shared))
