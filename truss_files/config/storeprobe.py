"""What a cold read asks before it answers, without the settings or store modules: does the
repository hold a truss store, and is any settings layer above truss.toml in play.

Kept apart from ``tipconfig`` (truss.toml itself) so that a plain ``truss-files query``, which
needs only these answers, imports no dataclass, protocol or TOML parser for them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from ..errors import StoreError
from ..git.gitdir import GitDir, Objects

__all__ = ["APP_NAME", "GLOBAL_FILE", "has_layers_above_store", "require_store", "user_config_file"]

# Kept equal to settings.GLOBAL_FILE and the platformdirs app name keys.config_dir uses (a
# test checks the resulting path); importing either module would cost the cold read path.
GLOBAL_FILE = "config.toml"
APP_NAME = "truss-files"


def require_store(path: str | os.PathLike[str]) -> None:
    """Raise ``StoreError`` when ``path`` is inside a git repository that holds no truss store
    (no ``.truss/allowed_signers`` at its branch tip), as a write there does: a read would
    otherwise answer an empty list, which reads as "nothing matches". Refs this reader cannot
    read (reftable) are left to the store, which opens through pygit2."""
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
    stack and platformdirs alone costs a good part of a path whose whole recall budget is a few
    milliseconds. On Linux the answer is platformdirs' own rule (an absolute ``$XDG_CONFIG_HOME``,
    else ``~/.config``, read from ``os.environ`` as platformdirs reads it); anywhere else, and
    whenever the environment is unusual, it asks platformdirs. A test holds the two equal."""
    return Path(_user_config_path(environ))


def _user_config_path(environ: Mapping[str, str]) -> str:
    # ``user_config_file`` as text: a warm query asks for it each time (``pathlib`` costs
    # more than the rest of the answer).
    override = environ.get("TRUSS_CONFIG_DIR")
    if override:
        return os.path.join(override, GLOBAL_FILE)
    home = os.environ.get("HOME", "")
    android = hasattr(sys, "getandroidapilevel") or (
        os.environ.get("ANDROID_DATA") == "/data" and os.environ.get("ANDROID_ROOT") == "/system"
    )
    if sys.platform != "linux" or android or not os.path.isabs(home):
        # settings (and the signing stack through keys) stay off the cold read path.
        from .settings import global_config_path

        return str(global_config_path(environ))
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.expanduser("~/.config")
    return os.path.join(base, APP_NAME, GLOBAL_FILE)


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
    return os.path.isfile(_user_config_path(environ))
