"""A belief's life: arbitration by the panel's arbiters, a LedgerRef on every entry, verdicts
that cite the tool calls they relied on. Real stores, real keys. The attacks on each (a
replayed verdict, a bypassed arbitration, a forged LedgerRef) are in
tests/adversarial/test_belief_attacks.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.panel.test_panel_runner import judge
from tests.support.belief_support import MARKER, durable_call, edit_config, run_cli
from tests.tools.test_tools_enterprise import ctx, src, trained
from truss_files.config.settings import load_settings
from truss_files.facade import MemoryStore
from truss_files.panel.runner import verify
from truss_files.store.belief import consolidate
from truss_files.tools.train import train
from truss_files.trust.audit import audit
from truss_files.trust.verdict import Verdict

# --------------------------------------------------------------------------- arbitration


def test_verify_with_arbiters_carries_their_decision_and_the_audit_accepts_it(
    store: MemoryStore,
    signed_commit: Callable[..., str],
    define_checks: Callable[..., str],
    tmp_path: Path,
) -> None:
    define_checks(store, {"true": "true"})
    edit_config(store, signed_commit, MARKER, 'conflict = "panel-arbitrated"')
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


def test_a_correction_and_a_consolidated_note_pass_panel_arbitrated_and_the_audit_agrees(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    # What the store lets retire a verified note without arbiters, the audit accepts too.
    edit_config(store, signed_commit, MARKER, 'conflict = "panel-arbitrated"')
    base = "the nightly job fails when the artifact cache is full and must be pruned"
    first = trained(store, ctx(), base, source=src("e1"))["entry"]["id"]
    store.promote(first, store.sign_verdict(first, "PASS"))
    train(store, ctx(), {"body": base + " weekly", "source": src("e2")})
    (merged,) = consolidate(store).changes
    store.promote(merged.id, store.sign_verdict(merged.id, "PASS"))
    assert store.get(first).superseded_by == merged.id
    fix = {"body": "the cache prunes itself now", "kind": "correction", "source": src("e3")}
    done = train(store, ctx(), {**fix, "supersedes": {"entryId": merged.id}})
    correction = done["entry"]["id"]
    store.promote(correction, store.sign_verdict(correction, "PASS"))
    assert store.get(merged.id).superseded_by == correction
    report = audit(store.git)
    assert report.ok, [str(v) for v in report.violations]


# --------------------------------------------------------------------------- ledger refs


def test_every_write_names_where_it_came_from(store: MemoryStore, tmp_path: Path) -> None:
    api = store.write("fact", "api", "from python")
    assert api.ledger_ref == "api:operator@example.test"
    key = tmp_path / "operator_key"
    out = run_cli(store, key, "write", "--kind", "fact", "--key", "c", "from cli")
    assert out.exit_code == 0, out.output
    (cli_entry,) = store.list_entries(key="c")
    assert cli_entry.provenance.produced_by == "cli:operator@example.test"
    lines = tmp_path / "in.jsonl"
    lines.write_text(json.dumps({"kind": "fact", "key": "i", "body": "imported"}) + "\n")
    out = run_cli(store, key, "import", str(lines))
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


# --------------------------------------------------------------------------- citations


def test_the_cli_signs_a_citing_verdict(store: MemoryStore, tmp_path: Path) -> None:
    entry = store.write("fact", "k", "holds")
    cite = durable_call(store, "R-cli")
    key = tmp_path / "operator_key"
    out = run_cli(store, key, "verdict", "sign", entry.id, "--pass", "--cite", cite)
    assert out.exit_code == 0, out.output
    assert Verdict.from_json(out.output).votes[0]["evidence"]["cites"] == [cite]
    out = run_cli(store, key, "verdict", "sign", entry.id, "--pass", "--cite", "x")
    assert out.exit_code == 1 and "ledger ref" in out.output


def test_mcp_writes_and_reads_name_the_mcp_face(store: MemoryStore) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client

    from truss_files.faces.mcp import build_server
    from truss_files.git.usage import read_usage, usage_path
    from truss_files.tools.dispatch import ToolSession

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
