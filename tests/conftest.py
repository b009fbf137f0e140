"""Shared fixtures: real git repositories and real keys made at test time.

Every test gets its own user config dir (so keys never leak between tests or into the real
home), pinned git identities, and — via ``store`` — a freshly initialised, signed store.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from truss_files.initstore import init_store
from truss_files.signing import Ed25519Signer
from truss_files.store import MemoryStore

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Operator",
    "GIT_AUTHOR_EMAIL": "operator@example.test",
    "GIT_COMMITTER_NAME": "Test Operator",
    "GIT_COMMITTER_EMAIL": "operator@example.test",
    "GIT_CONFIG_NOSYSTEM": "1",
}


@pytest.fixture(autouse=True)
def _isolated_env(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("TRUSS_CONFIG_DIR", str(home / ".config" / "truss-files"))
    for name in ("TRUSS_KEY", "TRUSS_SIGNER", "TRUSS_ROOT", "TRUSS_STORE", "TRUSS_PRINCIPAL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in GIT_ENV.items():
        monkeypatch.setenv(name, value)
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test Operator\n\temail = operator@example.test\n"
        "[init]\n\tdefaultBranch = main\n"
    )


class Clock:
    """A clock that ticks one second per call, so created times are distinct and ordered."""

    def __init__(self) -> None:
        self.now = datetime.datetime(2026, 11, 29, 11, 0, 0, tzinfo=datetime.UTC)

    def __call__(self) -> datetime.datetime:
        self.now += datetime.timedelta(seconds=1)
        return self.now


@pytest.fixture
def operator_key(tmp_path: Path) -> Ed25519Signer:
    signer = Ed25519Signer.generate("operator@example.test")
    signer.save(tmp_path / "operator_key")
    return signer


@pytest.fixture
def store(tmp_path: Path, operator_key: Ed25519Signer) -> Iterator[MemoryStore]:
    """A store in a work tree, initialised by a key holding operator, panel and agent."""
    path = tmp_path / "store"
    init_store(path, operator_key, "operator@example.test")
    yield MemoryStore(path, signer=operator_key, clock=Clock(), environ=dict(os.environ))


@pytest.fixture
def bare_store(tmp_path: Path, operator_key: Ed25519Signer) -> MemoryStore:
    import pygit2

    path = tmp_path / "bare.git"
    pygit2.init_repository(str(path), bare=True, initial_head="main")
    init_store(path, operator_key, "operator@example.test")
    return MemoryStore(path, signer=operator_key, clock=Clock(), environ=dict(os.environ))
