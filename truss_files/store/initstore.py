"""``truss-files init``: create or adopt a git repository as a store, and pin its trust root.

The first store commit is judged by its own tree (there is no parent policy yet); its id is
pinned in the repository's local config as ``truss.root``, outside anything a push can change.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pygit2

from ..errors import ConfigError, StoreError
from ..format.proposal import CORE_PATH, SELF_PATH, SELF_TEMPLATE
from ..format.trailers import trailers
from ..git.gitstore import Plan, Snapshot
from ..signing import AllowedSigners, PublicKey, Signer
from ..signing.trustpolicy import (
    CONFIG_PATH,
    DEFAULT_TOML,
    GIT_NAMESPACE,
    SIGNERS_PATH,
    TrustPolicy,
)
from ..trust.trustroot import ROOT_CONFIG, find_root, pinned_root
from .store import Store

CORE_TEMPLATE = """\
# Core identity (L0)

Operator-signed. The agent can read this and never amend it.

## Mandate
- What this agent is for, in one or two sentences.

## Boundaries
- What it must never do.

## Safety
- When it must stop and ask a person.
"""


@dataclass(frozen=True)
class InitResult:
    path: Path
    root: str
    created: bool
    principal: str
    public_line: str


def is_repo_top(path: Path) -> bool:
    """``path`` is a work tree's top or a bare repository (not merely inside one)."""
    if not path.exists():
        return False
    try:
        found = pygit2.discover_repository(str(path))
    except pygit2.GitError:
        return False
    if found is None:
        return False
    repo = pygit2.Repository(found)
    top = Path(repo.workdir) if repo.workdir else Path(repo.path)
    return top.resolve() == path.resolve()


def init_store(
    path: str | os.PathLike[str],
    signer: Signer,
    principal: str,
    *,
    environ: Mapping[str, str] | None = None,
) -> InitResult:
    target = Path(path).expanduser()
    if not is_repo_top(target):
        # Like `git init DIR`: a folder that is not itself a repository gets its own.
        target.mkdir(parents=True, exist_ok=True)
        pygit2.init_repository(str(target), initial_head="main")
    store = Store(target, signer=signer, environ=environ)
    git = store.git
    key = PublicKey.from_line(signer.public_line)
    existing_root = find_root(git)
    pinned = pinned_root(git.repo, environ)
    if existing_root is not None:
        root_id = str(existing_root.id)
        if pinned is not None and pinned != root_id:
            raise ConfigError(
                f"{git.git_dir}: this store's root is {root_id[:12]} but this repository pins "
                f"{pinned[:12]} ({ROOT_CONFIG}); it is another store. Check the remote, or "
                f"unset {ROOT_CONFIG} if you mean to trust this one"
            )
        git.repo.config[ROOT_CONFIG] = root_id
        policy = store.policy()
        try:
            principal, _ = policy.roles_of(key, GIT_NAMESPACE)
        except Exception:
            principal = "(your key is not in .truss/allowed_signers)"
        return InitResult(target, root_id, False, principal, signer.public_line)
    if pinned is not None:
        raise ConfigError(
            f"{git.git_dir} pins {ROOT_CONFIG}={pinned[:12]} but holds no store; unset it "
            "(git config --unset truss.root) to start a new store here"
        )

    signers = AllowedSigners.parse("", SIGNERS_PATH).with_signer(
        principal, key, ("git", "truss-verdict")
    )
    quoted = '"' + principal.replace("\\", "\\\\").replace('"', '\\"') + '"'
    files: dict[str, bytes | None] = {
        SIGNERS_PATH: signers.render().encode(),
        CONFIG_PATH: DEFAULT_TOML.format(principal=quoted).encode(),
    }
    tip = Snapshot(git.repo, git.tip())
    if tip.read(CORE_PATH) is None:
        files[CORE_PATH] = CORE_TEMPLATE.encode()
    if tip.read(SELF_PATH) is None:
        files[SELF_PATH] = SELF_TEMPLATE.encode()
    message = "truss: init store\n\n" + trailers(op="init", principal=principal)

    def check(commit: pygit2.Commit, _parent: Snapshot) -> None:
        signature, payload = commit.gpg_signature
        own = TrustPolicy.from_files(files[SIGNERS_PATH], files[CONFIG_PATH])
        own.check_signature(signature.decode(), payload, GIT_NAMESPACE, {"operator"})

    done = git.apply(
        lambda _snap: Plan(files, message), signer, store.identity(principal), check=check
    )
    if done is None:
        raise StoreError("init wrote nothing")
    root_id = str(done[0].id)
    git.repo.config[ROOT_CONFIG] = root_id
    return InitResult(target, root_id, True, principal, signer.public_line)
