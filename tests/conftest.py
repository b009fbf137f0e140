"""Shared fixtures: real git repositories and real keys made at test time.

Every test gets its own user config dir (so keys never leak between tests or into the real
home), pinned git identities, and — via ``store`` — a freshly initialised, signed store.

The collection hook marks the tests that start no process ``fast`` (the rule is in
tests/support/fastloop.py, its use in docs/testing.md) and runs the others first, so the
long ones do not end the run on one worker while the other idles.
"""

from __future__ import annotations

import os

# The minilm embedder's small matrices run faster on one BLAS thread (recall/encoders/minilm.py);
# set before anything imports numpy, as that module does for a query process.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import datetime
import re
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.support import fastloop
from truss_files.facade import MemoryStore
from truss_files.git.gitstore import Identity, Plan, Snapshot
from truss_files.signing import AllowedSigners, Ed25519Signer, PublicKey
from truss_files.signing.trustpolicy import CONFIG_PATH, SIGNERS_PATH
from truss_files.store.initstore import init_store

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Operator",
    "GIT_AUTHOR_EMAIL": "operator@example.test",
    "GIT_COMMITTER_NAME": "Test Operator",
    "GIT_COMMITTER_EMAIL": "operator@example.test",
    "GIT_CONFIG_NOSYSTEM": "1",
}


@pytest.hookimpl(trylast=True)  # after pytest's tmp_path plugin is configured
def pytest_configure(config: pytest.Config) -> None:
    """Where PYTHONDONTWRITEBYTECODE is set, every truss-files process a test starts would
    compile the package again (about half of its CPU time): let them share compiled modules
    in this run's temp dir instead, writing nothing beside the sources."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is None:
        return
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    if hasattr(config, "workerinput"):  # an xdist worker: .../pytest-N/popen-gwK
        base = base.parent
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(base / "pycache"))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the fast tests (before ``-m`` deselects), skip the long variants (``slow``) unless
    ``TRUSS_SLOW=1``, then put the others first: xdist hands out tests in collection order,
    so a long test collected last ends the run alone."""
    long_run = os.environ.get("TRUSS_SLOW") == "1"
    for item in items:
        if item.get_closest_marker("fast") is None and fastloop.is_fast(item):
            item.add_marker(pytest.mark.fast)
        if not long_run and item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.skip(reason="a long variant: set TRUSS_SLOW=1"))
    items.sort(key=lambda item: item.get_closest_marker("fast") is not None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with fastloop.guarding(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with fastloop.guarding(item):
        return (yield)


@pytest.fixture(scope="session")
def _model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One user cache for the session: the minilm embedder's float32 weights (~90 MB, made
    from the model file once, recall/encoders/minilm.py) are not rebuilt for every test's new
    HOME."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(autouse=True)
def _isolated_env(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, _model_cache: Path
) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(_model_cache))
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


# -- helpers shared by the store, audit and CLI tests (added for issue 2's suite) ------------

GitRunner = Callable[..., str]


@pytest.fixture
@fastloop.runs_only_git
def git() -> GitRunner:
    """Run the real git binary in a repository; fail the test with git's stderr on error."""

    def run(cwd: Path, *args: str, check: bool = True, input: str | None = None) -> str:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            input=input,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
        return proc.stdout

    return run


ChangesFor = Mapping[str, bytes | None] | Callable[[Snapshot], Mapping[str, bytes | None]]


@pytest.fixture
def signed_commit(operator_key: Ed25519Signer) -> Callable[..., str]:
    """Commit raw file changes through GitStore.apply, signed by ``signer`` (default: the
    operator) and checked by nothing: how a hand edit, a hostile client or an operator's
    config change reaches the branch. Returns the new commit id."""

    def commit(
        store: MemoryStore,
        changes: ChangesFor,
        *,
        signer: Ed25519Signer | None = None,
        message: str = "truss: hand edit\n\nTruss-Op: config",
    ) -> str:
        def plan(snap: Snapshot) -> Plan:
            found = changes(snap) if callable(changes) else changes
            return Plan(dict(found), message)

        who = Identity("Test Operator", "operator@example.test")
        done = store.git.apply(plan, signer or operator_key, who)
        assert done is not None, "the plan changed nothing"
        return str(done[0].id)

    return commit


@pytest.fixture
def add_signer(signed_commit: Callable[..., str]) -> Callable[..., str]:
    """Add a key to .truss/allowed_signers and its principal to [roles] in one commit."""

    def add(
        store: MemoryStore,
        signer: Ed25519Signer,
        principal: str,
        roles: tuple[str, ...] = (),
        *,
        by: Ed25519Signer | None = None,
    ) -> str:
        def changes(snap: Snapshot) -> dict[str, bytes | None]:
            signers = AllowedSigners.parse((snap.read(SIGNERS_PATH) or b"").decode())
            signers = signers.with_signer(
                principal, PublicKey.from_line(signer.public_line), ("git", "truss-verdict")
            )
            toml = (snap.read(CONFIG_PATH) or b"").decode()
            for role in roles:
                toml = re.sub(
                    rf"^{role} = \[(.*)\]$",
                    lambda m: f'{m.group(0)[:-1]}, "{principal}"]',
                    toml,
                    count=1,
                    flags=re.M,
                )
            return {SIGNERS_PATH: signers.render().encode(), CONFIG_PATH: toml.encode()}

        return signed_commit(
            store, changes, signer=by, message=f"truss: add signer {principal}\n\nTruss-Op: signers"
        )

    return add


@pytest.fixture
def agent_key(store: MemoryStore, tmp_path: Path, add_signer: Callable[..., str]) -> Ed25519Signer:
    """A key holding the agent role and nothing more, saved beside the operator's as
    ``agent_key`` (what ``--key`` names it by). Files with another agent key define their own."""
    signer = Ed25519Signer.generate("agent@example.test")
    signer.save(tmp_path / "agent_key")
    add_signer(store, signer, "agent@example.test", ("agent",))
    return signer


@pytest.fixture
def server(bare_store: MemoryStore) -> Path:
    """A bare repository holding a store, guarded by the installed pre-receive gate."""
    from truss_files.faces.hooks import install_hooks

    path = bare_store.git.git_dir
    report = install_hooks(path, server=True, protect=["release"])
    assert [h.name for h in report.hooks] == ["pre-receive"]
    return path


@pytest.fixture
def clone(
    server: Path, tmp_path: Path, operator_key: Ed25519Signer, git: GitRunner
) -> Callable[[str], MemoryStore]:
    """``make(name)``: a clone of ``server`` under tmp_path, writing with the operator's key."""

    def make(name: str) -> MemoryStore:
        git(tmp_path, "clone", "-q", str(server), name)
        return MemoryStore(tmp_path / name, signer=operator_key)

    return make


@pytest.fixture
def store_as(store: MemoryStore) -> Callable[[Ed25519Signer], MemoryStore]:
    """The same repository as ``store``, signing with another key."""

    def make(signer: Ed25519Signer) -> MemoryStore:
        return MemoryStore(store.git.workdir or store.git.git_dir, signer=signer, clock=Clock())

    return make


def with_checks(toml: str, checks: Mapping[str, str]) -> str:
    """truss.toml text with ``checks`` (name -> command) added to its [panel.checks]."""
    import json

    lines = "".join(f"{name} = {json.dumps(command)}\n" for name, command in checks.items())
    header = re.search(r"^\[panel\.checks\][ \t]*\n", toml, flags=re.M)
    if header is not None:
        return toml[: header.end()] + lines + toml[header.end() :]
    return toml.rstrip("\n") + "\n\n[panel.checks]\n" + lines


@pytest.fixture
def define_checks(signed_commit: Callable[..., str]) -> Callable[..., str]:
    """``define(store, {name: command})``: the checks entries may name, added to truss.toml's
    [panel.checks] in one operator-signed commit (as an operator defines them)."""

    def define(
        store: MemoryStore, checks: Mapping[str, str], *, signer: Ed25519Signer | None = None
    ) -> str:
        def changes(snap: Snapshot) -> dict[str, bytes | None]:
            toml = (snap.read(CONFIG_PATH) or b"").decode()
            return {CONFIG_PATH: with_checks(toml, checks).encode()}

        return signed_commit(
            store, changes, signer=signer, message="truss: define checks\n\nTruss-Op: config"
        )

    return define
