"""The trust material clients are given: trusted_root.json and the client trust config."""

from __future__ import annotations

import datetime
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from .encoding import b64, key_id, now, rfc3339, spki_der

TRUSTED_ROOT_MEDIA_TYPE = "application/vnd.dev.sigstore.trustedroot+json;version=0.1"
SIGNING_CONFIG_MEDIA_TYPE = "application/vnd.dev.sigstore.signingconfig.v0.2+json"
CLIENT_TRUST_CONFIG_MEDIA_TYPE = "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json"
OPERATOR = "truss-files test sigstore"


def _valid_from() -> dict[str, str]:
    return {"start": rfc3339(now() - datetime.timedelta(days=1))}


def _log_instance(base_url: str, key: ec.EllipticCurvePublicKey) -> dict[str, Any]:
    return {
        "baseUrl": base_url,
        "hashAlgorithm": "SHA2_256",
        "publicKey": {
            "rawBytes": b64(spki_der(key)),
            "keyDetails": "PKIX_ECDSA_P256_SHA_256",
            "validFor": _valid_from(),
        },
        "logId": {"keyId": b64(key_id(key))},
    }


def trusted_root(
    base_url: str,
    chain: list[x509.Certificate],
    rekor_key: ec.EllipticCurvePublicKey,
    ct_key: ec.EllipticCurvePublicKey,
) -> dict[str, Any]:
    return {
        "mediaType": TRUSTED_ROOT_MEDIA_TYPE,
        "tlogs": [_log_instance(base_url, rekor_key)],
        "certificateAuthorities": [
            {
                "subject": {"organization": OPERATOR, "commonName": OPERATOR},
                "uri": base_url,
                "certChain": {
                    "certificates": [
                        {"rawBytes": b64(c.public_bytes(serialization.Encoding.DER))} for c in chain
                    ]
                },
                "validFor": _valid_from(),
            }
        ],
        "ctlogs": [_log_instance(base_url, ct_key)],
        "timestampAuthorities": [],
    }


def signing_config(base_url: str, issuer_url: str) -> dict[str, Any]:
    def service(url: str) -> dict[str, Any]:
        return {
            "url": url,
            "majorApiVersion": 1,
            "validFor": _valid_from(),
            "operator": OPERATOR,
        }

    return {
        "mediaType": SIGNING_CONFIG_MEDIA_TYPE,
        "caUrls": [service(base_url)],
        "oidcUrls": [service(issuer_url)],
        "rekorTlogUrls": [service(base_url)],
        "rekorTlogConfig": {"selector": "ANY"},
        "tsaUrls": [],
        "tsaConfig": {"selector": "ANY"},
    }


def client_trust_config(root: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    return {
        "mediaType": CLIENT_TRUST_CONFIG_MEDIA_TYPE,
        "trustedRoot": root,
        "signingConfig": config,
    }
