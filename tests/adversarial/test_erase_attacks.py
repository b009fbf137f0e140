"""Attacks on erasure: only an operator may erase (an agent's key is refused before
anything is read or changed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from truss_files.errors import Forbidden
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.signing import Ed25519Signer
from truss_files.store.erase import plan_erasure


@pytest.mark.parametrize("roles", [("agent",), ("agent", "panel", "trainer"), ()])
def test_an_erasure_by_a_key_without_operator_is_forbidden(
    store: MemoryStore, add_signer: Callable[..., str], tmp_path: Path, roles: tuple[str, ...]
) -> None:
    agent = Ed25519Signer.generate("bot@example.test")
    agent.save(tmp_path / "bot_key")
    add_signer(store, agent, "bot@example.test", roles)
    entry = store.write("fact", "alice", "Alice Example lives at 12 Privacy Lane.")
    before = str(store.git.tip().id)  # type: ignore[union-attr]
    as_agent = MemoryStore(store.git.workdir, signer=agent, environ=store.environ)  # type: ignore[arg-type]
    with pytest.raises(Forbidden, match="operator role"):
        plan_erasure(as_agent, [entry.id], "because")
    for extra in (["--dry-run"], []):
        result = CliRunner().invoke(
            cli,
            [
                "--store",
                str(store.git.workdir),
                "--key",
                str(tmp_path / "bot_key"),
                "erase",
                entry.id,
                "--reason",
                "because",
                "--format",
                "json",
                *extra,
            ],
        )
        assert result.exit_code == 1
        assert json.loads(result.stdout)["error"]["code"] == "forbidden"
    assert str(store.git.tip().id) == before  # type: ignore[union-attr]


def test_an_unknown_key_is_forbidden(store: MemoryStore, tmp_path: Path) -> None:
    stranger = Ed25519Signer.generate("nobody@example.test")
    entry = store.write("fact", "alice", "Alice Example lives at 12 Privacy Lane.")
    as_stranger = MemoryStore(store.git.workdir, signer=stranger, environ=store.environ)  # type: ignore[arg-type]
    with pytest.raises(Forbidden, match="not in .truss/allowed_signers"):
        plan_erasure(as_stranger, [entry.id], "because")
