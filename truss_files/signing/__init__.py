"""Signing and verification: SSHSIG signatures (what git's ``gpg.format=ssh`` uses), the
``allowed_signers`` file, and two signers — one in-process, one running ``ssh-keygen``.

Deliberately free of pygit2 so that verification can be imported anywhere cheaply.
"""

from __future__ import annotations

from truss_files.signing.allowed_signers import (
    AllowedSigner,
    AllowedSigners,
    ForeignLine,
    verify_allowed,
)
from truss_files.signing.sshkeygen import SshKeygenSigner
from truss_files.signing.sshsig import (
    Ed25519Signer,
    PublicKey,
    Signer,
    insert_gpgsig,
    split_gpgsig,
    verify,
)

__all__ = [
    "AllowedSigner",
    "AllowedSigners",
    "Ed25519Signer",
    "ForeignLine",
    "PublicKey",
    "Signer",
    "SshKeygenSigner",
    "insert_gpgsig",
    "split_gpgsig",
    "verify",
    "verify_allowed",
]
