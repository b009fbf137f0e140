"""Byte encodings the servers need: DER lengths and strings, RFC 6962 TLS structures, keys."""

from __future__ import annotations

import base64
import datetime
import hashlib
import struct

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

UTC = datetime.UTC


def der_length(size: int) -> bytes:
    if size < 0x80:
        return bytes([size])
    raw = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def der_utf8_string(text: str) -> bytes:
    raw = text.encode()
    return b"\x0c" + der_length(len(raw)) + raw


def der_octet_string(raw: bytes) -> bytes:
    return b"\x04" + der_length(len(raw)) + raw


def tls_u16_prefixed(raw: bytes) -> bytes:
    return struct.pack("!H", len(raw)) + raw


def tls_u24_prefixed(raw: bytes) -> bytes:
    return struct.pack("!I", len(raw))[1:] + raw


def spki_der(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def key_id(key: ec.EllipticCurvePublicKey) -> bytes:
    """RFC 6962 key id: SHA-256 of the DER SubjectPublicKeyInfo (CT log ids, Rekor log ids)."""
    return hashlib.sha256(spki_der(key)).digest()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def new_p256() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def now() -> datetime.datetime:
    return datetime.datetime.now(UTC)


def rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
