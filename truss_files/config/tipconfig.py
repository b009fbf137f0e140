"""truss.toml at the branch tip, read without pygit2 (for the cold read-tool path); whether
a store is there and any settings layer above it is in play comes from ``storeprobe``.

A read tool call must know which tools the store serves and its recall mode before it can
answer. pygit2 and the store module cost more to import than
the whole indexed query — so a process that only reads goes through the recall engine's small
git reader (``gitdir``) instead. It falls back to pygit2 by itself for packed objects;
refs it cannot read (reftable) make ``tip_config`` return None and the caller open the store.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import ConfigError
from ..git.gitdir import GitDir, Objects

# Re-exported: the store check and the settings-layer probe live in storeprobe.py, which a
# plain query imports alone.
from .storeprobe import (
    APP_NAME,
    GLOBAL_FILE,
    has_layers_above_store,
    require_store,
    user_config_file,
)

__all__ = [
    "APP_NAME",
    "GLOBAL_FILE",
    "ConfigLike",
    "TipConfig",
    "has_layers_above_store",
    "require_store",
    "tip_config",
    "user_config_file",
]


class ConfigLike(Protocol):
    """What tools read of a store's configuration (``config.StoreConfig`` is one)."""

    @property
    def raw(self) -> Mapping[str, Any]: ...

    def section(self, name: str) -> Mapping[str, Any]: ...

    def get(self, section: str, key: str, default: Any = None) -> Any: ...


@dataclass(frozen=True)
class TipConfig:
    raw: Mapping[str, Any] = field(default_factory=dict)

    def section(self, name: str) -> Mapping[str, Any]:
        value = self.raw.get(name, {})
        if not isinstance(value, dict):
            raise ConfigError(f"truss.toml: [{name}] must be a table")
        return value

    def get(self, section: str, key: str, default: Any = None) -> Any:
        return self.section(section).get(key, default)


def tip_config(path: str | os.PathLike[str]) -> TipConfig | None:
    """The branch tip's truss.toml; None when this reader cannot tell (use the store)."""
    git = GitDir.discover(path)
    try:
        _ref, tip = git.head()
    except LookupError:
        return None
    if tip is None:
        return TipConfig()
    objects = Objects(git)
    entry = objects.entry(objects.commit_tree(tip), "truss.toml")
    if entry is None or entry.is_tree:
        return TipConfig()
    try:
        return TipConfig(tomllib.loads(objects.blob(entry.sha).decode("utf-8")))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"truss.toml: not valid TOML ({exc}); fix the file") from exc
