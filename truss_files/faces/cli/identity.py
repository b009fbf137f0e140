"""Identity and principal commands: `identity show|propose|proposals|approve|decline|log|set`
and `principal set|show`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ...errors import UsageError
from .app import Ctx, cli, handled, pass_ctx
from .output import AGENT_OPTION, CONTRACT_OPTION, FORMAT_OPTION, emit


def _read(source: str) -> str:
    """FILE or - (stdin), as UTF-8 text."""
    if source == "-":
        return sys.stdin.read()
    try:
        return Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {source}: {exc}; give a UTF-8 file or - for stdin") from exc


@cli.group()
def identity() -> None:
    """The agent's identity: core.md (operator-signed) and self.md (amendable under policy).

    [identity] policy in truss.toml: locked (operators only), propose (default: the agent
    proposes, an operator approves) or self_amend (the panel checks each proposal against
    core). Every change is one signed commit; `truss-files revert COMMIT` undoes it.

    \b
    Example:
      truss-files identity show --format text
    """


@identity.command("show")
@FORMAT_OPTION
@pass_ctx
@handled
def identity_show(obj: Ctx, fmt: str | None) -> None:
    """Print core.md and self.md as in force now.

    \b
    Example:
      truss-files identity show --format json
    """
    data = obj.store().identity_show()
    emit(fmt, data, lambda d: f"{d['core']}\n---\n\n{d['self']}".rstrip("\n"))


@identity.command("propose")
@click.argument("source", metavar="FILE|-")
@AGENT_OPTION
@CONTRACT_OPTION
@FORMAT_OPTION
@pass_ctx
@handled
def identity_propose(
    obj: Ctx, source: str, agent: str | None, contract: str | None, fmt: str | None
) -> None:
    """Propose a new identity/self.md (the whole file) in a signed commit.

    Under propose it waits for an operator; under self_amend the panel judges it against
    core (now when verification is eager, on `verify --pending` when lazy, never when off);
    under locked it is refused.

    \b
    Example:
      truss-files identity propose new-self.md
    """
    store = obj.store()
    settings = store.settings(agent=agent, contract=contract)
    done = store.identity_propose(_read(source), settings=settings)

    def text(d: dict[str, Any]) -> str:
        lines = [f"proposal {d['id']} ({d['status']}, policy {d['policy']})"]
        if "verification" in d:
            lines.append(f"panel: {d['verification']['status']} ({d['verification']['message']})")
        if d.get("note"):
            lines.append(f"note: {d['note']}")
        return "\n".join(lines)

    emit(fmt, done.to_dict(), text)


@identity.command("proposals")
@click.option("--all", "all_", is_flag=True, help="Decided proposals too.")
@FORMAT_OPTION
@pass_ctx
@handled
def identity_proposals(obj: Ctx, all_: bool, fmt: str | None) -> None:
    """List pending proposals (with --all, every proposal and its decision).

    \b
    Example:
      truss-files identity proposals --format json
    """
    found = obj.store().identity_proposals(status=None if all_ else "pending")
    data = {
        "proposals": [
            {
                "id": p.id,
                "author": p.author,
                "run": p.run,
                "call": p.call,
                "created": p.created,
                "status": p.status,
                "decided_by": p.decided_by,
                "text": p.text,
            }
            for p in found
        ]
    }

    def text(d: dict[str, Any]) -> str:
        rows = [
            f"{p['id'][:12]} {p['status']:<9} {p['created']} by {p['author']}"
            + (f" ({p['call']})" if p["call"] else "")
            for p in d["proposals"]
        ]
        return "\n".join(rows) or "no pending proposals"

    emit(fmt, data, text)


@identity.command("approve")
@click.argument("proposal_id", metavar="ID")
@FORMAT_OPTION
@pass_ctx
@handled
def identity_approve(obj: Ctx, proposal_id: str, fmt: str | None) -> None:
    """Approve a proposal (operator only): self.md becomes its text, in one signed commit.

    \b
    Example:
      truss-files identity approve 5b0c8f3e
    """
    data = obj.store().identity_approve(proposal_id)
    emit(fmt, data, lambda d: f"approved {d['id'][:12]} in {d['commit'][:12]}")


@identity.command("decline")
@click.argument("proposal_id", metavar="ID")
@FORMAT_OPTION
@pass_ctx
@handled
def identity_decline(obj: Ctx, proposal_id: str, fmt: str | None) -> None:
    """Decline a proposal (operator only); it is kept, declined, for the record.

    \b
    Example:
      truss-files identity decline 5b0c8f3e
    """
    data = obj.store().identity_decline(proposal_id)
    emit(fmt, data, lambda d: f"declined {d['id'][:12]} in {d['commit'][:12]}")


@identity.command("log")
@FORMAT_OPTION
@pass_ctx
@handled
def identity_log(obj: Ctx, fmt: str | None) -> None:
    """Every amendment of core.md and self.md: commit, op, signer and diff.

    \b
    Example:
      truss-files identity log --format json
    """
    found = obj.store().identity_log()
    data = {"amendments": [a.to_dict() for a in found]}

    def text(d: dict[str, Any]) -> str:
        out = []
        for a in d["amendments"]:
            out.append(f"{a['commit'][:12]} {a['op']:<16} {a['path']} signed by {a['signer']}")
            out.extend("    " + line for line in a["diff"].splitlines()[2:])
        return "\n".join(out) or "no amendments"

    emit(fmt, data, text)


@identity.command("set")
@click.argument("which", type=click.Choice(["core", "self"]))
@click.argument("source", metavar="FILE|-")
@FORMAT_OPTION
@pass_ctx
@handled
def identity_set(obj: Ctx, which: str, source: str, fmt: str | None) -> None:
    """Replace core.md or self.md (operator only, under any policy) in a signed commit.

    \b
    Example:
      truss-files identity set core core.md
    """
    data = obj.store().identity_set(which, _read(source))
    emit(fmt, data, lambda d: f"set {d['path']} in {d['commit'][:12]}")


@cli.group()
def principal() -> None:
    """Principals (L1): principals/<principal>.md, what the agent knows of one user.

    Written by that principal's own key or an operator's, in a signed commit.

    \b
    Example:
      truss-files principal show alice@example.com
    """


@principal.command("set")
@click.argument("name", metavar="PRINCIPAL")
@click.argument("source", metavar="FILE|-")
@FORMAT_OPTION
@pass_ctx
@handled
def principal_set(obj: Ctx, name: str, source: str, fmt: str | None) -> None:
    """Write principals/PRINCIPAL.md (your own, or anyone's as an operator).

    \b
    Example:
      echo "Prefers short answers." | truss-files principal set alice@example.com -
    """
    data = obj.store().principal_set(name, _read(source))
    emit(fmt, data, lambda d: f"set {d['path']} in {d['commit'][:12]}")


@principal.command("show")
@click.argument("name", metavar="PRINCIPAL")
@FORMAT_OPTION
@pass_ctx
@handled
def principal_show(obj: Ctx, name: str, fmt: str | None) -> None:
    """Print principals/PRINCIPAL.md.

    \b
    Example:
      truss-files principal show alice@example.com
    """
    data = obj.store().principal_show(name)
    emit(fmt, data, lambda d: d["text"].rstrip("\n"))


__all__ = ["cli"]
