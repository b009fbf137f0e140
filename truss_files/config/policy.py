"""VerificationPolicy: *when* the panel runs — never what verified means.

- ``off``: the panel never runs; everything stays honestly unverified (verify refuses).
- ``lazy`` (default): entries wait for ``truss-files verify``.
- ``eager``: the panel runs in the write path, right after the entry lands.
- ``tiered``: per kind, from ``[policy.tiered]`` (e.g. decision = "eager", scratch = "off");
  kinds not listed are lazy.

Eager runs in the front door every face writes through, ``MemoryStore.write`` /
``write_entries`` (facade.py), above ``Store.write``. The store itself is unchanged: a write
is still one signed commit landing unverified, and a PASS is still a second, panel-signed
commit, so an eager write interrupted between the two leaves an ordinary unverified entry for
``verify``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..model import Kind

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
