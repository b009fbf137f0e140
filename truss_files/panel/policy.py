"""VerificationPolicy: *when* the panel runs — never what verified means.

- ``off``: the panel never runs; everything stays honestly unverified (verify refuses).
- ``lazy`` (default): entries wait for ``truss-files verify``.
- ``eager``: the panel runs in the write path, right after the entry lands.
- ``tiered``: per kind, from ``[policy.tiered]`` (e.g. decision = "eager", scratch = "off");
  kinds not listed are lazy.

Eager runs through ``write_entry`` — a policy-aware wrapper over ``MemoryStore.write`` that
faces call instead of ``store.write``. The store itself is unchanged: a write is still one
signed commit landing unverified, and a PASS is still a second, panel-signed commit, so an
eager write interrupted between the two leaves an ordinary unverified entry for ``verify``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, TrussError
from ..model import Entry, Kind, Trust

if TYPE_CHECKING:
    from ..settings import Settings
    from ..store import MemoryStore
    from .report import Outcome

MODES = ("off", "lazy", "eager", "tiered")
TIER_MODES = ("off", "lazy", "eager")
# Amendments of identity/self.md are judged by the panel like a kind of their own: its
# reviewers are [panel.reviewers] identity, its tier [policy.tiered] identity.
IDENTITY_KIND = "identity"


def kind_name(kind: Kind | str) -> str:
    """The name a kind goes by in per-kind tables: a Kind's value, or ``identity``."""
    if isinstance(kind, Kind):
        return kind.value
    return IDENTITY_KIND if kind == IDENTITY_KIND else Kind.parse(kind).value


@dataclass(frozen=True)
class VerificationPolicy:
    mode: str = "lazy"
    tiers: Mapping[str, str] = field(default_factory=dict)  # kind -> off | lazy | eager

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"verification policy {self.mode!r} is unknown; use {MODES}")
        for kind, mode in self.tiers.items():
            if mode not in TIER_MODES:
                raise ConfigError(f"policy.tiered.{kind} is {mode!r}; use {TIER_MODES}")

    @classmethod
    def from_settings(cls, settings: Settings) -> VerificationPolicy:
        prefix = "policy.tiered."
        tiers = {
            k[len(prefix) :]: str(v.value)
            for k, v in settings.values.items()
            if k.startswith(prefix)
        }
        return cls(settings.verification, tiers)

    def mode_for(self, kind: Kind | str) -> str:
        """off, lazy or eager for entries of ``kind``."""
        name = kind_name(kind)
        if self.mode != "tiered":
            return self.mode
        return self.tiers.get(name, "lazy")

    def label(self, kind: Kind | str) -> str:
        """What a verdict records as its policy: ``lazy``, ``eager``, ``tiered:eager``…"""
        mode = self.mode_for(kind)
        return f"tiered:{mode}" if self.mode == "tiered" else mode

    def runs_on_write(self, kind: Kind | str) -> bool:
        return self.mode_for(kind) == "eager"

    def runs_on_verify(self, kind: Kind | str) -> bool:
        return self.mode_for(kind) != "off"


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


def panel_store_for(store: MemoryStore) -> MemoryStore | None:
    """A store that signs with a panel key: ``TRUSS_PANEL_KEY``, else ``store`` itself when
    its key holds the panel role, else None."""
    from ..errors import SignatureError
    from ..signing import Ed25519Signer, PublicKey
    from ..store import MemoryStore

    path = store.environ.get("TRUSS_PANEL_KEY")
    if path:
        from pathlib import Path

        if not Path(path).is_file():
            raise ConfigError(f"TRUSS_PANEL_KEY names {path}, which is not a key file")
        signer = Ed25519Signer.load(Path(path))
        where = store.git.workdir or store.git.git_dir
        return MemoryStore(where, signer=signer, clock=store.clock, environ=store.environ)
    try:
        _, roles = store.policy().roles_of(PublicKey.from_line(store.signer.public_line))
    except SignatureError:
        return None
    return store if "panel" in roles else None


def write_entry(
    store: MemoryStore,
    kind: Kind | str,
    key: str,
    body: str,
    *,
    settings: Settings | None = None,
    panel_store: MemoryStore | None = None,
    **fields: Any,
) -> WriteResult:
    """``store.write`` under the verification policy: when the kind is eager, run the panel
    on the new entry at once (promote, reject, or leave it unverified and say why)."""
    from ..settings import settings_for

    settings = settings or settings_for(store)
    entry = store.write(kind, key, body, **fields)
    outcomes, note = verify_written(store, [entry], settings=settings, panel_store=panel_store)
    if not outcomes:
        return WriteResult(entry, None, note)
    return WriteResult(store.get(entry.id), outcomes[0], note)


def verify_written(
    store: MemoryStore,
    entries: Sequence[Entry],
    *,
    settings: Settings | None = None,
    panel_store: MemoryStore | None = None,
) -> tuple[list[Outcome], str | None]:
    """The eager half of a write, for faces that commit entries their own way: run the panel
    on those ``entries`` whose kind is eager and that are still unverified. Returns the
    outcomes and, when the panel could not run, a note saying why (the entries stay
    unverified; ``truss-files verify`` picks them up)."""
    from ..settings import settings_for

    settings = settings or settings_for(store)
    policy = VerificationPolicy.from_settings(settings)
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
    from .runner import verify

    try:
        report = verify(verifier, due, settings=settings)
    except TrussError as exc:
        return [], f"eager verification did not run: {exc.message}; it stays unverified"
    return list(report.outcomes), None
