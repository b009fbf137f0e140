"""A private sigstore instance for the tests: OIDC issuer, Fulcio-style CA with a CT key, and a
Rekor-style log, served on 127.0.0.1 to sigstore's real client and checked by its real verifier.

Only the public servers are replaced; every check sigstore makes (certificate chain at the
log's integrated time, embedded SCT against the trusted CT keys, identity and issuer policy,
Merkle inclusion proof, signed checkpoint, signed entry timestamp, entry body against the
bundle) runs unchanged against this instance's trust material.

Use::

    sigstore_local                      # pytest fixture, session scope (tests/conftest.py)
    with LocalSigstore.start() as s:    # outside pytest (benchmarks); or start() / stop()
        s.url, s.issuer_url             # base URL (CA and log), OIDC issuer URL
        s.issue_token(identity, issuer=None, *, audience="sigstore", expires_in=600,
                      extra_claims=None) -> str          # JWT for IdentityToken(...)
        s.ambient_env(identity, issuer=GITHUB_ACTIONS_ISSUER) -> dict[str, str]
                                        # env of a CI job: sigstore's ambient detection finds it
        s.trust_config                  # sigstore.models.ClientTrustConfig (signing)
        s.trust_config_json             # Path of the same, for another process
        s.trusted_root                  # sigstore.models.TrustedRoot (verification)
        s.trusted_root_json             # Path of trusted_root.json, to pin in a store
        s.sign_unchecked(artifact, token=None) -> Bundle   # without the signer's own checks

Forged cases, each a context manager that restores the honest instance on exit::

    s.tampered_log("proof" | "set" | "checkpoint" | "checkpoint-root", ...)
                                  # log answers that do not verify
    s.log_time_shift(seconds)     # integrated time outside the 10-minute certificate
    s.certificate_shift(seconds)  # certificates that start later (not yet valid when logged)
    s.untrusted_ca()              # a CA outside the trusted root, with the trusted CA's names
    s.untrusted_ct_log()          # SCTs from a CT key outside the trusted root
    sigstore_other                # fixture: a second, independent deployment (own keys, log)
    s.issue_token(other_identity) / s.issue_token(issuer=other_issuer)
"""

from __future__ import annotations

from .instance import LocalSigstore
from .oidc import DEFAULT_IDENTITY, GITHUB_ACTIONS_ISSUER

__all__ = ["DEFAULT_IDENTITY", "GITHUB_ACTIONS_ISSUER", "LocalSigstore"]
