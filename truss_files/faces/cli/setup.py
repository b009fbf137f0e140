"""Setting up: ``init`` (make a repository a store) and ``keys`` (your signing keys)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import click

from ...facade import init as init_store
from ...signing.keys import (
    default_principal,
    default_signer_or_new,
    list_keys,
    load_signer,
    new_key,
)
from .app import Ctx, cli, handled, pass_ctx
from .output import FORMAT_OPTION, emit


@cli.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--principal", help="Your name in allowed_signers (default: your git email).")
@FORMAT_OPTION
@pass_ctx
@handled
def init(obj: Ctx, directory: str | None, principal: str | None, fmt: str | None) -> None:
    """Create or adopt a git repository as a store.

    Writes truss.toml, .truss/allowed_signers (your key holding every role: operator,
    panel, agent, trainer) and identity/core.md and identity/self.md templates in one signed
    commit, and pins that commit as the trust root in the repository's local config.
    Creates a key if you have none. Harmless to re-run.

    \b
    Example:
      truss-files init ~/agent-memory
    """
    target = Path(directory or obj.store_path or ".")
    if obj.key or obj.signer_kind:
        signer, made = load_signer(obj.key, signer=obj.signer_kind), False
    else:
        signer, made = default_signer_or_new()
    who = principal or _git_email(target) or default_principal()
    result = init_store(target, signer, who)
    data = {
        "path": str(result.path),
        "root": result.root,
        "created": result.created,
        "principal": result.principal,
        "public_key": result.public_line,
        "new_key": made,
    }

    def text(d: dict[str, Any]) -> str:
        verb = "Initialized store" if d["created"] else "Already a store"
        lines = [f"{verb} at {d['path']} (trust root {d['root'][:12]}, pinned as truss.root)"]
        lines.append(f"Signing as {d['principal']}: {d['public_key']}")
        if d["new_key"]:
            lines.append("Created a new signing key (see `truss-files keys list`).")
        return "\n".join(lines)

    emit(fmt, data, text)


def _git_email(path: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "config", "user.email"],
            cwd=path if path.is_dir() else None,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    return out.stdout.strip() or None


@cli.group()
def keys() -> None:
    """Manage your signing keys (kept under your user config dir, mode 0600).

    \b
    Example:
      truss-files keys new --name panel-bot && truss-files keys list
    """


@keys.command("new")
@click.option("--name", default="id_ed25519", show_default=True, help="File name of the key.")
@click.option("--comment", default="", help="Comment on the public key line.")
@FORMAT_OPTION
@handled
def keys_new(name: str, comment: str, fmt: str | None) -> None:
    """Create an Ed25519 signing key and print its public line.

    \b
    Example:
      truss-files keys new --name panel-bot
    """
    info = new_key(name, comment or default_principal())
    emit(
        fmt,
        {
            "name": info.name,
            "path": str(info.path),
            "public_key": info.public_line,
            "fingerprint": info.fingerprint,
        },
        lambda d: f"{d['public_key']}\n(private key at {d['path']}, {d['fingerprint']})",
    )


@keys.command("list")
@FORMAT_OPTION
@handled
def keys_list(fmt: str | None) -> None:
    """List your signing keys.

    \b
    Example:
      truss-files keys list --format json
    """
    found = [
        {
            "name": k.name,
            "path": str(k.path),
            "public_key": k.public_line,
            "fingerprint": k.fingerprint,
        }
        for k in list_keys()
    ]
    emit(
        fmt,
        found,
        lambda d: (
            "\n".join(f"{k['name']}\t{k['fingerprint']}\t{k['path']}" for k in d)
            or "no keys yet; create one with `truss-files keys new`"
        ),
    )
