"""Store configuration (``truss.toml``) and the trust policy a commit is judged by.

The policy of a commit is read from its *parent's* tree: adding a key or a role is itself a
commit that an already-trusted key must sign (as sequoia-git does).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, SignatureError
from . import AllowedSigners, PublicKey, verify

CONFIG_PATH = "truss.toml"
SIGNERS_PATH = ".truss/allowed_signers"
# A private sigstore deployment's trust anchors, pinned by an operator (keyless verdicts).
TRUSTED_ROOT_PATH = ".truss/trusted_root.json"
# What a store commit may touch: everything else in the repository is not the store's.
STORE_PREFIXES = ("memories/", "identity/", "principals/", ".truss/")
# trainer: writes above the task layer and in members' names (trust/authority.py decides where).
ROLES = ("operator", "panel", "agent", "trainer")
GIT_NAMESPACE = "git"
VERDICT_NAMESPACE = "truss-verdict"

DEFAULT_TOML = """\
# truss-files store configuration. Roles name principals from .truss/allowed_signers;
# a change here must be signed by an operator (judged by the parent commit's policy).

[roles]
operator = [{principal}]
panel = [{principal}]
agent = [{principal}]
# trainer: writes the team and enterprise layers and in members' names (memory.train).
trainer = [{principal}]

[tools]
# The read tools (memory_query, memory_view, read_memory) are served to agents.
memory = true
# The write binding (memory, write_memory) stays off until you turn it on.
memory_write = false

[policy]
verification = "lazy"
conflict = "verified-wins"
# Every new entry names a LedgerRef, and a verdict is bound to the state it judged; the
# audit holds the history from this setting on to both.
provenance = "required"

[identity]
# Who amends identity/self.md: "locked" (operators only), "propose" (the agent proposes, an
# operator approves) or "self_amend" (the panel checks each amendment against core.md).
policy = "propose"

[recall]
mode = "exact"
"""


@dataclass(frozen=True)
class StoreConfig:
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: bytes | None, source: str = CONFIG_PATH) -> StoreConfig:
        if data is None:
            return cls({})
        try:
            raw = tomllib.loads(data.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{source}: not valid TOML ({exc}); fix the file") from exc
        roles = raw.get("roles", {})
        if not isinstance(roles, dict):
            raise ConfigError(f"{source}: [roles] must be a table of role = [principals]")
        for role, members in roles.items():
            if role not in ROLES:
                raise ConfigError(
                    f"{source}: unknown role '{role}' in [roles]; use {', '.join(ROLES)}"
                )
            if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                raise ConfigError(f"{source}: roles.{role} must be a list of principal names")
        return cls(raw)

    def roles(self) -> dict[str, frozenset[str]]:
        roles = self.raw.get("roles", {})
        return {role: frozenset(roles.get(role, ())) for role in ROLES}

    def section(self, name: str) -> Mapping[str, Any]:
        value = self.raw.get(name, {})
        if not isinstance(value, dict):
            raise ConfigError(f"{CONFIG_PATH}: [{name}] must be a table")
        return value

    def get(self, section: str, key: str, default: Any = None) -> Any:
        return self.section(section).get(key, default)


@dataclass(frozen=True)
class TrustPolicy:
    """Who may sign, and in which roles: allowed_signers + truss.toml [roles] of one tree."""

    signers: AllowedSigners
    config: StoreConfig
    # The pinned sigstore trusted root's bytes; None: the production root sigstore ships.
    trusted_root: bytes | None = None

    @classmethod
    def from_files(
        cls, signers: bytes | None, config: bytes | None, trusted_root: bytes | None = None
    ) -> TrustPolicy:
        if signers is None:
            raise ConfigError(
                f"{SIGNERS_PATH} is missing: this is not a truss store yet (run truss-files init)"
            )
        return cls(
            AllowedSigners.parse(signers.decode("utf-8", "replace"), SIGNERS_PATH),
            StoreConfig.parse(config),
            trusted_root,
        )

    def roles_of(self, key: PublicKey, namespace: str = GIT_NAMESPACE) -> tuple[str, set[str]]:
        """The principal a key belongs to and the roles it holds; raises if unknown."""
        principals = self.signers.principals_for(key, namespace)
        if not principals:
            raise SignatureError(
                f"key {key.fingerprint} is not in {SIGNERS_PATH} for namespace '{namespace}'; "
                "an operator must add it in a signed commit"
            )
        roles = self.config.roles()
        held = {role for role, members in roles.items() if members & set(principals)}
        return principals[0], held

    def check_signature(
        self, armored: str, data: bytes, namespace: str, need: set[str]
    ) -> tuple[str, PublicKey]:
        """Verify a signature and that its key holds one of the ``need`` roles."""
        key = verify(armored, data, namespace)
        principal, held = self.roles_of(key, namespace)
        if need and not (held & need):
            raise SignatureError(
                f"signed by {principal} ({key.fingerprint}), who holds "
                f"{', '.join(sorted(held)) or 'no role'}; this needs the "
                f"{' or '.join(sorted(need))} role in truss.toml [roles]"
            )
        return principal, key


def is_store_path(path: str) -> bool:
    return path == CONFIG_PATH or path.startswith(STORE_PREFIXES)
