"""Review and enforcement commands: `diff`, `textconv`, `install-drivers`, `merge-driver`,
`hooks install`, `hook NAME` (what the installed hooks run) and `sync`."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import click

from ...errors import TrussError, UsageError
from ...facade import MemoryStore, change_set
from ...review.merge import merge_files
from ...review.render import render
from ...review.textconv import textconv as convert
from ..drivers import install_drivers
from ..hooks import install_hooks
from .app import Ctx, cli, handled, pass_ctx
from .output import FORMAT_OPTION, emit, want_json

# The hooks git writes to on stdin: the command reads it all and hands it to both checks.


@cli.command("diff")
@click.argument("rev_range", metavar="RANGE")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["markdown", "text", "json"]),
    default=None,
    help="markdown: for a PR comment or $GITHUB_STEP_SUMMARY (kept under 64 KB). "
    "Default: text on a terminal, JSON otherwise.",
)
@click.option("--root", metavar="COMMIT", help="Trust root for the audit (default: truss.root).")
@pass_ctx
@handled
def diff_cmd(obj: Ctx, rev_range: str, fmt: str | None, root: str | None) -> None:
    """The semantic change set of RANGE: what a reviewer of memory needs.

    Entries added (kind, key, body), trust transitions with their verdicts (outcome,
    reviewers' votes, signer), supersede links, identity and policy amendments, and the
    audit's violations for the range. RANGE is BASE..HEAD, BASE...HEAD (against the merge
    base, as a pull request shows it) or BASE (meaning BASE..HEAD).

    \b
    Example:
      truss-files diff origin/main...HEAD
      truss-files diff "$BASE..$HEAD" --format markdown >> "$GITHUB_STEP_SUMMARY"
    """
    changes = change_set(obj.store_path or ".", rev_range, root=root)
    if fmt == "json" or (fmt is None and want_json(None)):
        emit("json", changes.to_dict())
        return
    click.echo(render(changes, fmt or "text"))


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@handled
def textconv(file: str) -> None:
    """Print an entry file readably (git's diff.truss.textconv runs this).

    A header line with kind, key, trust and the verdict summary, one line per mutable field,
    each vote, then the body. A file that is not a valid entry is printed as it is.

    \b
    Example:
      truss-files textconv memories/lesson/5b/5b0c8f3e9d7a41c2b6e0f1a2d3c4b5a6.md
    """
    try:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {file}: {exc.strerror}") from exc
    # Bytes, not click.echo: git may run us with a C locale, and bodies are UTF-8.
    sys.stdout.buffer.write(convert(data).encode("utf-8"))
    sys.stdout.buffer.flush()


@cli.command("install-drivers")
@click.option(
    "--no-attributes", is_flag=True, help="Write only the git config, not .gitattributes."
)
@FORMAT_OPTION
@pass_ctx
@handled
def install_drivers_cmd(obj: Ctx, no_attributes: bool, fmt: str | None) -> None:
    """Configure git's diff and merge drivers for entry files in this repository.

    Writes diff.truss.textconv, merge.truss.driver and merge.truss.name to the local git
    config, and the line `memories/**/*.md diff=truss merge=truss` to .gitattributes if it is
    not there (commit that file so everyone gets it).

    \b
    Example:
      truss-files install-drivers && git log -p memories/
    """
    report = install_drivers(obj.store_path or ".", attributes=not no_attributes)

    def text(_d: object) -> str:
        lines = [f"git config {k} = {v}" for k, v in report.config.items()]
        if no_attributes:
            lines.append("left .gitattributes alone (--no-attributes)")
        elif report.attributes_added:
            lines.append(f"added the entry line to {report.attributes}; commit it")
        else:
            lines.append(f"{report.attributes} already routes entries to the drivers")
        return "\n".join(lines)

    emit(fmt, dataclasses.asdict(report), text)


@cli.command("merge-driver")
@click.argument("base", type=click.Path(exists=True, dir_okay=False))
@click.argument("ours", type=click.Path(exists=True, dir_okay=False))
@click.argument("theirs", type=click.Path(exists=True, dir_okay=False))
@click.argument("path")
@handled
def merge_driver(base: str, ours: str, theirs: str, path: str) -> None:
    """Merge two versions of one entry file by the trust state machine (git runs this).

    BASE, OURS and THEIRS are git's %O %A %B; PATH is %P. The result is written to OURS.
    What cannot be settled (say, rejected on one side and verified on the other) is left
    with conflict markers naming the reason, and the exit status is 1.

    \b
    Example (what install-drivers configures):
      git config merge.truss.driver "truss-files merge-driver %O %A %B %P"
    """
    result = merge_files(Path(base), Path(ours), Path(theirs), path, _head_policy())
    for note in result.notes:
        click.echo(f"truss-files merge-driver: {path}: {note}", err=True)
    if not result.clean:
        click.echo(f"truss-files merge-driver: CONFLICT in {path}: {result.reason}", err=True)
        sys.exit(1)


def _head_policy() -> Any:
    """The policy of HEAD in the repository git runs the driver in (None outside a store):
    keyless verdicts either side brings are verified against it."""

    try:
        store = MemoryStore(".")
        return store.policy()
    except TrussError:
        return None


@cli.group()
def hooks() -> None:
    """Git hooks that enforce signatures and the audit (thin shims over it).

    \b
    Example:
      truss-files hooks install
    """


@hooks.command("install")
@click.option("--server", is_flag=True, help="Install the pre-receive gate (a server's repo).")
@click.option("--root", metavar="COMMIT", help="Pin the server's trust root (truss.root).")
@click.option(
    "--protect",
    metavar="BRANCH",
    multiple=True,
    help="Another branch never deleted or force-pushed (truss.protected; the default branch "
    "and every branch whose history holds the trust root always are). Repeatable; globs "
    "like release/* work.",
)
@FORMAT_OPTION
@pass_ctx
@handled
def hooks_install(
    obj: Ctx, server: bool, root: str | None, protect: tuple[str, ...], fmt: str | None
) -> None:
    """Install the hooks into this repository; harmless to re-run.

    Client (default): pre-commit validates staged store files, commit-msg wants Truss-Op
    trailers on store commits, pre-push audits what a push sends. With --server (a bare
    repository that receives pushes): pre-receive refuses unsigned or invalid commits, and
    deletions and force-pushes of protected branches: every branch whose history holds the
    trust root, the default branch and the --protect patterns. A hook already there is kept as
    NAME.local and runs first.

    \b
    Example:
      truss-files hooks install
      truss-files --store /srv/git/memory.git hooks install --server \\
          --root "$(git config truss.root)"   # run where your store was initialised
    """
    report = install_hooks(obj.store_path or ".", server=server, root=root, protect=protect)
    data = {
        "hooks": [dataclasses.asdict(h) for h in report.hooks],
        "notes": list(report.notes),
    }

    def text(_d: object) -> str:
        lines = []
        for h in report.hooks:
            line = f"{h.action:<9} {h.path}"
            if h.chained:
                line += f" (runs {Path(h.chained).name} first)"
            lines.append(line)
        lines.extend(f"note: {n}" for n in report.notes)
        return "\n".join(lines)

    emit(fmt, data, text)


@cli.command("sync")
@click.argument("remote", default="origin")
@click.option("--root", metavar="COMMIT", help="Trust root for the incoming audit.")
@FORMAT_OPTION
@pass_ctx
@handled
def sync_cmd(obj: Ctx, remote: str, root: str | None, fmt: str | None) -> None:
    """Fetch, audit what came in, integrate, and push by compare-and-swap.

    Integrates by fast-forward, or by a signed merge commit whose entry files are merged by
    the trust state machine; retries when another writer pushed first. Incoming commits that
    fail the audit stop the sync before anything local moves.

    \b
    Example:
      truss-files sync            # with origin
      truss-files sync backup
    """
    result = obj.store().sync(remote, root=root)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    emit(fmt, dataclasses.asdict(result), result.summary())


__all__ = ["cli"]
