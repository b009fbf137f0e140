"""Commands that change belief: write, import, verdicts, promote, reject, demote, supersede,
revert; and repair, which puts the work tree back in step after a crash."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from ...errors import TrussError, UsageError
from ...facade import read_verdict, scope_stamp
from ...facade import repair as repair_store
from ...format.imports import FORMATS as IMPORT_FORMATS
from ...format.imports import read_records
from ...model import MAX_BODY, TOMBSTONE_MARK, Entry, body_size, check_ledger_ref
from ...tools.memory_paths import parse_path as parse_memory_path
from .app import KINDS, LAYERS, Ctx, cli, handled, pass_ctx
from .output import AGENT_OPTION, CONTRACT_OPTION, FORMAT_OPTION, emit, write_out
from .progress import Progress, enabled, interruptible


def _read_body(body: str) -> str:
    if body == "-":
        return sys.stdin.read()
    return body


# -- writing and trust -----------------------------------------------------------------------


@cli.command()
@click.option("--kind", required=True, type=click.Choice(KINDS), help="What sort of memory.")
@click.option("--key", "key_", required=True, help="A stable name; newer entries supersede.")
@click.option("--layer", type=click.Choice(LAYERS), default="task", show_default=True)
@click.option(
    "--source", metavar="LEDGERREF", help="What produced it: git:<sha>, run:<id>/<n>, event:<id>."
)
@click.option(
    "--author",
    help="Who wrote it (default: agent:<your principal>); another name, like the team and "
    "enterprise layers, needs the trainer role.",
)
@click.option(
    "--check",
    "checks",
    multiple=True,
    metavar="NAME",
    help="A check truss.toml defines in [panel.checks]; the panel takes its command's exit "
    "status as a vote (repeatable).",
)
@click.option(
    "--agent",
    envvar="TRUSS_AGENT",
    help="The agent this note belongs to under [memory] scope (stamped as scope agent=...).",
)
@click.option(
    "--scope",
    "scope_pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="A scope field to stamp, e.g. project=p-3 (repeatable).",
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
    agent: str | None,
    scope_pairs: tuple[str, ...],
    body: str,
    fmt: str | None,
) -> None:
    """Write an entry; it lands unverified. BODY is the text, or - to read stdin.

    \b
    Example:
      truss-files write --kind lesson --key rust-borrow-checker \\
          --source run:R-7f3a/12 "Scope the index guard before any await."
      truss-files write --kind fact --key db --agent build-bot --scope project=p-3 "PG 16."
      truss-files write --kind lesson --key ci --check tests "The suite is green."
    """
    scope = scope_stamp(scope_pairs, agent=agent or None)
    store = obj.store()
    entry = store.new_entry(
        kind,
        key_,
        _read_body(body),
        layer=layer,
        scope=scope,
        produced_by=source,
        author=author,
        checks=checks,
    )
    # The front door every face writes through: when the policy is eager for this kind, the
    # panel runs now.
    done = store.write_entries([entry])
    outcome = done.outcome_for(entry.id)
    extra = [f"verification: {outcome.line()}"] if outcome else []
    extra += [f"note: {done.note}"] if done.note else []
    emit(fmt, done.result(entry.id, path=True), "\n".join([entry.id, *extra]))


@cli.command("import")
@click.argument("source", type=click.Path(allow_dash=True))
@click.option(
    "--from",
    "source_format",
    type=click.Choice(IMPORT_FORMATS),
    default="jsonl",
    show_default=True,
    help="What SOURCE holds: JSON lines (as export writes them), a MEMORY.md/CLAUDE.md list "
    "of notes, an Anthropic /memories folder, or a mem0 export (Memory.get_all's JSON).",
)
@FORMAT_OPTION
@pass_ctx
@handled
def import_(obj: Ctx, source: str, source_format: str, fmt: str | None) -> None:
    """Bulk-import entries in one commit: JSON lines, or notes kept elsewhere (--from).

    SOURCE is a file, - for stdin, or (with --from anthropic-memories) a folder.

    Each JSON line is an object with kind, key and body, and optionally layer, scope,
    author, source (a ledger ref), sources, salience, checks (names from truss.toml's
    [panel.checks]) and memory_path; id, when given, must be the id those fields make (a
    line from `truss-files export` keeps its id); trust and created are read and ignored.
    Notes from the other formats get produced_by import:<file>:<line>. Everything lands
    unverified, and one bad record refuses the whole file.

    \b
    Example:
      echo '{"kind": "fact", "key": "db", "body": "Postgres 16 in prod."}' > notes.jsonl
      truss-files import notes.jsonl
      truss-files import --from memory-md CLAUDE.md
      truss-files import --from mem0 mem0-export.json
    """
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
        "memory_path",
        # What export adds: the id is checked, trust and created are the exporter's.
        "id",
        "trust",
        "created",
    }

    progress = Progress("import", enabled(fmt == "json"))
    tip = store.git.tip()
    before = str(tip.id) if tip is not None else None
    state: dict[str, Any] = {"phase": "reading", "where": source, "read": 0, "entries": 0}

    def stopped() -> str:
        if state["phase"] != "committing":
            where = source if state["phase"] == "reading" else f"line {state['read']}"
            return (
                f"interrupted while {state['phase']} {where}: nothing was imported. Run the "
                "same command again"
            )
        now = store.git.tip()
        landed = now is not None and str(now.id) != before
        return (
            "interrupted while committing: the import is one commit, and "
            + (
                f"it landed ({state['entries']} entries)"
                if landed
                else "it did not land: nothing was imported"
            )
            + ". Running the same command again skips entries already stored"
        )

    def entries() -> Iterator[Entry]:
        # One record at a time: the file is never held whole (an import may be larger than
        # memory); each entry's file goes into the pack as it is read (Store.import_entries).
        principal = store.principal()
        if source_format == "jsonl":
            records = _jsonl_records(source)
        else:
            records = ((r.where, r.fields) for r in read_records(source_format, source))
        for number, (where, item) in enumerate(records, 1):
            state["where"], state["read"] = where, number
            yield _import_record(store, item, where, allowed, principal)
        state["phase"] = "committing"
        progress.phase(f"committing {state['entries']} entries in one signed commit")

    def packed(n: int) -> None:
        state["entries"] = n
        progress.advance()

    with interruptible(progress, stopped):
        state["phase"] = "checking"
        progress.phase("checking entries", _lines(source) if source_format == "jsonl" else None)
        # A credential anywhere refuses the file whole, naming each FILE:LINE (SecretFound).
        ids = store.import_entries(entries(), on_entry=packed, where=lambda n: state["where"])
    emit(
        fmt,
        {"imported": len(ids), "ids": ids},
        f"imported {len(ids)} entries (unverified until a panel verifies them)",
    )


def _lines(source: str) -> int | None:
    """How many lines a regular file holds (a cheap pass for the progress bar), else None."""
    try:
        if source == "-" or not os.path.isfile(source):
            return None
        with open(source, "rb") as again:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: again.read(1 << 20), b""))
    except OSError:
        return None


def _jsonl_records(source: str) -> Iterator[tuple[str, Any]]:
    """Each non-blank line of ``source`` (a file or -), parsed, with where it was: read one
    line at a time."""
    try:
        handle = click.open_file(source, "rb")
    except OSError as exc:
        raise UsageError(f"{source}: cannot read it ({exc.strerror})") from exc
    name = "<stdin>" if source == "-" else source
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{name}:{number}"
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UsageError(
                    f"{where}: not UTF-8 (byte {exc.start + 1} of the line); save the file as "
                    "UTF-8, e.g. with iconv -t UTF-8"
                ) from None
            try:
                yield where, json.loads(text)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{where}: not JSON ({exc.msg})") from exc


def _import_record(store: Any, item: Any, where: str, allowed: set[str], principal: str) -> Entry:
    """One import record as a new entry, or a ``UsageError`` naming where it was."""
    if not isinstance(item, dict):
        raise UsageError(f"{where}: each line must be a JSON object")
    unknown = sorted(set(item) - allowed)
    if unknown:
        raise UsageError(f"{where}: unknown field(s) {', '.join(unknown)}")
    if "memory_path" in item:
        item = _at_memory_path(item, where)
    missing = [f for f in ("kind", "key", "body") if not isinstance(item.get(f), str)]
    if missing:
        raise UsageError(f"{where}: needs string field(s) {', '.join(missing)}")
    try:
        entry: Entry = store.new_entry(
            item["kind"],
            item["key"],
            item["body"],
            layer=item.get("layer", "task"),
            scope=item.get("scope"),
            # The signer's name, looked up once per import, not twice per record.
            author=item.get("author") or f"agent:{principal}",
            produced_by=item.get("source") or f"import:{principal}",
            sources=item.get("sources", ()),
            salience=item.get("salience", 0.5),
            checks=item.get("checks", ()),
        )
    except TrussError as exc:
        raise UsageError(f"{where}: {exc.message}") from exc
    if "memory_path" in item:
        # The memory tool's file: its text byte for byte, as the tool stores it.
        entry = dataclasses.replace(entry, body=item["body"], memory_path=item["memory_path"])
    if "id" in item and item["id"] != entry.id:
        raise UsageError(
            f"{where}: the fields make id {entry.id}, not {item['id']}: the line was "
            "changed after export (or is another store's with other fields); remove "
            "the id field to import it as a new entry"
        )
    return entry


def _at_memory_path(item: dict[str, Any], where: str) -> dict[str, Any]:
    """A record of a memory tool's file: the kind and key its path names (as the memory
    tool maps them), checked as the tool checks a path the model gives."""
    try:
        vp = parse_memory_path(item["memory_path"])
    except UsageError as exc:
        raise UsageError(f"{where}: {exc.message}") from exc
    if vp.key is None:
        raise UsageError(f"{where}: memory_path {item['memory_path']} names a folder, not a file")
    mapped = {"kind": vp.kind.value if vp.kind else "fact", "key": vp.key}
    for name, value in mapped.items():
        if name in item and item[name] != value:
            raise UsageError(
                f"{where}: memory_path {item['memory_path']} names {name} {value}, not {item[name]}"
            )
    if not isinstance(item.get("body"), str):
        raise UsageError(f"{where}: needs string field(s) body")
    if body_size(item["body"]) > MAX_BODY:
        raise UsageError(
            f"{where}: body is {body_size(item['body'])} bytes; the limit is {MAX_BODY}"
        )
    if item["body"].startswith(TOMBSTONE_MARK):
        raise UsageError(f"{where}: a memory may not start with {TOMBSTONE_MARK}")
    return {**item, **mapped, "memory_path": vp.norm}


@cli.group()
def verdict() -> None:
    """Panel verdicts: signed PASS/FAIL records for exactly one entry.

    \b
    Example:
      truss-files verdict sign 5b0c8f3e --pass | truss-files promote 5b0c8f3e --verdict -
    """


@verdict.command("sign")
@click.argument("entry_id")
@click.option("--pass", "passed", is_flag=True, help="The entry holds.")
@click.option("--fail", "failed", is_flag=True, help="The entry does not hold.")
@click.option("--note", default="", help="Your evidence, recorded in the vote.")
@click.option(
    "--cite",
    "cites",
    multiple=True,
    metavar="run:R/N",
    help="A run's tool call you relied on (repeatable); promote and the audit check that "
    "each cited call is in that run's signed ledger.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to a file.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "text"]),
    default=None,
    help="json: the signed verdict itself on stdout, the default even on a terminal, so it "
    "pipes into promote (with -o: the file's name and the verdict's id); text: one line "
    "saying what was signed.",
)
@click.option(
    "--sigstore",
    "keyless",
    is_flag=True,
    help="Sign keylessly with sigstore (the `sigstore` extra): your OIDC identity instead of "
    "a panel key; the verdict carries the bundle.",
)
@click.option(
    "--identity-token",
    envvar="SIGSTORE_IDENTITY_TOKEN",
    help="With --sigstore: the OIDC token to sign with (default: the CI's ambient identity).",
)
@click.option(
    "--trust-config",
    type=click.Path(dir_okay=False),
    envvar="TRUSS_SIGSTORE_TRUST_CONFIG",
    help="With --sigstore: a ClientTrustConfig JSON for a private sigstore deployment "
    "(default: the public instance).",
)
@pass_ctx
@handled
def verdict_sign(
    obj: Ctx,
    entry_id: str,
    passed: bool,
    failed: bool,
    note: str,
    cites: tuple[str, ...],
    output: str | None,
    fmt: str | None,
    keyless: bool,
    identity_token: str | None,
    trust_config: str | None,
) -> None:
    """Sign a verdict on an entry with your panel key; prints the verdict JSON.

    With -o the verdict goes to the file and a line saying so to stderr (or, with --format
    json, an object naming the file on stdout). With --sigstore the verdict is signed by an
    OIDC identity (a CI workflow's, say) that truss.toml [roles] panel names as
    sigstore:<issuer>|<identity>.

    \b
    Examples:
      truss-files verdict sign 5b0c8f3e --pass | truss-files promote 5b0c8f3e --verdict -
      truss-files verdict sign 5b0c8f3e --fail --note "not reproduced" -o ~/v.json
      truss-files verdict sign 5b0c8f3e --pass --cite run:R-7f3a/12 -o v.json
      truss-files verdict sign 5b0c8f3e --pass --sigstore -o verdict.json
    """
    if passed == failed:
        raise click.UsageError(
            "give --pass or --fail, not both" if passed else "say --pass or --fail"
        )
    outcome = "PASS" if passed else "FAIL"
    if keyless:
        signed = obj.store().sign_keyless_verdict(
            entry_id, outcome, note=note, token=identity_token, trust_config=trust_config
        )
    else:
        for cite in cites:
            check_ledger_ref(cite)
            if not cite.startswith("run:"):
                raise UsageError(f"--cite {cite}: a verdict cites a run's call, run:<run-id>/<seq>")
        signed = obj.store().sign_verdict(entry_id, outcome, note=note, cites=cites)
    said = f"verdict {signed.id} ({outcome} on {signed.entry[:12]}, signed by {signed.signer})"
    if output:
        write_out(output, signed.to_json(), "the verdict")
        if fmt == "json":
            emit(fmt, {**signed.summary(), "entry": signed.entry, "path": output})
        else:
            click.echo(f"{said} written to {output}", err=True)
    elif fmt == "text":
        click.echo(said)
    else:
        click.echo(signed.to_json(), nl=False)


@verdict.command("verify")
@click.argument("path", metavar="FILE")
@FORMAT_OPTION
@pass_ctx
@handled
def verdict_verify(obj: Ctx, path: str, fmt: str | None) -> None:
    """Explain one verdict file (or -): who signed it, and whether this store accepts it.

    An SSH-signed verdict is checked against .truss/allowed_signers; a keyless one against
    the trusted root (pinned at .truss/trusted_root.json, or the one sigstore ships), offline,
    and its identity against truss.toml [roles] panel. A refusal names the rule it breaks
    (sigstore-identity, sigstore-issuer, sigstore-artifact, sigstore-untrusted-certificate,
    sigstore-expired-certificate, sigstore-log, ...) and exits 1.

    \b
    Example:
      truss-files verdict verify verdict.json
    """
    found = _load_verdict(path)
    store = obj.store()
    keyless = store.check_verdict(found)
    try:
        trust: str | None = store.get(found.entry).trust.value
    except TrussError:
        trust = None
    data = {**found.summary(), "entry": found.entry, "valid": True, "keyless": keyless}
    data["entry_trust"] = trust
    how = (
        f"keylessly by {keyless['identity']} (issuer {keyless['issuer']}, log index "
        f"{keyless['log_index']})"
        if keyless
        else f"by {found.signer} ({found.key.split()[0] if found.key else 'no key'})"
    )
    text = (
        f"verdict {found.id}: {found.outcome} on {found.entry}, signed {how}; valid here, "
        "and the signer holds the panel role"
        + (f"; the entry is {trust}" if trust else "; no such entry in this store")
    )
    emit(fmt, data, text)


def _load_verdict(path: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read verdict file {path}: {exc.strerror}") from exc
    return read_verdict(text, path)


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
@AGENT_OPTION
@CONTRACT_OPTION
@FORMAT_OPTION
@pass_ctx
@handled
def promote(
    obj: Ctx,
    entry_id: str,
    verdict_file: str,
    agent: str | None,
    contract: str | None,
    fmt: str | None,
) -> None:
    """Mark an entry verified, on a PASS verdict signed by a panel key for exactly this id.

    Verified entries of the same kind and key are settled by the conflict policy of the
    layered settings, as verify takes them (truss.toml → user config → [agents.NAME] →
    --contract FILE): under keep-both-flagged both stay verified and reads name the
    conflict. truss.toml's panel-arbitrated holds whatever is layered.

    \b
    Example:
      truss-files promote 5b0c8f3e --verdict v.json
      truss-files promote 5b0c8f3e --verdict v.json --contract ci-contract.toml
    """
    store = obj.store()
    settings = store.settings(agent=agent, contract=contract)
    entry = store.promote(entry_id, _load_verdict(verdict_file), settings=settings)
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


# A repair lists this many restored paths in text; the rest are counted.
REPAIR_LISTED = 20


@cli.command()
@click.option(
    "--force",
    is_flag=True,
    help="Also discard edits the store never wrote (store paths only; untracked files stay).",
)
@FORMAT_OPTION
@pass_ctx
@handled
def repair(obj: Ctx, force: bool, fmt: str | None) -> None:
    """Bring the work tree and index back in step with the branch after a crash.

    A writer killed between moving the branch and updating the work tree leaves new entries
    looking deleted in `git status` (a plain `git commit` would then delete them), and a
    killed git or truss process can leave a lock file (index.lock, refs/heads/main.lock)
    that blocks every write. The next write repairs both by itself; this command does it
    now: it removes lock files whose owner is gone (never one a running git process holds),
    replays interrupted writes, and restores every store path whose work tree file or index
    entry differs from the branch, when what it holds is a version the store wrote. An edit
    the store never wrote is kept and listed (exit 1); --force discards it too.

    \b
    Example:
      truss-files repair            # after a crash, or when the pre-commit hook asks for it
      git status --short memories/  # nothing left to show
    """
    done = repair_store(obj.store_path or ".", force=force)
    data = {
        "fixed": list(done.fixed),
        "kept": list(done.kept),
        "notes": list(done.notes),
        "counts": {"restored": len(done.fixed), "kept": len(done.kept), "notes": len(done.notes)},
    }

    def text(_d: object) -> str:
        # Twenty thousand paths (an import cut short) are a count, not a screenful.
        shown = done.fixed[:REPAIR_LISTED]
        lines = [*done.notes, *(f"restored {p}" for p in shown)]
        if len(done.fixed) > len(shown):
            lines.append(f"... and {len(done.fixed) - len(shown)} more (--format json lists all)")
        lines.extend(
            f"kept {p} (an edit the store never wrote; --force discards it)" for p in done.kept
        )
        if done.fixed or done.kept or done.notes:
            lines.append(
                f"repaired: {len(done.fixed)} store path(s) restored to the branch's version, "
                f"{len(done.kept)} kept, {len(done.notes)} other fix(es) and note(s) above"
            )
        else:
            lines.append(
                "ok: nothing to repair; the work tree and index are in step with the branch"
            )
        return "\n".join(lines)

    emit(fmt, data, text)
    if done.kept:
        sys.exit(1)
