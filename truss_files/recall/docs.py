"""Entries as the recall index stores them: a record to rebuild each from, and its tokens.

The record is a plain tuple ``marshal`` can write: every field of the ``Entry``, the verdict
as its three shown fields plus its text (see ``entryscan``). It is stored in the floor index of
the entry's own trust (``floors``), so a query answers entries without reading git.
"""

from __future__ import annotations

from typing import Any, Final

from ..format.entryscan import VerdictBlock, entry_of_fields
from ..model import Entry, Kind, Layer, Trust
from .tokenize import tokenize

__all__ = [
    "MARKER_PREFIX",
    "TRUST_CODE",
    "content_hash",
    "document_tokens",
    "embed_text",
    "entry_of",
    "record_of",
]

TRUST_CODE: Final = {Trust.UNVERIFIED: 0, Trust.STALE: 1, Trust.VERIFIED: 2, Trust.REJECTED: 3}
# Bodies that start with this are machine markers (the memory tool's tombstones), not notes.
MARKER_PREFIX: Final = "<!-- truss:"

_TRUSTS: Final = {t.value: t for t in Trust}
_LAYERS: Final = {x.value: x for x in Layer}
_KINDS: Final = {k.value: k for k in Kind}


def embed_text(body: str) -> str:
    """What an entry's vector is computed from (and cached by the hash of): its body alone.

    The key is a handle (``conv-26-D1:3``, ``deploy-2``, an id), not prose: embedded in front
    of the body it pulled every vector toward the key's tokens, and the semantic mode ranked
    below its own encoder used on the bodies (LoCoMo recall@5 0.369 against 0.431;
    ``docs/recall-quality.md``). Exact mode still matches the key's words."""
    return body


def content_hash(text: str) -> bytes:
    import hashlib  # not at the top: a query never hashes (OpenSSL costs start-up)

    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


def document_tokens(entry: Entry) -> list[str]:
    """What BM25 sees of an entry: its key and its body."""
    return tokenize(entry.key) + tokenize(entry.body)


def record_of(entry: Entry) -> tuple[Any, ...]:
    """The index record of ``entry`` (``entry_of`` reverses it)."""
    prov = entry.provenance
    verified_by: Any = prov.verified_by
    verdict: Any = None
    if isinstance(verified_by, VerdictBlock):
        summary = verified_by.summary
        verdict = (0, (summary["verdict_id"], summary["outcome"], summary["signer"]))
        verdict += (verified_by.text,)
    elif verified_by is not None:
        verdict = (1, dict(verified_by))
    # A masked note's kinds ride at the end, only when there are any: records of every
    # other entry stay as they were, so an index built before reads on.
    masked = (tuple(prov.masked),) if prov.masked else ()
    return (
        entry.kind.value,
        entry.key,
        entry.body,
        entry.trust.value,
        entry.layer.value,
        tuple(sorted(entry.scope.items())),
        entry.author,
        entry.created,
        entry.salience,
        prov.produced_by,
        tuple(prov.sources),
        verdict,
        entry.supersedes,
        entry.superseded_by,
        tuple(entry.checks),
        *masked,
    )


def entry_of(record: tuple[Any, ...], entry_id: str | None = None) -> Entry:
    """The ``Entry`` of an index record. ``entry_id``: its document id, which the index
    checked is the content address of the file (``entryfile.parse``) -- given, the
    entry need not hash its fields again (nor a query import hashlib) to know it."""
    (kind, key, body, trust, layer, scope, author, created, salience, produced_by, sources,
     verdict, supersedes, superseded_by, checks) = record[:15]  # fmt: skip
    verified_by: Any = None
    if verdict is not None:
        if verdict[0] == 0:
            verdict_id, outcome, signer = verdict[1]
            verified_by = VerdictBlock(
                {"verdict_id": verdict_id, "outcome": outcome, "signer": signer}, verdict[2]
            )
        else:
            verified_by = verdict[1]
    entry = entry_of_fields(
        (_KINDS[kind], key, body, _TRUSTS[trust], _LAYERS[layer], dict(scope), author, created,
         salience, produced_by, tuple(sources), verified_by, supersedes, superseded_by,
         tuple(checks))
    )  # fmt: skip
    if len(record) > 15:
        entry.provenance.__dict__["masked"] = tuple(record[15])  # built here, not shared
    if entry_id is not None:
        entry.__dict__["_id"] = entry_id  # the frozen id cache ``Entry.id`` reads
    return entry
