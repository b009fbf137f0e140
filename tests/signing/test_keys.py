"""Signing keys under the user config dir: `keys new`, `keys list`, and which key signs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from truss_files.errors import ConfigError, UsageError
from truss_files.faces.cli.main import cli
from truss_files.signing import Ed25519Signer, PublicKey, SshKeygenSigner, verify
from truss_files.signing.keys import (
    config_dir,
    default_principal,
    default_signer_or_new,
    keys_dir,
    list_keys,
    load_signer,
    new_key,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _keys() -> Path:
    return Path(os.environ["TRUSS_CONFIG_DIR"]) / "keys"


def test_keys_new_writes_a_0600_key_and_prints_its_public_line() -> None:
    result = CliRunner().invoke(cli, ["keys", "new", "--name", "panel-bot", "--format", "text"])
    assert result.exit_code == 0, result.output
    private = _keys() / "panel-bot"
    public = _keys() / "panel-bot.pub"
    assert _mode(private) == 0o600
    assert stat.S_IMODE(private.parent.stat().st_mode) & 0o077 == 0
    line = public.read_text().strip()
    assert result.output.splitlines()[0] == line
    assert line.startswith("ssh-ed25519 ") and line.endswith(" operator@example.test")
    # The private key really is that public key's.
    signer = Ed25519Signer.load(private)
    assert signer.public_line == line
    assert verify(signer.sign(b"data", "git"), b"data", "git") == PublicKey.from_line(line)


def test_keys_new_json_and_comment() -> None:
    result = CliRunner().invoke(
        cli, ["keys", "new", "--comment", "ci@example.test", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["name"] == "id_ed25519"
    assert data["path"] == str(_keys() / "id_ed25519")
    assert data["public_key"].endswith(" ci@example.test")
    assert data["fingerprint"].startswith("SHA256:")


def test_keys_new_refuses_to_overwrite() -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["keys", "new", "--format", "json"]).exit_code == 0
    before = (_keys() / "id_ed25519").read_bytes()
    result = runner.invoke(cli, ["keys", "new", "--format", "json"])
    assert result.exit_code == 1
    error = json.loads(result.output)["error"]
    assert error["code"] == "invalid_input" and "already exists" in error["message"]
    assert (_keys() / "id_ed25519").read_bytes() == before


@pytest.mark.parametrize("name", ["../escape", "a/b", "", "x" * 65, "bad\n", "sp ace"])
def test_key_names_are_plain_file_names(name: str) -> None:
    with pytest.raises(UsageError, match="letters, digits"):
        new_key(name)
    assert not _keys().exists() or list(_keys().iterdir()) == []


def test_keys_list() -> None:
    runner = CliRunner()
    empty = runner.invoke(cli, ["keys", "list", "--format", "text"])
    assert empty.exit_code == 0 and "no keys yet" in empty.output
    assert json.loads(runner.invoke(cli, ["keys", "list", "--format", "json"]).output) == []
    a = new_key("a-key", "a@example.test")
    b = new_key("b-key", "b@example.test")
    listed = json.loads(runner.invoke(cli, ["keys", "list", "--format", "json"]).output)
    assert [(k["name"], k["fingerprint"], k["public_key"]) for k in listed] == [
        ("a-key", a.fingerprint, a.public_line),
        ("b-key", b.fingerprint, b.public_line),
    ]
    text = runner.invoke(cli, ["keys", "list", "--format", "text"]).output
    assert a.fingerprint in text and b.fingerprint in text
    assert [k.name for k in list_keys()] == ["a-key", "b-key"]


def test_config_dir_follows_truss_config_dir_then_xdg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert config_dir() == Path(os.environ["TRUSS_CONFIG_DIR"])
    assert config_dir({"TRUSS_CONFIG_DIR": str(tmp_path / "c")}) == tmp_path / "c"
    monkeypatch.delenv("TRUSS_CONFIG_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_dir() == tmp_path / "xdg" / "truss-files"
    assert keys_dir() == tmp_path / "xdg" / "truss-files" / "keys"


def test_load_signer_prefers_an_explicit_key_then_truss_key(tmp_path: Path) -> None:
    mine = Ed25519Signer.generate("mine")
    mine.save(tmp_path / "mine")
    env = {"TRUSS_CONFIG_DIR": str(tmp_path / "cfg"), "TRUSS_KEY": str(tmp_path / "mine")}
    assert load_signer(environ=env).public_line == mine.public_line
    other = Ed25519Signer.generate("other")
    other.save(tmp_path / "other")
    assert load_signer(tmp_path / "other", environ=env).public_line == other.public_line


def test_load_signer_without_any_key_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="truss-files keys new"):
        load_signer(environ={"TRUSS_CONFIG_DIR": str(tmp_path)})
    with pytest.raises(ConfigError, match="does not exist"):
        load_signer(tmp_path / "missing", environ={})
    with pytest.raises(UsageError, match="builtin or ssh-keygen"):
        load_signer(signer="gpg", environ={})


def test_default_signer_is_made_once() -> None:
    first, made = default_signer_or_new()
    assert made and _mode(_keys() / "id_ed25519") == 0o600
    second, made_again = default_signer_or_new()
    assert not made_again and second.public_line == first.public_line


def test_default_principal_order() -> None:
    assert default_principal({"TRUSS_PRINCIPAL": "p", "GIT_COMMITTER_EMAIL": "c"}) == "p"
    assert default_principal({"GIT_COMMITTER_EMAIL": "c", "EMAIL": "e"}) == "c"
    assert default_principal({"EMAIL": "e"}) == "e"


def test_ssh_keygen_signer_through_load_signer(tmp_path: Path) -> None:
    key = tmp_path / "hw_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hw@example.test", "-f", str(key)],
        check=True,
        capture_output=True,
    )
    signer = load_signer(key, signer="ssh-keygen", environ={})
    assert isinstance(signer, SshKeygenSigner)
    armored = signer.sign(b"payload", "git")
    assert verify(armored, b"payload", "git") == PublicKey.from_line(signer.public_line)
