"""Keyless commands: `attest` (a sigstore attestation of commits, kept as git notes) and
`sigstore pin-root` (an operator pins a private deployment's trusted root).

Both need the `sigstore` extra; nothing here is imported by any other command.
"""

from __future__ import annotations

from pathlib import Path

import click

from ...facade import NOTES_REF
from .app import Ctx, cli, handled, pass_ctx
from .output import FORMAT_OPTION, emit

TOKEN_OPTION = click.option(
    "--identity-token",
    envvar="SIGSTORE_IDENTITY_TOKEN",
    help="The OIDC token to sign with (default: the CI's ambient identity).",
)
TRUST_CONFIG_OPTION = click.option(
    "--trust-config",
    type=click.Path(dir_okay=False),
    envvar="TRUSS_SIGSTORE_TRUST_CONFIG",
    help="A ClientTrustConfig JSON for a private sigstore deployment (default: the public one).",
)


@cli.command()
@click.argument("rev", required=False, metavar="[COMMIT|RANGE]")
@TOKEN_OPTION
@TRUST_CONFIG_OPTION
@FORMAT_OPTION
@pass_ctx
@handled
def attest(
    obj: Ctx,
    rev: str | None,
    identity_token: str | None,
    trust_config: str | None,
    fmt: str | None,
) -> None:
    """Attest commits keylessly: a sigstore bundle over each commit id, as a git note.

    The notes live under refs/notes/truss-sigstore, travel with `sync`, and are verified
    offline by `audit`, `log` and the server's gate. The signing identity must be a sigstore
    principal the store names (truss.toml [roles] panel or [sigstore] attesters). Default:
    the branch tip. With [sigstore] attest = true every trust transition is attested as it
    is made.

    \b
    Example:
      truss-files attest
      truss-files attest HEAD~3..HEAD --trust-config trust_config.json
    """
    done = obj.store().attest(rev, token=identity_token, trust_config=trust_config)
    data = {
        "ref": NOTES_REF,
        "attested": [
            {"commit": a.commit, "signer": a.signer, "log_index": a.log_index} for a in done
        ],
    }
    emit(
        fmt,
        data,
        "\n".join(
            f"attested {a.commit[:12]} by {a.signer} (log index {a.log_index})" for a in done
        ),
    )


@cli.group("sigstore")
def sigstore_group() -> None:
    """The store's sigstore settings: the trusted root keyless signatures are checked by.

    \b
    Example:
      truss-files sigstore pin-root trusted_root.json
    """


@sigstore_group.command("pin-root")
@click.argument("path", type=click.Path(dir_okay=False, exists=True))
@FORMAT_OPTION
@pass_ctx
@handled
def pin_root(obj: Ctx, path: str, fmt: str | None) -> None:
    """Pin a private sigstore deployment's trusted_root.json at .truss/trusted_root.json.

    One operator-signed commit; from its children on, keyless verdicts and attestations are
    verified against this root instead of the production root sigstore ships.

    \b
    Example:
      truss-files sigstore pin-root trusted_root.json
    """
    change = obj.store().pin_trusted_root(Path(path).read_bytes())
    emit(
        fmt,
        {"commit": change.commit, "summary": change.summary},
        change.summary if change.commit is None else f"{change.summary}: {change.commit}",
    )


__all__ = ["cli"]
