"""The trust root: the first commit whose tree holds ``.truss/allowed_signers``, and its pin.

``init`` pins the root's id in the repository's local config (``truss.root``), outside anything
a push can change; the audit, the read gate and the hooks judge every history from it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pygit2

from ..git.gitstore import GitStore
from ..signing.trustpolicy import SIGNERS_PATH

__all__ = ["ROOT_CONFIG", "find_root", "pinned_root"]

ROOT_CONFIG = "truss.root"


def pinned_root(repo: pygit2.Repository, environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    if env.get("TRUSS_ROOT"):
        return env["TRUSS_ROOT"]
    try:
        return str(repo.config[ROOT_CONFIG])
    except KeyError:
        return None


def find_root(git: GitStore, rev: str | None = None) -> pygit2.Commit | None:
    """The first commit (along first parents) whose tree holds .truss/allowed_signers."""
    tip = git.tip() if rev is None else git.commit(rev)
    root = None
    commit = tip
    while commit is not None:
        try:
            commit.tree[SIGNERS_PATH]
        except KeyError:
            break
        root = commit
        commit = commit.parents[0] if commit.parents else None
    return root
