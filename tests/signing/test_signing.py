"""Tests for truss_files.signing, checked against the real ssh-keygen and git binaries."""

from __future__ import annotations

import base64
import os
import stat
import struct
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from truss_files.errors import ConfigError, SignatureError
from truss_files.signing import (
    AllowedSigner,
    AllowedSigners,
    Ed25519Signer,
    PublicKey,
    Signer,
    SshKeygenSigner,
    insert_gpgsig,
    split_gpgsig,
    verify,
    verify_allowed,
)

# One key for property tests: hypothesis re-runs the body many times and key generation is
# not what is under test there.
MODULE_SIGNER = Ed25519Signer.generate("prop@test")


# --------------------------------------------------------------------------- helpers


def run(cmd: list[str], input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(cmd, input=input, capture_output=True, check=False, timeout=60)


def keygen(
    path: Path, comment: str = "", *, keytype: str = "ed25519", passphrase: str = ""
) -> Path:
    result = run(
        ["ssh-keygen", "-q", "-t", keytype, "-N", passphrase, "-C", comment, "-f", str(path)]
    )
    assert result.returncode == 0, result.stderr
    return path


def keygen_sign(key: Path, data: bytes, namespace: str, *extra: str) -> str:
    result = run(
        ["ssh-keygen", "-q", "-Y", "sign", "-f", str(key), "-n", namespace, *extra], input=data
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.decode()


def sig_blob(armored: str) -> bytes:
    lines = armored.strip().splitlines()
    return base64.b64decode("".join(lines[1:-1]))


def armor(blob: bytes) -> str:
    b64 = base64.b64encode(blob).decode()
    body = "\n".join(b64[i : i + 70] for i in range(0, len(b64), 70))
    return f"-----BEGIN SSH SIGNATURE-----\n{body}\n-----END SSH SIGNATURE-----\n"


def ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


@pytest.fixture
def git_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Isolate git from the machine's config (HOME, system config) for the whole test."""
    home = tmp_path / "home"
    home.mkdir()
    values = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Ada",
        "GIT_AUTHOR_EMAIL": "ada@example.com",
        "GIT_COMMITTER_NAME": "Ada",
        "GIT_COMMITTER_EMAIL": "ada@example.com",
        "GIT_AUTHOR_DATE": "2024-01-02T03:04:05Z",
        "GIT_COMMITTER_DATE": "2024-01-02T03:04:05Z",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return {**os.environ}


def git(repo: Path, *args: str, data: bytes | None = None) -> str:
    result = run(["git", "-C", str(repo), *args], input=data)
    assert result.returncode == 0, (args, result.stderr.decode())
    return result.stdout.decode()


@pytest.fixture
def repo(tmp_path: Path, git_env: dict[str, str]) -> Path:
    path = tmp_path / "repo"
    run(["git", "init", "-q", "-b", "main", str(path)])
    (path / "a.md").write_text("hello\n")
    git(path, "add", "a.md")
    git(path, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "first\n\nbody line")
    return path


# --------------------------------------------------------------------------- keys


def test_generate_save_load_round_trip(tmp_path: Path) -> None:
    signer = Ed25519Signer.generate("alice@example.com")
    key_path = tmp_path / "id_ed25519"
    signer.save(key_path)

    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert key_path.read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    pub_text = (tmp_path / "id_ed25519.pub").read_text()
    assert pub_text == signer.public_line + "\n"
    assert signer.public_line.endswith(" alice@example.com")

    loaded = Ed25519Signer.load(key_path)
    assert loaded.public_key == signer.public_key
    assert loaded.public_key.comment == "alice@example.com"
    assert loaded.sign(b"x", "git") == signer.sign(b"x", "git")

    listed = run(["ssh-keygen", "-l", "-f", str(tmp_path / "id_ed25519.pub")])
    assert listed.stdout.decode().split()[1] == signer.fingerprint
    # ssh-keygen itself can read the private key we wrote.
    derived = run(["ssh-keygen", "-y", "-f", str(key_path)])
    assert derived.returncode == 0, derived.stderr
    assert PublicKey.from_line(derived.stdout.decode()) == signer.public_key


def test_save_replaces_existing_world_readable_file_with_0600(tmp_path: Path) -> None:
    key_path = tmp_path / "key"
    key_path.write_text("old")
    key_path.chmod(0o644)
    Ed25519Signer.generate().save(key_path)
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    # No temp file is left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key", "key.pub"]


def test_load_key_made_by_ssh_keygen(tmp_path: Path) -> None:
    key = keygen(tmp_path / "k", "made by ssh-keygen")
    signer = Ed25519Signer.load(key)
    assert signer.public_line == (tmp_path / "k.pub").read_text().strip()
    assert signer.public_key.comment == "made by ssh-keygen"
    assert isinstance(signer, Signer)


def test_load_rejects_encrypted_and_non_ed25519(tmp_path: Path) -> None:
    encrypted = keygen(tmp_path / "enc", passphrase="correct horse")
    with pytest.raises(ConfigError, match="passphrase-protected.*ssh-keygen signer"):
        Ed25519Signer.load(encrypted)
    ecdsa = keygen(tmp_path / "ec", keytype="ecdsa")
    with pytest.raises(ConfigError, match="not ssh-ed25519.*ssh-keygen signer"):
        Ed25519Signer.load(ecdsa)
    pem = tmp_path / "pem"
    pem.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    with pytest.raises(ConfigError, match="not an OpenSSH private key"):
        Ed25519Signer.load(pem)
    with pytest.raises(ConfigError, match="cannot read"):
        Ed25519Signer.load(tmp_path / "missing")


def test_load_rejects_corrupted_private_key(tmp_path: Path) -> None:
    key = keygen(tmp_path / "k")
    lines = key.read_text().splitlines()
    body = bytearray(base64.b64decode("".join(lines[1:-1])))
    body[-20] ^= 0xFF  # inside the private section: the seed/public halves no longer agree
    b64 = base64.b64encode(bytes(body)).decode()
    key.write_text(f"{lines[0]}\n{b64}\n{lines[-1]}\n")
    with pytest.raises(ConfigError, match="malformed OpenSSH private key"):
        Ed25519Signer.load(key)


def test_public_key_from_line_and_blob() -> None:
    signer = Ed25519Signer.generate()
    line = signer.public_line + " some  comment"
    key = PublicKey.from_line(line)
    assert key == signer.public_key
    assert key.comment == "some  comment"
    assert PublicKey.from_blob(key.blob) == key
    assert key.public_line == line
    assert PublicKey(key.raw).public_line == signer.public_line
    for junk in ["", "ssh-ed25519", "ssh-ed25519 !!!!", "ssh-rsa AAAAB3NzaC1yc2E=", "hello"]:
        with pytest.raises(ConfigError):
            PublicKey.from_line(junk)
    # A blob that claims ed25519 but is the wrong length.
    bad_blob = ssh_string(b"ssh-ed25519") + ssh_string(b"\x00" * 31)
    with pytest.raises(ConfigError):
        PublicKey.from_line("ssh-ed25519 " + base64.b64encode(bad_blob).decode())


# --------------------------------------------------------------------------- signatures


def test_signature_byte_identical_to_ssh_keygen(tmp_path: Path) -> None:
    key = keygen(tmp_path / "k", "c")
    signer = Ed25519Signer.load(key)
    for data, namespace in [(b"hello", "git"), (b"", "truss-verdict"), (os.urandom(5000), "x")]:
        assert signer.sign(data, namespace) == keygen_sign(key, data, namespace)


def test_ssh_keygen_verifies_our_signature(tmp_path: Path) -> None:
    signer = Ed25519Signer.generate("a@example.com")
    data = b"some data\n"
    sig_path = tmp_path / "data.sig"
    sig_path.write_text(signer.sign(data, "git"))
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(AllowedSigners(()).with_signer("a@example.com", signer.public_key).render())

    ok = run(
        ["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", "a@example.com", "-n", "git"]
        + ["-s", str(sig_path)],
        input=data,
    )
    assert ok.returncode == 0, ok.stderr
    assert signer.fingerprint in ok.stdout.decode()

    novalidate = run(
        ["ssh-keygen", "-Y", "check-novalidate", "-n", "git", "-s", str(sig_path)], input=data
    )
    assert novalidate.returncode == 0, novalidate.stderr

    tampered = run(
        ["ssh-keygen", "-Y", "check-novalidate", "-n", "git", "-s", str(sig_path)],
        input=data + b"!",
    )
    assert tampered.returncode != 0


def test_verify_accepts_ssh_keygen_signatures(tmp_path: Path) -> None:
    key = keygen(tmp_path / "k")
    expected = PublicKey.from_line((tmp_path / "k.pub").read_text())
    assert verify(keygen_sign(key, b"payload", "git"), b"payload", "git") == expected
    # ssh-keygen can also hash with sha256 (PROTOCOL.sshsig allows both).
    sha256_sig = keygen_sign(key, b"payload", "git", "-O", "hashalg=sha256")
    assert b"sha256" in sig_blob(sha256_sig)
    assert verify(sha256_sig, b"payload", "git") == expected


def _rebuild(
    blob: bytes,
    *,
    magic: bytes | None = None,
    version: int | None = None,
    key: bytes | None = None,
    namespace: bytes | None = None,
    hash_alg: bytes | None = None,
    signature: bytes | None = None,
    trailer: bytes = b"",
) -> bytes:
    """Re-encode a signature blob with some fields replaced."""
    pos = 6
    fields = []
    (ver,) = struct.unpack(">I", blob[pos : pos + 4])
    pos += 4
    for _ in range(5):
        (n,) = struct.unpack(">I", blob[pos : pos + 4])
        fields.append(blob[pos + 4 : pos + 4 + n])
        pos += 4 + n
    k, ns, reserved, h, s = fields
    return (
        (magic or blob[:6])
        + struct.pack(">I", ver if version is None else version)
        + ssh_string(key if key is not None else k)
        + ssh_string(namespace if namespace is not None else ns)
        + ssh_string(reserved)
        + ssh_string(hash_alg if hash_alg is not None else h)
        + ssh_string(signature if signature is not None else s)
        + trailer
    )


def test_rebuild_helper_is_identity() -> None:
    sig = MODULE_SIGNER.sign(b"d", "git")
    assert armor(_rebuild(sig_blob(sig))) == sig


def test_verify_rejections() -> None:
    signer = MODULE_SIGNER
    data = b"the data"
    sig = signer.sign(data, "git")
    blob = sig_blob(sig)
    assert verify(sig, data, "git") == signer.public_key

    with pytest.raises(SignatureError, match="namespace 'git', expected 'truss-verdict'"):
        verify(sig, data, "truss-verdict")
    with pytest.raises(SignatureError, match="does not match the data"):
        verify(sig, data + b"x", "git")

    inner = _rebuild(blob).split(ssh_string(b"ssh-ed25519"))[-1]
    raw_sig = inner[4:]
    flipped = raw_sig[:-1] + bytes([raw_sig[-1] ^ 1])
    altered = armor(_rebuild(blob, signature=ssh_string(b"ssh-ed25519") + ssh_string(flipped)))
    with pytest.raises(SignatureError, match="does not match the data"):
        verify(altered, data, "git")

    other_key = Ed25519Signer.generate().public_key
    with pytest.raises(SignatureError, match="does not match the data"):
        verify(armor(_rebuild(blob, key=other_key.blob)), data, "git")

    with pytest.raises(SignatureError, match="truncated"):
        verify(sig[: len(sig) // 2], data, "git")
    with pytest.raises(SignatureError):
        lines = sig.splitlines()
        verify("\n".join([lines[0], lines[1][:-8], lines[-1]]), data, "git")
    with pytest.raises(SignatureError, match="not an SSH signature"):
        verify("garbage", data, "git")
    with pytest.raises(SignatureError, match="base64"):
        verify("-----BEGIN SSH SIGNATURE-----\n!!!\n-----END SSH SIGNATURE-----\n", data, "git")
    with pytest.raises(SignatureError, match="bad magic"):
        verify(armor(_rebuild(blob, magic=b"SSHSIH")), data, "git")
    with pytest.raises(SignatureError, match="version 2"):
        verify(armor(_rebuild(blob, version=2)), data, "git")
    with pytest.raises(SignatureError, match="unsupported signature hash 'md5'"):
        verify(armor(_rebuild(blob, hash_alg=b"md5")), data, "git")
    with pytest.raises(SignatureError, match="trailing"):
        verify(armor(_rebuild(blob, trailer=b"\x00")), data, "git")
    with pytest.raises(SignatureError, match="malformed"):
        verify(armor(blob[:-10]), data, "git")
    with pytest.raises(SignatureError, match="signature algorithm"):
        bad_alg = ssh_string(b"ssh-rsa") + ssh_string(raw_sig)
        verify(armor(_rebuild(blob, signature=bad_alg)), data, "git")
    with pytest.raises(SignatureError, match="unsupported key type"):
        rsa_key = ssh_string(b"ssh-rsa") + ssh_string(b"\x01\x00\x01") + ssh_string(b"\x00" * 8)
        verify(armor(_rebuild(blob, key=rsa_key)), data, "git")
    with pytest.raises(SignatureError, match="empty"):
        verify(sig, data, "")
    with pytest.raises(SignatureError, match="empty"):
        signer.sign(data, "")


def test_verify_tolerates_crlf_armor() -> None:
    sig = MODULE_SIGNER.sign(b"d", "git")
    assert verify(sig.replace("\n", "\r\n"), b"d", "git") == MODULE_SIGNER.public_key


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=2048), namespace=st.text(st.characters(codec="utf-8"), min_size=1))
def test_property_sign_then_verify(data: bytes, namespace: str) -> None:
    sig = MODULE_SIGNER.sign(data, namespace)
    assert verify(sig, data, namespace) == MODULE_SIGNER.public_key


@settings(max_examples=30, deadline=None)
@given(data=st.binary(max_size=256), other=st.binary(max_size=256))
def test_property_other_data_rejected(data: bytes, other: bytes) -> None:
    sig = MODULE_SIGNER.sign(data, "git")
    if other != data:
        with pytest.raises(SignatureError):
            verify(sig, other, "git")


# --------------------------------------------------------------------------- git commits


def _allowed_file(tmp_path: Path, principal: str, key: PublicKey) -> Path:
    path = tmp_path / "allowed_signers"
    path.write_text(AllowedSigners(()).with_signer(principal, key, ("git",)).render())
    return path


def test_git_verifies_commit_signed_by_us(tmp_path: Path, repo: Path) -> None:
    signer = Ed25519Signer.generate("ada@laptop")
    raw = git(repo, "cat-file", "commit", "HEAD").encode()
    signed = insert_gpgsig(raw, signer.sign(raw, "git"))
    sha = git(repo, "hash-object", "-t", "commit", "-w", "--stdin", data=signed).strip()
    git(repo, "update-ref", "refs/heads/signed", sha)
    allowed = _allowed_file(tmp_path, "ada@example.com", signer.public_key)

    cfg = ["-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={allowed}"]
    result = run(["git", "-C", str(repo), *cfg, "verify-commit", sha])
    assert result.returncode == 0, result.stderr
    log = git(repo, *cfg, "log", "--show-signature", "-1", "signed")
    assert 'Good "git" signature for ada@example.com' in log
    assert signer.fingerprint in log
    assert git(repo, *cfg, "show", "-s", "--format=%G?", "signed").strip() == "G"

    # The signed object still carries the original content and the header parses back.
    payload, sig = split_gpgsig(signed)
    assert payload == raw
    assert sig is not None and verify(sig, payload, "git") == signer.public_key

    # And git rejects it when the key is not allowed.
    stranger = _allowed_file(tmp_path, "eve@example.com", Ed25519Signer.generate().public_key)
    cfg2 = ["-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={stranger}"]
    assert run(["git", "-C", str(repo), *cfg2, "verify-commit", sha]).returncode != 0


def test_insert_gpgsig_matches_git_commit_S(tmp_path: Path, repo: Path) -> None:
    """git's own signed commit == our insert_gpgsig over the same payload, byte for byte."""
    key = keygen(tmp_path / "k", "ada")
    signer = Ed25519Signer.load(key)
    (repo / "b.md").write_text("second\n")
    git(repo, "add", "b.md")
    # An encoding header shows the signature goes at the end of the headers, not after
    # committer.
    git(
        repo,
        "-c",
        "gpg.format=ssh",
        "-c",
        f"user.signingkey={key}",
        "-c",
        "i18n.commitEncoding=ISO-8859-1",
        "commit",
        "-q",
        "-S",
        "-m",
        "second",
    )
    git_raw = git(repo, "cat-file", "commit", "HEAD").encode()
    assert b"\nencoding ISO-8859-1\ngpgsig -----BEGIN SSH SIGNATURE-----\n" in git_raw

    payload, sig = split_gpgsig(git_raw)
    assert sig is not None
    assert b"gpgsig" not in payload
    assert verify(sig, payload, "git") == signer.public_key
    assert insert_gpgsig(payload, signer.sign(payload, "git")) == git_raw


def test_insert_gpgsig_edge_cases() -> None:
    raw = b"tree abc\nauthor A <a> 1 +0000\ncommitter A <a> 1 +0000\n\nmsg\n"
    sig = MODULE_SIGNER.sign(raw, "git")
    out = insert_gpgsig(raw, sig)
    lines = out.split(b"\n")
    assert lines[3] == b"gpgsig -----BEGIN SSH SIGNATURE-----"
    assert all(line.startswith(b" ") for line in lines[4 : 4 + len(sig.splitlines()) - 1])
    assert out.endswith(b" -----END SSH SIGNATURE-----\n\nmsg\n")
    # Signature without trailing newline is accepted as if it had one.
    assert insert_gpgsig(raw, sig.rstrip("\n")) == out
    with pytest.raises(SignatureError, match="already carries"):
        insert_gpgsig(out, sig)
    sha256 = insert_gpgsig(raw, sig, object_format="sha256")
    assert b"\ngpgsig-sha256 -----BEGIN" in sha256
    assert split_gpgsig(sha256, object_format="sha256") == (raw, sig)
    # Under the sha1 header name, the sha256 signature is dropped from the payload, as git does.
    assert split_gpgsig(sha256) == (raw, None)
    # No message at all: the header block runs to the end.
    bare = b"tree abc\ncommitter A <a> 1 +0000\n"
    assert split_gpgsig(insert_gpgsig(bare, sig)) == (bare, sig)
    assert split_gpgsig(raw) == (raw, None)


header_line = st.from_regex(r"[a-z]{1,8} [ -~]{0,30}", fullmatch=True).filter(
    lambda s: not s.startswith("gpgsig")
)


@settings(max_examples=60, deadline=None)
@given(
    headers=st.lists(header_line, min_size=1, max_size=5),
    message=st.binary(max_size=200),
)
def test_property_insert_split_round_trip(headers: list[str], message: bytes) -> None:
    raw = ("\n".join(headers) + "\n\n").encode() + message
    sig = MODULE_SIGNER.sign(raw, "git")
    assert split_gpgsig(insert_gpgsig(raw, sig)) == (raw, sig)


# --------------------------------------------------------------------------- allowed_signers


@pytest.fixture
def keys() -> dict[str, Ed25519Signer]:
    return {name: Ed25519Signer.generate(f"{name} key") for name in ["alice", "bob", "erin"]}


def _sample_file(keys: dict[str, Ed25519Signer]) -> str:
    return "\n".join(
        [
            "# operators of this store",
            "",
            f'"alice smith@example.com,alice@example.com" namespaces="git,truss-verdict" '
            f"{keys['alice'].public_line}",
            f"   bob@example.com {PublicKey(keys['bob'].public_key.raw).public_line}",
            f"ca@example.com cert-authority {keys['bob'].public_key.public_line}",
            "dave@example.com ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQC7 dave",
            f'erin@example.com namespaces="truss-*,!truss-admin" {keys["erin"].public_line}',
            "",
        ]
    )


def test_allowed_signers_parse(keys: dict[str, Ed25519Signer]) -> None:
    parsed = AllowedSigners.parse(_sample_file(keys))
    assert [s.line for s in parsed.signers] == [3, 4, 7]
    alice, bob, erin = parsed.signers
    assert alice.principals == ("alice smith@example.com", "alice@example.com")
    assert alice.namespaces == ("git", "truss-verdict")
    assert alice.key == keys["alice"].public_key and alice.key.comment == "alice key"
    assert bob.namespaces is None and bob.key.comment == ""
    assert erin.namespaces == ("truss-*", "!truss-admin")
    assert [f.line for f in parsed.foreign] == [5, 6]
    assert isinstance(alice, AllowedSigner)


def test_quote_in_middle_of_principals_like_openssh() -> None:
    line = f'bob@example.com,"alice smith" {MODULE_SIGNER.public_line}'
    (signer,) = AllowedSigners.parse(line).signers
    assert signer.principals == ("bob@example.com", "alice smith")
    assert signer.render().startswith('"bob@example.com,alice smith" ssh-ed25519 ')


def test_principals_for(keys: dict[str, Ed25519Signer]) -> None:
    parsed = AllowedSigners.parse(_sample_file(keys))
    alice, bob, erin = (keys[n].public_key for n in ["alice", "bob", "erin"])
    assert parsed.principals_for(alice, "git") == ("alice smith@example.com", "alice@example.com")
    assert parsed.principals_for(alice, "truss-verdict")[1] == "alice@example.com"
    assert parsed.principals_for(alice, "file") == ()
    assert parsed.principals_for(bob, "anything") == ("bob@example.com",)  # no restriction
    assert parsed.principals_for(erin, "truss-verdict") == ("erin@example.com",)
    assert parsed.principals_for(erin, "truss-admin") == ()  # negated pattern vetoes
    assert parsed.principals_for(erin, "git") == ()
    assert parsed.principals_for(Ed25519Signer.generate().public_key, "git") == ()
    # The cert-authority line for bob's key does not add "ca@example.com".
    assert "ca@example.com" not in parsed.principals_for(bob, "git")


def test_render_round_trip_and_ssh_keygen_agrees(
    tmp_path: Path, keys: dict[str, Ed25519Signer]
) -> None:
    parsed = AllowedSigners.parse(_sample_file(keys))
    text = parsed.render()
    assert text.endswith("\n") and "#" not in text
    assert len(text.splitlines()) == 5
    reparsed = AllowedSigners.parse(text)
    assert reparsed.render() == text
    assert [(s.principals, s.key, s.namespaces) for s in reparsed.signers] == [
        (s.principals, s.key, s.namespaces) for s in parsed.signers
    ]
    # ssh-keygen reads our rendering the same way (quoted principal with a space included).
    allowed = tmp_path / "allowed"
    allowed.write_text(text)
    for name, namespace, principal in [
        ("alice", "git", "alice smith@example.com"),
        ("bob", "git", "bob@example.com"),
        ("erin", "truss-x", "erin@example.com"),
    ]:
        data = b"data"
        sig_path = tmp_path / f"{name}.sig"
        sig_path.write_text(keys[name].sign(data, namespace))
        found = run(
            ["ssh-keygen", "-Y", "find-principals", "-f", str(allowed), "-s", str(sig_path)]
        )
        assert found.returncode == 0, found.stderr
        assert principal in found.stdout.decode()
        ok = run(
            ["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", principal, "-n", namespace]
            + ["-s", str(sig_path)],
            input=data,
        )
        assert ok.returncode == 0, ok.stderr
        assert verify_allowed(sig_path.read_text(), data, namespace, parsed)[0] == principal


def test_with_signer(keys: dict[str, Ed25519Signer]) -> None:
    empty = AllowedSigners.parse("# nobody yet\n")
    assert empty.render() == ""
    one = empty.with_signer("alice@example.com", keys["alice"].public_key, ("git",))
    assert one.render() == f'alice@example.com namespaces="git" {keys["alice"].public_line}\n'
    assert one.with_signer("alice@example.com", keys["alice"].public_key, ("git",)) is one
    two = one.with_signer("bob smith", keys["bob"].public_key)
    assert two.render().splitlines()[1] == f'"bob smith" {keys["bob"].public_line}'
    assert two.principals_for(keys["bob"].public_key, "x") == ("bob smith",)
    # Foreign lines survive rewriting, in their original place.
    parsed = AllowedSigners.parse(_sample_file(keys))
    added = parsed.with_signer("new@example.com", Ed25519Signer.generate().public_key)
    rendered = added.render().splitlines()
    assert rendered[2].startswith("ca@example.com cert-authority ")
    assert rendered[3].startswith("dave@example.com ssh-rsa ")
    assert rendered[-1].startswith("new@example.com ssh-ed25519 ")
    for bad in ["", 'a"b', "a,b", "a\nb"]:
        with pytest.raises(ConfigError, match="invalid principal"):
            empty.with_signer(bad, keys["alice"].public_key)
    with pytest.raises(ConfigError, match="invalid namespace"):
        empty.with_signer("a", keys["alice"].public_key, ("git,x",))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("alice@example.com", "missing key"),
        ("alice@example.com ssh-ed25519", "missing or invalid base64"),
        ("alice@example.com ssh-ed25519 !!notbase64", "missing or invalid base64"),
        ("alice@example.com ssh-ed2551 AAAA", "unknown key type"),
        ("alice@example.com namespaces=git KEY", "double-quoted value"),
        ('alice@example.com namespaces="git KEY', "unterminated quote|missing key"),
        ('alice@example.com frobnicate="1" KEY', "unknown option 'frobnicate=\"1\"'"),
        ('alice@example.com namespaces="a",namespaces="b" KEY', "given twice"),
        ('alice@example.com namespaces="a", KEY', "stray ','"),
        ('alice@example.com valid-after="2024" KEY', "invalid valid-after"),
        ('alice@example.com valid-before="20241301" KEY', "invalid valid-before"),
        ('alice@example.com namespaces="a,,b" KEY', "empty namespace"),
        ('"alice@example.com KEY', "unterminated quote"),
        ("alice@example.com,,bob KEY", "empty principal"),
        ('"alice smith",bob KEY', "after the closing quote"),
        ("alice@example.com ssh-ed25519 AAAAB3NzaC1yc2E=", "unsupported key type"),
    ],
)
def test_malformed_lines_name_file_and_line(line: str, message: str) -> None:
    key_line = MODULE_SIGNER.public_line
    text = "# header\n\n" + line.replace("KEY", key_line) + "\n"
    with pytest.raises(ConfigError, match=message) as info:
        AllowedSigners.parse(text, source=".truss/allowed_signers")
    assert info.value.message.startswith(".truss/allowed_signers:3: ")


def test_valid_after_and_before(tmp_path: Path) -> None:
    signer = Ed25519Signer.generate()
    text = (
        f'old@example.com valid-before="20200101Z" {signer.public_line}\n'
        f'future@example.com valid-after="29990101120000Z" {signer.public_line}\n'
        f'now@example.com valid-after="20200101",valid-before="29991231235959Z" '
        f"{signer.public_line}\n"
    )
    parsed = AllowedSigners.parse(text)
    key = signer.public_key
    assert parsed.principals_for(key, "git") == ("now@example.com",)
    assert parsed.principals_for(key, "git", at=datetime(2019, 6, 1, tzinfo=UTC)) == (
        "old@example.com",
    )
    assert parsed.signers[0].valid_before == datetime(2020, 1, 1, tzinfo=UTC)
    edge = datetime(2020, 1, 1, tzinfo=UTC)
    assert "old@example.com" in parsed.principals_for(key, "git", at=edge)  # inclusive
    assert "old@example.com" not in parsed.principals_for(
        key, "git", at=edge + timedelta(seconds=1)
    )
    # ssh-keygen reads our rendering of the time options and reaches the same verdict.
    rendered = tmp_path / "allowed"
    rendered.write_text(parsed.render())
    assert 'valid-before="20200101000000Z"' in parsed.render()
    sig_path = tmp_path / "sig"
    sig_path.write_text(signer.sign(b"d", "git"))
    for principal, accepted in [("old@example.com", False), ("now@example.com", True)]:
        result = run(
            ["ssh-keygen", "-Y", "verify", "-f", str(rendered), "-I", principal, "-n", "git"]
            + ["-s", str(sig_path)],
            input=b"d",
        )
        assert (result.returncode == 0) == accepted, result.stderr


def test_verify_allowed(keys: dict[str, Ed25519Signer]) -> None:
    parsed = AllowedSigners.parse(_sample_file(keys))
    data = b"verdict"
    principal, key = verify_allowed(
        keys["alice"].sign(data, "truss-verdict"), data, "truss-verdict", parsed
    )
    assert principal == "alice smith@example.com"
    assert key == keys["alice"].public_key and key.comment == "alice key"

    stranger = Ed25519Signer.generate()
    with pytest.raises(SignatureError) as info:
        verify_allowed(stranger.sign(data, "git"), data, "git", parsed)
    assert info.value.message == (
        f"signed by unknown key {stranger.fingerprint} ; add it to .truss/allowed_signers "
        "with a commit signed by an operator"
    )
    with pytest.raises(SignatureError, match="not allowed to sign 'file'"):
        verify_allowed(keys["alice"].sign(data, "file"), data, "file", parsed)
    with pytest.raises(SignatureError, match="does not match the data"):
        verify_allowed(keys["alice"].sign(data, "git"), b"other", "git", parsed)


# --------------------------------------------------------------------------- ssh-keygen signer


def test_ssh_keygen_signer(tmp_path: Path) -> None:
    key = keygen(tmp_path / "k", "ssh-keygen signer")
    signer = SshKeygenSigner(key)
    assert isinstance(signer, Signer)
    in_process = Ed25519Signer.load(key)
    assert signer.public_line == in_process.public_line
    assert signer.fingerprint == in_process.fingerprint
    sig = signer.sign(b"data\n", "git")
    assert verify(sig, b"data\n", "git") == in_process.public_key
    assert sig == in_process.sign(b"data\n", "git")
    # Pointing at the .pub works too: ssh-keygen finds the private half beside it.
    via_pub = SshKeygenSigner(tmp_path / "k.pub")
    assert verify(via_pub.sign(b"x", "ns"), b"x", "ns") == in_process.public_key


def test_ssh_keygen_signer_derives_public_line_without_pub(tmp_path: Path) -> None:
    key = keygen(tmp_path / "k", "c")
    expected = (tmp_path / "k.pub").read_text().strip()
    (tmp_path / "k.pub").unlink()
    assert SshKeygenSigner(key).public_line == expected


def test_ssh_keygen_signer_errors(tmp_path: Path) -> None:
    with pytest.raises(SignatureError, match="ssh-keygen .*failed"):
        # A .pub with no private key beside it and no agent: ssh-keygen's own error surfaces.
        signer = Ed25519Signer.generate()
        pub = tmp_path / "lonely.pub"
        pub.write_text(signer.public_line + "\n")
        SshKeygenSigner(pub).sign(b"d", "git")
    ecdsa = keygen(tmp_path / "ec", keytype="ecdsa")
    with pytest.raises(ConfigError, match="unsupported key type"):
        SshKeygenSigner(ecdsa).sign(b"d", "git")
    # A stale .pub (another key) beside the private key is caught after signing.
    key = keygen(tmp_path / "k")
    (tmp_path / "k.pub").write_text(Ed25519Signer.generate().public_line + "\n")
    with pytest.raises(SignatureError, match="advertises|doesn't match"):
        SshKeygenSigner(key).sign(b"d", "git")


def test_from_git_config_path(tmp_path: Path, repo: Path) -> None:
    with pytest.raises(ConfigError, match="user.signingkey is not set.*git config"):
        SshKeygenSigner.from_git_config(repo)
    key = keygen(tmp_path / "k", "cfg")
    git(repo, "config", "user.signingkey", str(key))
    signer = SshKeygenSigner.from_git_config(repo)
    assert signer.key_path == key
    assert verify(signer.sign(b"d", "git"), b"d", "git") == Ed25519Signer.load(key).public_key

    git(repo, "config", "user.signingkey", "keys/mine")
    (repo / "keys").mkdir()
    keygen(repo / "keys" / "mine")
    assert SshKeygenSigner.from_git_config(repo).key_path == repo / "keys" / "mine"

    git(repo, "config", "user.signingkey", str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="does not exist"):
        SshKeygenSigner.from_git_config(repo)


@pytest.fixture
def ssh_agent(
    tmp_path: Path, git_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(
        ["ssh-agent", "-D", "-a", str(sock)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        assert sock.exists(), "ssh-agent did not start"
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        yield str(sock)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("prefix", ["key::", ""])
def test_from_git_config_literal_key_uses_agent(
    tmp_path: Path, repo: Path, ssh_agent: str, prefix: str
) -> None:
    key = keygen(tmp_path / "agentkey", "in agent")
    added = run(["ssh-add", "-q", str(key)])
    assert added.returncode == 0, added.stderr
    public_line = (tmp_path / "agentkey.pub").read_text().strip()
    # Remove the private key from disk: only the agent can sign now.
    key.unlink()
    git(repo, "config", "user.signingkey", prefix + public_line)
    signer = SshKeygenSigner.from_git_config(repo)
    assert signer.public_line == public_line
    assert verify(signer.sign(b"d", "git"), b"d", "git") == PublicKey.from_line(public_line)
