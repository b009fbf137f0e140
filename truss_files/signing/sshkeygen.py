"""A signer that runs the real ``ssh-keygen -Y sign``.

This is for keys the in-process signer cannot (and should not) touch: passphrase-protected
keys, keys that live only in ssh-agent, hardware keys — i.e. whatever the operator already
uses for ``git commit -S``. It reads the same ``user.signingkey`` setting git does.
"""

from __future__ import annotations

import base64
import binascii
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path

from truss_files.errors import ConfigError, SignatureError
from truss_files.signing.sshsig import PublicKey, _b64_fingerprint, verify

__all__ = ["SshKeygenSigner"]

_SET_KEY_HINT = (
    "set it with 'git config --global user.signingkey ~/.ssh/id_ed25519.pub' "
    "(a key file, or 'key::ssh-ed25519 AAAA...' for a key held in ssh-agent)"
)
_TIMEOUT = 120  # seconds; generous because ssh-keygen may wait for a hardware key touch


def _ssh_keygen() -> str:
    exe = shutil.which("ssh-keygen")
    if exe is None:
        raise ConfigError("ssh-keygen not found on PATH; install OpenSSH (8.2 or later)")
    return exe


class SshKeygenSigner:
    """Signs with ``ssh-keygen -Y sign -f KEY``.

    ``key_path`` is a private key, or a ``.pub`` whose private half is loaded in ssh-agent;
    ssh-keygen accepts both.
    """

    def __init__(self, key_path: Path) -> None:
        self.key_path = Path(key_path)
        self._public_line: str | None = None

    @classmethod
    def from_git_config(cls, repo_dir: Path | None = None) -> SshKeygenSigner:
        """Use git's ``user.signingkey`` (as seen from ``repo_dir``, else global config)."""
        cmd = ["git"]
        if repo_dir is not None:
            cmd += ["-C", str(repo_dir)]
        cmd += ["config", "--get", "user.signingkey"]
        try:
            result = subprocess.run(
                cmd, capture_output=True, text=True, timeout=_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfigError(f"cannot run git to read user.signingkey: {exc}") from exc
        value = result.stdout.strip()
        if result.returncode != 0 or not value:
            detail = result.stderr.strip()
            raise ConfigError(
                "git config user.signingkey is not set"
                + (f" ({detail})" if detail else "")
                + f"; {_SET_KEY_HINT}"
            )
        # Same rules as git's gpg-interface.c: "key::" prefix or a bare "ssh-..." line is a
        # literal public key (private half in ssh-agent); anything else is a path.
        literal = value.removeprefix("key::") if value.startswith("key::") else None
        if literal is None and value.startswith("ssh-"):
            literal = value
        if literal is not None:
            return cls._from_literal(literal)
        path = Path(value).expanduser()
        if not path.is_absolute():
            # git runs ssh-keygen from the work tree top, which is where users expect relative
            # paths to resolve; repo_dir is our best stand-in for it.
            path = (Path(repo_dir) if repo_dir is not None else Path.cwd()) / path
        if not path.exists():
            raise ConfigError(f"git config user.signingkey points to {path}, which does not exist")
        return cls(path)

    @classmethod
    def _from_literal(cls, line: str) -> SshKeygenSigner:
        # ssh-keygen needs a file; git does the same dance with a temp file. The directory is
        # removed when this signer is garbage-collected (or at interpreter exit).
        tmpdir = tempfile.mkdtemp(prefix="truss-signingkey-")
        pub = Path(tmpdir) / "signingkey.pub"
        pub.write_text(line.strip() + "\n", encoding="utf-8")
        signer = cls(pub)
        weakref.finalize(signer, shutil.rmtree, tmpdir, True)
        return signer

    def _pub_path(self) -> Path | None:
        if self.key_path.name.endswith(".pub"):
            return self.key_path
        candidate = self.key_path.with_name(self.key_path.name + ".pub")
        return candidate if candidate.exists() else None

    @property
    def public_line(self) -> str:
        if self._public_line is None:
            pub = self._pub_path()
            if pub is not None:
                try:
                    text = pub.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as exc:
                    raise ConfigError(f"{pub}: cannot read public key: {exc}") from exc
                line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
                if not line:
                    raise ConfigError(f"{pub}: empty public key file")
                source = str(pub)
            else:
                # No .pub beside the key: derive it (may prompt on the tty for a passphrase).
                try:
                    out = self._run(["-y", "-f", str(self.key_path)])
                except SignatureError as exc:
                    raise ConfigError(f"cannot read the public half: {exc.message}") from exc
                line = out.decode(errors="replace").strip()
                source = str(self.key_path)
            if len(line.split()) < 2:
                raise ConfigError(f"{source}: not an OpenSSH public key line")
            self._public_line = line
        return self._public_line

    @property
    def public_key(self) -> PublicKey:
        """The key as a ``PublicKey``; ConfigError for non-ed25519 keys truss cannot verify."""
        try:
            return PublicKey.from_line(self.public_line)
        except ConfigError as exc:
            raise ConfigError(f"{self.key_path}: {exc.message}") from exc

    @property
    def fingerprint(self) -> str:
        try:
            blob = base64.b64decode(self.public_line.split()[1], validate=True)
        except (binascii.Error, IndexError) as exc:
            raise ConfigError(f"{self.key_path}: public key is not valid base64") from exc
        return _b64_fingerprint(blob)

    def sign(self, data: bytes, namespace: str) -> str:
        if not namespace:
            raise SignatureError("signature namespace must not be empty")
        # Refuse keys truss cannot verify before asking the user for a passphrase or touch.
        expected = self.public_key
        # Like git, hand the data over in a file rather than on stdin: when there is no tty,
        # ssh-keygen reads a passphrase prompt's answer from stdin, which would eat the data.
        with tempfile.TemporaryDirectory(prefix="truss-sign-") as tmpdir:
            data_path = Path(tmpdir) / "data"
            data_path.write_bytes(data)
            self._run(
                ["-q", "-Y", "sign", "-f", str(self.key_path), "-n", namespace, str(data_path)]
            )
            sig_path = data_path.with_name("data.sig")
            try:
                armored = sig_path.read_text(encoding="ascii")
            except (OSError, UnicodeDecodeError) as exc:
                raise SignatureError(f"ssh-keygen -Y sign wrote no signature: {exc}") from exc
        # A stale .pub beside the private key would make us advertise one key and sign with
        # another; checking here turns that into a clear error instead of a later mystery.
        signed_by = verify(armored, data, namespace)
        if signed_by != expected:
            raise SignatureError(
                f"ssh-keygen signed with {signed_by.fingerprint}, but {self.key_path} "
                f"advertises {expected.fingerprint}; fix the .pub file or user.signingkey"
            )
        return armored

    def _run(self, args: list[str]) -> bytes:
        cmd = [_ssh_keygen(), *args]
        try:
            result = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SignatureError(f"cannot run {' '.join(cmd)}: {exc}") from exc
        if result.returncode != 0:
            stderr = result.stderr.decode(errors="replace").strip()
            raise SignatureError(
                f"ssh-keygen {' '.join(args[:3])} failed (exit {result.returncode}) for "
                f"{self.key_path}: {stderr or 'no error output'}"
            )
        return result.stdout

    def __repr__(self) -> str:
        return f"SshKeygenSigner({str(self.key_path)!r})"
