"""Commands that read: show, list, log, why, audit (``query`` has a module of its own)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from ...errors import EntryError
from ...facade import audit_history
from ...format.views import entry_detail, entry_view, shown, skipped_report
from ...model import Kind, Layer, Trust
from ...review.whytext import to_markdown, to_text
from .app import KINDS, LAYERS, TRUSTS, Ctx, cli, handled, pass_ctx
from .output import FORMAT_OPTION, emit, want_json

if TYPE_CHECKING:
    from ...facade import MemoryStore
    from ...git.gitstore import Snapshot
    from ...store.store import Skipped

# -- reading ---------------------------------------------------------------------------------


@cli.command()
@click.argument("entry_id")
@click.option(
    "--raw", is_flag=True, help="Print the entry's file as stored: front matter and signature."
)
@click.option(
    "--at",
    metavar="DATE|COMMIT",
    help="The entry as it was then (a date: the last commit at or before it).",
)
@FORMAT_OPTION
@pass_ctx
@handled
def show(obj: Ctx, entry_id: str, raw: bool, at: str | None, fmt: str | None) -> None:
    """Show one entry (any trust, for people; agents use the tools).

    Text: the belief (kind, key, trust, body) and who verified it, when; --raw prints the
    file itself. Refused for an entry above unverified while the branch's history fails the
    audit.

    \b
    Examples:
      truss-files show 5b0c8f3e
      truss-files show 5b0c8f3e --raw > entry.md
      truss-files show 5b0c8f3e --at 2026-11-01     # as it was on 1 November
    """
    store = obj.store()
    snap = store.snapshot() if at is None else store.open_read(Trust.UNVERIFIED, at=at).snap
    entry = store.get(entry_id, snap)
    withheld = _gate(store, snap, entry.trust, at)
    if withheld:
        click.echo(f"note: {withheld}", err=True)
    if raw:
        click.echo(snap.read(entry.path), nl=False)  # bytes: exactly the stored file
        return
    emit(fmt, entry_view(entry, full=True), lambda _d: entry_detail(entry))


def _gate(store: MemoryStore, snap: Snapshot, trust: Trust, at: str | None = None) -> str | None:
    """The read gate for a command that shows entries of ``trust``: refused above unverified
    when the history fails the audit; otherwise why entries above unverified are held back.
    ``at``: the read of that past commit (``snap``), gated as the tip is."""
    floor = trust if trust.rank > 0 else Trust.UNVERIFIED
    if at is not None:
        return store.open_read(floor, at=snap.oid).withheld
    return store.open_read(floor, snap).withheld


@cli.command("list")
@click.option("--kind", type=click.Choice(KINDS))
@click.option("--key", "key_")
@click.option("--trust", type=click.Choice(TRUSTS))
@click.option("--layer", type=click.Choice(LAYERS))
@FORMAT_OPTION
@pass_ctx
@handled
def list_(
    obj: Ctx,
    kind: str | None,
    key_: str | None,
    trust: str | None,
    layer: str | None,
    fmt: str | None,
) -> None:
    """List entries, oldest first, with filters.

    A file under memories/ that cannot be read (it does not parse, or it is a gitlink) is
    skipped and named on stderr (JSON: {"skipped": [{"path", "error"}]}); the exit status is
    1 only when such files leave nothing to list.

    \b
    Example:
      truss-files list --kind decision --trust verified
    """
    store = obj.store()
    snap = store.snapshot()
    wanted = Trust(trust) if trust else None
    withheld = _gate(store, snap, wanted or Trust.UNVERIFIED)
    folder = Kind(kind) if kind else None
    skipped: list[Skipped] = []
    entries = store.list_entries(
        kind=folder,
        key=key_,
        trust=wanted,
        layer=Layer(layer) if layer else None,
        snap=snap,
        skipped=skipped,
    )
    if withheld:
        kept = [e for e in entries if e.trust.rank <= Trust.UNVERIFIED.rank]
        if len(kept) < len(entries):
            click.echo(f"note: {len(entries) - len(kept)} entries withheld: {withheld}", err=True)
        entries = kept
    if skipped:
        click.echo(skipped_report(skipped, as_json=want_json(fmt)), err=True)
        # A filter that matches nothing is no error; a folder where nothing reads is.
        if not entries and next(store.iter_entries(snap, folder, skipped=[]), None) is None:
            raise EntryError(
                f"nothing to list: {len(skipped)} file(s) under memories/ could not be read; "
                "`truss-files audit` names the commit that brought each in"
            )
    emit(
        fmt,
        [entry_view(e, full=True) for e in entries],
        lambda _d: (
            "\n".join(
                f"{e.id[:12]}  {e.trust.value:<10}  {e.kind.value}/{e.key}"
                for e in map(shown, entries)
            )
            or "no entries match"
        ),
    )


@cli.command()
@click.argument("entry_id")
@FORMAT_OPTION
@pass_ctx
@handled
def log(obj: Ctx, entry_id: str, fmt: str | None) -> None:
    """Every commit that touched an entry, with its signer and verdict.

    \b
    Example:
      truss-files log 5b0c8f3e
    """
    items = obj.store().log(entry_id)
    emit(
        fmt,
        [i.__dict__ for i in items],
        lambda _d: "\n".join(
            f"{i.commit[:12]}  {i.time}  {i.op:<9} {i.trust or '-':<10}  by {i.signer}"
            + (f"  verdict {i.verdict[:12]}" if i.verdict else "")
            + (f"  reason: {i.reason}" if i.reason else "")
            + (f"\n    keyless verdict: {i.keyless}" if i.keyless else "")
            + (f"\n    attested: {i.attested}" if i.attested else "")
            for i in items
        ),
    )


@cli.command()
@click.argument("entry_id")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "text", "markdown"]),
    default=None,
    help="markdown: for a PR comment (a table of the history). "
    "Default: text on a terminal, JSON otherwise.",
)
@pass_ctx
@handled
def why(obj: Ctx, entry_id: str, fmt: str | None) -> None:
    """Why the store believes an entry: its history, verdicts, producer and sources.

    Every commit that changed the entry (op, trust before -> after, signer) with the verdict
    it recorded (reviewers, votes, evidence), checked again; the producing ledger ref resolved
    (for run:R/N, the tool, input and result sha256 of that signed ledger call); and each
    source resolved to the commit, entry or call it names. A ref that fails its checks says
    `refused`, one with nothing to check it against `unresolvable`: neither is trusted.

    \b
    Examples:
      truss-files why 5b0c8f3e
      truss-files why 5b0c8f3e --format markdown >> "$GITHUB_STEP_SUMMARY"
    """
    answer = obj.store().why(entry_id)
    withheld = answer.get("withheld")
    if withheld:
        click.echo(f"note: {withheld}", err=True)
    if fmt == "markdown":
        click.echo(to_markdown(answer), nl=False)
        return
    emit(fmt, answer, to_text)


@cli.command("audit")
@click.argument("rev_range", required=False)
@click.option("--root", metavar="COMMIT", help="Trust root (default: git config truss.root).")
@FORMAT_OPTION
@pass_ctx
@handled
def audit_cmd(obj: Ctx, rev_range: str | None, root: str | None, fmt: str | None) -> None:
    """Re-check history from the trust root: signatures, roles, entries, verdicts.

    Exit 0 when clean; otherwise one line per violation naming commit, file and rule, exit 1.
    An entry the history adds holding a credential is named too (rule secret: its id, the
    commit, the kind; never the value) and exits 1, though reads still serve verified memory.

    \b
    Example:
      truss-files audit              # everything since the root
      truss-files audit main~5..main
    """
    # The progress display (a ticker thread, signal handlers) is audit's alone here: list
    # and show, in this module too, never load it.
    from .progress import Progress, enabled, interruptible

    progress = Progress("audit", enabled(fmt == "json"))
    last: dict[str, Any] = {"commit": "", "checked": 0, "total": 0}

    def step(commit: str, checked: int, total: int) -> None:
        last.update(commit=commit, checked=checked, total=total)
        if checked == 0:
            progress.phase("checking commits", total)
        else:
            progress.advance()

    def stopped() -> str:
        resume = f"`truss-files audit {last['commit'][:12]}..`" if last["commit"] else "it"
        return (
            f"interrupted: {last['checked']} of {last['total']} commits checked; the audit "
            f"changes nothing. Run it again from the root, or check the rest with {resume}"
        )

    with interruptible(progress, stopped):
        progress.phase("listing commits")
        report = audit_history(obj.store_path or ".", rev_range, root=root, on_commit=step)
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
    found = report.violations + report.secrets
    emit(
        fmt,
        {
            "root": report.root,
            "checked": report.checked,
            "ok": report.clean,
            "violations": [v.__dict__ for v in report.violations],
            "secrets": [v.__dict__ for v in report.secrets],
        },
        lambda _d: (
            "\n".join(str(v) for v in found)
            or f"ok: {report.checked} commits audited from root {report.root[:12]}"
        ),
    )
    if not report.clean:
        sys.exit(1)
