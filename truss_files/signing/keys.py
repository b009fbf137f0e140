"""The user's signing keys, kept under the user config dir (``$XDG_CONFIG_HOME/truss-files``).

Which key signs: ``--key PATH`` / ``TRUSS_KEY``, else the default key made by ``keys new``.
``TRUSS_SIGNER=ssh-keygen`` (or ``--signer ssh-keygen``) signs through the ssh-keygen binary
with git's ``user.signingkey`` instead, for agent-held or hardware keys.
"""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from ..errors import ConfigError, UsageError
from . import Ed25519Signer, PublicKey, Signer, SshKeygenSigner

DEFAULT_NAME = "id_ed25519"
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("TRUSS_CONFIG_DIR"):
        return Path(env["TRUSS_CONFIG_DIR"])
    return Path(platformdirs.user_config_dir("truss-files"))


def keys_dir(environ: Mapping[str, str] | None = None) -> Path:
    return config_dir(environ) / "keys"


@dataclass(frozen=True)
class KeyInfo:
    name: str
    path: Path
    public_line: str
    fingerprint: str


def new_key(
    name: str = DEFAULT_NAME, comment: str = "", environ: Mapping[str, str] | None = None
) -> KeyInfo:
    if not _NAME.fullmatch(name):
        raise UsageError(f"key name '{name}' may use letters, digits, '.', '_' and '-' only")
    path = keys_dir(environ) / name
    if path.exists():
        raise UsageError(f"{path} already exists; pick another --name or use the key you have")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    signer = Ed25519Signer.generate(comment)
    signer.save(path)
    return KeyInfo(name, path, signer.public_line, signer.fingerprint)


def list_keys(environ: Mapping[str, str] | None = None) -> list[KeyInfo]:
    folder = keys_dir(environ)
    if not folder.is_dir():
        return []
    found = []
    for pub in sorted(folder.glob("*.pub")):
        line = pub.read_text().strip()
        key = PublicKey.from_line(line)
        found.append(KeyInfo(pub.stem, pub.with_suffix(""), line, key.fingerprint))
    return found


def load_signer(
    key: str | os.PathLike[str] | None = None,
    *,
    signer: str | None = None,
    repo_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Signer:
    """The signer for this process: an explicit key, the environment, or the default key."""
    env = os.environ if environ is None else environ
    kind = signer or env.get("TRUSS_SIGNER", "builtin")
    if kind == "ssh-keygen":
        if key:
            return SshKeygenSigner(Path(key).expanduser())
        return SshKeygenSigner.from_git_config(repo_dir)
    if kind != "builtin":
        raise UsageError(f"unknown signer '{kind}'; use builtin or ssh-keygen")
    raw = key or env.get("TRUSS_KEY")
    path = Path(raw).expanduser() if raw else None
    if path is None:
        path = keys_dir(env) / DEFAULT_NAME
        if not path.exists():
            raise ConfigError(
                f"no signing key at {path}; create one with `truss-files keys new` "
                "or pass --key PATH"
            )
    if not path.exists():
        raise ConfigError(f"signing key {path} does not exist")
    return Ed25519Signer.load(path)


def default_signer_or_new(environ: Mapping[str, str] | None = None) -> tuple[Signer, bool]:
    """The user's default key, made on first use (``init`` on a fresh machine)."""
    env = os.environ if environ is None else environ
    if env.get("TRUSS_KEY") or env.get("TRUSS_SIGNER") == "ssh-keygen":
        return load_signer(environ=env), False
    path = keys_dir(env) / DEFAULT_NAME
    if path.exists():
        return Ed25519Signer.load(path), False
    info = new_key(DEFAULT_NAME, comment=default_principal(env), environ=env)
    return Ed25519Signer.load(info.path), True


def default_principal(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    for var in ("TRUSS_PRINCIPAL", "GIT_COMMITTER_EMAIL", "GIT_AUTHOR_EMAIL", "EMAIL"):
        if env.get(var):
            return env[var]
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"
