"""Compaction: a summary the harness wrote stands in for the run's older notes in its L4.

``context compact --run R --summary FILE|-`` writes one ``context_summary`` entry for R: like
any write it lands unverified, produced by R (``run:R/<n>``, ``n`` the newest note it covers)
and signed by R's principal, so it is R's own by the same proof as every note of R
(``authority``). Its ``sources`` name the ledger refs of the notes it summarises
(``run:R/<seq>``); ``context`` then shows the newest summary first in R's L4 and leaves out
the notes its sources name, and every older summary. Nothing is deleted: the notes stay in the
store, readable through the tools as before; only the tail a model carries gets shorter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..errors import Forbidden, NotFound, UsageError
from ..format.scope import stamp
from ..model import Entry, Kind
from ..runs.ledger import check_run_id
from ..runs.links import key_principal
from ..runs.start import load_start
from ..tools.dispatch import seq_of
from .tail import own_notes

if TYPE_CHECKING:
    from ..store.store import Store

__all__ = ["SUMMARY_CHARS", "compact", "summary_key"]

SUMMARY_CHARS: Final = 20000  # a summary is shorter than what it replaces, or it is no summary


def summary_key(run: str) -> str:
    return f"summary-{run}"


def compact(store: Store, run: str, summary: str) -> Entry:
    """Write the summary of run ``run``'s L4 as its own ``context_summary`` (unverified)."""
    check_run_id(run)
    text = summary.strip()
    if not text:
        raise UsageError("the summary is empty; write what the run's notes said, then compact")
    if len(text) > SUMMARY_CHARS:
        raise UsageError(
            f"the summary is {len(text)} characters; the limit is {SUMMARY_CHARS}. A summary "
            "stands in for notes in the prompt: shorten it"
        )
    start = load_start(store, run)
    if start is None:
        raise NotFound(f"run {run} has not started; run `truss-files context --run {run}` first")
    principal = key_principal(store)
    if principal is None:
        raise Forbidden(
            f"compacting run {run} needs a key of its principal (the summary must be the "
            "run's own by signature); pass --key or set user.signingkey"
        )
    if start.owner is not None and start.owner != principal:
        raise Forbidden(
            f"run {run} was started by {start.owner}, not {principal}; only its own principal "
            "compacts it"
        )
    snap = store.snapshot()
    notes = own_notes(store, snap, run, principal)
    refs = sorted(
        {n.provenance.produced_by for n in notes if n.provenance.produced_by},
        key=lambda r: (len(r), r),
    )
    seq = max((seq_of(n, run) for n in notes), default=0) or 1
    entry = store.new_entry(
        Kind.CONTEXT_SUMMARY,
        summary_key(run),
        text,
        scope=stamp(None, agent=start.agent, project=start.project),
        produced_by=f"run:{run}/{seq}",
        sources=refs,
    )
    return store.write_many([entry])[0]
