"""Keyless signatures with sigstore: principals named by an OIDC identity, signing with a
short-lived certificate, and offline verification that names what is wrong.

A keyless principal is ``sigstore:<issuer>|<identity>`` -- the OIDC issuer and the
certificate's subject alternative name, both matched exactly. Verification never touches the
network: the certificate chain, its SCT, the transparency log entry (inclusion proof,
checkpoint, promise) and the signature are checked by sigstore's own ``Verifier`` against a
trusted root -- the one pinned in the store at ``.truss/trusted_root.json`` (a private
deployment), or else the production root that ships inside the sigstore package.

sigstore is the ``sigstore`` extra and costly to import, so it is imported only inside the
functions that sign or verify; naming and parsing principals stays free of it.

Before sigstore's verifier runs, a few checks of our own give each refusal its name (the
rules below); they only name failures, they never accept anything sigstore would refuse.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import KeylessError, UsageError
from . import keyless_checks as checks

if TYPE_CHECKING:
    from cryptography.x509 import Certificate
    from sigstore.models import Bundle

PREFIX = "sigstore:"

# The verdict's ``key`` field for a keyless verdict: there is no long-lived key to name.
KEYLESS_KEY = "sigstore"
# Fulcio's OIDC issuer extensions: v1 holds the raw string, v2 a DER UTF8String.
_ISSUER_V1 = "1.3.6.1.4.1.57264.1.1"
_ISSUER_V2 = "1.3.6.1.4.1.57264.1.8"
# An issuer is an http(s) URL; an identity an email, a URI or another SAN string. Neither may
# hold whitespace, quotes or the '|' that separates them; the whole stays one TOML string.
_ISSUER = re.compile(r"^https?://[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]{1,256}$")
_IDENTITY = re.compile(r"^[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]{1,512}$")

RULES = {
    "sigstore-bundle": "the bundle is missing or malformed",
    "sigstore-identity": "signed by another identity",
    "sigstore-issuer": "the identity comes from another OIDC issuer",
    "sigstore-artifact": "signed over other bytes (another entry, verdict or commit)",
    "sigstore-untrusted-certificate": "a certificate the trusted root does not vouch for",
    "sigstore-expired-certificate": "the certificate was not valid when the log recorded it",
    "sigstore-log": "the transparency log entry does not verify",
}


@dataclass(frozen=True)
class KeylessIdentity:
    """An OIDC issuer and a certificate identity (SAN), matched exactly."""

    issuer: str
    identity: str

    @property
    def principal(self) -> str:
        return f"{PREFIX}{self.issuer}|{self.identity}"

    @classmethod
    def parse(cls, principal: str) -> KeylessIdentity | None:
        """The identity a ``sigstore:`` principal names; None for any other principal."""
        if not principal.startswith(PREFIX):
            return None
        issuer, sep, identity = principal[len(PREFIX) :].partition("|")
        if not sep or not _ISSUER.fullmatch(issuer) or not _IDENTITY.fullmatch(identity):
            raise UsageError(
                f"invalid sigstore principal {principal!r}: write it as "
                "'sigstore:<issuer>|<identity>', e.g. 'sigstore:https://token.actions."
                "githubusercontent.com|https://github.com/org/repo/.github/workflows/"
                "verify.yml@refs/heads/main' (no spaces or quotes)"
            )
        return cls(issuer, identity)


@dataclass(frozen=True)
class KeylessSignature:
    """What a verified bundle says: who signed, and where the log recorded it."""

    issuer: str
    identity: str
    log_index: int
    integrated_time: int

    @property
    def principal(self) -> str:
        return KeylessIdentity(self.issuer, self.identity).principal

    def to_dict(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "issuer": self.issuer,
            "log_index": self.log_index,
            "integrated_time": self.integrated_time,
        }


def is_keyless(principal: str) -> bool:
    return principal.startswith(PREFIX)


# --------------------------------------------------------------------------- signing


def sign(
    payload: bytes, *, token: str | None = None, trust_config: str | Path | None = None
) -> tuple[KeylessIdentity, dict[str, Any]]:
    """Sign ``payload`` keylessly; returns the identity the certificate names and the bundle.

    The OIDC token is ``token``, or what sigstore's own ambient detection finds (GitHub
    Actions with ``id-token: write``, and the other CI systems it knows). ``trust_config`` is
    a ClientTrustConfig JSON file (a private deployment); without it, the public instance.
    """
    identity, raw = token_identity(token)
    # here: sigstore is the optional extra, and costly to import
    from sigstore.errors import Error
    from sigstore.oidc import IdentityToken
    from sigstore.sign import SigningContext

    config = _trust_config(trust_config)
    try:
        context = SigningContext.from_trust_config(config)
        with context.signer(IdentityToken(raw)) as signer:
            bundle = signer.sign_artifact(payload)
    except (Error, OSError, ValueError) as exc:
        raise KeylessError(
            "sigstore-sign", f"sigstore could not sign: {exc}; check the token and the trust config"
        ) from exc
    data: dict[str, Any] = json.loads(bundle.to_json())
    issuer, sans = _cert_identity(bundle.signing_certificate)
    if issuer != identity.issuer or identity.identity not in sans:
        raise KeylessError(
            "sigstore-identity",
            f"the certificate names {issuer} | {', '.join(sans)}, not the token's "
            f"{identity.issuer} | {identity.identity}; nothing was signed in your name",
        )
    return identity, data


def token_identity(token: str | None) -> tuple[KeylessIdentity, str]:
    """The identity an OIDC token (given, or found by sigstore's ambient detection) names."""
    # here: sigstore is the optional extra, and costly to import
    from sigstore.oidc import IdentityError, IdentityToken, detect_credential

    try:
        raw = token or detect_credential()
    except IdentityError as exc:
        raise UsageError(f"no ambient OIDC credential: {exc}") from exc
    if not raw:
        raise UsageError(
            "no OIDC identity token: pass --identity-token (or SIGSTORE_IDENTITY_TOKEN), or "
            "run in CI with an ambient identity (GitHub Actions: permissions: id-token: write)"
        )
    try:
        parsed = IdentityToken(raw)
    except IdentityError as exc:
        raise UsageError(f"the OIDC identity token is not usable: {exc}") from exc
    return KeylessIdentity(parsed.federated_issuer, parsed.identity), raw


def _trust_config(path: str | Path | None) -> Any:
    # here: sigstore is the optional extra, and costly to import
    from sigstore.models import ClientTrustConfig

    if path is None:
        return ClientTrustConfig.production()
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read trust config {path}: {exc.strerror}") from exc
    try:
        return ClientTrustConfig.from_json(text)
    except Exception as exc:  # noqa: BLE001 - pydantic and sigstore errors alike
        raise UsageError(f"{path} is not a sigstore ClientTrustConfig JSON: {exc}") from exc


# --------------------------------------------------------------------------- verifying


def verify(
    payload: bytes,
    bundle: Any,
    expected: KeylessIdentity,
    trusted_root: bytes | None,
    what: str,
) -> KeylessSignature:
    """Raise ``KeylessError`` (its ``rule`` one of ``RULES``) unless ``bundle`` is a valid
    sigstore signature over exactly ``payload`` by exactly ``expected``. Offline."""
    # here: sigstore is the optional extra, and costly to import
    from sigstore.errors import Error as SigstoreError
    from sigstore.verify.policy import Identity

    parsed, data = _bundle(bundle, what)
    cert = parsed.signing_certificate
    issuer, sans = _cert_identity(cert)
    if issuer != expected.issuer:
        raise KeylessError(
            "sigstore-issuer",
            f"{what}: the certificate's OIDC issuer is {issuer or 'missing'}, not "
            f"{expected.issuer}",
        )
    if expected.identity not in sans:
        raise KeylessError(
            "sigstore-identity",
            f"{what}: signed by {', '.join(sans) or 'no identity'}, not {expected.identity}",
        )
    checks.check_artifact(cert, data, payload, what)
    checks.check_chain(cert, checks.trusted_root(trusted_root), data, what)
    verifier = checks.verifier(trusted_root)
    try:
        verifier.verify_artifact(
            payload, parsed, Identity(identity=expected.identity, issuer=expected.issuer)
        )
    except SigstoreError as exc:
        raise KeylessError(
            "sigstore-log",
            f"{what}: the transparency log entry or the certificate's signed timestamp does "
            f"not verify against the trusted root ({exc})",
        ) from exc
    entry = checks.log_entry(data)
    return KeylessSignature(
        issuer, expected.identity, int(entry.get("logIndex", -1)), checks.integrated(entry)
    )


def claimed(bundle: Any) -> tuple[str, str, int | None] | None:
    """(identity, issuer, log index) a bundle claims, read without sigstore (cheap, for
    ``diff`` and ``log``); None when it cannot be read. Unverified: the audit judges."""
    from cryptography import x509  # here: x509 is heavy, and naming principals needs none

    try:
        material = bundle["verificationMaterial"]
        der = base64.b64decode(material["certificate"]["rawBytes"])
        cert = x509.load_der_x509_certificate(der)
        entries = material.get("tlogEntries") or [{}]
        index = int(entries[0]["logIndex"]) if "logIndex" in entries[0] else None
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    issuer, sans = _cert_identity(cert)
    return (sans[0] if sans else "", issuer, index)


def _bundle(bundle: Any, what: str) -> tuple[Bundle, dict[str, Any]]:
    # here: sigstore is the optional extra, and costly to import
    from sigstore.models import Bundle

    if isinstance(bundle, Mapping):
        text = json.dumps(bundle)
    elif isinstance(bundle, str | bytes):
        text = bundle.decode() if isinstance(bundle, bytes) else bundle
    else:
        raise KeylessError("sigstore-bundle", f"{what}: no sigstore bundle")
    try:
        data = json.loads(text)
        parsed = Bundle.from_json(text)
    except Exception as exc:  # noqa: BLE001 - pydantic, json and sigstore errors alike
        raise KeylessError(
            "sigstore-bundle", f"{what}: the sigstore bundle does not parse ({exc})"
        ) from exc
    if not isinstance(data, dict):
        raise KeylessError("sigstore-bundle", f"{what}: the sigstore bundle is not an object")
    return parsed, data


def _cert_identity(cert: Certificate) -> tuple[str, list[str]]:
    from cryptography import x509  # here: x509 is heavy, and naming principals needs none

    issuer = ""
    for ext in cert.extensions:
        oid = ext.oid.dotted_string
        if oid == _ISSUER_V1 and isinstance(ext.value, x509.UnrecognizedExtension):
            issuer = issuer or ext.value.value.decode("utf-8", "replace")
        elif oid == _ISSUER_V2 and isinstance(ext.value, x509.UnrecognizedExtension):
            raw = ext.value.value
            # DER UTF8String: tag 0x0c, then a short or long length.
            if len(raw) > 2 and raw[0] == 0x0C:
                skip = 2 if raw[1] < 0x80 else 2 + (raw[1] & 0x7F)
                issuer = raw[skip:].decode("utf-8", "replace")
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return issuer, []
    sans = [*san.get_values_for_type(x509.UniformResourceIdentifier)]
    sans += san.get_values_for_type(x509.RFC822Name)
    return issuer, sans


def check_trusted_root(data: bytes) -> None:
    """Raise ``UsageError`` unless ``data`` is a sigstore trusted root."""
    try:
        checks.trusted_root(data)
    except KeylessError as exc:
        raise UsageError(exc.detail) from exc
