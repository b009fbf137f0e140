"""The change set as a reviewer reads it: text for a terminal, markdown for a pull request.

Markdown goes into a PR comment or ``$GITHUB_STEP_SUMMARY``; GitHub refuses a comment over
65,536 characters, so it is cut to a budget, most important first (violations, broken files,
trust transitions, links, identity and policy changes, added entries, commits), and the cut
is said in a closing line. Bodies and identity diffs are capped one by one as well.
"""

from __future__ import annotations

import html
import re

from ..errors import UsageError
from .diff import ChangeSet, FileChange, Transition

# Bytes >= characters, and the last 1,000 are kept for the note that says what was cut.
MARKDOWN_LIMIT = 64_000
_NOTE_RESERVE = 1_000
BODY_LIMIT = 2_000
DIFF_LIMIT = 4_000


def _counts(cs: ChangeSet) -> str:
    moves: dict[str, int] = {}
    for t in cs.transitions:
        moves[t.after] = moves.get(t.after, 0) + 1
    parts = [f"{len(cs.commits)} commit{'s' * (len(cs.commits) != 1)}"]
    parts.append(f"{len(cs.added)} entr{'ies' if len(cs.added) != 1 else 'y'} added")
    for label, trust in (("promoted", "verified"), ("rejected", "rejected"), ("stale", "stale")):
        if moves.get(trust):
            parts.append(f"{moves[trust]} {label}")
    if cs.supersedes:
        parts.append(f"{len(cs.supersedes)} superseded")
    if cs.files:
        parts.append(f"{len(cs.files)} identity/policy file{'s' * (len(cs.files) != 1)}")
    return " · ".join(parts)


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
            lines.append(
                f"  {_short(t.id)} {t.kind}/{t.key}: {_trust_move(t)} (signed by {t.signer})"
            )
            if t.verdict:
                lines.append(f"      verdict {t.verdict.summary}")
                lines.extend(f"      vote {r}" for r in t.verdict.reviewers)
            if t.reason:
                lines.append(f"      reason: {t.reason}")
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
        for a in cs.added:
            lines.append(f"  {_short(a.id)} {a.kind}/{a.key} [{a.trust}] by {a.author}")
            lines.extend("      " + line for line in a.body.splitlines())
    if cs.commits:
        lines.append("\nCommits:")
        lines.extend(
            f"  {_short(c.id)} {c.op or '-':<9} {c.signer:<24} {c.subject}" for c in cs.commits
        )
    return "\n".join(lines)


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#])")


def _md(text: str) -> str:
    """Plain text safe inside a markdown table cell or bullet."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


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
                f"| `{_short(v['commit'])}` | {_md(v['path'] or '-')} | `{v['rule']}` "
                f"| {_md(v['message'])} |"
                for v in cs.violations
            ],
            "violations",
        )
    )
    out.append(
        (
            "⚠️ Broken store files",
            "",
            [f"- {_md(p.path)}: {_md(p.message)}" for p in cs.problems],
            "broken files",
        )
    )
    rows = []
    for t in cs.transitions:
        verdict = "-"
        votes = "-"
        if t.verdict:
            verdict = (
                f"{t.verdict.outcome} `{_short(t.verdict.verdict_id)}` by {_md(t.verdict.signer)}"
            )
            if t.verdict.quorum:
                verdict += f" ({_md(t.verdict.quorum)})"
            votes = "<br>".join(_md(r) for r in t.verdict.reviewers) or "-"
        if t.reason:
            verdict += f"<br>reason: {_md(t.reason)}"
        rows.append(
            f"| `{_short(t.id)}` | {t.kind} · {_md(t.key)} | {t.before} → **{t.after}** "
            f"| {verdict} | {votes} | {_md(t.signer)} |"
        )
    out.append(
        (
            "Trust transitions",
            "| entry | kind · key | trust | verdict | reviewers (votes) | commit signed by |\n"
            "|---|---|---|---|---|---|\n",
            rows,
            "transitions",
        )
    )
    out.append(
        (
            "Supersedes",
            "",
            [
                f"- `{_short(s.new)}` supersedes `{_short(s.old)}` ({s.kind} · {_md(s.key)})"
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
    out.append(
        (
            "Entries added",
            "",
            [
                f"<details><summary><code>{_short(a.id)}</code> {a.kind} · "
                f"<b>{html.escape(a.key)}</b> · {a.trust} · by {html.escape(a.author)}"
                f"</summary>\n\n"
                + _fence(_cap(a.body, BODY_LIMIT, f"`truss-files show {a.id}`"), "text")
                + "\n\n</details>"
                for a in cs.added
            ],
            "added entries",
        )
    )
    out.append(
        (
            "Commits",
            "| commit | op | signed by | subject |\n|---|---|---|---|\n",
            [
                f"| `{_short(c.id)}` | {c.op or '-'} | {_md(c.signer)} | {_md(c.subject)} |"
                for c in cs.commits
            ],
            "commits",
        )
    )
    return out


def to_markdown(cs: ChangeSet, limit: int = MARKDOWN_LIMIT) -> str:
    """Markdown for a PR comment or step summary, at most ``limit`` bytes of UTF-8."""
    head = [
        f"### truss-files: memory changes in `{_short(cs.base)}..{_short(cs.head)}`",
        "",
        f"{_counts(cs)} · **{_audit_line(cs, True)}**",
    ]
    head.extend(f"\n> note: {_md(n)}" for n in cs.notes)
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
