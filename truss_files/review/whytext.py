"""``why``'s answer (``review.why.explain``) as people read it: text and pull-request markdown.

The text is for a terminal: the belief and its standing in one line (the verdict or link
that holds it where it is), each change with its votes, the producing call and the sources.
The markdown is for a PR comment: the same, with the history as a table whose cells are
escaped (a ``|`` in a demotion's reason keeps every row's columns) and a long body cut.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["to_markdown", "to_text"]


def _move(item: Mapping[str, Any]) -> str:
    return f"{item.get('from') or 'new'} → {item.get('to') or 'gone'}"


def _verdict_line(verdict: Mapping[str, Any] | None, own: str) -> str:
    """``PASS 1/1 by alice (verdict 0123456789ab, quorum 1-of-1)``, saying when the verdict
    was another entry's (a rival promoted over this one) and when it does not check out."""
    if not verdict:
        return ""
    vid = str(verdict.get("verdict_id") or "?")[:12]
    if verdict.get("outcome") is None:
        return f"verdict {vid} INVALID: {verdict.get('problem')}"
    votes = verdict.get("votes") or []
    agree = sum(1 for v in votes if v.get("vote") == verdict.get("outcome"))
    line = f"{verdict['outcome']} {agree}/{len(votes)} by {verdict.get('signer')} (verdict {vid}"
    line += f", quorum {verdict['quorum']})" if verdict.get("quorum") else ")"
    if verdict.get("entry") and verdict["entry"] != own:
        line += f" for entry {str(verdict['entry'])[:12]}"
    return line + ("" if verdict.get("valid") else f" INVALID: {verdict.get('problem')}")


def _note(vote: Mapping[str, Any]) -> str:
    evidence = vote.get("evidence")
    if isinstance(evidence, Mapping):
        for name in ("note", "rationale", "reason"):
            if evidence.get(name):
                return str(evidence[name])
    return ""


def _resolved_line(resolved: Mapping[str, Any]) -> str:
    return f"{resolved.get('status')}: {resolved.get('detail')}"


def _digests(resolved: Mapping[str, Any]) -> list[str]:
    if resolved.get("type") != "memory_tool_call" or resolved.get("status") != "verified":
        return []
    return [
        f"input sha256 {resolved.get('input_sha256')}",
        f"result sha256 {resolved.get('result_sha256')}",
        f"ledger commit {resolved.get('commit')}",
    ]


def _standing(why: Mapping[str, Any]) -> str:
    """The belief's standing in one line: its trust and the verdict or link behind it."""
    entry = why["entry"]
    trust = entry["trust"]
    if trust == "stale" and entry.get("superseded_by"):
        return f"stale: superseded by {entry['superseded_by'][:12]}"
    reasons = [i["reason"] for i in why["history"] if i.get("reason") and i.get("to") == trust]
    if trust == "stale" and reasons:
        return f"stale: demoted, {reasons[-1]}"
    if trust == "unverified":
        return "unverified: no panel verdict yet"
    own = [i for i in why["history"] if (i.get("verdict") or {}).get("entry") == entry["id"]]
    moved = [i for i in why["history"] if i.get("to") == trust and i.get("from") != trust]
    if own and moved and own[-1] is moved[-1]:
        return f"{trust}: {_verdict_line(own[-1]['verdict'], entry['id'])}"
    back = f" (made {trust} by {moved[-1]['op']} {moved[-1]['commit'][:12]})" if moved else ""
    if own:  # a revert brings the entry back under the verdict it had
        return f"{trust}: {_verdict_line(own[-1]['verdict'], entry['id'])}{back}"
    return f"{trust}: no verdict recorded for it{back}"


def to_text(why: Mapping[str, Any]) -> str:
    """For a terminal: the belief, then each change, its producer and its sources."""
    entry = why["entry"]
    lines = [f"{entry['id'][:12]}  {entry['kind']}/{entry['key']}  [{entry['trust']}]"]
    lines.extend("    " + line for line in str(entry["body"]).splitlines())
    standing = _standing(why)
    lines.append(standing)
    if entry.get("superseded_by") and "superseded by" not in standing:
        lines.append(f"superseded by {entry['superseded_by'][:12]}")
    if entry.get("supersedes"):
        lines.append(f"supersedes {entry['supersedes'][:12]}")
    lines.append("")
    lines.append("history:")
    for item in why["history"]:
        head = (
            f"  {item['commit'][:12]}  {item.get('time', '')}  {item['op']:<9} "
            f"{_move(item):<24} by {item['signer']}"
        )
        lines.append(head)
        if item.get("reason"):
            lines.append(f"      reason: {item['reason']}")
        verdict = item.get("verdict")
        if verdict:
            lines.append(f"      {_verdict_line(verdict, entry['id'])}")
            for vote in verdict.get("votes") or []:
                note = _note(vote)
                lines.append(
                    f"        {vote.get('reviewer')} ({vote.get('kind')}) {vote.get('vote')}"
                    + (f": {note}" if note else "")
                )
    produced = why["produced_by"]
    lines.append("")
    lines.append(f"produced by {produced['ref'] or '-'}")
    lines.append(f"  {_resolved_line(produced['resolved'])}")
    lines.extend(f"  {d}" for d in _digests(produced["resolved"]))
    lines.append("")
    if why["sources"]:
        lines.append("sources:")
        for source in why["sources"]:
            lines.append(f"  {source['ref']}")
            lines.append(f"    {_resolved_line(source['resolved'])}")
            lines.extend(f"    {d}" for d in _digests(source["resolved"]))
    else:
        lines.append("sources: none")
    return "\n".join(lines)


# A pull-request comment holds 65,536 characters at most: a long body is cut (``show`` has it).
BODY_LIMIT = 2_000
MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#])")


def md(text: object) -> str:
    """Plain text safe inside a markdown table cell or bullet."""
    return MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def _md_verdict(verdict: Mapping[str, Any] | None, own: str) -> str:
    if not verdict:
        return ""
    parts = [md(_verdict_line(verdict, own))]
    for vote in verdict.get("votes") or []:
        note = _note(vote)
        parts.append(
            md(f"{vote.get('reviewer')} ({vote.get('kind')}) {vote.get('vote')}")
            + (f": {md(note)}" if note else "")
        )
    return "<br>".join(parts)


def to_markdown(why: Mapping[str, Any]) -> str:
    """For a pull-request comment: the belief, a table of its history, producer and sources."""
    entry = why["entry"]
    lines = [
        f"### Why `{entry['id'][:12]}` {md(entry['kind'])} · {md(entry['key'])} "
        f"is **{entry['trust']}**",
        "",
    ]
    body = str(entry["body"])
    if len(body) > BODY_LIMIT:
        body = (
            body[:BODY_LIMIT]
            + f"\n… ({len(body) - BODY_LIMIT} more characters; `truss-files show`)"
        )
    lines.extend("> " + MD_SPECIAL.sub(r"\\\1", line) for line in body.splitlines())
    lines.append("")
    lines.append(md(_standing(why)))
    lines.append("")
    lines.append("| commit | when | op | trust | signer | verdict |")
    lines.append("|---|---|---|---|---|---|")
    for item in why["history"]:
        verdict = _md_verdict(item.get("verdict"), entry["id"])
        if item.get("reason"):
            verdict = (verdict + "<br>" if verdict else "") + "reason: " + md(item["reason"])
        lines.append(
            f"| `{item['commit'][:12]}` | {md(item.get('time', ''))} | {md(item['op'])} "
            f"| {md(_move(item))} | {md(item['signer'])} | {verdict} |"
        )
    produced = why["produced_by"]
    lines.append("")
    resolved = produced["resolved"]
    ref = f"`{produced['ref']}`" if produced["ref"] else "nothing"
    lines.append(f"**Produced by** {ref}: **{resolved.get('status')}**, {md(resolved['detail'])}")
    lines.extend(f"- {md(d)}" for d in _digests(resolved))
    lines.append("")
    if not why["sources"]:
        lines.append("**Sources:** none")
    else:
        lines.append("**Sources:**")
        lines.append("")
        for source in why["sources"]:
            got = source["resolved"]
            lines.append(f"- `{source['ref']}`: **{got.get('status')}**, {md(got.get('detail'))}")
    return "\n".join(lines) + "\n"
