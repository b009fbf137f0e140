"""How an entry looks outside the library: the JSON shape tools return, and a text form.

Every form here shows the entry with each credential-shaped value in its text masked
(format/secrets.py ``shown``): whatever face returns stored text through these returns no
credential that got into the store past the write path, and the ids stay the stored ones."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..model import Entry
from .secrets import shown

__all__ = ["entry_detail", "entry_text", "entry_view", "shown", "skipped_report", "verdict_summary"]

if TYPE_CHECKING:
    from ..store.store import Skipped


def verdict_summary(verified_by: Any) -> dict[str, Any] | None:
    if not verified_by:
        return None
    return {
        "verdict_id": verified_by.get("verdict_id"),
        "outcome": verified_by.get("outcome"),
        "signer": verified_by.get("signer"),
    }


def entry_view(entry: Entry, score: float | None = None, *, full: bool = False) -> dict[str, Any]:
    """The entry object of memory_query / memory_view (the shape agents depend on)."""
    entry = shown(entry)
    data: dict[str, Any] = {
        "id": entry.id,
        "kind": entry.kind.value,
        "key": entry.key,
        "body": entry.body,
        "trust": entry.trust.value,
    }
    if score is not None:
        data["score"] = round(score, 6)
    data["ledger_ref"] = entry.ledger_ref
    data["provenance"] = {
        "produced_by": entry.provenance.produced_by,
        "sources": list(entry.provenance.sources),
        "verified_by": verdict_summary(entry.provenance.verified_by),
    }
    if full:
        data.update(
            layer=entry.layer.value,
            scope=dict(entry.scope),
            author=entry.author,
            created=entry.created,
            salience=entry.salience,
            supersedes=entry.supersedes,
            superseded_by=entry.superseded_by,
            path=entry.path,
        )
    return data


def entry_text(entry: Entry, score: float | None = None) -> str:
    entry = shown(entry)
    head = f"{entry.id[:12]}  {entry.kind.value}/{entry.key}  [{entry.trust.value}]"
    if score is not None:
        head += f"  score {score:.2f}"
    body = "\n".join("    " + line for line in entry.body.splitlines())
    return f"{head}\n{body}"


def entry_detail(entry: Entry) -> str:
    """``show`` for a person: the belief and who vouched for it, not the file (``--raw``)."""
    entry = shown(entry)
    lines = [f"{entry.id[:12]}  {entry.kind.value}/{entry.key}  [{entry.trust.value}]"]
    lines.append(
        f"layer {entry.layer.value}, written by {entry.author or 'unknown'} at {entry.created}"
    )
    verdict = entry.provenance.verified_by
    if verdict:
        lines.append(
            f"verified by {verdict.get('signer', '?')} at {verdict.get('time', '?')} "
            f"({verdict.get('outcome', '?')}, quorum {verdict.get('quorum', '?')}, "
            f"verdict {str(verdict.get('verdict_id', '?'))[:12]})"
        )
    else:
        lines.append("not verified by a panel")
    if entry.supersedes:
        lines.append(f"supersedes {entry.supersedes[:12]}")
    if entry.superseded_by:
        lines.append(f"superseded by {entry.superseded_by[:12]}")
    if entry.provenance.produced_by:
        lines.append(f"produced by {entry.provenance.produced_by}")
    lines.append("")
    lines.append(entry.body.rstrip("\n"))
    return "\n".join(lines)


def skipped_report(skipped: Sequence[Skipped], *, as_json: bool) -> str:
    """What a listing says about the files it skipped: one warning line each, or one JSON
    object ``{"skipped": [{"path", "error"}]}``."""
    if as_json:
        items = [{"path": s.path, "error": s.error} for s in skipped]
        return json.dumps({"skipped": items}, ensure_ascii=False)
    return "\n".join(f"warning: skipped {s.error}" for s in skipped)
