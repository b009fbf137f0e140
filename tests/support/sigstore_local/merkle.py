"""An append-only RFC 6962 Merkle tree: leaf and node hashes, roots and inclusion paths."""

from __future__ import annotations

import hashlib


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(size: int) -> int:
    """The largest power of two strictly below ``size`` (RFC 6962 2.1)."""
    return 1 << ((size - 1).bit_length() - 1)


class MerkleTree:
    def __init__(self) -> None:
        self._leaves: list[bytes] = []
        # Complete subtrees never change once full, so their hashes are kept.
        self._full: dict[tuple[int, int], bytes] = {}

    def __len__(self) -> int:
        return len(self._leaves)

    def append(self, data: bytes) -> int:
        self._leaves.append(leaf_hash(data))
        return len(self._leaves) - 1

    def _hash(self, start: int, end: int) -> bytes:
        size = end - start
        if size == 1:
            return self._leaves[start]
        cached = self._full.get((start, end))
        if cached is not None:
            return cached
        mid = start + _split(size)
        value = node_hash(self._hash(start, mid), self._hash(mid, end))
        if size & (size - 1) == 0:
            self._full[(start, end)] = value
        return value

    def root(self, size: int) -> bytes:
        if size == 0:
            return hashlib.sha256(b"").digest()
        return self._hash(0, size)

    def inclusion_path(self, index: int, size: int) -> list[bytes]:
        """Sibling hashes from the leaf up to the root of the first ``size`` leaves."""
        path: list[bytes] = []
        start, end = 0, size
        # Walk down collecting siblings, then return them leaf first.
        while end - start > 1:
            mid = start + _split(end - start)
            if index < mid:
                path.append(self._hash(mid, end))
                end = mid
            else:
                path.append(self._hash(start, mid))
                start = mid
        return path[::-1]
