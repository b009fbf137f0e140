"""`init`: create or adopt a repository as a store, pin its trust root, make a key if needed."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest
from click.testing import CliRunner

from truss_files.errors import ConfigError
from truss_files.faces.cli.main import cli
from truss_files.format.proposal import SELF_PATH
from truss_files.git.gitstore import GitStore
from truss_files.signing import AllowedSigners, Ed25519Signer, PublicKey
from truss_files.signing.trustpolicy import CONFIG_PATH, SIGNERS_PATH, StoreConfig
from truss_files.store.initstore import CORE_PATH, init_store
from truss_files.trust.audit import audit
from truss_files.trust.trustroot import ROOT_CONFIG, find_root, pinned_root

PRINCIPAL = "operator@example.test"


def _verify(repo: Path, sha: str, git: Callable[..., str]) -> str:
    signers = repo / ".truss" / "allowed_signers"
    return git(
        repo,
        "-c",
        "gpg.format=ssh",
        "-c",
        f"gpg.ssh.allowedSignersFile={signers}",
        "log",
        "--show-signature",
        "-1",
        "--format=%H",
        sha,
    )


def test_init_creates_a_store_in_one_signed_commit(
    tmp_path: Path, operator_key: Ed25519Signer, git: Callable[..., str]
) -> None:
    path = tmp_path / "new" / "store"
    result = init_store(path, operator_key, PRINCIPAL)
    assert result.created and result.path == path and result.principal == PRINCIPAL
    assert result.public_line == operator_key.public_line

    gs = GitStore(path)
    tip = gs.tip()
    assert tip is not None and str(tip.id) == result.root and tip.parents == []
    snap = gs.snapshot()
    files = [CONFIG_PATH, SIGNERS_PATH, CORE_PATH, SELF_PATH]
    assert sorted(p for p, _ in snap.walk("")) == sorted(files)
    signers = AllowedSigners.parse((snap.read(SIGNERS_PATH) or b"").decode())
    key = PublicKey.from_line(operator_key.public_line)
    assert signers.principals_for(key, "git") == (PRINCIPAL,)
    assert signers.principals_for(key, "truss-verdict") == (PRINCIPAL,)
    roles = StoreConfig.parse(snap.read(CONFIG_PATH)).roles()
    assert all(roles[r] == {PRINCIPAL} for r in ("operator", "panel", "agent"))
    config = StoreConfig.parse(snap.read(CONFIG_PATH))
    assert config.get("tools", "memory") is True and config.get("tools", "memory_write") is False
    assert config.get("policy", "conflict") == "verified-wins"

    # The root is pinned in the repository's own config, outside anything a push changes.
    assert git(path, "config", "--local", ROOT_CONFIG).strip() == result.root
    assert pinned_root(gs.repo, {}) == result.root
    assert 'Good "git" signature' in _verify(path, result.root, git)
    assert git(path, "log", "-1", "--format=%(trailers:key=Truss-Op,valueonly)").strip() == "init"
    assert git(path, "status", "--porcelain") == ""
    assert (path / CORE_PATH).read_text().startswith("# Core identity")
    assert audit(gs).ok


def test_running_init_again_is_harmless(store_path_and_root: tuple[Path, str]) -> None:
    path, root = store_path_and_root
    gs = GitStore(path)
    tip = gs.tip()
    again = init_store(path, Ed25519Signer.load(path.parent / "operator_key"), PRINCIPAL)
    assert not again.created and again.root == root and again.principal == PRINCIPAL
    assert GitStore(path).tip() == tip


@pytest.fixture
def store_path_and_root(tmp_path: Path, operator_key: Ed25519Signer) -> tuple[Path, str]:
    path = tmp_path / "store"
    return path, init_store(path, operator_key, PRINCIPAL).root


def test_rerun_after_writes_keeps_the_root(tmp_path: Path, operator_key: Ed25519Signer) -> None:
    from truss_files.facade import MemoryStore

    path = tmp_path / "store"
    root = init_store(path, operator_key, PRINCIPAL).root
    store = MemoryStore(path, signer=operator_key)
    store.write("fact", "k", "body")
    tip = store.git.tip()
    again = init_store(path, operator_key, PRINCIPAL)
    assert again.root == root and store.git.tip() == tip
    found = find_root(store.git)
    assert found is not None and str(found.id) == root


def test_rerun_with_a_key_that_is_not_in_the_store_says_so(
    store_path_and_root: tuple[Path, str],
) -> None:
    path, root = store_path_and_root
    again = init_store(path, Ed25519Signer.generate("someone"), "someone@example.test")
    assert again.root == root and not again.created
    assert "not in .truss/allowed_signers" in again.principal


def test_another_stores_pinned_root_is_refused(
    tmp_path: Path, operator_key: Ed25519Signer, git: Callable[..., str]
) -> None:
    a = init_store(tmp_path / "a", operator_key, PRINCIPAL)
    b = init_store(tmp_path / "b", Ed25519Signer.generate("b"), "b@example.test")
    assert a.root != b.root
    # As if a.git had been cloned over a checkout that trusts store b.
    git(tmp_path / "a", "config", ROOT_CONFIG, b.root)
    tip = GitStore(tmp_path / "a").tip()
    with pytest.raises(ConfigError, match="another store") as info:
        init_store(tmp_path / "a", operator_key, PRINCIPAL)
    assert a.root[:12] in info.value.message and b.root[:12] in info.value.message
    assert f"unset {ROOT_CONFIG}" in info.value.message
    assert GitStore(tmp_path / "a").tip() == tip
    assert git(tmp_path / "a", "config", ROOT_CONFIG).strip() == b.root  # left as it was


def test_a_pinned_root_without_a_store_is_refused(
    tmp_path: Path, operator_key: Ed25519Signer, git: Callable[..., str]
) -> None:
    pygit2.init_repository(str(tmp_path / "r"), initial_head="main")
    git(tmp_path / "r", "config", ROOT_CONFIG, "0" * 40)
    with pytest.raises(ConfigError, match="holds no store"):
        init_store(tmp_path / "r", operator_key, PRINCIPAL)


def test_adopting_a_repository_with_code_commits(
    tmp_path: Path, operator_key: Ed25519Signer, git: Callable[..., str]
) -> None:
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# project\n")
    (repo / "app.py").write_text("print('hi')\n")
    git(repo, "add", ".")
    git(repo, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "code")
    git(repo, "-c", "commit.gpgsign=false", "commit", "-q", "--allow-empty", "-m", "more code")
    code_tip = git(repo, "rev-parse", "HEAD").strip()

    result = init_store(repo, operator_key, PRINCIPAL)
    assert result.created
    gs = GitStore(repo)
    tip = gs.tip()
    assert tip is not None and str(tip.id) == result.root
    assert [str(p) for p in tip.parent_ids] == [code_tip]
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "3"
    assert (repo / "README.md").read_text() == "# project\n"
    assert git(repo, "status", "--porcelain") == ""
    report = audit(gs)
    assert report.ok and report.checked == 1  # unsigned code history before the root is fine
    found = find_root(gs)
    assert found is not None and str(found.id) == result.root


def test_adopting_keeps_an_existing_identity_core(
    tmp_path: Path, operator_key: Ed25519Signer, git: Callable[..., str]
) -> None:
    repo = tmp_path / "project"
    (repo / "identity").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / CORE_PATH).write_text("# Our own core\n")
    git(repo, "add", ".")
    git(repo, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "core")
    init_store(repo, operator_key, PRINCIPAL)
    assert GitStore(repo).snapshot().read(CORE_PATH) == b"# Our own core\n"


def test_init_in_a_folder_inside_a_repository_makes_its_own(
    tmp_path: Path, operator_key: Ed25519Signer, git: Callable[..., str]
) -> None:
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q", "-b", "main")
    result = init_store(outer / "memory", operator_key, PRINCIPAL)
    assert (outer / "memory" / ".git").is_dir()
    assert git(outer, "rev-list", "--all").strip() == ""  # the outer repo is untouched
    assert GitStore(outer / "memory").tip() is not None and result.created


def test_init_a_bare_repository(bare_store: object, tmp_path: Path) -> None:
    gs = GitStore(tmp_path / "bare.git")
    assert gs.bare
    snap = gs.snapshot()
    assert snap.read(SIGNERS_PATH) and snap.read(CONFIG_PATH) and snap.read(CORE_PATH)
    assert pinned_root(gs.repo, {}) == snap.oid


# --------------------------------------------------------------------------- through the CLI


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_cli_init_creates_a_key_under_truss_config_dir(tmp_path: Path) -> None:
    import os

    config_dir = Path(os.environ["TRUSS_CONFIG_DIR"])
    key = config_dir / "keys" / "id_ed25519"
    assert not key.exists()
    runner = CliRunner()
    result = runner.invoke(cli, ["init", str(tmp_path / "s"), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["new_key"] is True and data["created"] is True
    assert key.exists() and _mode(key) == 0o600
    assert (key.parent / "id_ed25519.pub").read_text().strip() == data["public_key"]
    assert data["principal"] == "operator@example.test"  # from git's user.email

    again = runner.invoke(cli, ["init", str(tmp_path / "s"), "--format", "json"])
    assert again.exit_code == 0, again.output
    second = json.loads(again.output)
    assert second["new_key"] is False and second["created"] is False
    assert second["root"] == data["root"]


def test_cli_init_honours_xdg_config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRUSS_CONFIG_DIR")
    xdg = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "s"), "--format", "json"])
    assert result.exit_code == 0, result.output
    key = xdg / "truss-files" / "keys" / "id_ed25519"
    assert key.exists() and _mode(key) == 0o600
    assert json.loads(result.output)["new_key"] is True


def test_cli_init_refuses_another_store_with_exit_1(
    tmp_path: Path, operator_key: Ed25519Signer, git: Callable[..., str]
) -> None:
    init_store(tmp_path / "a", operator_key, PRINCIPAL)
    other = init_store(tmp_path / "b", Ed25519Signer.generate("b"), "b@example.test")
    git(tmp_path / "a", "config", ROOT_CONFIG, other.root)
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "a"), "--format", "json"])
    assert result.exit_code == 1
    error = json.loads(result.output)["error"]
    assert error["code"] == "config" and "another store" in error["message"]
