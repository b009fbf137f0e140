"""Where reviewers run: a private checkout of the commit under review, and an environment
that cannot reach the signing keys.

The checkout is exported from the commit's tree with pygit2 into a temporary directory — the
repository, its index and its work tree are never touched, so a reviewer (or a verify that is
killed halfway) cannot leave anything half-written in the store. It is made lazily, once per
run, and shared by the reviewers of that run. A configured directory may replace it.

Each command also gets a fresh, empty HOME, with its own XDG config, data, cache, state and
runtime directories inside it (the caller's would point into the real home, where keys,
caches and agent sockets live), and an environment without ``TRUSS_*``, the ssh agent socket
or git's repository overrides: nothing a reviewer runs can find the panel key through the
environment, nor leave anything in the real home.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pygit2

from ..errors import StoreError

# Variables that would hand a reviewer a signing key or point git at the real repository.
STRIPPED = frozenset(
    {
        "SSH_AUTH_SOCK",
        "SSH_AGENT_PID",
        "SSH_ASKPASS",
        "GNUPGHOME",
        "GPG_AGENT_INFO",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_CONFIG",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
    }
)
STRIPPED_PREFIXES = ("TRUSS_",)

# Each XDG base directory a reviewer gets, relative to its private HOME (the spec's defaults,
# so a tool that ignores the variables lands in the same place). The runtime directory holds
# agent sockets (gpg-agent's among them), so it is replaced too, and made private (0700) as
# the spec asks.
XDG_DIRS = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_DATA_HOME": ".local/share",
    "XDG_STATE_HOME": ".local/state",
    "XDG_CACHE_HOME": ".cache",
    "XDG_RUNTIME_DIR": ".run",
}

_MODE_TREE = 0o040000
_MODE_LINK = 0o120000
_MODE_EXEC = 0o100755
_MODE_COMMIT = 0o160000


class Workspace:
    """A temporary place to run one verify or recheck: a checkout plus empty homes."""

    def __init__(
        self,
        repo: Any = None,
        commit: str | None = None,
        *,
        workdir: Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.repo = repo  # a pygit2.Repository, or None when ``workdir`` is given
        self.commit = commit
        self.workdir = workdir
        self.environ = dict(os.environ if environ is None else environ)
        self._root: Path | None = None
        self._checkout: Path | None = None
        self._homes = 0

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def root(self) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="truss-panel-"))
        return self._root

    def close(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
            self._checkout = None

    def checkout(self) -> Path:
        """The directory reviewers run in: the configured one, or an export of the commit."""
        if self.workdir is not None:
            if not self.workdir.is_dir():
                raise StoreError(
                    f"panel workdir {self.workdir} is not a directory; fix [panel] workdir"
                )
            return self.workdir
        if self._checkout is None:
            target = self.root / "checkout"
            target.mkdir()
            if self.repo is not None and self.commit is not None:
                commit = self.repo.revparse_single(self.commit)
                _export(self.repo, commit.peel(pygit2.Tree), target)
            self._checkout = target
        return self._checkout

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A fresh empty HOME and the caller's environment minus anything that signs."""
        self._homes += 1
        home = self.root / f"home-{self._homes}"
        (home / ".config" / "truss-files").mkdir(parents=True)
        for sub in XDG_DIRS.values():
            (home / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        env = reviewer_env(self.environ, home)
        env.update(extra or {})
        return env


def reviewer_env(base: Mapping[str, str], home: Path) -> dict[str, str]:
    env = {
        name: value
        for name, value in base.items()
        if name not in STRIPPED and not name.startswith(STRIPPED_PREFIXES)
    }
    env["HOME"] = str(home)
    env.update({name: str(home / sub) for name, sub in XDG_DIRS.items()})
    env["TRUSS_CONFIG_DIR"] = str(home / ".config" / "truss-files")
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


def _export(repo: Any, tree: Any, target: Path) -> None:
    """Write ``tree``'s files under ``target`` as git would check them out."""
    for item in tree:
        name = item.name or ""
        # A crafted tree may hold names git itself refuses to check out; skip them.
        if name in ("", ".", "..", ".git") or "/" in name or "\0" in name:
            continue
        path = target / name
        mode = item.filemode
        if mode == _MODE_TREE:
            path.mkdir()
            _export(repo, repo[item.id], path)
        elif mode == _MODE_COMMIT:
            path.mkdir()  # a submodule stays empty, as after a plain `git clone`
        elif mode == _MODE_LINK:
            os.symlink(repo[item.id].data.decode("utf-8", "surrogateescape"), path)
        else:
            path.write_bytes(repo[item.id].data)
            if mode == _MODE_EXEC:
                path.chmod(0o755)
