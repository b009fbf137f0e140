"""Signing without the client's own checks, for bundles sigstore's signer would refuse to make.

sigstore's ``Signer`` verifies the certificate's SCT before it signs, so a certificate with an
SCT from an untrusted CT key never reaches a bundle through it. The product's verifier must
still refuse such a bundle when someone else makes it: this does the same three requests as the
real client (certificate, signature, log entry) and assembles the bundle with sigstore's own
``Bundle.from_parts``, checking nothing on the way.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.request
from typing import TYPE_CHECKING, Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

if TYPE_CHECKING:
    from sigstore.models import Bundle


def _post(url: str, body: Any, headers: dict[str, str]) -> Any:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json", **headers}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def sign_unchecked(base_url: str, token: str, artifact: bytes) -> Bundle:
    from sigstore.models import Bundle, TransparencyLogEntry

    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([]))
        .sign(key, hashes.SHA256())
    )
    answer = _post(
        f"{base_url}/api/v2/signingCert",
        {
            "certificateSigningRequest": base64.b64encode(
                csr.public_bytes(serialization.Encoding.PEM)
            ).decode()
        },
        {"Authorization": f"Bearer {token}"},
    )
    pems = answer["signedCertificateEmbeddedSct"]["chain"]["certificates"]
    cert = x509.load_pem_x509_certificate(pems[0].encode())
    digest = hashlib.sha256(artifact).digest()
    signature = key.sign(digest, ec.ECDSA(Prehashed(hashes.SHA256())))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    entry = _post(
        f"{base_url}/api/v1/log/entries",
        {
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": digest.hex()}},
                "signature": {
                    "content": base64.b64encode(signature).decode(),
                    "publicKey": {"content": base64.b64encode(cert_pem).decode()},
                },
            },
        },
        {},
    )
    return Bundle.from_parts(cert, signature, TransparencyLogEntry._from_v1_response(entry))
