"""The eager half of a write: run the panel on an entry as it lands, when the policy says so.

Above the store and the panel runner: a face writes through ``write_entry`` (or commits its own
way and calls ``verify_written``); the verification policy itself is a value (``policy``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, SignatureError, TrussError
from ..model import Entry, Kind, Trust
from ..settings import Settings, settings_for
from ..signing import Ed25519Signer, PublicKey
from ..store import Store
from .report import Outcome
from .runner import verify

__all__ = ["WriteResult", "panel_store_for", "verify_written", "write_entry"]


@dataclass(frozen=True)
class WriteResult:
    """The entry as it stands after the write (and, when eager, after the panel)."""

    entry: Entry
    outcome: Outcome | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.entry.id,
            "trust": self.entry.trust.value,
            "path": self.entry.path,
        }
        if self.outcome is not None:
            data["verification"] = self.outcome.to_dict()
        if self.note:
            data["note"] = self.note
        return data


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


def write_entry(
    store: Store,
    kind: Kind | str,
    key: str,
    body: str,
    *,
    settings: Settings | None = None,
    panel_store: Store | None = None,
    **fields: Any,
) -> WriteResult:
    """``store.write`` under the verification policy: when the kind is eager, run the panel
    on the new entry at once (promote, reject, or leave it unverified and say why)."""

    settings = settings or settings_for(store)
    entry = store.write(kind, key, body, **fields)
    outcomes, note = verify_written(store, [entry], settings=settings, panel_store=panel_store)
    if not outcomes:
        return WriteResult(entry, None, note)
    return WriteResult(store.get(entry.id), outcomes[0], note)


def verify_written(
    store: Store,
    entries: Sequence[Entry],
    *,
    settings: Settings | None = None,
    panel_store: Store | None = None,
) -> tuple[list[Outcome], str | None]:
    """The eager half of a write, for faces that commit entries their own way: run the panel
    on those ``entries`` whose kind is eager and that are still unverified. Returns the
    outcomes and, when the panel could not run, a note saying why (the entries stay
    unverified; ``truss-files verify`` picks them up)."""

    settings = settings or settings_for(store)
    policy = settings.policy
    due = [e.id for e in entries if policy.runs_on_write(e.kind) and e.trust is Trust.UNVERIFIED]
    if not due:
        return [], None
    try:
        verifier = panel_store or panel_store_for(store)
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
