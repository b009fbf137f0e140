"""The checks behind ``keyless.verify`` that give each refusal its name, and the trusted root
and verifier they share (cached per pinned root). They only name failures: sigstore's own
``Verifier`` runs after them and decides.
"""

from __future__ import annotations

import base64
import datetime
import functools
import hashlib
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from ..errors import KeylessError
from .trustpolicy import TRUSTED_ROOT_PATH

if TYPE_CHECKING:
    from cryptography.x509 import Certificate
    from sigstore.models import TrustedRoot


def check_artifact(cert: Certificate, data: Mapping[str, Any], payload: bytes, what: str) -> None:
    signature = data.get("messageSignature")
    if not isinstance(signature, dict):
        raise KeylessError("sigstore-bundle", f"{what}: the bundle holds no message signature")
    digest = (signature.get("messageDigest") or {}).get("digest")
    if digest is not None and digest != base64.b64encode(hashlib.sha256(payload).digest()).decode():
        raise KeylessError(
            "sigstore-artifact",
            f"{what}: the bundle was made for other bytes (another entry, verdict or commit)",
        )
    key = cert.public_key()
    try:
        raw = base64.b64decode(str(signature.get("signature", "")), validate=True)
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise InvalidSignature
        key.verify(raw, payload, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError) as exc:
        raise KeylessError(
            "sigstore-artifact",
            f"{what}: the signature is not over these bytes (another entry, verdict or commit)",
        ) from exc


def check_chain(cert: Certificate, root: TrustedRoot, data: Mapping[str, Any], what: str) -> None:
    cas = root.get_fulcio_certs()
    if not any(_issued_by(cert, ca) for ca in cas):
        raise KeylessError(
            "sigstore-untrusted-certificate",
            f"{what}: the signing certificate ({cert.issuer.rfc4514_string()}) was not issued "
            "by a certificate authority of the trusted root; pin your deployment's "
            f"trusted_root.json at {TRUSTED_ROOT_PATH} (an operator's commit)",
        )
    trusted_logs = _ct_log_ids(root)
    for sct in _scts(cert):
        if trusted_logs and sct not in trusted_logs:
            raise KeylessError(
                "sigstore-untrusted-certificate",
                f"{what}: the certificate's timestamp (SCT) comes from a certificate "
                "transparency log the trusted root does not name",
            )
    when = integrated(log_entry(data))
    start = int(cert.not_valid_before_utc.timestamp())
    end = int(cert.not_valid_after_utc.timestamp())
    if not start <= when <= end:
        raise KeylessError(
            "sigstore-expired-certificate",
            f"{what}: the certificate is valid {cert.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ} "
            f"to {cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}, but the log recorded the "
            f"signature at {_iso(when)}",
        )


def _scts(cert: Certificate) -> list[bytes]:
    from cryptography import x509  # here: x509 is heavy, and keyless imports this module

    try:
        found = cert.extensions.get_extension_for_class(
            x509.PrecertificateSignedCertificateTimestamps
        ).value
    except x509.ExtensionNotFound:
        return []
    return [sct.log_id for sct in found]


def _ct_log_ids(root: TrustedRoot) -> frozenset[bytes]:
    """The key ids of the root's CT logs (empty when they cannot be read: then sigstore's own
    SCT check alone decides, under the ``sigstore-log`` name)."""
    try:
        raw = json.loads(root._inner.to_json())  # the wire form; no public accessor
        return frozenset(base64.b64decode(log["logId"]["keyId"]) for log in raw.get("ctlogs", []))
    except (AttributeError, KeyError, TypeError, ValueError):
        return frozenset()


def _iso(epoch: int) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _issued_by(cert: Certificate, ca: Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except Exception:  # noqa: BLE001 - a mismatch of names, key type or signature
        return False
    return True


def log_entry(data: Mapping[str, Any]) -> Mapping[str, Any]:
    material = data.get("verificationMaterial") or {}
    entries = material.get("tlogEntries") if isinstance(material, dict) else None
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        raise KeylessError("sigstore-log", "the bundle holds no transparency log entry")
    return entries[0]


def integrated(entry: Mapping[str, Any]) -> int:
    try:
        return int(entry.get("integratedTime", 0))
    except (TypeError, ValueError) as exc:
        raise KeylessError(
            "sigstore-log", "the log entry's integratedTime is not a number"
        ) from exc


@functools.lru_cache(maxsize=8)
def trusted_root(pinned: bytes | None) -> TrustedRoot:
    from sigstore.models import ClientTrustConfig, TrustedRoot  # here: the optional extra

    if pinned is None:
        # sigstore ships the production trusted root in its package; offline=True reads it
        # (and any cached update) without a network. Its "offline mode" warning is noise here.
        logging.getLogger("sigstore._internal.tuf").setLevel(logging.ERROR)
        return ClientTrustConfig.production(offline=True).trusted_root
    from sigstore_models.trustroot import v1 as trustroot_v1  # here: the optional extra

    try:
        return TrustedRoot(trustroot_v1.TrustedRoot.from_json(pinned))
    except Exception as exc:  # noqa: BLE001 - pydantic and sigstore errors alike
        raise KeylessError(
            "sigstore-trusted-root",
            f"{TRUSTED_ROOT_PATH} is not a sigstore trusted root ({exc}); an operator must fix it",
        ) from exc


@functools.lru_cache(maxsize=8)
def verifier(pinned: bytes | None) -> Any:
    from sigstore.verify import Verifier  # here: the optional extra

    return Verifier(trusted_root=trusted_root(pinned))
