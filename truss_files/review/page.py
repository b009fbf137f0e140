"""The review page as HTML: the pending list, one entry with its belief timeline (an inline
SVG) and provenance chain, and the pass / fail forms.

Every piece of text from the store -- bodies, keys, signers, refs, reasons -- goes through
``_e`` (``html.escape`` with quotes), in element text and in attributes alike, so an entry
body holding ``<script>`` is shown as those characters and never runs. The pages carry no
script of their own, and the server sends a policy that forbids any (``CSP``), so an escape
missed here would still not run. Forms carry the page's token in their body: a cookie
would be sent by a forged cross-site form too, the token is not.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from urllib.parse import quote

from ..model import Entry
from .history import ProvenanceChain, SupersedeLink, TimelineStep
from .queue import Pending, Queue

__all__ = ["CSP", "entry_page", "error_page", "index_page", "timeline_svg"]

# No script anywhere, styles only from the page itself, forms only back to this server.
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:1.5rem auto;max-width:60rem;padding:0 1rem;
color:#1d2430}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:1.6rem}
code{font:13px ui-monospace,monospace;background:#f1f3f6;padding:0 .25rem;border-radius:3px}
pre.body{white-space:pre-wrap;background:#f7f8fa;border-left:3px solid #9aa5b5;
padding:.5rem .75rem;margin:.4rem 0}
ol.pending{padding-left:1.2rem}ol.pending>li{margin:1rem 0;padding-bottom:.6rem;
border-bottom:1px solid #e3e6ea}
.meta{color:#5b6573;font-size:13px}.trust{font-weight:600}
.verified{color:#1b7f3b}.unverified{color:#8a6d00}.stale{color:#b05d00}.rejected{color:#b3261e}
form.decide{display:flex;gap:.5rem;align-items:center;margin-top:.4rem}
form.decide input[name=note]{flex:1;padding:.3rem}
button{padding:.3rem .9rem;border-radius:4px;border:1px solid #888;cursor:pointer}
button.pass{background:#e4f4e8}button.fail{background:#fbe6e4}
.flash{background:#eef6ff;border:1px solid #b9d4f5;padding:.5rem .75rem}
.error{background:#fdecea;border:1px solid #f2b8b5;padding:.5rem .75rem}
table{border-collapse:collapse;font-size:13px}td,th{padding:.2rem .6rem;text-align:left;
border-bottom:1px solid #eee}
figure{margin:.5rem 0;overflow-x:auto}
"""

_COLOUR = {
    "verified": "#1b7f3b",
    "unverified": "#c9a100",
    "stale": "#d97a00",
    "rejected": "#b3261e",
}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _url(path: str, token: str, **query: str) -> str:
    parts = [f"token={quote(token, safe='')}"]
    parts += [f"{k}={quote(v, safe='')}" for k, v in query.items()]
    return _e(f"{path}?{'&'.join(parts)}")


def _page(title: str, body: str) -> str:
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def _trust(trust: str | None, absent: str = "absent") -> str:
    name = trust or absent
    return f'<span class="trust {_e(name)}">{_e(name)}</span>'


def _form(entry_id: str, token: str, keys: bool = False) -> str:
    """The pass / fail form; with ``keys``, the access keys that decide it (the page's first
    entry: p passes, f fails, n goes to the note -- with the browser's access-key modifier,
    Alt or Alt+Shift, as the page carries no script to read plain keys)."""
    note, passes, fails = (
        (' accesskey="n"', ' accesskey="p"', ' accesskey="f"') if keys else ("", "", "")
    )
    return (
        '<form class="decide" method="post" action="/decide">'
        f'<input type="hidden" name="token" value="{_e(token)}">'
        f'<input type="hidden" name="id" value="{_e(entry_id)}">'
        f'<input name="note"{note} maxlength="2000" '
        'placeholder="note for the verdict (optional)">'
        f'<button class="pass" name="outcome" value="PASS"{passes}>Pass</button>'
        f'<button class="fail" name="outcome" value="FAIL"{fails}>Fail</button></form>'
    )


def _session_head(session: str | None, count: int) -> str:
    notes = f"{count} note" + ("" if count == 1 else "s")
    what = "written outside a run" if session is None else f"session <code>{_e(session)}</code>"
    return f'<h2 class="session">{what}: {_e(notes)}</h2>'


def _votes(item: Pending) -> str:
    if not item.votes:
        return '<p class="meta votes">votes so far: none recorded</p>'
    rows = "".join(
        f"<li>{_e(v.reviewer)} ({_e(v.kind)}): <b>{_e(v.vote)}</b>"
        + (f" &ldquo;{_e(v.note)}&rdquo;" if v.note else "")
        + f' <span class="meta">in verdict <code>{_e(v.verdict[:12])}</code> '
        f"({_e(v.outcome)}, signed by {_e(v.signer)}, commit <code>{_e(v.commit[:12])}</code>"
        ", since undone)</span></li>"
        for v in item.votes
    )
    return f'<div class="votes meta">votes so far:<ul>{rows}</ul></div>'


def _supersedes(item: Pending, token: str) -> str:
    if not item.supersedes:
        return ""
    rows = "".join(
        f'<li><a href="{_url("/entry/" + r.id, token)}"><code>{_e(r.id[:12])}</code></a> '
        + (f"&ldquo;{_e(_first_line(r.body))}&rdquo;" if r.body is not None else "(withheld)")
        + "</li>"
        for r in item.supersedes
    )
    return f'<div class="meta supersedes">a pass would turn stale:<ul>{rows}</ul></div>'


def _first_line(text: str, width: int = 120) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def index_page(
    queue: Queue, token: str, *, store: str, flash: str | None = None, error: str | None = None
) -> str:
    """The pending list: each entry with its body, provenance, what a pass would turn stale,
    the votes so far, a link to its timeline and the pass / fail form."""
    parts = ["<header><h1>Pending review</h1>"]
    count = f"{len(queue.items)} pending" + (
        f" (of {queue.total}; the rest after these)" if queue.total > len(queue.items) else ""
    )
    parts.append(
        f'<p class="meta">{_e(count)} in <code>{_e(store)}</code>, newest session first, '
        "oldest first within a session; on the first entry access key p passes, f fails, "
        "n writes a note</p>"
    )
    parts.append("</header>")
    if flash:
        parts.append(f'<p class="flash" role="status">{_e(flash)}</p>')
    if error:
        parts.append(f'<p class="error" role="alert">{_e(error)}</p>')
    if queue.withheld:
        parts.append(f'<p class="error">verified bodies withheld: {_e(queue.withheld)}</p>')
    if not queue.items:
        parts.append('<p id="empty">Nothing is waiting for review.</p>')
    parts.append('<ol class="pending" id="pending">')
    first = True
    for session, items in queue.sessions():
        for n, item in enumerate(items):
            e = item.entry
            head = _session_head(session, len(items)) if n == 0 else ""
            parts.append(
                f'<li class="pending-entry" data-id="{_e(e.id)}" '
                f'data-session="{_e(session or "")}">{head}'
                f'<a class="entry-link" href="{_url("/entry/" + e.id, token)}">'
                f"{_e(e.kind.value)}/{_e(e.key)}</a> <code>{_e(e.id[:12])}</code>"
                f'<div class="meta">written by {_e(e.author)} at {_e(e.created)}'
                f"{_produced(e)}</div>"
                f'<pre class="body">{_e(e.body)}</pre>'
                f"{_supersedes(item, token)}{_votes(item)}{_form(e.id, token, first)}</li>"
            )
            first = False
    parts.append("</ol>")
    return _page("truss-files review", "".join(parts))


def _produced(entry: Entry) -> str:
    ref = entry.provenance.produced_by
    return f", produced by <code>{_e(ref)}</code>" if ref else ""


def entry_page(
    entry: Entry,
    marks: Sequence[TimelineStep],
    chain: ProvenanceChain,
    token: str,
    *,
    item: Pending | None = None,
    flash: str | None = None,
    error: str | None = None,
) -> str:
    """One entry: the belief, its timeline, its provenance chain; the form when pending."""
    shown = chain.withheld is None or entry.trust.rank <= 0
    parts = [
        f'<p><a href="{_url("/", token)}">&larr; pending list</a></p>',
        f"<h1>{_e(entry.kind.value)}/{_e(entry.key)} {_trust(entry.trust.value)}</h1>",
        f'<p class="meta">id <code id="entry-id">{_e(entry.id)}</code>, layer '
        f"{_e(entry.layer.value)}, written by {_e(entry.author)} at {_e(entry.created)}</p>",
    ]
    if flash:
        parts.append(f'<p class="flash" role="status">{_e(flash)}</p>')
    if error:
        parts.append(f'<p class="error" role="alert">{_e(error)}</p>')
    if shown:
        parts.append(f'<pre class="body">{_e(entry.body)}</pre>')
    else:
        parts.append(f'<p class="error">body withheld: {_e(chain.withheld)}</p>')
    if item is not None:
        parts.append(_supersedes(item, token) + _votes(item) + _form(entry.id, token, True))
    parts.append('<h2 id="timeline-heading">Belief timeline</h2>')
    parts.append(f'<figure id="timeline">{timeline_svg(marks)}</figure>')
    parts.append(_timeline_table(marks))
    parts.append('<h2>Provenance chain</h2><ol id="provenance">')
    parts.extend(_chain(chain, token))
    parts.append("</ol>")
    return _page(f"{entry.kind.value}/{entry.key} — truss-files review", "".join(parts))


def _chain(chain: ProvenanceChain, token: str) -> list[str]:
    rows = []
    for link in reversed(chain.replaced):
        rows.append(f"<li>replaced: {_link(link, token)}</li>")
    ref = chain.produced_by
    rows.append(
        "<li>produced by "
        + (f"<code>{_e(ref)}</code>" if ref else "(no ledger ref)")
        + f" &rarr; this entry, written by {_e(chain.entry.author)}</li>"
    )
    for source in chain.sources:
        rows.append(f"<li>source: <code>{_e(source)}</code></li>")
    v = chain.verified_by
    if v:
        rows.append(
            f"<li>verdict <code>{_e(str(v.get('verdict_id') or '?')[:12])}</code>: "
            f"{_e(v.get('outcome'))} signed by {_e(v.get('signer'))} at {_e(v.get('time'))} "
            f"(quorum {_e(v.get('quorum'))}, {_e(v.get('policy'))})</li>"
        )
    else:
        rows.append("<li>no verdict yet</li>")
    for link in chain.replaced_by:
        rows.append(f"<li>replaced by: {_link(link, token)}</li>")
    return rows


def _link(link: SupersedeLink, token: str) -> str:
    body = f" &ldquo;{_e(_first_line(link.body))}&rdquo;" if link.body is not None else ""
    return (
        f'<a href="{_url("/entry/" + link.id, token)}"><code>{_e(link.id[:12])}</code></a> '
        f"{_e(link.kind)}/{_e(link.key)} {_trust(link.trust)}{body}"
    )


def _timeline_table(marks: Sequence[TimelineStep]) -> str:
    rows = "".join(
        f"<tr><td><code>{_e(m.commit[:12])}</code></td><td>{_e(m.time)}</td>"
        f"<td>{_e(m.op)}</td><td>{_trust(m.before, 'new')} &rarr; {_trust(m.after, 'removed')}</td>"
        f"<td>{_e(m.signer)}</td><td>"
        + (f"{_e(m.outcome or '')} <code>{_e(m.verdict[:12])}</code>" if m.verdict else "")
        + (f" {_e(m.reason)}" if m.reason else "")
        + "</td></tr>"
        for m in marks
    )
    return (
        '<table id="history"><thead><tr><th>commit</th><th>time</th><th>op</th>'
        "<th>trust</th><th>signer</th><th>verdict</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def timeline_svg(marks: Sequence[TimelineStep]) -> str:
    """One mark per commit along a line, oldest on the left: the op above, a dot in the
    colour of the trust it left, the step (before → after), the signer and the verdict
    below; each mark's <title> holds the full commit, time and reason."""
    step, left, width_min = 150, 75, 300
    width = max(width_min, left * 2 + step * max(len(marks) - 1, 0))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="150" '
        f'viewBox="0 0 {width} 150" aria-label="belief timeline, {len(marks)} commits">'
    ]
    if len(marks) > 1:
        x_end = left + step * (len(marks) - 1)
        parts.append(
            f'<line x1="{left}" y1="55" x2="{x_end}" y2="55" stroke="#9aa5b5" stroke-width="2"/>'
        )
    for n, m in enumerate(marks):
        x = left + step * n
        colour = _COLOUR.get(m.after or "", "#333")
        verdict = f"{m.outcome or 'verdict'} {m.verdict[:8]}" if m.verdict else ""
        title = (
            f"{m.commit} at {m.time}: {m.op}, {m.before or 'new'} → {m.after or 'removed'}, "
            f"signed by {m.signer}"
            + (f", verdict {m.verdict}" if m.verdict else "")
            + (f", reason: {m.reason}" if m.reason else "")
        )
        parts.append(
            f'<g class="mark" data-commit="{_e(m.commit)}" data-op="{_e(m.op)}" '
            f'data-after="{_e(m.after or "")}"><title>{_e(title)}</title>'
            f'<text x="{x}" y="30" text-anchor="middle" font-size="13" font-weight="600">'
            f"{_e(m.op)}</text>"
            f'<circle cx="{x}" cy="55" r="10" fill="{colour}" stroke="#fff" stroke-width="2"/>'
            f'<text x="{x}" y="85" text-anchor="middle" font-size="12">'
            f"{_e(m.before or 'new')} → {_e(m.after or 'removed')}</text>"
            f'<text x="{x}" y="103" text-anchor="middle" font-size="11" fill="#5b6573">'
            f"{_e(_short(m.signer, 22))}</text>"
            f'<text x="{x}" y="121" text-anchor="middle" font-size="11" fill="#5b6573">'
            f"{_e(verdict)}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def error_page(status: int, message: str) -> str:
    return _page(
        f"{status} — truss-files review",
        f'<h1>{status}</h1><p class="error" role="alert">{_e(message)}</p>',
    )
