"""Where a run starts: its first ``context --run RUN`` records the identity in force.

The record, ``.git/truss/context/runs/<run>.json``, names the commit whose ``identity/``,
``principals/`` and ``truss.toml`` the run read, and what the caller said (principal, agent,
project, tool flags, the memory note). Every later ``context`` for the run rebuilds tools and
system from that commit, so their bytes stay the same while memory moves and even after an
identity amendment lands; a run that starts later records a later commit and sees the new
``self.md``. An amendment thus takes effect at run boundaries, never mid-run.

The record is created once, atomically (a hard link of a finished file: of two processes
starting one run, one wins and the other reads its record). It holds a commit id, not text:
what a run reads is always git's own objects, and the commit must stay in the branch's history.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Final

from ..errors import StoreError, UsageError
from ..git.gitdir import GitDir
from .ledger import check_run_id

if TYPE_CHECKING:
    from ..store.store import Store

__all__ = ["RunStart", "load_start", "start_run"]

FORMAT: Final = 1


@dataclass(frozen=True)
class RunStart:
    run: str
    commit: str
    principal: str | None = None
    agent: str | None = None
    project: str | None = None
    gates: tuple[str, ...] = ()
    instruction: str = ""
    owner: str | None = None  # the principal of the key that started the run, if it had one
    # The configured instructions at the start, name -> text (context/instruction.py); the
    # built-in note is ``instruction``.
    instructions: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> str:
        data = asdict(self)
        data["gates"] = list(self.gates)
        data["instructions"] = dict(self.instructions)
        return json.dumps({"format": FORMAT, **data}, sort_keys=True, ensure_ascii=False)


def _folder(store: Store) -> str:
    return os.path.join(GitDir.discover(store.git.git_dir).cache_str, "context", "runs")


def _path(store: Store, run: str) -> str:
    return os.path.join(_folder(store), f"{check_run_id(run)}.json")


def load_start(store: Store, run: str) -> RunStart | None:
    """The run's start record, or None when the run has not started here."""
    path = _path(store, run)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StoreError(
            f"{path}: the start record of run {run} cannot be read ({exc}); start a new run id"
        ) from exc
    try:
        if data.pop("format") != FORMAT:
            raise ValueError("unknown format")
        data["gates"] = tuple(data["gates"])
        data["instructions"] = tuple(sorted(dict(data.get("instructions", {})).items()))
        start = RunStart(**data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise StoreError(
            f"{path}: the start record of run {run} is not one truss-files wrote ({exc}); "
            "start a new run id"
        ) from exc
    if start.run != run:
        raise StoreError(f"{path} records run {start.run!r}, not {run!r}; start a new run id")
    return start


def start_run(
    store: Store,
    run: str,
    commit: str,
    *,
    principal: str | None,
    agent: str | None,
    project: str | None,
    gates: Sequence[str],
    instruction: Callable[[], str],
    owner: str | None = None,
    instructions: Callable[[], Mapping[str, str]] | None = None,
) -> tuple[RunStart, bool]:
    """The run's record: made now at ``commit`` (True), or the one already there (False).

    Later calls may leave the principal out; naming another one is refused, because the
    system bytes of a started run do not change. ``instruction`` is asked only for a new run
    (it reads the layered settings: a resumed run does not pay for them)."""
    found = load_start(store, run)
    if found is None:
        wanted = RunStart(
            run,
            commit,
            principal,
            agent,
            project,
            tuple(sorted(set(gates))),
            instruction(),
            owner,
            tuple(sorted((instructions() if instructions else {}).items())),
        )
        made = _create(store, run, wanted)
        found = wanted if made else load_start(store, run)
        if found is None:
            raise StoreError(f"the start record of run {run} vanished while it was written")
        if made:
            return found, True
    if principal is not None and principal != found.principal:
        raise UsageError(
            f"run {run} started with principal {found.principal!r}; its system prompt cannot "
            f"change mid-run. Drop --principal, or start a new run for {principal!r}"
        )
    if agent is not None and found.agent is not None and agent != found.agent:
        raise UsageError(
            f"run {run} started as agent {found.agent!r}, not {agent!r}; start a new run id"
        )
    return found, False


def _create(store: Store, run: str, start: RunStart) -> bool:
    folder = _folder(store)
    final = _path(store, run)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{run}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(start.to_json() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, final)  # create-if-absent, whole: never a half-written record
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
