"""Helpers for the tests of a belief's life (tests/test_belief*.py and the attacks on it in
tests/adversarial/test_belief_attacks.py): truss.toml edits signed by the operator, the tip,
and the CLI on the test's store."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner, Result

from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.git.gitstore import Snapshot
from truss_files.tools.dispatch import ToolSession

MARKER = 'conflict = "verified-wins"'  # the conflict line `truss-files init` writes


def edit_config(store: MemoryStore, signed_commit: Callable[..., str], old: str, new: str) -> None:
    """Replace ``old`` by ``new`` in truss.toml, in one operator-signed commit."""

    def changes(snap: Snapshot) -> dict[str, bytes | None]:
        text = (snap.read("truss.toml") or b"").decode()
        assert old in text
        return {"truss.toml": text.replace(old, new).encode()}

    signed_commit(store, changes)


def set_conflict(store: MemoryStore, signed_commit: Callable[..., str], policy: str) -> None:
    """Set truss.toml's ``[policy] conflict`` (from the init default or from another)."""
    text = (store.snapshot().read("truss.toml") or b"").decode()
    line = next(x for x in text.splitlines() if x.startswith("conflict = "))
    edit_config(store, signed_commit, line, f'conflict = "{policy}"')


def tip(store: MemoryStore) -> str:
    found = store.git.tip()
    assert found is not None
    return str(found.id)


def run_cli(store: MemoryStore, key: Path, *args: str) -> Result:
    """``truss-files --store STORE --key KEY ARGS`` through click's runner."""
    base = ["--store", str(store.git.workdir), "--key", str(key)]
    return CliRunner().invoke(cli, [*base, *args])


def durable_call(store: MemoryStore, run: str) -> str:
    """One signed call in run ``run``'s ledger; its ledger ref, for a verdict to cite."""
    session = ToolSession(store, run_id=run, durable=True)
    out = session.call("memory_query", {"query": "anything", "min_trust": "unverified"})
    assert out.error is None, out.error
    return f"run:{run}/1"
