"""Child runs: which run a run was started under, recorded beside the run records.

``context --run C --parent P`` and ``tool … --run C --parent P`` link child ``C`` to parent
``P`` at C's first call with a parent. The link is kept under ``.git/truss/runs/`` (never in
the work tree; a durable child's ledger names its parent in ``run.json`` too)::

    .git/truss/runs/parent/<C>      "<P> <principal>\\n"   (created once: a hard link)
    .git/truss/runs/children/<P>    "<C> <principal>\\n"   one line per child (appended)

``<principal>`` is the principal of the key that made the link. Whose notes a link shares,
and with whom, is decided in ``authority`` (a run's own notes): only notes signed by the
viewing run's principal, through links made by that same principal -- a link file written by
anyone else shares nothing of theirs, and lets no stranger into the parent's view.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import TYPE_CHECKING, NamedTuple

from ..authority import RunView
from ..errors import Forbidden, TrussError, UsageError
from ..gitdir import GitDir
from .ledger import RUN_REF_PREFIX, RunLedger, check_run_id

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["Link", "children", "link", "link_run", "parent"]


class Link(NamedTuple):
    run: str  # the other run (the parent, or a child)
    principal: str  # who made the link


def _folder(git: GitDir, part: str) -> str:
    return os.path.join(git.cache_str, "runs", part)


def _lines(path: str) -> list[Link]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in text.split("\n"):
        run, _, principal = line.partition(" ")
        if run and principal and " " not in principal:
            out.append(Link(run, principal))
    return out


def parent(git: GitDir, run: str) -> Link | None:
    """The parent ``run`` was linked to, and by whom; None for a run started on its own."""
    found = _lines(os.path.join(_folder(git, "parent"), run))
    return found[0] if found else None


def children(git: GitDir, run: str) -> list[Link]:
    """The runs linked to ``run`` as their parent, first linked first, each once."""
    seen: dict[str, Link] = {}
    for found in _lines(os.path.join(_folder(git, "children"), run)):
        seen.setdefault(found.run, found)
    return list(seen.values())


def link(git: GitDir, child: str, parent_run: str, principal: str) -> bool:
    """Record ``child`` as a child of ``parent_run``, made by ``principal``. True when this
    call made the link, False when it was there already; refuses another parent, a run as
    its own parent, and a parent whose runs another principal recorded."""
    check_run_id(child)
    check_run_id(parent_run)
    if child == parent_run:
        raise UsageError(f"run {child} cannot be its own parent; give --parent another run id")
    known = parent(git, child)
    if known is not None:
        if known.run != parent_run:
            raise UsageError(
                f"run {child} is already a child of {known.run}; start a new run id to work "
                f"under {parent_run}"
            )
        return False
    for other in (parent(git, parent_run), *children(git, parent_run)):
        if other is not None and other.principal != principal:
            raise Forbidden(
                f"run {parent_run} belongs to {other.principal}, not {principal}; a child run "
                "is started with a key of its parent's principal"
            )
    folder = _folder(git, "parent")
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{child}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(f"{parent_run} {principal}\n")
    try:
        os.link(tmp, os.path.join(folder, child))  # created once: of two racers one wins
    except FileExistsError:
        return _settled(git, child, parent_run)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    kids = _folder(git, "children")
    os.makedirs(kids, exist_ok=True)
    # One short line in append mode: concurrent children of one parent never interleave.
    fd = os.open(os.path.join(kids, parent_run), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{child} {principal}\n".encode())
    finally:
        os.close(fd)
    return True


def _settled(git: GitDir, child: str, parent_run: str) -> bool:
    known = parent(git, child)
    if known is not None and known.run != parent_run:
        raise UsageError(f"run {child} is already a child of {known.run}; start a new run id")
    return False


def link_run(store: Store, child: str, parent_run: str, principal: str | None) -> bool:
    """``link`` for a call signed by ``principal`` (the calling key's): refused without a
    key, and when the parent is a durable run whose ledger names another principal."""
    check_run_id(parent_run)
    if principal is None:
        raise Forbidden(
            f"run {child} cannot be linked to {parent_run}: no key of a principal in "
            ".truss/allowed_signers signs this call; pass --key or set user.signingkey"
        )
    if store.git.tip(RUN_REF_PREFIX + parent_run) is not None:
        owner = RunLedger(store, parent_run).verified().principal
        if owner != principal:
            raise Forbidden(
                f"run {parent_run} belongs to {owner}, not {principal}; a child run is "
                "started with a key of its parent's principal"
            )
    return link(GitDir.discover(store.git.git_dir), child, parent_run, principal)


def key_principal(store: Store) -> str | None:
    """The principal of the key this store signs with, None without a usable one."""
    try:
        return store.principal()
    except TrussError:
        return None


def run_view(git: GitDir, run: str, principal: str | None) -> RunView:
    """The run as ``principal`` sees it: its parent, the parent's other children and its own
    children, as far as links ``principal`` made say so (a link anyone else made shares
    nothing: the stranger's notes are not signed by ``principal``, and ours are not shown to
    a run whose principal is the stranger)."""
    if principal is None:
        return RunView(run, None)
    shared: set[str] = set()
    up = parent(git, run)
    if up is not None and up.principal == principal:
        shared.add(up.run)
        shared.update(c.run for c in children(git, up.run) if c.principal == principal)
    shared.update(c.run for c in children(git, run) if c.principal == principal)
    shared.discard(run)
    return RunView(run, principal, frozenset(shared))
