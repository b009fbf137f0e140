"""A private sigstore instance for the tests: OIDC issuer, Fulcio-style CA with a CT key, and a
Rekor-style log, served on 127.0.0.1 to sigstore's real client and verified by its real verifier.
"""

from __future__ import annotations

from .instance import LocalSigstore
from .oidc import DEFAULT_IDENTITY, GITHUB_ACTIONS_ISSUER

__all__ = ["DEFAULT_IDENTITY", "GITHUB_ACTIONS_ISSUER", "LocalSigstore"]
