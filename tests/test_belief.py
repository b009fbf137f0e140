"""A belief's life: arbitration enforced in the library and the audit, a LedgerRef on every
entry, verdicts bound to the state they judged (no replay across a demotion).

Real stores, real keys; every attack is made as a hostile client makes it (past the
library, through ``GitStore.apply``) or through the public API, and the audit is asked."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from hand_commits import commit as hand_commit
from hand_commits import promote as hand_promote
from test_panel_runner import judge

from truss_files import entryfile
from truss_files.audit import audit
from truss_files.errors import ConflictError, UsageError, VerdictError
from truss_files.facade import MemoryStore
from truss_files.faces.cli import cli
from truss_files.gitstore import Snapshot
from truss_files.model import Entry, Kind, Provenance, Trust
from truss_files.panel.runner import verify
from truss_files.settings import load_settings
from truss_files.signing import Ed25519Signer
from truss_files.trailers import trailers
from truss_files.verdict import Verdict, sign_verdict

MARKER = 'conflict = "verified-wins"'


def _config(store: MemoryStore, signed_commit: Callable[..., str], old: str, new: str) -> None:
    def changes(snap: Snapshot) -> dict[str, bytes | None]:
        text = (snap.read("truss.toml") or b"").decode()
        assert old in text
        return {"truss.toml": text.replace(old, new).encode()}

    signed_commit(store, changes)


def _arbitrated(store: MemoryStore, signed_commit: Callable[..., str]) -> None:
    _config(store, signed_commit, MARKER, 'conflict = "panel-arbitrated"')


def _tip(store: MemoryStore) -> str:
    tip = store.git.tip()
    assert tip is not None
    return str(tip.id)


def _rules(store: MemoryStore) -> list[str]:
    return [v.rule for v in audit(store.git).violations]


# --------------------------------------------------------------------------- arbitration


def test_a_plain_pass_cannot_supersede_a_verified_rival_under_panel_arbitrated(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    _arbitrated(store, signed_commit)
    first = store.write("decision", "db", "postgres")
    store.promote(first.id, store.sign_verdict(first.id, "PASS"))  # no rival: it stands
    second = store.write("decision", "db", "sqlite")
    verdict = store.sign_verdict(second.id, "PASS")
    tip = _tip(store)
    for override in (None, "verified-wins", "latest-wins"):
        # A layered override cannot loosen truss.toml's panel-arbitrated either.
        with pytest.raises(ConflictError, match="arbiters' decision") as caught:
            store.promote(second.id, verdict, conflict=override)
        assert caught.value.code == "conflict" and first.id in caught.value.message
    assert _tip(store) == tip
    assert store.get(first.id).trust is Trust.VERIFIED
    assert store.get(second.id).trust is Trust.UNVERIFIED
    assert audit(store.git).ok


def test_the_cli_promote_refuses_it_with_exit_1_and_code_conflict(
    store: MemoryStore, signed_commit: Callable[..., str], tmp_path: Path
) -> None:
    _arbitrated(store, signed_commit)
    first = store.write("decision", "db", "postgres")
    store.promote(first.id, store.sign_verdict(first.id, "PASS"))
    second = store.write("decision", "db", "sqlite")
    verdict = tmp_path / "v.json"
    verdict.write_text(store.sign_verdict(second.id, "PASS").to_json())
    base = ["--store", str(store.git.workdir), "--key", str(tmp_path / "operator_key")]
    result = CliRunner().invoke(
        cli, [*base, "promote", second.id, "--verdict", str(verdict), "--format", "json"]
    )
    assert result.exit_code == 1, result.output
    assert "conflict" in result.output and "arbiters" in result.output
    assert store.get(first.id).trust is Trust.VERIFIED


def test_verify_with_arbiters_carries_their_decision_and_the_audit_accepts_it(
    store: MemoryStore,
    signed_commit: Callable[..., str],
    define_checks: Callable[..., str],
    tmp_path: Path,
) -> None:
    define_checks(store, {"true": "true"})
    _arbitrated(store, signed_commit)
    settings = load_settings(
        {"panel": {"arbiters": [{"type": "judge", "command": judge(tmp_path, "PASS")}]}}
    )
    first = store.write("decision", "db", "postgres", checks=["true"])
    verify(store, [first.id], settings=settings)
    second = store.write("decision", "db", "sqlite", checks=["true"])
    (outcome,) = verify(store, [second.id], settings=settings).outcomes
    assert outcome.status == "promoted", outcome.message
    verdict = Verdict.from_dict(store.get(second.id).provenance.verified_by or {})
    assert verdict.arbitration is not None and verdict.arbitration["rival"] == first.id
    assert [v["vote"] for v in verdict.arbitration["votes"]] == ["PASS"]
    assert store.get(first.id).superseded_by == second.id
    assert audit(store.git).ok


def test_the_audit_flags_a_hand_promote_that_superseded_the_rival_with_a_plain_pass(
    store: MemoryStore, signed_commit: Callable[..., str], operator_key: Ed25519Signer
) -> None:
    _arbitrated(store, signed_commit)
    first = store.write("decision", "db", "postgres")
    store.promote(first.id, store.sign_verdict(first.id, "PASS"))
    second = store.write("decision", "db", "sqlite")
    verdict = store.sign_verdict(second.id, "PASS")
    # Past the library: the promote commit verified-wins would make.
    snap = store.snapshot()
    rival = store.get(first.id, snap)
    new = store.get(second.id, snap)
    prov = dataclasses.replace(new.provenance, verified_by=verdict.to_dict())
    won = dataclasses.replace(new, trust=Trust.VERIFIED, provenance=prov, supersedes=rival.id)
    lost = dataclasses.replace(rival, trust=Trust.STALE, superseded_by=new.id)
    message = f"truss: promote {new.id[:12]}\n\n" + trailers(
        op="promote",
        entry=new.id,
        trust=[f"{new.id} unverified -> verified", f"{rival.id} verified -> stale"],
        verdict=verdict.id,
    )
    bad = hand_commit(
        store,
        operator_key,
        {
            won.path: entryfile.serialize(won).encode(),
            lost.path: entryfile.serialize(lost).encode(),
        },
        message,
    )
    found = [v for v in audit(store.git).violations if v.rule == "arbitration"]
    assert [(v.commit, v.path) for v in found] == [(bad, rival.path)]
    assert "carries no arbiters' decision" in found[0].message


# --------------------------------------------------------------------------- verdict replay


def test_a_pass_verdict_cannot_be_replayed_across_a_demotion(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "holds")
    early = store.sign_verdict(entry.id, "PASS")  # signed, kept back
    verdict = store.sign_verdict(entry.id, "PASS", note="the one used")
    assert verdict.basis == store.snapshot().blob_id(entry.path)
    store.promote(entry.id, verdict)
    store.demote(entry.id, "no longer true")
    tip = _tip(store)
    for replayed in (verdict, early):
        with pytest.raises(VerdictError, match="changed since"):
            store.promote(entry.id, replayed)
    assert _tip(store) == tip and store.get(entry.id).trust is Trust.STALE
    fresh = store.sign_verdict(entry.id, "PASS", note="re-checked")
    assert store.promote(entry.id, fresh).trust is Trust.VERIFIED
    assert audit(store.git).ok


def test_a_verdict_without_a_basis_cannot_be_replayed_either(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    entry = store.write("fact", "k", "holds")
    old_style = sign_verdict(  # as verdicts were signed before they named a basis
        entry.id,
        "PASS",
        [{"reviewer": "operator@example.test", "kind": "human", "vote": "PASS"}],
        signer=operator_key,
        principal="operator@example.test",
        quorum="1-of-1",
        policy="manual",
        now="2026-11-29T12:00:00Z",
    )
    assert old_style.basis is None
    store.promote(entry.id, old_style)
    store.demote(entry.id, "no longer true")
    with pytest.raises(VerdictError, match="replayed across a demotion"):
        store.promote(entry.id, old_style)
    # Nor one signed before it (kept back), while a fresh one re-verifies.
    kept = sign_verdict(
        entry.id,
        "PASS",
        [{"reviewer": "operator@example.test", "kind": "human", "vote": "PASS"}],
        signer=operator_key,
        principal="operator@example.test",
        quorum="1-of-1",
        policy="manual",
        now="2026-11-29T11:59:00Z",
    )
    with pytest.raises(VerdictError, match="before the verdict that last verified"):
        store.promote(entry.id, kept)
    fresh = dataclasses.replace(kept, time="2026-11-29T12:30:00Z", signature="")
    fresh = sign_verdict(
        entry.id,
        "PASS",
        list(fresh.votes),
        signer=operator_key,
        principal="operator@example.test",
        quorum="1-of-1",
        policy="manual",
        now=fresh.time,
    )
    assert store.promote(entry.id, fresh).trust is Trust.VERIFIED
    assert audit(store.git).ok


def test_the_audit_flags_a_hand_made_replay(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    entry = store.write("fact", "k", "holds")
    verdict = store.sign_verdict(entry.id, "PASS")
    store.promote(entry.id, verdict)
    store.demote(entry.id, "no longer true")
    assert audit(store.git).ok
    bad = hand_promote(store, operator_key, entry.id, verdict)
    found = [v for v in audit(store.git).violations if v.rule == "verdict-replay"]
    assert [v.commit for v in found] == [bad]


def test_a_signed_revert_of_a_demotion_is_not_a_replay(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "holds")
    store.promote(entry.id, store.sign_verdict(entry.id, "PASS"))
    store.demote(entry.id, "oops")
    demote = _tip(store)
    store.revert(demote)
    assert store.get(entry.id).trust is Trust.VERIFIED
    assert audit(store.git).ok


# --------------------------------------------------------------------------- ledger refs


def test_every_write_names_where_it_came_from(store: MemoryStore, tmp_path: Path) -> None:
    api = store.write("fact", "api", "from python")
    assert api.ledger_ref == "api:operator@example.test"
    base = ["--store", str(store.git.workdir), "--key", str(tmp_path / "operator_key")]
    out = CliRunner().invoke(cli, [*base, "write", "--kind", "fact", "--key", "c", "from cli"])
    assert out.exit_code == 0, out.output
    (cli_entry,) = store.list_entries(key="c")
    assert cli_entry.provenance.produced_by == "cli:operator@example.test"
    lines = tmp_path / "in.jsonl"
    lines.write_text(json.dumps({"kind": "fact", "key": "i", "body": "imported"}) + "\n")
    out = CliRunner().invoke(cli, [*base, "import", str(lines)])
    assert out.exit_code == 0, out.output
    (imported,) = store.list_entries(key="i")
    assert imported.provenance.produced_by == "import:operator@example.test"
    assert all(e.provenance.produced_by for e in store.list_entries())
    assert audit(store.git).ok


def test_write_memory_outside_a_run_names_the_tool(store: MemoryStore) -> None:
    from truss_files.tools.dispatch import ToolSession

    session = ToolSession(store, flags=["memory_write"])
    result = session.call("write_memory", {"kind": "fact", "key": "t", "body": "by a tool"})
    assert result.error is None, result.error
    (entry,) = store.list_entries(key="t")
    assert entry.provenance.produced_by == "tool:operator@example.test"


def _null_ref_entry(store: MemoryStore) -> Entry:
    return Entry(
        kind=Kind.FACT,
        key="nowhere",
        body="from nowhere",
        author="agent:operator@example.test",
        created="2026-11-29T12:00:00Z",
        provenance=Provenance(produced_by=None),
    )


def test_the_audit_refuses_a_new_entry_without_a_ledger_ref(
    store: MemoryStore, operator_key: Ed25519Signer
) -> None:
    entry = _null_ref_entry(store)
    with pytest.raises(UsageError, match="no provenance.produced_by"):
        store.write_many([entry])
    message = "truss: write fact nowhere\n\n" + trailers(op="write", entry=entry.id)
    bad = hand_commit(
        store, operator_key, {entry.path: entryfile.serialize(entry).encode()}, message
    )
    found = [v for v in audit(store.git).violations if v.rule == "ledger-ref"]
    assert [(v.commit, v.path) for v in found] == [(bad, entry.path)]


def test_an_older_store_without_the_cut_over_still_audits(
    store: MemoryStore, signed_commit: Callable[..., str], operator_key: Ed25519Signer
) -> None:
    # A store made before the cut-over: truss.toml has no [policy] provenance line.
    _config(store, signed_commit, 'provenance = "required"\n', "")
    entry = _null_ref_entry(store)
    message = "truss: write fact nowhere\n\n" + trailers(op="write", entry=entry.id)
    hand_commit(store, operator_key, {entry.path: entryfile.serialize(entry).encode()}, message)
    assert audit(store.git).ok
    # The operator turns it on: from then on a null ref is refused, the past still audits.
    _config(store, signed_commit, MARKER, MARKER + '\nprovenance = "required"')
    later = dataclasses.replace(entry, key="later")
    message = "truss: write fact later\n\n" + trailers(op="write", entry=later.id)
    bad = hand_commit(
        store, operator_key, {later.path: entryfile.serialize(later).encode()}, message
    )
    assert [(v.commit, v.rule) for v in audit(store.git).violations] == [(bad, "ledger-ref")]


# --------------------------------------------------------------------------- citations


def _durable_call(store: MemoryStore, run: str) -> str:
    from truss_files.tools.dispatch import ToolSession

    session = ToolSession(store, run_id=run, durable=True)
    out = session.call("memory_query", {"query": "anything", "min_trust": "unverified"})
    assert out.error is None, out.error
    return f"run:{run}/1"


def test_a_verdict_may_cite_a_signed_call_and_not_a_missing_or_unsigned_one(
    store: MemoryStore, operator_key: Ed25519Signer, git: Callable[..., str]
) -> None:
    entry = store.write("fact", "k", "holds")
    cite = _durable_call(store, "R-cite")
    good = store.sign_verdict(entry.id, "PASS", cites=[cite])
    assert good.votes[0]["evidence"]["cites"] == [cite]
    missing = store.sign_verdict(entry.id, "PASS", cites=["run:R-cite/9"])
    nowhere = store.sign_verdict(entry.id, "PASS", cites=["run:R-none/1"])
    # An unsigned "ledger" made with plain git: a call #1 nobody signed.
    repo = store.git.workdir
    assert repo is not None
    tree = git(repo, "write-tree").strip()
    fake = git(repo, "commit-tree", tree, "-m", "call\n\nTruss-Run: R-fake\nTruss-Seq: 1").strip()
    git(repo, "update-ref", "refs/truss/runs/R-fake", fake)
    unsigned = store.sign_verdict(entry.id, "PASS", cites=["run:R-fake/1"])
    tip = _tip(store)
    for bad, words in (
        (missing, "holds no call #9"),
        (nowhere, "no ledger of run R-none"),
        (unsigned, "is unsigned"),
    ):
        with pytest.raises(VerdictError, match=words):
            store.promote(entry.id, bad)
    assert _tip(store) == tip
    store.promote(entry.id, good)
    assert audit(store.git).ok
    # Past the library: a verdict citing a call that is not there.
    other = store.write("fact", "k2", "also holds")
    forged = store.sign_verdict(other.id, "PASS", cites=["run:R-cite/9"])
    bad = hand_promote(store, operator_key, other.id, forged)
    found = [v for v in audit(store.git).violations if v.rule == "verdict-cites"]
    assert [v.commit for v in found] == [bad] and "holds no call #9" in found[0].message


def test_the_cli_signs_a_citing_verdict(store: MemoryStore, tmp_path: Path) -> None:
    entry = store.write("fact", "k", "holds")
    cite = _durable_call(store, "R-cli")
    base = ["--store", str(store.git.workdir), "--key", str(tmp_path / "operator_key")]
    out = CliRunner().invoke(cli, [*base, "verdict", "sign", entry.id, "--pass", "--cite", cite])
    assert out.exit_code == 0, out.output
    assert Verdict.from_json(out.output).votes[0]["evidence"]["cites"] == [cite]
    out = CliRunner().invoke(cli, [*base, "verdict", "sign", entry.id, "--pass", "--cite", "x"])
    assert out.exit_code == 1 and "ledger ref" in out.output


def test_mcp_writes_and_reads_name_the_mcp_face(store: MemoryStore) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client

    from truss_files.faces.mcp import build_server
    from truss_files.tools.dispatch import ToolSession
    from truss_files.usage import read_usage, usage_path

    session = ToolSession(store, flags=["memory", "memory_write"])

    async def main() -> None:
        async with Client(build_server(session)) as client:
            await client.call_tool(
                "write_memory", {"kind": "fact", "key": "m", "body": "written over mcp"}
            )
            await client.call_tool(
                "memory_query", {"query": "written over mcp", "min_trust": "unverified"}
            )

    anyio.run(main)
    (entry,) = store.list_entries(key="m")
    assert entry.provenance.produced_by == "mcp:operator@example.test"
    assert read_usage(store.git.git_dir)[entry.id].uses == 1
    assert Path(usage_path(store.git.git_dir)).read_text().split()[1] == "mcp"
