"""A Fulcio-style CA: root and intermediate, short-lived code-signing leaves with an embedded SCT.

Issuance follows the precertificate flow of RFC 6962: the leaf is first issued as a
precertificate carrying the critical poison extension, the CT log key signs an SCT over the
precertificate's TBS (poison removed) bound to the issuer's key hash, then the final
certificate is issued with the same fields and the SCT list in place of the poison.
"""

from __future__ import annotations

import datetime
import hashlib
import struct
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

from .encoding import (
    der_octet_string,
    der_utf8_string,
    key_id,
    new_p256,
    now,
    spki_der,
    tls_u16_prefixed,
    tls_u24_prefixed,
)
from .oidc import is_email, token_identity

OIDC_ISSUER_V1 = ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
OIDC_ISSUER_V2 = ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
SCT_LIST = ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")
CERT_LIFETIME = datetime.timedelta(minutes=10)
CA_LIFETIME = datetime.timedelta(days=3650)


class CsrRefused(Exception):
    """A certificate request the CA must not sign (no proof of possession, bad key)."""


@dataclass
class CtLog:
    """The CT log's signing key: only SCTs are made, entries are not kept."""

    key: ec.EllipticCurvePrivateKey = field(default_factory=new_p256)

    @property
    def log_id(self) -> bytes:
        return key_id(self.key.public_key())

    def precert_sct(self, precert_tbs: bytes, issuer: ec.EllipticCurvePublicKey) -> bytes:
        """One serialized SCT (RFC 6962 3.2) over a precertificate entry: the issuer's key
        hash and the precertificate's TBS with the poison removed."""
        timestamp = int(now().timestamp() * 1000)
        extensions = b""
        entry = hashlib.sha256(spki_der(issuer)).digest() + tls_u24_prefixed(precert_tbs)
        # version v1 (0), signature_type certificate_timestamp (0), entry_type precert (1)
        signed = struct.pack("!BBQH", 0, 0, timestamp, 1) + entry + tls_u16_prefixed(extensions)
        signature = self.key.sign(signed, ec.ECDSA(hashes.SHA256()))
        # digitally-signed: hash sha256 (4), signature ecdsa (3)
        return (
            struct.pack("!B", 0)
            + self.log_id
            + struct.pack("!Q", timestamp)
            + tls_u16_prefixed(extensions)
            + struct.pack("!BB", 4, 3)
            + tls_u16_prefixed(signature)
        )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "truss-files test sigstore"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _ca_certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer_name: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    path_length: int,
    start: datetime.datetime,
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if issuer_key is not key:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


class FulcioCA:
    def __init__(self, ct_log: CtLog, name: str = "truss-files test fulcio") -> None:
        start = now() - datetime.timedelta(days=1)
        self.ct_log = ct_log
        self.root_key = new_p256()
        self.root = _ca_certificate(
            f"{name} root", self.root_key, _name(f"{name} root"), self.root_key, 1, start
        )
        self.intermediate_key = new_p256()
        self.intermediate = _ca_certificate(
            f"{name} intermediate",
            self.intermediate_key,
            self.root.subject,
            self.root_key,
            0,
            start,
        )
        # Knob: moves a leaf's whole validity window, so the log's integrated time can fall
        # outside it.
        self.validity_shift = datetime.timedelta(0)

    @property
    def chain(self) -> list[x509.Certificate]:
        """Issuing chain, intermediate first."""
        return [self.intermediate, self.root]

    def issue(self, csr_pem: bytes, claims: dict[str, Any]) -> list[x509.Certificate]:
        """Leaf, intermediate, root for a CSR whose self-signature proves possession."""
        try:
            csr = x509.load_pem_x509_csr(csr_pem)
        except ValueError as exc:
            raise CsrRefused(f"certificate request is not a PEM CSR: {exc}") from exc
        if not csr.is_signature_valid:
            raise CsrRefused("certificate request signature does not verify (proof of possession)")
        public_key = csr.public_key()
        if not isinstance(public_key, ec.EllipticCurvePublicKey):
            raise CsrRefused("certificate request key must be ECDSA")
        leaf = self._leaf(public_key, token_identity(claims), str(claims["iss"]))
        return [leaf, self.intermediate, self.root]

    def _leaf(
        self, public_key: ec.EllipticCurvePublicKey, identity: str, issuer: str
    ) -> x509.Certificate:
        start = now() + self.validity_shift
        san: x509.GeneralName = (
            x509.RFC822Name(identity)
            if is_email(identity)
            else x509.UniformResourceIdentifier(identity)
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.intermediate.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + CERT_LIFETIME)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    self.intermediate_key.public_key()
                ),
                critical=False,
            )
            # An empty subject makes the SAN critical (RFC 5280 4.2.1.6).
            .add_extension(x509.SubjectAlternativeName([san]), critical=True)
            .add_extension(x509.UnrecognizedExtension(OIDC_ISSUER_V1, issuer.encode()), False)
            .add_extension(
                x509.UnrecognizedExtension(OIDC_ISSUER_V2, der_utf8_string(issuer)), False
            )
        )
        # The poison and the SCT list are each the last extension, so the precertificate's TBS
        # without the poison is byte for byte the TBS of the same fields with neither: that is
        # what the CT log signs, and what a verifier gets back by dropping the SCT list.
        precert = builder.add_extension(x509.PrecertPoison(), critical=True).sign(
            self.intermediate_key, hashes.SHA256()
        )
        precert_tbs = builder.sign(self.intermediate_key, hashes.SHA256()).tbs_certificate_bytes
        if precert.extensions[-1].oid != x509.PrecertPoison.oid:
            raise AssertionError("the poison must be the precertificate's last extension")
        sct = self.ct_log.precert_sct(precert_tbs, self.intermediate_key.public_key())
        sct_list = der_octet_string(tls_u16_prefixed(tls_u16_prefixed(sct)))
        return builder.add_extension(
            x509.UnrecognizedExtension(SCT_LIST, sct_list), critical=False
        ).sign(self.intermediate_key, hashes.SHA256())


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()
