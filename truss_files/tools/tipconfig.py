"""truss.toml at the branch tip, read without pygit2 (for the cold read-tool path), and
whether any settings layer above it (user config, agent, contract) is in play.

A read tool call must know which tools the store serves and its recall mode before it can
answer. pygit2 and the store module cost ~170 ms to import on this machine class — more than
the whole indexed query — so a process that only reads goes through the recall engine's small
git reader (``recall.gitread``) instead. It falls back to pygit2 by itself for packed objects;
refs it cannot read (reftable) make ``tip_config`` return None and the caller open the store.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import ConfigError, StoreError

# Kept equal to settings.GLOBAL_FILE and the platformdirs app name keys.config_dir uses (a
# test checks the resulting path); importing either module would cost the cold read path.
GLOBAL_FILE = "config.toml"
APP_NAME = "truss-files"


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
    from ..recall.gitread import GitDir, Objects

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
    import tomllib  # here: a plain query with no settings layer never parses TOML

    try:
        return TipConfig(tomllib.loads(objects.blob(entry.sha).decode("utf-8")))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"truss.toml: not valid TOML ({exc}); fix the file") from exc


def require_store(path: str | os.PathLike[str]) -> None:
    """Raise ``StoreError`` when ``path`` is inside a git repository that holds no truss store
    (no ``.truss/allowed_signers`` at its branch tip), as a write there does: a read would
    otherwise answer an empty list, which reads as "nothing matches". Refs this reader cannot
    read (reftable) are left to the store, which opens through pygit2."""
    from ..recall.gitread import GitDir, Objects

    git = GitDir.discover(path)
    try:
        ref, tip = git.head()
    except LookupError:
        return
    if tip is not None:
        objects = Objects(git)
        truss = objects.subtree(objects.commit_tree(tip), ".truss")
        if truss is not None and objects.entry(truss, "allowed_signers") is not None:
            return
    branch = (ref or "HEAD").removeprefix("refs/heads/")
    raise StoreError(
        f"{git.path_str} holds no truss store (no .truss/allowed_signers at the tip of "
        f"{branch}); run `truss-files init` in that repository to make one, or pass "
        "--store PATH"
    )


def user_config_file(environ: Mapping[str, str]) -> Path:
    """``settings.global_config_path`` without its imports: ``keys`` pulls in the signing
    stack (~20 ms) and platformdirs alone costs ~5 ms, on a path whose whole recall budget is
    ~13 ms. On Linux the answer is platformdirs' own rule (an absolute ``$XDG_CONFIG_HOME``,
    else ``~/.config``, read from ``os.environ`` as platformdirs reads it); anywhere else, and
    whenever the environment is unusual, it asks platformdirs. A test holds the two equal."""
    override = environ.get("TRUSS_CONFIG_DIR")
    if override:
        return Path(override) / GLOBAL_FILE
    home = os.environ.get("HOME", "")
    android = hasattr(sys, "getandroidapilevel") or (
        os.environ.get("ANDROID_DATA") == "/data" and os.environ.get("ANDROID_ROOT") == "/system"
    )
    if sys.platform != "linux" or android or not os.path.isabs(home):
        from ..settings import global_config_path

        return global_config_path(environ)
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.expanduser("~/.config")
    return Path(base) / APP_NAME / GLOBAL_FILE


def has_layers_above_store(
    environ: Mapping[str, str],
    *,
    agent: str | None = None,
    contract: str | os.PathLike[str] | None = None,
) -> bool:
    """Whether any settings layer above truss.toml is in play (an agent, a contract, or the
    user config file): when none is, truss.toml alone decides, and a cold read can skip the
    settings module."""
    if agent or contract or environ.get("TRUSS_AGENT") or environ.get("TRUSS_CONTRACT"):
        return True
    return user_config_file(environ).is_file()
