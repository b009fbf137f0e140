"""A Rekor-style (API v1) transparency log of ``hashedrekord`` 0.0.1 entries.

Each entry is a leaf of a real RFC 6962 tree; the answer carries the entry's inclusion proof
against the tree just after it was added, a checkpoint for that tree in the signed-note format,
and a signed entry timestamp (the promise) over the canonical entry with its integrated time.
"""

from __future__ import annotations

import base64
import binascii
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

TAMPER_KINDS = frozenset({"proof", "set", "checkpoint"})


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
        # the next answers to corrupt ("proof", "set", "checkpoint").
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
        """Canonical body of a hashedrekord 0.0.1 whose signature verifies under its
        certificate's key, as Rekor checks before it logs anything."""
        if _field(proposed, "kind") != "hashedrekord" or _field(proposed, "apiVersion") != "0.0.1":
            raise EntryRefused("only hashedrekord 0.0.1 entries are accepted")
        algorithm = _field(proposed, "spec", "data", "hash", "algorithm")
        digest_hex = _field(proposed, "spec", "data", "hash", "value")
        signature_b64 = _field(proposed, "spec", "signature", "content")
        cert_b64 = _field(proposed, "spec", "signature", "publicKey", "content")
        if algorithm != "sha256":
            raise EntryRefused("spec.data.hash.algorithm must be sha256")
        try:
            digest = bytes.fromhex(digest_hex)
            signature = base64.b64decode(signature_b64, validate=True)
            cert = x509.load_pem_x509_certificate(base64.b64decode(cert_b64, validate=True))
        except (ValueError, TypeError, binascii.Error) as exc:
            raise EntryRefused(f"entry fields do not decode: {exc}") from exc
        key = cert.public_key()
        if len(digest) != 32 or not isinstance(key, ec.EllipticCurvePublicKey):
            raise EntryRefused("entry needs a SHA-256 digest and an ECDSA certificate")
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
