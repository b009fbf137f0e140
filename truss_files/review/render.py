"""The change set as a reviewer reads it: text for a terminal, markdown for a pull request.

Markdown goes into a PR comment or ``$GITHUB_STEP_SUMMARY``; GitHub refuses a comment over
65,536 characters, so it is cut to a budget, most important first (violations, broken files,
trust transitions, links, identity and policy changes, added entries, commits), and the cut
is said in a closing line. Bodies and identity diffs are capped one by one as well.

Each transition's row says why the entry moved (the votes and their notes, a demotion's
reason, the entry that superseded it) beside the first lines of its body, and names each
person once with what they did. A move the trust arrows or the audit refuse is marked
illegal and never counted as a promotion. A Mermaid diagram (code hosts draw it) sums up
the range's moves.
"""

from __future__ import annotations

import html
import re

from ..errors import UsageError
from .diff import ChangeSet, FileChange, Transition
from .whytext import BODY_LIMIT, MD_SPECIAL, md

# Bytes >= characters, and the last 1,000 are kept for the note that says what was cut.
MARKDOWN_LIMIT = 64_000
_NOTE_RESERVE = 1_000
DIFF_LIMIT = 4_000


def _counts(cs: ChangeSet) -> str:
    moves: dict[str, int] = {}
    illegal = 0
    for t in cs.transitions:
        if not t.legal:
            illegal += 1  # never counted as promoted, rejected or stale
            continue
        moves[t.after] = moves.get(t.after, 0) + 1
    parts = [f"{len(cs.commits)} commit{'s' * (len(cs.commits) != 1)}"]
    parts.append(f"{len(cs.added)} entr{'ies' if len(cs.added) != 1 else 'y'} added")
    for label, trust in (("promoted", "verified"), ("rejected", "rejected"), ("stale", "stale")):
        if moves.get(trust):
            parts.append(f"{moves[trust]} {label}")
    if illegal:
        parts.append(f"{illegal} illegal trust move{'s' * (illegal != 1)}")
    if cs.supersedes:
        parts.append(f"{len(cs.supersedes)} superseded")
    if cs.files:
        parts.append(f"{len(cs.files)} identity/policy file{'s' * (len(cs.files) != 1)}")
    return " · ".join(parts)


def _why(t: Transition) -> list[str]:
    """Why the entry moved, in plain lines: what a reviewer weighs before approving."""
    if not t.legal:
        return [
            f"illegal move {t.before} → {t.after}: trust only moves unverified → verified or "
            "rejected, verified → stale and stale → verified, each with a panel verdict "
            "(see the audit violations)"
        ]
    if t.after == "stale":
        # The verdict in the file is the old PASS that once verified it; not the why.
        lines = []
        if t.superseded_by:
            lines.append(f"superseded by {t.superseded_by[:12]} (a newer verified entry, same key)")
        if t.reason:
            lines.append(f"demoted: {t.reason}")
        return lines or ["demoted (no reason recorded)"]
    lines = []
    if t.verdict:
        v = t.verdict
        agree = sum(1 for vote in v.votes if vote[2] == v.outcome)
        head = f"{v.outcome} {agree}/{len(v.votes)}"
        if v.quorum:
            head += f", quorum {v.quorum}"
        lines.append(f"{head} (verdict {v.verdict_id[:12]})")
        for reviewer, kind, vote, note in v.votes:
            lines.append(f"{reviewer} ({kind}) {vote}" + (f": {note}" if note else ""))
    if t.reason:
        lines.append(f"reason: {t.reason}")
    return lines


def _who(t: Transition) -> list[tuple[str, list[str]]]:
    """Each person once, with what they did: sign the commit, sign the verdict, vote."""
    people: dict[str, list[str]] = {t.signer: ["commit"]}
    if t.verdict and t.after != "stale":
        if t.verdict.keyless is not None:
            identity, issuer, index = t.verdict.keyless
            signed = f"verdict, keyless: {identity} via {issuer}, log index {index}"
            people.setdefault(t.verdict.signer, []).append(signed)
        else:
            people.setdefault(t.verdict.signer, []).append("verdict")
        for reviewer, _kind, vote, _note in t.verdict.votes:
            people.setdefault(reviewer, []).append(f"vote {vote}")
    return list(people.items())


def _first_lines(body: str, lines: int = 3, width: int = 300) -> str:
    kept = [line for line in body.splitlines() if line.strip()][:lines]
    text = " / ".join(kept)
    more = len(text) > width or len([x for x in body.splitlines() if x.strip()]) > lines
    return text[:width] + (" …" if more else "")


def mermaid(cs: ChangeSet) -> str:
    """A small state diagram of the range's trust moves, one edge per move with its count."""
    edges: dict[tuple[str, str, bool], int] = {}
    for t in cs.transitions:
        edge = (t.before, t.after, t.legal)
        edges[edge] = edges.get(edge, 0) + 1
    unverified = sum(1 for a in cs.added if not any(t.id == a.id for t in cs.transitions))
    lines = ["flowchart LR"]
    if unverified:
        lines.append(f"  new -->|{unverified} written| unverified")
    for (before, after, legal), count in sorted(edges.items()):
        if legal:
            lines.append(f"  {before} -->|{count}| {after}")
        else:
            lines.append(f"  {before} -.->|{count} illegal| {after}")
    if len(lines) == 1:
        return ""
    bad = sorted({a for (_b, a, legal) in edges if not legal})
    if bad:
        lines.append("  classDef bad stroke:#d00,stroke-width:2px")
        lines.append(f"  class {','.join(bad)} bad")
    return "\n".join(lines)


def _audit_line(cs: ChangeSet, markdown: bool) -> str:
    if cs.violations:
        mark = "❌ " if markdown else ""
        return f"{mark}audit: {len(cs.violations)} violation(s) in {cs.audited} commits"
    if any(n.startswith("audit not run") for n in cs.notes):
        return ("⚠️ " if markdown else "") + "audit: not run"
    return ("✅ " if markdown else "") + f"audit: clean ({cs.audited} commits)"


def _short(value: str | None) -> str:
    return value[:12] if value else "-"


def _trust_move(t: Transition) -> str:
    return f"{t.before} → {t.after}"


def _what(f: FileChange) -> str:
    return f"identity amendment by {f.amendment}" if f.amendment else f.area


def to_text(cs: ChangeSet) -> str:
    lines = [f"truss-files diff {cs.range} ({_short(cs.base)}..{_short(cs.head)})"]
    lines.append(_counts(cs) + " · " + _audit_line(cs, False))
    lines.extend(f"note: {n}" for n in cs.notes)
    if cs.violations:
        lines.append("\nAudit violations:")
        lines.extend(
            f"  {_short(v['commit'])} {v['path'] or '-'}: [{v['rule']}] {v['message']}"
            for v in cs.violations
        )
    if cs.problems:
        lines.append("\nBroken store files:")
        lines.extend(f"  {p.path}: {p.message}" for p in cs.problems)
    if cs.transitions:
        lines.append("\nTrust transitions:")
        for t in cs.transitions:
            who = "; ".join(f"{name} ({', '.join(did)})" for name, did in _who(t))
            mark = "ILLEGAL " if not t.legal else ""
            lines.append(f"  {_short(t.id)} {t.kind}/{t.key}: {mark}{_trust_move(t)} by {who}")
            lines.extend(f"      {line}" for line in _why(t))
            lines.extend(f"      | {line}" for line in t.body.splitlines()[:3])
    if cs.supersedes:
        lines.append("\nSupersedes:")
        lines.extend(
            f"  {_short(s.new)} supersedes {_short(s.old)} ({s.kind}/{s.key})"
            for s in cs.supersedes
        )
    if cs.files:
        lines.append("\nIdentity and policy changes:")
        for f in cs.files:
            lines.append(f"  {f.status} {f.path} ({_what(f)}, signed by {f.signer})")
            lines.extend("      " + line for line in f.diff.splitlines()[2:])
    if cs.added:
        lines.append("\nEntries added:")
        moved = {t.id for t in cs.transitions}
        for a in cs.added:
            lines.append(f"  {_short(a.id)} {a.kind}/{a.key} [{a.trust}] by {a.author}")
            if a.id not in moved:  # a moved entry's body is shown beside its move
                lines.extend("      " + line for line in a.body.splitlines())
    if cs.commits:
        lines.append("\nCommits:")
        lines.extend(
            f"  {_short(c.id)} {c.op or '-':<9} {c.signer:<24} {c.subject}" for c in cs.commits
        )
    return "\n".join(lines)


def _fence(text: str, lang: str = "") -> str:
    runs = [len(m) for m in re.findall(r"`+", text)]
    ticks = "`" * max(3, max(runs, default=0) + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _cap(text: str, limit: int, hint: str) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit} more characters; {hint})"


def _md_sections(cs: ChangeSet) -> list[tuple[str, str, list[str], str]]:
    """(title, preamble, items, noun) in the order a reviewer needs them."""
    out: list[tuple[str, str, list[str], str]] = []
    out.append(
        (
            "❌ Audit violations",
            "| commit | file | rule | message |\n|---|---|---|---|\n",
            [
                f"| `{_short(v['commit'])}` | {md(v['path'] or '-')} | `{v['rule']}` "
                f"| {md(v['message'])} |"
                for v in cs.violations
            ],
            "violations",
        )
    )
    out.append(
        (
            "⚠️ Broken store files",
            "",
            [f"- {md(p.path)}: {md(p.message)}" for p in cs.problems],
            "broken files",
        )
    )
    rows = []
    for t in cs.transitions:
        move = f"{t.before} → **{t.after}**"
        if not t.legal:
            move = f"⚠️ {t.before} → {t.after} (illegal)"
        why = "<br>".join(md(line) for line in _why(t)) or "-"
        who = "<br>".join(f"{md(name)} ({', '.join(did)})" for name, did in _who(t))
        rows.append(
            f"| `{_short(t.id)}` {t.kind} · {md(t.key)} | {move} | {why} "
            f"| {md(_first_lines(t.body)) or '-'} | {who} |"
        )
    out.append(
        (
            "Trust transitions",
            "| entry | trust | why | body | who |\n|---|---|---|---|---|\n",
            rows,
            "transitions",
        )
    )
    out.append(
        (
            "Supersedes",
            "",
            [
                f"- `{_short(s.new)}` supersedes `{_short(s.old)}` ({s.kind} · {md(s.key)})"
                for s in cs.supersedes
            ],
            "supersede links",
        )
    )
    out.append(
        (
            "Identity and policy changes",
            "",
            [
                f"<details><summary>{f.status} <code>{html.escape(f.path)}</code> "
                f"({html.escape(_what(f))}, "
                f"signed by {html.escape(f.signer)})</summary>\n\n"
                + _fence(_cap(f.diff, DIFF_LIMIT, "see `git diff`"), "diff")
                + "\n\n</details>"
                for f in cs.files
            ],
            "identity/policy files",
        )
    )
    moved = {t.id for t in cs.transitions}
    out.append(
        (
            "Entries added, still unverified",
            "",
            [
                f"- `{_short(a.id)}` {a.kind} · **{md(a.key)}** · by {md(a.author)}\n\n"
                + _quote(a.body, f"`truss-files show {a.id}`")
                for a in cs.added
                if a.id not in moved  # a moved entry's body is in its transition's row
            ],
            "added entries",
        )
    )
    out.append(
        (
            "Commits",
            "| commit | op | signed by | subject |\n|---|---|---|---|\n",
            [
                f"| `{_short(c.id)}` | {c.op or '-'} | {md(c.signer)} | {md(c.subject)} |"
                for c in cs.commits
            ],
            "commits",
        )
    )
    return out


def _quote(body: str, hint: str) -> str:
    """A body as an indented block quote under its bullet, its markdown left inert."""
    lines = [MD_SPECIAL.sub(r"\\\1", line) for line in body[:BODY_LIMIT].splitlines()]
    if len(body) > BODY_LIMIT:
        lines.append(f"… ({len(body) - BODY_LIMIT} more characters; {hint})")
    return "\n".join("  > " + line for line in lines) + "\n"


def to_markdown(cs: ChangeSet, limit: int = MARKDOWN_LIMIT) -> str:
    """Markdown for a PR comment or step summary, at most ``limit`` bytes of UTF-8."""
    head = [
        f"### truss-files: memory changes in `{_short(cs.base)}..{_short(cs.head)}`",
        "",
        f"{_counts(cs)} · **{_audit_line(cs, True)}**",
    ]
    head.extend(f"\n> note: {md(n)}" for n in cs.notes)
    diagram = mermaid(cs)
    if diagram:
        head.extend(["", _fence(diagram, "mermaid")])
    parts = ["\n".join(head) + "\n"]
    used = len(parts[0].encode())
    budget = max(0, limit - _NOTE_RESERVE)
    cut: list[str] = []
    for title, preamble, items, noun in _md_sections(cs):
        if not items:
            continue
        heading = f"\n#### {title}\n\n{preamble}"
        kept = 0
        for item in items:
            chunk = item + "\n"
            size = len(chunk.encode()) + (len(heading.encode()) if kept == 0 else 0)
            if used + size > budget:
                break
            if kept == 0:
                parts.append(heading)
            parts.append(chunk)
            used += size
            kept += 1
        if kept < len(items):
            cut.append(f"{len(items) - kept} of {len(items)} {noun}")
    if cut:
        rng = cs.range.replace("`", "")
        parts.append(
            f"\n> ✂️ Cut to stay under 64 KB: {'; '.join(cut)}. "
            f"Run `truss-files diff {rng[:200]}` for the full change set.\n"
        )
    return "".join(parts)


def render(cs: ChangeSet, fmt: str) -> str:
    if fmt == "markdown":
        return to_markdown(cs)
    if fmt == "text":
        return to_text(cs)
    raise UsageError(f"unknown format '{fmt}'; use markdown, text or json")
