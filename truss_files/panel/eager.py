"""The eager half of a write: run the panel on entries as they land, when the policy says so.

Above the store and the panel runner, below the facade: every face writes through
``write_and_verify`` here (``MemoryStore.write_entries`` for the CLI and Python callers, the
tools for ``write_memory`` and the ``memory`` binding), which commits and then runs
``verify_written``; the verification policy itself is a value (``policy``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.settings import Settings, settings_for
from ..errors import ConfigError, SignatureError, TrussError
from ..model import Entry, Trust
from ..signing import Ed25519Signer, PublicKey
from ..store.store import Store
from .report import EntryOutcome
from .runner import verify

__all__ = ["Written", "panel_store_for", "verify_written", "write_and_verify"]


@dataclass(frozen=True)
class Written:
    """What a write left (``MemoryStore.write_entries``): each entry as it stands after the
    commit and, where the policy is eager for its kind, the panel; the panel's outcome for
    each entry it ran on; and why it could not run, when it could not."""

    entries: tuple[Entry, ...]
    outcomes: tuple[EntryOutcome, ...] = ()
    note: str | None = None

    def outcome_for(self, entry_id: str) -> EntryOutcome | None:
        return next((o for o in self.outcomes if o.id == entry_id), None)

    def result(self, entry_id: str | None = None, *, path: bool = False) -> dict[str, Any]:
        """The public result of one entry's write (the first by default), as
        ``truss-files write`` prints it and ``write_memory`` returns it: ``{"id", "trust"}``
        -- its trust once the write is done --, ``path`` when asked, and ``verification``
        (the panel's outcome) and ``note`` (why the panel could not run) when there are."""
        entry = next(e for e in self.entries if entry_id is None or e.id == entry_id)
        data: dict[str, Any] = {"id": entry.id, "trust": entry.trust.value}
        if path:
            data["path"] = entry.path
        outcome = self.outcome_for(entry.id)
        if outcome is not None:
            data["verification"] = outcome.to_dict()
        if self.note:
            data["note"] = self.note
        return data


def write_and_verify(
    store: Store,
    entries: Iterable[Entry],
    *,
    settings: Settings | None = None,
    subject: str | None = None,
) -> Written:
    """The one way a face writes: ``entries`` (unverified, from ``new_entry``) in one
    signed commit (``Store.write_many``; ``subject`` is its first line), then the
    verification policy of ``settings`` (default ``settings_for(store)``) on the entries
    that commit added: where it is eager for their kind, the panel runs now, each PASS or
    FAIL a second, panel-signed commit (``verify_written``). An entry already stored keeps
    its own history."""
    # Read before the commit: a broken settings file (or contract) fails the write whole
    # instead of leaving it half done.
    settings = settings or settings_for(store)
    stored, added = store._write_batch(entries, subject)
    outcomes, note = verify_written(store, [e for e in stored if e.id in added], settings=settings)
    if outcomes:
        snap = store.snapshot()
        decided = {o.id for o in outcomes}
        stored = [store.get(e.id, snap) if e.id in decided else e for e in stored]
    if added:
        # A long-lived process that asked a semantic query embeds the new notes now, not in
        # its next query (``recall.engine.embed_written``; nothing loads otherwise).
        from ..recall.engine import embed_written

        embed_written(store)
    return Written(tuple(stored), tuple(outcomes), note)


def panel_store_for(store: Store) -> Store | None:
    """A store that signs with a panel key: ``TRUSS_PANEL_KEY``, else ``store`` itself when
    its key holds the panel role, else None."""

    path = store.environ.get("TRUSS_PANEL_KEY")
    if path:
        if not Path(path).is_file():
            raise ConfigError(f"TRUSS_PANEL_KEY names {path}, which is not a key file")
        signer = Ed25519Signer.load(Path(path))
        where = store.git.workdir or store.git.git_dir
        return Store(where, signer=signer, clock=store.clock, environ=store.environ)
    try:
        _, roles = store.policy().roles_of(PublicKey.from_line(store.signer.public_line))
    except SignatureError:
        return None
    return store if "panel" in roles else None


def verify_written(
    store: Store,
    entries: Sequence[Entry],
    *,
    settings: Settings | None = None,
) -> tuple[list[EntryOutcome], str | None]:
    """The eager half of a write (``MemoryStore.write_entries`` calls it after the commit):
    run the panel on those ``entries`` whose kind is eager and that are still unverified.
    Returns the outcomes and, when the panel could not run, a note saying why (the entries
    stay unverified; ``truss-files verify`` picks them up)."""

    settings = settings or settings_for(store)
    policy = settings.policy
    due = [e.id for e in entries if policy.runs_on_write(e.kind) and e.trust is Trust.UNVERIFIED]
    if not due:
        return [], None
    try:
        verifier = panel_store_for(store)
    except TrussError as exc:
        # The entries are already committed: a bad TRUSS_PANEL_KEY must not read as a failed
        # write (an agent would write again), only as a panel that did not run.
        return [], (
            f"eager verification did not run: {exc.message}; the entry stays unverified until "
            "`truss-files verify` runs"
        )
    if verifier is None:
        return [], (
            f"the verification policy is eager but {store.principal()} does not hold the panel "
            "role; the entry stays unverified until `truss-files verify` runs with a panel key "
            "(or set TRUSS_PANEL_KEY)"
        )
    try:
        report = verify(verifier, due, settings=settings)
    except TrussError as exc:
        return [], f"eager verification did not run: {exc.message}; it stays unverified"
    return list(report.outcomes), None
