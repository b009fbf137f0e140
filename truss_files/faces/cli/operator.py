"""Operator commands: `signers add/remove/list` and `roles grant/revoke`.

Each change is one operator-signed commit made by ``truss_files.store.operators``; ``list`` reads.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ...errors import UsageError
from ...facade import ROLES
from .app import Ctx, cli, handled, pass_ctx
from .output import FORMAT_OPTION, emit


def _change_text(data: dict[str, Any]) -> str:
    lines = [data["summary"] if data["commit"] is None else f"{data['summary']}: {data['commit']}"]
    lines.extend(f"note: {note}" for note in data["notes"])
    return "\n".join(lines)


def _emit_change(fmt: str | None, change: Any) -> None:
    data = {"commit": change.commit, "summary": change.summary, "notes": list(change.notes)}
    emit(fmt, data, _change_text)


@cli.group("signers")
def signers_group() -> None:
    """Who may sign: the keys in .truss/allowed_signers (operators only change them).

    \b
    Example:
      truss-files signers add alice@example.com alice.pub
      truss-files signers list --format text
    """


@signers_group.command("add")
@click.argument("principal")
@click.argument("pubkey", metavar="PUBKEY-FILE|-")
@click.option(
    "--namespaces",
    default="git,truss-verdict",
    show_default=True,
    help="What the key may sign: git (commits), truss-verdict (panel verdicts).",
)
@FORMAT_OPTION
@pass_ctx
@handled
def signers_add(obj: Ctx, principal: str, pubkey: str, namespaces: str, fmt: str | None) -> None:
    """Add PRINCIPAL's public key (a .pub file, or - for stdin) in one operator-signed commit.

    The key alone grants nothing: give the principal a role with `roles grant`.

    \b
    Example:
      truss-files signers add alice@example.com alice.pub
      truss-files roles grant panel alice@example.com
    """
    if pubkey == "-":
        text, source = sys.stdin.read(), "stdin"
    else:
        path = Path(pubkey).expanduser()
        try:
            text, source = path.read_text(encoding="utf-8"), str(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the public key file {path}: {exc}") from exc
    spaces = tuple(ns.strip() for ns in namespaces.split(",") if ns.strip())
    _emit_change(fmt, obj.store().add_signer(principal, text, source=source, namespaces=spaces))


@signers_group.command("remove")
@click.argument("principal")
@FORMAT_OPTION
@pass_ctx
@handled
def signers_remove(obj: Ctx, principal: str, fmt: str | None) -> None:
    """Remove every key of PRINCIPAL in one operator-signed commit.

    What the key signed before stays valid (each commit is judged by its parent's policy).

    \b
    Example:
      truss-files signers remove alice@example.com
    """
    _emit_change(fmt, obj.store().remove_signer(principal))


@signers_group.command("list")
@FORMAT_OPTION
@pass_ctx
@handled
def signers_list(obj: Ctx, fmt: str | None) -> None:
    """List the principals, their key fingerprints, namespaces and roles (reads only).

    \b
    Example:
      truss-files signers list --format json
    """
    rows = [
        {
            "principal": s.principal,
            "fingerprint": s.fingerprint,
            "public_key": s.public_key,
            "namespaces": list(s.namespaces) if s.namespaces is not None else None,
            "roles": list(s.roles),
        }
        for s in obj.store().signers()
    ]

    def text(data: list[dict[str, Any]]) -> str:
        return "\n".join(
            f"{r['principal']}\t{r['fingerprint']}\t"
            f"{','.join(r['namespaces']) if r['namespaces'] is not None else '*'}\t"
            f"{','.join(r['roles']) or '(no role)'}"
            for r in data
        )

    emit(fmt, rows, text)


@cli.group("roles")
def roles_group() -> None:
    """Who holds which role in truss.toml [roles]: operator, panel, agent or trainer.

    \b
    Example:
      truss-files roles grant panel alice@example.com
      truss-files roles revoke panel alice@example.com
    """


@roles_group.command("grant")
@click.argument("role", type=click.Choice(list(ROLES)))
@click.argument("principal")
@FORMAT_OPTION
@pass_ctx
@handled
def roles_grant(obj: Ctx, role: str, principal: str, fmt: str | None) -> None:
    """Give PRINCIPAL (who has a key in allowed_signers) ROLE, in one operator-signed commit.

    \b
    Example:
      truss-files roles grant panel alice@example.com
    """
    _emit_change(fmt, obj.store().grant_role(role, principal))


@roles_group.command("revoke")
@click.argument("role", type=click.Choice(list(ROLES)))
@click.argument("principal")
@FORMAT_OPTION
@pass_ctx
@handled
def roles_revoke(obj: Ctx, role: str, principal: str, fmt: str | None) -> None:
    """Take ROLE from PRINCIPAL in one operator-signed commit.

    The last operator who can sign cannot be removed: nobody could change roles again.

    \b
    Example:
      truss-files roles revoke agent alice@example.com
    """
    _emit_change(fmt, obj.store().revoke_role(role, principal))


__all__ = ["cli"]
