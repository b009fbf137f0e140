"""Entries as the recall index stores them: a class byte for filtering, a record to rebuild.

The class byte packs what the trust filter needs into one byte per document, so a filter is a
256-entry table applied with ``bytes.translate`` (C speed, ~20 µs per 100k documents):

    bits 0-1  trust: 0 unverified, 1 stale, 2 verified, 3 rejected
    bit  2    superseded (``superseded_by`` is set)
    bit  3    marked: the body starts with ``<!-- truss:`` (machine markers, e.g. tombstones)
    bits 4-7  kind (index in ``Kind``)

The layer gets its own byte. The record is a plain tuple ``marshal`` can write: every field
of the ``Entry``, the verdict as its three shown fields plus its text (see ``scan``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ..model import Entry, Kind, Layer, Provenance, Trust
from .segment import Doc
from .tokenize import tokenize
from .verdict import VerdictBlock

__all__ = [
    "KIND_CODE",
    "KIND_OF_CODE",
    "LAYER_CODE",
    "LAYER_OF_CODE",
    "MARKED",
    "MARKER_PREFIX",
    "SUPERSEDED",
    "TRUST_CODE",
    "TRUST_OF_CODE",
    "content_hash",
    "embed_text",
    "doc_meta",
    "fields_meta",
    "document_tokens",
    "entry_of",
    "to_doc",
]

TRUST_CODE: Final = {Trust.UNVERIFIED: 0, Trust.STALE: 1, Trust.VERIFIED: 2, Trust.REJECTED: 3}
KIND_CODE: Final = {kind: n for n, kind in enumerate(Kind)}
LAYER_CODE: Final = {layer: n for n, layer in enumerate(Layer)}
SUPERSEDED: Final = 4
MARKED: Final = 8
# Code -> value, for the floor indexes' tags (``floors.doc_tags``).
TRUST_OF_CODE: Final = {code: trust.value for trust, code in TRUST_CODE.items()}
KIND_OF_CODE: Final = {code: kind.value for kind, code in KIND_CODE.items()}
LAYER_OF_CODE: Final = {code: layer.value for layer, code in LAYER_CODE.items()}
# Bodies that start with this are machine markers (the memory tool's tombstones), not notes.
MARKER_PREFIX: Final = "<!-- truss:"

_TRUSTS: Final = {t.value: t for t in Trust}
_LAYERS: Final = {x.value: x for x in Layer}


def embed_text(key: str, body: str) -> str:
    """What an entry's vector is computed from (and cached by the hash of)."""
    return f"{key}\n{body}"


def content_hash(text: str) -> bytes:
    import hashlib  # not at the top: a query never hashes (~3 ms of start-up with OpenSSL)

    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


def document_tokens(entry: Entry) -> list[str]:
    """What BM25 sees of an entry: its key and its body."""
    return tokenize(entry.key) + tokenize(entry.body)


# By value: an enum member's hash and ``.value`` run Python code (~0.3 µs each), and an index
# rebuild computes these for every entry.
_TRUST_CODE_OF: Final = {t._value_: c for t, c in TRUST_CODE.items()}
_KIND_CODE_OF: Final = {k._value_: c for k, c in KIND_CODE.items()}
_LAYER_CODE_OF: Final = {x._value_: c for x, c in LAYER_CODE.items()}


def class_byte(entry: Entry) -> int:
    code = _TRUST_CODE_OF[entry.trust._value_] | _KIND_CODE_OF[entry.kind._value_] << 4
    if entry.superseded_by is not None:
        code |= SUPERSEDED
    if entry.body.startswith(MARKER_PREFIX):
        code |= MARKED
    return code


def to_doc(entry: Entry, entry_id: str | None = None) -> Doc:
    tokens = document_tokens(entry)
    cls, layer, record, group, run, chash = doc_meta(entry)
    return Doc(
        id=entry_id or entry.id,
        cls=cls,
        layer=layer,
        length=len(tokens),
        tf=dict(Counter(tokens)),
        record=record,
        group=group,
        run=run,
        chash=chash,
    )


Meta = tuple[int, int, tuple[Any, ...], str, str | None, bytes]


def doc_meta(entry: Entry) -> Meta:
    """Everything a segment keeps of an entry but its terms: ``(class byte, layer code,
    record, "kind\\0key" group, run id or None, content hash)``."""
    prov = entry.provenance
    return fields_meta(
        entry.kind._value_,
        entry.key,
        entry.body,
        entry.trust._value_,
        entry.layer._value_,
        entry.scope,
        entry.author,
        entry.created,
        entry.salience,
        prov.produced_by,
        prov.sources,
        prov.verified_by,
        entry.supersedes,
        entry.superseded_by,
        entry.checks,
    )


def fields_meta(
    kind: str,
    key: str,
    body: str,
    trust: str,
    layer: str,
    scope: Mapping[str, str],
    author: str,
    created: str,
    salience: float,
    produced_by: str | None,
    sources: Iterable[str],
    verified_by: Mapping[str, Any] | None,
    supersedes: str | None,
    superseded_by: str | None,
    checks: Iterable[str],
) -> Meta:
    """``doc_meta`` of the entry with these fields (kind, trust and layer by value): what
    ``scan.scan_meta`` gives the index builder without making the ``Entry``."""
    verdict: Any = None
    if isinstance(verified_by, VerdictBlock):
        summary = verified_by.summary
        verdict = (0, (summary["verdict_id"], summary["outcome"], summary["signer"]))
        verdict += (verified_by.text,)
    elif verified_by is not None:
        verdict = (1, dict(verified_by))
    record = (
        kind,
        key,
        body,
        trust,
        layer,
        tuple(sorted(scope.items())),
        author,
        created,
        salience,
        produced_by,
        tuple(sources),
        verdict,
        supersedes,
        superseded_by,
        tuple(checks),
    )
    code = _TRUST_CODE_OF[trust] | _KIND_CODE_OF[kind] << 4
    if superseded_by is not None:
        code |= SUPERSEDED
    if body.startswith(MARKER_PREFIX):
        code |= MARKED
    produced = produced_by or ""
    run = produced[4 : produced.rfind("/")] if produced.startswith("run:") else None
    return (
        code,
        _LAYER_CODE_OF[layer],
        record,
        f"{kind}\0{key}",
        run or None,
        content_hash(embed_text(key, body)),
    )


def entry_of(record: tuple[Any, ...], entry_id: str | None = None) -> Entry:
    """The ``Entry`` of an index record. ``entry_id``: its document id, which the index
    checked is the content address of the file (``scan``, ``entryfile.parse``) -- given, the
    entry need not hash its fields again (nor a query import hashlib) to know it."""
    (
        kind,
        key,
        body,
        trust,
        layer,
        scope,
        author,
        created,
        salience,
        produced_by,
        sources,
        verdict,
        supersedes,
        superseded_by,
        checks,
    ) = record
    verified_by: Any = None
    if verdict is not None:
        if verdict[0] == 0:
            verdict_id, outcome, signer = verdict[1]
            verified_by = VerdictBlock(
                {"verdict_id": verdict_id, "outcome": outcome, "signer": signer}, verdict[2]
            )
        else:
            verified_by = verdict[1]
    entry = Entry(
        kind=Kind(kind),
        key=key,
        body=body,
        trust=_TRUSTS[trust],
        layer=_LAYERS[layer],
        scope=dict(scope),
        author=author,
        created=created,
        salience=salience,
        provenance=Provenance(
            produced_by=produced_by, sources=tuple(sources), verified_by=verified_by
        ),
        supersedes=supersedes,
        superseded_by=superseded_by,
        checks=tuple(checks),
    )
    if entry_id is not None:
        object.__setattr__(entry, "_id", entry_id)
    return entry
