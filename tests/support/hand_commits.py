"""Writes and promotions made past the library's checks, as a hostile client makes them.

The library refuses every write on a history the audit rejects, and every entry its signer's
roles do not allow (``authority``). A test that needs such a commit -- to show the audit, the
read gate or the server gate naming it -- signs one here with a real key through
``GitStore.apply`` and no check, exactly what a client that skips the library does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.format.trailers import trailers
from truss_files.git.gitstore import Identity, Plan, Snapshot
from truss_files.model import Entry, Trust
from truss_files.signing import Ed25519Signer, PublicKey
from truss_files.trust.verdict import Verdict

WHO = Identity("Test Operator", "operator@example.test")


def commit(
    store: MemoryStore, signer: Ed25519Signer, changes: dict[str, bytes], message: str
) -> str:
    done = store.git.apply(lambda _snap: Plan(dict(changes), message), signer, WHO)
    assert done is not None, "the plan changed nothing"
    return str(done[0].id)


def write(
    store: MemoryStore, signer: Ed25519Signer, kind: str, key: str, body: str, **fields: Any
) -> Entry:
    """A write commit as ``MemoryStore.write`` makes it (same file, same trailers), signed by
    ``signer`` and checked by nothing. ``fields`` as ``new_entry`` takes them; ``author``
    defaults to ``agent:<signer's principal>``."""
    if "author" not in fields:
        public = PublicKey.from_line(signer.public_line)
        names = store.policy().signers.principals_for(public, "git")
        fields["author"] = f"agent:{names[0]}" if names else "agent:unknown"
    entry = store.new_entry(kind, key, body, **fields)
    message = f"truss: write {entry.kind.value} {entry.key}\n\n" + trailers(
        op="write", entry=entry.id, trust="none -> unverified"
    )
    commit(store, signer, {entry.path: entryfile.serialize(entry).encode()}, message)
    return entry


def promote(store: MemoryStore, signer: Ed25519Signer, entry_id: str, verdict: Verdict) -> str:
    """A promote commit as ``MemoryStore.promote`` makes it, signed and checked by nothing."""
    snap: Snapshot = store.snapshot()
    entry = store.get(entry_id, snap)
    prov = dataclasses.replace(entry.provenance, verified_by=verdict.to_dict())
    done = dataclasses.replace(entry, trust=Trust.VERIFIED, provenance=prov)
    message = f"truss: promote {entry.id[:12]} ({entry.kind.value} {entry.key})\n\n" + trailers(
        op="promote",
        entry=entry.id,
        trust=f"{entry.id} {entry.trust.value} -> verified",
        verdict=verdict.id,
    )
    return commit(store, signer, {done.path: entryfile.serialize(done).encode()}, message)
