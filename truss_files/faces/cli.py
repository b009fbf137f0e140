"""The ``truss-files`` command line: each command parses options, calls one library function
and prints through one helper. Heavy imports stay inside the commands that need them.

Exit codes: 0 ok, 1 a user or tool error, 2 usage, 3 an unexpected bug.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..errors import TrussError, UsageError
from .output import FORMAT_OPTION, emit, fail

if TYPE_CHECKING:
    from ..store import MemoryStore

F = TypeVar("F", bound=Callable[..., Any])

KINDS = [
    "goal",
    "decision",
    "fact",
    "lesson",
    "playbook",
    "artifact",
    "scratch",
    "context_summary",
    "inference",
    "preference",
    "correction",
]
TRUSTS = ["unverified", "verified", "stale", "rejected"]
LAYERS = ["task", "member", "role", "team", "enterprise"]


class Ctx:
    def __init__(self, store: str | None, key: str | None, signer: str | None) -> None:
        self.store_path = store
        self.key = key
        self.signer_kind = signer
        self._store: MemoryStore | None = None

    def store(self) -> MemoryStore:
        if self._store is None:
            from ..keys import load_signer
            from ..store import MemoryStore

            path = self.store_path or "."
            store = MemoryStore(path)
            if self.key or self.signer_kind:
                store._signer = load_signer(
                    self.key, signer=self.signer_kind, repo_dir=store.git.workdir
                )
            self._store = store
        return self._store


pass_ctx = click.make_pass_decorator(Ctx)


def handled(func: F) -> F:
    """Turn library errors into exit 1 with the message (JSON when asked), bugs into 3."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        fmt = kwargs.get("fmt")
        try:
            return func(*args, **kwargs)
        except TrussError as exc:
            fail(exc, fmt)
            sys.exit(1)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception:  # noqa: BLE001 - the last line of defence
            traceback.print_exc()
            click.echo("error: an unexpected bug; please report the trace above", err=True)
            sys.exit(3)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    wrapper.__click_params__ = getattr(func, "__click_params__", [])  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--store",
    metavar="PATH",
    envvar="TRUSS_STORE",
    help="The store's git repository (default: the repository around the current directory).",
)
@click.option("--key", metavar="PATH", envvar="TRUSS_KEY", help="Private key to sign with.")
@click.option(
    "--signer",
    type=click.Choice(["builtin", "ssh-keygen"]),
    envvar="TRUSS_SIGNER",
    help="builtin: in-process Ed25519 (default); ssh-keygen: your git user.signingkey.",
)
@click.version_option(package_name="truss-files")
@click.pass_context
def cli(ctx: click.Context, store: str | None, key: str | None, signer: str | None) -> None:
    """Signed, reviewable, revertible memory for LLM agents.

    Memory is markdown files with YAML front matter under memories/<kind>/ in a git
    repository. Every write lands unverified; only a signed panel verdict makes it verified;
    every trust change is a signed commit you can revert.

    \b
    Start here:
      truss-files init                       # make this repository a store
      truss-files write --kind lesson --key ci-flakes "Retry the network tests once."
      truss-files query "flaky ci"           # verified entries only, by default
    """
    ctx.obj = Ctx(store, key, signer)


def _read_body(body: str) -> str:
    if body == "-":
        return sys.stdin.read()
    return body


# -- set-up ----------------------------------------------------------------------------------


@cli.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--principal", help="Your name in allowed_signers (default: your git email).")
@FORMAT_OPTION
@pass_ctx
@handled
def init(obj: Ctx, directory: str | None, principal: str | None, fmt: str | None) -> None:
    """Create or adopt a git repository as a store.

    Writes truss.toml, .truss/allowed_signers (your key as operator, panel and agent) and an
    identity/core.md template in one signed commit, and pins that commit as the trust root
    in the repository's local config. Creates a key if you have none. Harmless to re-run.

    \b
    Example:
      truss-files init ~/agent-memory
    """
    from ..initstore import init_store
    from ..keys import default_principal, default_signer_or_new, load_signer

    target = Path(directory or obj.store_path or ".")
    if obj.key or obj.signer_kind:
        signer, made = load_signer(obj.key, signer=obj.signer_kind), False
    else:
        signer, made = default_signer_or_new()
    who = principal or _git_email(target) or default_principal()
    result = init_store(target, signer, who)
    data = {
        "path": str(result.path),
        "root": result.root,
        "created": result.created,
        "principal": result.principal,
        "public_key": result.public_line,
        "new_key": made,
    }

    def text(d: dict[str, Any]) -> str:
        verb = "Initialized store" if d["created"] else "Already a store"
        lines = [f"{verb} at {d['path']} (trust root {d['root'][:12]}, pinned as truss.root)"]
        lines.append(f"Signing as {d['principal']}: {d['public_key']}")
        if d["new_key"]:
            lines.append("Created a new signing key (see `truss-files keys list`).")
        return "\n".join(lines)

    emit(fmt, data, text)


def _git_email(path: Path) -> str | None:
    import subprocess

    try:
        out = subprocess.run(
            ["git", "config", "user.email"],
            cwd=path if path.is_dir() else None,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    return out.stdout.strip() or None


@cli.group()
def keys() -> None:
    """Manage your signing keys (kept under your user config dir, mode 0600)."""


@keys.command("new")
@click.option("--name", default="id_ed25519", show_default=True, help="File name of the key.")
@click.option("--comment", default="", help="Comment on the public key line.")
@FORMAT_OPTION
@handled
def keys_new(name: str, comment: str, fmt: str | None) -> None:
    """Create an Ed25519 signing key and print its public line.

    \b
    Example:
      truss-files keys new --name panel-bot
    """
    from ..keys import default_principal, new_key

    info = new_key(name, comment or default_principal())
    emit(
        fmt,
        {
            "name": info.name,
            "path": str(info.path),
            "public_key": info.public_line,
            "fingerprint": info.fingerprint,
        },
        lambda d: f"{d['public_key']}\n(private key at {d['path']}, {d['fingerprint']})",
    )


@keys.command("list")
@FORMAT_OPTION
@handled
def keys_list(fmt: str | None) -> None:
    """List your signing keys.

    \b
    Example:
      truss-files keys list --format json
    """
    from ..keys import list_keys

    found = [
        {
            "name": k.name,
            "path": str(k.path),
            "public_key": k.public_line,
            "fingerprint": k.fingerprint,
        }
        for k in list_keys()
    ]
    emit(
        fmt,
        found,
        lambda d: (
            "\n".join(f"{k['name']}\t{k['fingerprint']}\t{k['path']}" for k in d)
            or "no keys yet; create one with `truss-files keys new`"
        ),
    )


# -- writing and trust -----------------------------------------------------------------------


@cli.command()
@click.option("--kind", required=True, type=click.Choice(KINDS), help="What sort of memory.")
@click.option("--key", "key_", required=True, help="A stable name; newer entries supersede.")
@click.option("--layer", type=click.Choice(LAYERS), default="task", show_default=True)
@click.option(
    "--source", metavar="LEDGERREF", help="What produced it: git:<sha>, run:<id>/<n>, event:<id>."
)
@click.option("--author", help="Who wrote it (default: agent:<your principal>).")
@click.option(
    "--check",
    "checks",
    multiple=True,
    metavar="CMD",
    help="A command whose exit status the panel takes as a vote (repeatable).",
)
@click.argument("body")
@FORMAT_OPTION
@pass_ctx
@handled
def write(
    obj: Ctx,
    kind: str,
    key_: str,
    layer: str,
    source: str | None,
    author: str | None,
    checks: tuple[str, ...],
    body: str,
    fmt: str | None,
) -> None:
    """Write an entry; it lands unverified. BODY is the text, or - to read stdin.

    \b
    Example:
      truss-files write --kind lesson --key rust-borrow-checker \\
          --source run:R-7f3a/12 "Scope the index guard before any await."
    """
    from ..panel.policy import write_entry

    # Through the verification policy: when it is eager for this kind, the panel runs now.
    result = write_entry(
        obj.store(),
        kind,
        key_,
        _read_body(body),
        layer=layer,
        produced_by=source,
        author=author,
        checks=checks,
    )
    extra = [f"verification: {result.outcome.line()}"] if result.outcome else []
    extra += [f"note: {result.note}"] if result.note else []
    emit(fmt, result.to_dict(), "\n".join([result.entry.id, *extra]))


@cli.command("import")
@click.argument("source", type=click.File("r", encoding="utf-8"))
@FORMAT_OPTION
@pass_ctx
@handled
def import_(obj: Ctx, source: Any, fmt: str | None) -> None:
    """Bulk-import entries from JSON lines (one commit); SOURCE is a file or -.

    Each line is an object with kind, key and body, and optionally layer, scope, author,
    source (a ledger ref), sources, salience and checks. Everything lands unverified.

    \b
    Example:
      echo '{"kind": "fact", "key": "db", "body": "Postgres 16 in prod."}' > notes.jsonl
      truss-files import notes.jsonl
    """
    import json

    store = obj.store()
    allowed = {
        "kind",
        "key",
        "body",
        "layer",
        "scope",
        "author",
        "source",
        "sources",
        "salience",
        "checks",
    }
    entries = []
    lines = source.readlines()
    with click.progressbar(
        lines, label="Reading", file=sys.stderr, hidden=not sys.stderr.isatty()
    ) as bar:
        for number, line in enumerate(bar, 1):
            if not line.strip():
                continue
            where = f"{source.name}:{number}"
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{where}: not JSON ({exc.msg})") from exc
            if not isinstance(item, dict):
                raise UsageError(f"{where}: each line must be a JSON object")
            unknown = sorted(set(item) - allowed)
            if unknown:
                raise UsageError(f"{where}: unknown field(s) {', '.join(unknown)}")
            missing = [f for f in ("kind", "key", "body") if not isinstance(item.get(f), str)]
            if missing:
                raise UsageError(f"{where}: needs string field(s) {', '.join(missing)}")
            try:
                entries.append(
                    store.new_entry(
                        item["kind"],
                        item["key"],
                        item["body"],
                        layer=item.get("layer", "task"),
                        scope=item.get("scope"),
                        author=item.get("author"),
                        produced_by=item.get("source"),
                        sources=item.get("sources", ()),
                        salience=item.get("salience", 0.5),
                        checks=item.get("checks", ()),
                    )
                )
            except TrussError as exc:
                raise UsageError(f"{where}: {exc.message}") from exc
    stored = store.write_many(entries)
    emit(
        fmt,
        {"imported": len(stored), "ids": [e.id for e in stored]},
        f"imported {len(stored)} entries (unverified until a panel verifies them)",
    )


@cli.group()
def verdict() -> None:
    """Panel verdicts: signed PASS/FAIL records for exactly one entry."""


@verdict.command("sign")
@click.argument("entry_id")
@click.option("--pass", "outcome", flag_value="PASS", help="The entry holds.")
@click.option("--fail", "outcome", flag_value="FAIL", help="The entry does not hold.")
@click.option("--note", default="", help="Your evidence, recorded in the vote.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to a file.")
@pass_ctx
@handled
def verdict_sign(
    obj: Ctx, entry_id: str, outcome: str | None, note: str, output: str | None
) -> None:
    """Sign a verdict on an entry with your panel key; prints the verdict JSON.

    \b
    Example:
      truss-files verdict sign 5b0c8f3e --pass --note "reproduced" -o v.json
      truss-files promote 5b0c8f3e --verdict v.json
    """
    if outcome is None:
        raise UsageError("say --pass or --fail")
    signed = obj.store().sign_verdict(entry_id, outcome, note=note)
    if output:
        Path(output).write_text(signed.to_json())
        click.echo(f"verdict {signed.id} ({outcome}) written to {output}", err=True)
    else:
        click.echo(signed.to_json(), nl=False)


def _load_verdict(path: str) -> Any:
    from ..panel.verdict import Verdict

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read verdict file {path}: {exc.strerror}") from exc
    return Verdict.from_json(text, path)


def _trust_result(fmt: str | None, entry: Any, verb: str) -> None:
    emit(
        fmt,
        {
            "id": entry.id,
            "trust": entry.trust.value,
            "supersedes": entry.supersedes,
            "superseded_by": entry.superseded_by,
        },
        f"{entry.id} is now {entry.trust.value}"
        + (
            f" (supersedes {entry.supersedes[:12]})"
            if entry.supersedes and verb == "promote"
            else ""
        ),
    )


@cli.command()
@click.argument("entry_id")
@click.option("--verdict", "verdict_file", required=True, help="A PASS verdict file (or -).")
@FORMAT_OPTION
@pass_ctx
@handled
def promote(obj: Ctx, entry_id: str, verdict_file: str, fmt: str | None) -> None:
    """Mark an entry verified, on a PASS verdict signed by a panel key for exactly this id.

    \b
    Example:
      truss-files promote 5b0c8f3e --verdict v.json
    """
    entry = obj.store().promote(entry_id, _load_verdict(verdict_file))
    _trust_result(fmt, entry, "promote")


@cli.command()
@click.argument("entry_id")
@click.option("--verdict", "verdict_file", required=True, help="A FAIL verdict file (or -).")
@FORMAT_OPTION
@pass_ctx
@handled
def reject(obj: Ctx, entry_id: str, verdict_file: str, fmt: str | None) -> None:
    """Mark an entry rejected on a FAIL verdict; it is kept for audit, never returned.

    \b
    Example:
      truss-files reject 5b0c8f3e --verdict fail.json
    """
    entry = obj.store().reject(entry_id, _load_verdict(verdict_file))
    _trust_result(fmt, entry, "reject")


@cli.command()
@click.argument("entry_id")
@click.option("--reason", required=True, help="Why it is no longer believed.")
@FORMAT_OPTION
@pass_ctx
@handled
def demote(obj: Ctx, entry_id: str, reason: str, fmt: str | None) -> None:
    """Turn a verified entry stale (demoted, never deleted).

    \b
    Example:
      truss-files demote 5b0c8f3e --reason "the API changed in v2"
    """
    entry = obj.store().demote(entry_id, reason)
    _trust_result(fmt, entry, "demote")


@cli.command()
@click.argument("old")
@click.argument("new")
@FORMAT_OPTION
@pass_ctx
@handled
def supersede(obj: Ctx, old: str, new: str, fmt: str | None) -> None:
    """Record that verified entry NEW replaces OLD (OLD turns stale).

    \b
    Example:
      truss-files supersede 5b0c8f3e 9d7a41c2
    """
    old_e, new_e = obj.store().supersede(old, new)
    emit(
        fmt,
        {"old": old_e.id, "old_trust": old_e.trust.value, "new": new_e.id},
        f"{new_e.id[:12]} supersedes {old_e.id[:12]} (now {old_e.trust.value})",
    )


@cli.command()
@click.argument("commit")
@FORMAT_OPTION
@pass_ctx
@handled
def revert(obj: Ctx, commit: str, fmt: str | None) -> None:
    """Undo a trust transition or identity amendment with a signed revert commit.

    \b
    Example:
      truss-files revert HEAD
    """
    made = obj.store().revert(commit)
    emit(fmt, {"commit": str(made.id), "reverts": commit}, f"reverted in {str(made.id)[:12]}")


# -- reading ---------------------------------------------------------------------------------


@cli.command()
@click.argument("entry_id")
@FORMAT_OPTION
@pass_ctx
@handled
def show(obj: Ctx, entry_id: str, fmt: str | None) -> None:
    """Show one entry (any trust, for people; agents use the tools).

    \b
    Example:
      truss-files show 5b0c8f3e
    """
    from ..entryfile import serialize
    from ..views import entry_view

    entry = obj.store().get(entry_id)
    emit(fmt, entry_view(entry, full=True), lambda _d: serialize(entry).rstrip("\n"))


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

    \b
    Example:
      truss-files list --kind decision --trust verified
    """
    from ..model import Kind, Layer, Trust
    from ..views import entry_view

    entries = obj.store().list_entries(
        kind=Kind(kind) if kind else None,
        key=key_,
        trust=Trust(trust) if trust else None,
        layer=Layer(layer) if layer else None,
    )
    emit(
        fmt,
        [entry_view(e, full=True) for e in entries],
        lambda _d: (
            "\n".join(f"{e.id[:12]}  {e.trust.value:<10}  {e.kind.value}/{e.key}" for e in entries)
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
            for i in items
        ),
    )


@cli.command()
@click.argument("text")
@click.option("--kind", type=click.Choice(KINDS))
@click.option("--key", "key_")
@click.option(
    "--min-trust",
    type=click.Choice(["verified", "stale", "unverified"]),
    default="verified",
    show_default=True,
)
@click.option("--limit", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option(
    "--mode",
    type=click.Choice(["exact", "semantic", "hybrid"]),
    help="exact: BM25; semantic: embeddings; hybrid: both, fused by rank "
    "(default: [recall] mode in truss.toml, else exact).",
)
@FORMAT_OPTION
@pass_ctx
@handled
def query(
    obj: Ctx,
    text: str,
    kind: str | None,
    key_: str | None,
    min_trust: str,
    limit: int,
    mode: str | None,
    fmt: str | None,
) -> None:
    """Rank entries at or above a trust floor (BM25 statistics from those entries only).

    Runs on the recall index cached under .git/truss/ (updated from the tree diff after
    every write). semantic and hybrid need `pip install 'truss-files[semantic]'`.

    \b
    Example:
      truss-files query "borrow checker await" --kind lesson
      truss-files query "why are builds slow" --mode hybrid
    """
    from ..model import Kind, Trust
    from ..recall.engine import search
    from ..recall.pipeline import Filter
    from ..views import entry_text, entry_view

    floor = Trust.floor(min_trust)
    flt = Filter(min_trust=floor, kind=Kind(kind) if kind else None, key=key_)
    result = search(obj.store_path or ".", text, flt, limit, mode=mode)
    hits = result.hits
    data: dict[str, Any] = {
        "recall_mode": result.mode,
        "min_trust": floor.value,
        "entries": [entry_view(h.entry, h.score) for h in hits],
    }
    # keep-both-flagged leaves two verified entries on one key: reads must say so.
    conflicts = []
    if result.related:
        from ..panel.conflicts import find_conflicts

        conflicts = find_conflicts([h.entry for h in hits], result.related)
    if conflicts:
        data["conflicts"] = [c.to_dict() for c in conflicts]
    flags = "".join(
        f"\n\nconflict: {c.kind}/{c.key} is held by verified {', '.join(i[:12] for i in c.ids)}"
        for c in conflicts
    )
    emit(
        fmt,
        data,
        lambda _d: (
            (
                "\n\n".join(entry_text(h.entry, h.score) for h in hits)
                or f"nothing at or above {floor.value} matches"
            )
            + flags
        ),
    )


@cli.command("audit")
@click.argument("rev_range", required=False)
@click.option("--root", metavar="COMMIT", help="Trust root (default: git config truss.root).")
@FORMAT_OPTION
@pass_ctx
@handled
def audit_cmd(obj: Ctx, rev_range: str | None, root: str | None, fmt: str | None) -> None:
    """Re-check history from the trust root: signatures, roles, entries, verdicts.

    Exit 0 when clean; otherwise one line per violation naming commit, file and rule, exit 1.

    \b
    Example:
      truss-files audit              # everything since the root
      truss-files audit main~5..main
    """
    from ..audit import audit
    from ..gitstore import GitStore

    report = audit(GitStore(obj.store_path or "."), rev_range, root=root)
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
    emit(
        fmt,
        {
            "root": report.root,
            "checked": report.checked,
            "ok": report.ok,
            "violations": [v.__dict__ for v in report.violations],
        },
        lambda _d: (
            "\n".join(str(v) for v in report.violations)
            or f"ok: {report.checked} commits audited from root {report.root[:12]}"
        ),
    )
    if not report.ok:
        sys.exit(1)


# The commands of the other issues' faces live beside this file and attach themselves to `cli`.
from . import cli_panel, cli_review, cli_tools  # noqa: E402,F401


def main() -> None:
    cli(prog_name="truss-files")


if __name__ == "__main__":
    main()
