"""Who may do what: the one place each trust rule at the edges is decided.

The library's check before a ref moves, the audit and the server gate all call these
functions, so a new face (a tool, a route, a hook) cannot forget a rule by forgetting to
copy it. Each section below is one promise of "Who may do what, at every edge"; the attack
on it lives in ``tests/adversarial/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .model import Entry, Trust

if TYPE_CHECKING:
    from .recall.gitread import GitDir

# --- layers and authors: who may write above the task layer or in another's name ---------


# --- checks: which commands may run as reviewers -----------------------------------------


# --- a run's own notes: proven by signature, shared with parent and siblings -------------
#
# An unverified entry is run R's own (seen by R below the trust floor, listed by R's memory
# tool as its own write, in R's L4) only when its ``produced_by`` names R -- or a run R shares
# notes with -- *and* the commit that added its file carries a verified signature of R's
# principal (``writers``). R's principal: the principal of the key making the call, which for
# a durable run must be the principal its ledger names (``viewer``). A child run shares its
# notes with its parent and the parent's other children, through links made by that same
# principal (``tools/runlinks``); a tombstone hides entries from its own run only, on the
# same proof. memory.ask's "a task's own" is a note a trainer's key added (``trainer_note``).

_RUN_PREFIX = "run:"


@dataclass(frozen=True)
class RunView:
    """Whose unverified notes a run may take as its own: ``run`` and the runs it shares
    notes with (``shared``), each proven by a signature of ``principal`` (None: nobody's)."""

    run: str
    principal: str | None
    shared: frozenset[str] = frozenset()

    @property
    def runs(self) -> frozenset[str]:
        return self.shared | {self.run}


def run_of(produced_by: str | None) -> str | None:
    """The run a ``run:<id>/<seq>`` LedgerRef names, else None."""
    if not produced_by or not produced_by.startswith(_RUN_PREFIX):
        return None
    run, sep, _ = produced_by[len(_RUN_PREFIX) :].partition("/")
    return run if sep and run else None


def owns(view: RunView | None, run: str | None, trust: Trust, writer: str | None) -> bool:
    """Whether a note of ``run`` (its ``produced_by``), at ``trust``, added by a commit that
    ``writer`` signed (None: no verified signature), is ``view``'s own."""
    return (
        view is not None
        and view.principal is not None
        and trust is Trust.UNVERIFIED
        and run is not None
        and run in view.runs
        and writer == view.principal
    )


def is_own(view: RunView | None, entry: Entry, writer: str | None) -> bool:
    """``owns`` for an entry in hand."""
    return owns(view, run_of(entry.provenance.produced_by), entry.trust, writer)


def own_delete(view: RunView | None, run: str | None, writer: str | None) -> bool:
    """Whether an unverified tombstone of ``run`` hides what it deletes from ``view``'s run:
    only the run's own, on the same proof (never a shared run's, never anyone else's)."""
    return (
        view is not None
        and view.principal is not None
        and run == view.run
        and writer == view.principal
    )


def run_view(git: GitDir, run: str, principal: str | None) -> RunView:
    """The run as ``principal`` sees it: its parent, the parent's other children and its own
    children, as far as links ``principal`` made say so (a link anyone else made shares
    nothing: the stranger's notes are not signed by ``principal``, and ours are not shown to
    a run whose principal is the stranger)."""
    from .tools import runlinks

    if principal is None:
        return RunView(run, None)
    shared: set[str] = set()
    up = runlinks.parent(git, run)
    if up is not None and up.principal == principal:
        shared.add(up.run)
        shared.update(c.run for c in runlinks.children(git, up.run) if c.principal == principal)
    shared.update(c.run for c in runlinks.children(git, run) if c.principal == principal)
    shared.discard(run)
    return RunView(run, principal, frozenset(shared))


def viewer(key_principal: str | None, ledger_principal: str | None) -> str | None:
    """A run's principal for own notes: the calling key's, which must be the one its durable
    ledger names when it has one (another principal's key sees no note as the run's own)."""
    if key_principal is None:
        return None
    if ledger_principal is not None and ledger_principal != key_principal:
        return None
    return key_principal


def trainers(roles: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """Whose notes memory.ask takes as a task's own: the principals holding ``trainer``."""
    return frozenset(roles.get("trainer", frozenset()))


def trainer_note(trust: Trust, writer: str | None, trained_by: frozenset[str]) -> bool:
    """Whether an unverified note in a task's own area counts as that task's own: a commit
    signed by a trainer's key added it."""
    return trust is Trust.UNVERIFIED and writer is not None and writer in trained_by
