"""A Rekor-style (API v1) transparency log of ``hashedrekord`` and ``dsse`` 0.0.1 entries.

Each entry is a leaf of a real RFC 6962 tree; the answer carries the entry's inclusion proof
against the tree just after it was added, a checkpoint for that tree in the signed-note format,
and a signed entry timestamp (the promise) over the canonical entry with its integrated time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
import time
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

from .encoding import b64, key_id, new_p256
from .merkle import MerkleTree, leaf_hash

TAMPER_KINDS = frozenset({"proof", "set", "checkpoint", "checkpoint-root"})


class EntryRefused(Exception):
    """A proposed entry the log must not accept; the message names the field."""


def _field(obj: Any, *path: str) -> Any:
    for name in path:
        if not isinstance(obj, dict) or name not in obj:
            raise EntryRefused(f"entry has no {'.'.join(path)}")
        obj = obj[name]
    return obj


def _canonical(value: dict[str, Any]) -> bytes:
    """RFC 8785 for the JSON the log signs: ASCII keys, strings and integers only, where
    sorted keys without whitespace are the canonical form."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class TransparencyLog:
    def __init__(self, origin: str, name: str = "truss-files-test-rekor") -> None:
        self.key = new_p256()
        self.log_id = key_id(self.key.public_key())
        self.origin = origin
        self.name = name
        self.tree = MerkleTree()
        self._lock = threading.Lock()
        # Knobs. integrated_time_offset moves the time the log claims; tamper names parts of
        # the next answers to corrupt (see TAMPER_KINDS and LocalSigstore.tampered_log).
        self.integrated_time_offset = 0
        self.tamper: set[str] = set()

    def sign(self, data: bytes) -> bytes:
        return self.key.sign(data, ec.ECDSA(hashes.SHA256()))

    def add(self, proposed: Any) -> dict[str, Any]:
        body = self._checked_body(proposed)
        with self._lock:
            index = self.tree.append(body)
            size = len(self.tree)
            integrated = int(time.time()) + self.integrated_time_offset
            root = self.tree.root(size)
            path = self.tree.inclusion_path(index, size)
            tamper = set(self.tamper)
        body_b64 = b64(body)
        promise = self.sign(
            _canonical(
                {
                    "body": body_b64,
                    "integratedTime": integrated,
                    "logID": self.log_id.hex(),
                    "logIndex": index,
                }
            )
        )
        checkpoint = self.checkpoint(size, root)
        if "proof" in tamper:
            path = [bytes([path[0][0] ^ 1]) + path[0][1:], *path[1:]] if path else [root]
        if "set" in tamper:
            promise = self.sign(b"not the entry")
        if "checkpoint" in tamper:
            checkpoint = self.checkpoint(size, root, signer=new_p256())
        if "checkpoint-root" in tamper:
            # Signed by the log, but for another tree: a split view.
            checkpoint = self.checkpoint(size, leaf_hash(b"another tree"))
        return {
            leaf_hash(body).hex(): {
                "body": body_b64,
                "integratedTime": integrated,
                "logID": self.log_id.hex(),
                "logIndex": index,
                "verification": {
                    "inclusionProof": {
                        "checkpoint": checkpoint,
                        "hashes": [h.hex() for h in path],
                        "logIndex": index,
                        "rootHash": root.hex(),
                        "treeSize": size,
                    },
                    "signedEntryTimestamp": b64(promise),
                },
            }
        }

    def checkpoint(
        self, size: int, root: bytes, signer: ec.EllipticCurvePrivateKey | None = None
    ) -> str:
        note = f"{self.origin}\n{size}\n{b64(root)}\n"
        signature = (signer or self.key).sign(note.encode(), ec.ECDSA(hashes.SHA256()))
        # The signature line's 4-byte key hint is the log id's prefix, as clients look it up.
        return f"{note}\n\u2014 {self.name} {b64(self.log_id[:4] + signature)}\n"

    def info(self) -> dict[str, Any]:
        with self._lock:
            size = len(self.tree)
            root = self.tree.root(size)
        return {
            "rootHash": root.hex(),
            "treeSize": size,
            "signedTreeHead": self.checkpoint(size, root),
            "treeID": self.origin.rsplit(" ", 1)[-1],
        }

    def _checked_body(self, proposed: Any) -> bytes:
        """Canonical body of an entry whose signatures verify under its certificates' keys, as
        Rekor checks before it logs anything."""
        kind = (_field(proposed, "kind"), _field(proposed, "apiVersion"))
        if kind == ("hashedrekord", "0.0.1"):
            return self._hashedrekord_body(proposed)
        if kind == ("dsse", "0.0.1"):
            return _dsse_body(proposed)
        raise EntryRefused("only hashedrekord 0.0.1 and dsse 0.0.1 entries are accepted")

    def _hashedrekord_body(self, proposed: Any) -> bytes:
        algorithm = _field(proposed, "spec", "data", "hash", "algorithm")
        digest_hex = _field(proposed, "spec", "data", "hash", "value")
        signature_b64 = _field(proposed, "spec", "signature", "content")
        cert_b64 = _field(proposed, "spec", "signature", "publicKey", "content")
        if algorithm != "sha256":
            raise EntryRefused("spec.data.hash.algorithm must be sha256")
        try:
            digest = bytes.fromhex(digest_hex)
            signature = base64.b64decode(signature_b64, validate=True)
            key = _certificate_key(cert_b64)
        except (ValueError, TypeError, binascii.Error) as exc:
            raise EntryRefused(f"entry fields do not decode: {exc}") from exc
        if len(digest) != 32:
            raise EntryRefused("spec.data.hash.value must be a SHA-256 digest")
        try:
            key.verify(signature, digest, ec.ECDSA(Prehashed(hashes.SHA256())))
        except InvalidSignature as exc:
            raise EntryRefused("entry signature does not verify under its certificate") from exc
        return _canonical(
            {
                "apiVersion": "0.0.1",
                "kind": "hashedrekord",
                "spec": {
                    "data": {"hash": {"algorithm": "sha256", "value": digest_hex}},
                    "signature": {"content": signature_b64, "publicKey": {"content": cert_b64}},
                },
            }
        )


def _certificate_key(cert_b64: Any) -> ec.EllipticCurvePublicKey:
    cert = x509.load_pem_x509_certificate(base64.b64decode(cert_b64, validate=True))
    key = cert.public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise EntryRefused("the signing certificate's key must be ECDSA")
    return key


def _pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding: what an envelope's signatures cover."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _dsse_body(proposed: Any) -> bytes:
    """A dsse 0.0.1 entry as Rekor stores it: envelope and payload hashes, and each signature
    with its verifier, once every signature verifies over the envelope's PAE."""
    envelope_json = _field(proposed, "spec", "proposedContent", "envelope")
    verifiers = _field(proposed, "spec", "proposedContent", "verifiers")
    if not isinstance(envelope_json, str):
        raise EntryRefused("spec.proposedContent.envelope must be the envelope's JSON text")
    try:
        envelope = json.loads(envelope_json)
        payload = base64.b64decode(_field(envelope, "payload"), validate=True)
        payload_type = _field(envelope, "payloadType")
        signatures = [
            base64.b64decode(_field(sig, "sig"), validate=True)
            for sig in _field(envelope, "signatures")
        ]
        keys = [_certificate_key(v) for v in verifiers]
    except (ValueError, TypeError, binascii.Error) as exc:
        raise EntryRefused(f"entry fields do not decode: {exc}") from exc
    if not signatures or len(keys) != 1 or not isinstance(payload_type, str):
        raise EntryRefused("a dsse entry needs signatures, a payloadType and one verifier")
    for signature in signatures:
        try:
            keys[0].verify(signature, _pae(payload_type, payload), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature as exc:
            raise EntryRefused("entry signature does not verify under its certificate") from exc
    return _canonical(
        {
            "apiVersion": "0.0.1",
            "kind": "dsse",
            "spec": {
                "envelopeHash": {
                    "algorithm": "sha256",
                    "value": hashlib.sha256(envelope_json.encode()).hexdigest(),
                },
                "payloadHash": {
                    "algorithm": "sha256",
                    "value": hashlib.sha256(payload).hexdigest(),
                },
                "signatures": [
                    {"signature": b64(signature), "verifier": verifiers[0]}
                    for signature in signatures
                ],
            },
        }
    )
