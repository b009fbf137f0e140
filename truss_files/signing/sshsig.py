"""SSHSIG signatures (OpenSSH ``PROTOCOL.sshsig``) for Ed25519 keys, in pure Python.

This is the format ``ssh-keygen -Y sign`` writes and git uses for ``gpg.format=ssh``. Doing it
in-process means truss can sign and verify without a binary on PATH, and the signatures stay
byte-identical to ``ssh-keygen``'s (Ed25519 is deterministic and we hash with sha512 like it
does), so anything we sign verifies with stock git and OpenSSH and vice versa.

Only Ed25519 is supported: one key type keeps the verification surface small, and it is what
``ssh-keygen -t ed25519`` (the documented setup) produces.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from truss_files.errors import ConfigError, SignatureError

__all__ = [
    "Ed25519Signer",
    "PublicKey",
    "Signer",
    "insert_gpgsig",
    "split_gpgsig",
    "verify",
]

KEY_TYPE = "ssh-ed25519"
_KEY_TYPE_B = KEY_TYPE.encode()

_SIG_MAGIC = b"SSHSIG"
_SIG_VERSION = 1
_SIG_BEGIN = "-----BEGIN SSH SIGNATURE-----"
_SIG_END = "-----END SSH SIGNATURE-----"
# ssh-keygen always signs with sha512; sha256 is the only other hash PROTOCOL.sshsig allows.
_SIGN_HASH = "sha512"
_HASHES = {"sha512": hashlib.sha512, "sha256": hashlib.sha256}

_PRIV_BEGIN = "-----BEGIN OPENSSH PRIVATE KEY-----"
_PRIV_END = "-----END OPENSSH PRIVATE KEY-----"
_PRIV_MAGIC = b"openssh-key-v1\x00"

# OpenSSH wraps the base64 of both armors at 70 columns; matching it is what makes our output
# byte-identical to ssh-keygen's rather than merely equivalent.
_WRAP = 70

_USE_SSH_KEYGEN = "use the ssh-keygen signer (git config user.signingkey) for such keys instead"


# --------------------------------------------------------------------------- wire format


def _ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


class _Reader:
    """Cursor over SSH wire-format data; every short read raises ``ValueError``."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self._pos + n > len(self._data):
            raise ValueError("truncated data")
        out = self._data[self._pos : self._pos + n]
        self._pos += n
        return out

    def uint32(self) -> int:
        value: int = struct.unpack(">I", self.take(4))[0]
        return value

    def string(self) -> bytes:
        return self.take(self.uint32())

    def done(self) -> bool:
        return self._pos == len(self._data)

    def rest(self) -> bytes:
        out = self._data[self._pos :]
        self._pos = len(self._data)
        return out


def _wrap(text: str) -> str:
    return "\n".join(text[i : i + _WRAP] for i in range(0, len(text), _WRAP))


def _b64_fingerprint(blob: bytes) -> str:
    # Same as `ssh-keygen -l`: unpadded base64 of the sha256 of the key blob.
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


# --------------------------------------------------------------------------- public keys


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 public key.

    ``comment`` is excluded from equality and hashing: it is a label, not part of the key, and
    the key recovered from a signature never has one.
    """

    raw: bytes
    comment: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if len(self.raw) != 32:
            raise ConfigError(f"an ssh-ed25519 key is 32 bytes, got {len(self.raw)}")
        if "\n" in self.comment or "\r" in self.comment:
            raise ConfigError("a key comment cannot contain a line break")

    @classmethod
    def from_line(cls, line: str) -> PublicKey:
        """Parse an OpenSSH public key line, ``ssh-ed25519 <base64> [comment]``."""
        parts = line.strip().split(None, 2)
        if len(parts) < 2:
            raise ConfigError(
                f"not an OpenSSH public key line: {line.strip()[:60]!r}; "
                "expected 'ssh-ed25519 AAAA... [comment]' as in a .pub file"
            )
        keytype, b64 = parts[0], parts[1]
        comment = parts[2].strip() if len(parts) == 3 else ""
        if keytype != KEY_TYPE:
            raise ConfigError(
                f"unsupported key type {keytype!r}: truss verifies only ssh-ed25519 keys; "
                "create one with 'ssh-keygen -t ed25519'"
            )
        try:
            blob = base64.b64decode(b64, validate=True)
        except binascii.Error as exc:
            raise ConfigError(f"public key is not valid base64: {b64[:20]!r}...") from exc
        key = cls.from_blob(blob)
        return cls(key.raw, comment)

    @classmethod
    def from_blob(cls, blob: bytes) -> PublicKey:
        """Parse an SSH wire-format key blob (``string "ssh-ed25519" || string key``)."""
        reader = _Reader(blob)
        try:
            keytype = reader.string()
        except ValueError as exc:
            raise ConfigError(f"malformed SSH key blob: {exc}") from exc
        if keytype != _KEY_TYPE_B:
            raise ConfigError(
                f"unsupported key type {keytype.decode(errors='replace')!r}: truss verifies "
                "only ssh-ed25519 keys"
            )
        try:
            raw = reader.string()
            if not reader.done():
                raise ValueError("trailing bytes after the key")
        except ValueError as exc:
            raise ConfigError(f"malformed ssh-ed25519 key blob: {exc}") from exc
        return cls(raw)

    @property
    def blob(self) -> bytes:
        return _ssh_string(_KEY_TYPE_B) + _ssh_string(self.raw)

    @property
    def public_line(self) -> str:
        line = f"{KEY_TYPE} {base64.b64encode(self.blob).decode()}"
        return f"{line} {self.comment}" if self.comment else line

    @property
    def fingerprint(self) -> str:
        return _b64_fingerprint(self.blob)


# --------------------------------------------------------------------------- signing


@runtime_checkable
class Signer(Protocol):
    """Something that produces armored SSHSIG signatures for one key."""

    @property
    def public_line(self) -> str: ...

    @property
    def fingerprint(self) -> str: ...

    def sign(self, data: bytes, namespace: str) -> str: ...


def _check_namespace(namespace: str) -> bytes:
    # PROTOCOL.sshsig: "The namespace value MUST NOT be the empty string"; ssh-keygen agrees.
    if not namespace:
        raise SignatureError("signature namespace must not be empty")
    return namespace.encode("utf-8")


def _signed_data(namespace: bytes, reserved: bytes, hash_alg: bytes, data: bytes) -> bytes:
    digest = _HASHES[hash_alg.decode()](data).digest()
    return (
        _SIG_MAGIC
        + _ssh_string(namespace)
        + _ssh_string(reserved)
        + _ssh_string(hash_alg)
        + _ssh_string(digest)
    )


def _armor(blob: bytes) -> str:
    return f"{_SIG_BEGIN}\n{_wrap(base64.b64encode(blob).decode())}\n{_SIG_END}\n"


class Ed25519Signer:
    """In-process signer holding an Ed25519 private key; needs no binary and no network."""

    def __init__(self, private_key: Ed25519PrivateKey, comment: str = "") -> None:
        self._key = private_key
        raw = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self._public = PublicKey(raw, comment)
        # The file it was loaded from, if any (``serve`` warns when others can read it).
        self.key_path: Path | None = None

    @classmethod
    def generate(cls, comment: str = "") -> Ed25519Signer:
        return cls(Ed25519PrivateKey.generate(), comment)

    @classmethod
    def load(cls, path: Path) -> Ed25519Signer:
        """Load an unencrypted OpenSSH private key file (as written by ``ssh-keygen -N ''``)."""
        try:
            text = Path(path).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read private key: {exc}") from exc
        found = cls._from_openssh(text, str(path))
        found.key_path = Path(path)
        return found

    @classmethod
    def _from_openssh(cls, text: str, source: str) -> Ed25519Signer:
        lines = [ln.strip() for ln in text.strip().splitlines()]
        if not lines or lines[0] != _PRIV_BEGIN or lines[-1] != _PRIV_END:
            raise ConfigError(
                f"{source}: not an OpenSSH private key ('{_PRIV_BEGIN}'); "
                f"the in-process signer reads only those; {_USE_SSH_KEYGEN}"
            )
        try:
            data = base64.b64decode("".join(lines[1:-1]), validate=True)
        except binascii.Error as exc:
            raise ConfigError(f"{source}: private key is not valid base64") from exc
        try:
            return cls._parse_openssh(data, source)
        except ValueError as exc:
            raise ConfigError(
                f"{source}: malformed OpenSSH private key ({exc}); regenerate it with "
                "'ssh-keygen -t ed25519'"
            ) from exc

    @classmethod
    def _parse_openssh(cls, data: bytes, source: str) -> Ed25519Signer:
        # Layout from OpenSSH PROTOCOL.key.
        if not data.startswith(_PRIV_MAGIC):
            raise ValueError("bad magic")
        reader = _Reader(data[len(_PRIV_MAGIC) :])
        cipher, kdf = reader.string(), reader.string()
        reader.string()  # kdf options
        if cipher != b"none" or kdf != b"none":
            raise ConfigError(
                f"{source}: private key is passphrase-protected; the in-process signer only "
                f"reads unencrypted keys; {_USE_SSH_KEYGEN}"
            )
        if reader.uint32() != 1:
            raise ValueError("expected exactly one key")
        outer_blob = reader.string()
        outer_type = _Reader(outer_blob).string()
        if outer_type != _KEY_TYPE_B:
            raise ConfigError(
                f"{source}: key type {outer_type.decode(errors='replace')!r} is not "
                f"ssh-ed25519; the in-process signer only handles ed25519; {_USE_SSH_KEYGEN}"
            )
        private = _Reader(reader.string())
        if not reader.done():
            raise ValueError("trailing bytes")
        # Matching check ints are how OpenSSH notices a wrong passphrase or corruption.
        if private.uint32() != private.uint32():
            raise ValueError("check bytes do not match")
        if private.string() != _KEY_TYPE_B:
            raise ValueError("private key type does not match the public key")
        pub = private.string()
        secret = private.string()
        comment = private.string().decode("utf-8", errors="replace")
        padding = private.rest()
        if padding != bytes(range(1, len(padding) + 1)):
            raise ValueError("bad padding")
        if len(secret) != 64 or secret[32:] != pub or PublicKey.from_blob(outer_blob).raw != pub:
            raise ValueError("public and private halves do not match")
        key = Ed25519PrivateKey.from_private_bytes(secret[:32])
        signer = cls(key, comment)
        if signer.public_key.raw != pub:
            raise ValueError("private key does not derive the stored public key")
        return signer

    def _openssh_bytes(self) -> bytes:
        pub = self._public.raw
        seed = self._key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        check = secrets.token_bytes(4)
        private = (
            check
            + check
            + _ssh_string(_KEY_TYPE_B)
            + _ssh_string(pub)
            + _ssh_string(seed + pub)
            + _ssh_string(self._public.comment.encode())
        )
        # Unencrypted keys still pad to the "none" cipher's 8-byte block, with bytes 1, 2, 3...
        private += bytes(range(1, 1 + (-len(private)) % 8))
        body = (
            _PRIV_MAGIC
            + _ssh_string(b"none")
            + _ssh_string(b"none")
            + _ssh_string(b"")
            + struct.pack(">I", 1)
            + _ssh_string(self._public.blob)
            + _ssh_string(private)
        )
        return f"{_PRIV_BEGIN}\n{_wrap(base64.b64encode(body).decode())}\n{_PRIV_END}\n".encode()

    def save(self, path: Path) -> None:
        """Write the private key (mode 0600) to ``path`` and the public line to ``path.pub``."""
        path = Path(path)
        pub_path = path.with_name(path.name + ".pub")
        try:
            _write_private(path, self._openssh_bytes())
            pub_path.write_text(self.public_line + "\n", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot write key: {exc}") from exc

    @property
    def public_key(self) -> PublicKey:
        return self._public

    @property
    def public_line(self) -> str:
        return self._public.public_line

    @property
    def fingerprint(self) -> str:
        return self._public.fingerprint

    def sign(self, data: bytes, namespace: str) -> str:
        ns = _check_namespace(namespace)
        hash_alg = _SIGN_HASH.encode()
        signature = self._key.sign(_signed_data(ns, b"", hash_alg, data))
        blob = (
            _SIG_MAGIC
            + struct.pack(">I", _SIG_VERSION)
            + _ssh_string(self._public.blob)
            + _ssh_string(ns)
            + _ssh_string(b"")
            + _ssh_string(hash_alg)
            + _ssh_string(_ssh_string(_KEY_TYPE_B) + _ssh_string(signature))
        )
        return _armor(blob)

    def __repr__(self) -> str:
        # Never let the private key reach a log line.
        return f"Ed25519Signer({self.fingerprint})"


def _write_private(path: Path, content: bytes) -> None:
    # The temp file is created 0600 by mkstemp, so the key is never readable by others, even
    # for an instant; the rename then replaces any older file (whatever its mode) atomically.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- verification


def _dearmor(armored: str) -> bytes:
    lines = [ln.strip() for ln in armored.strip().splitlines()]
    if not lines or lines[0] != _SIG_BEGIN:
        raise SignatureError(f"not an SSH signature: it does not start with '{_SIG_BEGIN}'")
    if len(lines) < 3 or lines[-1] != _SIG_END:
        raise SignatureError(f"truncated SSH signature: no '{_SIG_END}' line")
    try:
        return base64.b64decode("".join(lines[1:-1]), validate=True)
    except binascii.Error as exc:
        raise SignatureError("SSH signature body is not valid base64") from exc


def verify(armored: str, data: bytes, namespace: str) -> PublicKey:
    """Check an armored SSHSIG over ``data`` in ``namespace``; return the key that made it.

    This proves only that the holder of the returned key signed; whether that key is trusted
    is the caller's question (see ``verify_allowed``).
    """
    ns = _check_namespace(namespace)
    blob = _dearmor(armored)
    try:
        reader = _Reader(blob)
        if reader.take(len(_SIG_MAGIC)) != _SIG_MAGIC:
            raise SignatureError("not an SSH signature: bad magic preamble")
        version = reader.uint32()
        if version != _SIG_VERSION:
            raise SignatureError(f"unsupported SSH signature version {version}")
        key_blob = reader.string()
        sig_ns = reader.string()
        reserved = reader.string()
        hash_alg = reader.string()
        sig_blob = reader.string()
        if not reader.done():
            raise SignatureError("malformed SSH signature: trailing bytes")
        sig_reader = _Reader(sig_blob)
        sig_type = sig_reader.string()
        sig_bytes = sig_reader.string()
        if not sig_reader.done():
            raise SignatureError("malformed SSH signature: trailing bytes after the signature")
    except ValueError as exc:
        raise SignatureError(f"malformed SSH signature: {exc}") from exc

    if sig_ns != ns:
        raise SignatureError(
            f"signature is for namespace {sig_ns.decode(errors='replace')!r}, "
            f"expected {namespace!r}"
        )
    if hash_alg.decode(errors="replace") not in _HASHES:
        raise SignatureError(
            f"unsupported signature hash {hash_alg.decode(errors='replace')!r} "
            "(sha512 and sha256 are allowed)"
        )
    try:
        key = PublicKey.from_blob(key_blob)
    except ConfigError as exc:
        # A bad key inside a signature is the signature's fault, not the configuration's.
        raise SignatureError(f"signature key: {exc.message}") from exc
    if sig_type != _KEY_TYPE_B:
        raise SignatureError(
            f"signature algorithm {sig_type.decode(errors='replace')!r} does not match "
            "the ssh-ed25519 key"
        )
    try:
        Ed25519PublicKey.from_public_bytes(key.raw).verify(
            sig_bytes, _signed_data(ns, reserved, hash_alg, data)
        )
    except InvalidSignature as exc:
        raise SignatureError(
            f"signature by {key.fingerprint} does not match the data (altered or forged)"
        ) from exc
    return key


# --------------------------------------------------------------------------- git commits

_GPGSIG_HEADERS = {"sha1": b"gpgsig", "sha256": b"gpgsig-sha256"}


def _gpgsig_header(object_format: str) -> bytes:
    try:
        return _GPGSIG_HEADERS[object_format]
    except KeyError:
        raise SignatureError(f"unknown git object format {object_format!r}") from None


def _split_lines(data: bytes) -> list[bytes]:
    # Like splitlines(keepends=True) but on "\n" only, as git does; a stray "\r" is content.
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def insert_gpgsig(commit_raw: bytes, armored: str, *, object_format: str = "sha1") -> bytes:
    """Insert ``armored`` into a raw commit object the way ``git commit -S`` does.

    Mirrors git's ``add_header_signature``: the header goes at the end of the header block
    (after committer, encoding, ...), its first line prefixed by ``gpgsig ``, every following
    line by a single space. ``commit_raw`` is exactly the bytes that were signed.
    """
    header = _gpgsig_header(object_format)
    head = commit_raw.split(b"\n\n", 1)[0]
    if any(line.startswith(b"gpgsig") for line in head.split(b"\n")):
        raise SignatureError("commit already carries a signature; sign the unsigned commit")
    sig = armored if armored.endswith("\n") else armored + "\n"
    if "\n\n" in sig.rstrip("\n") or not sig.strip():
        # A blank line inside the header would end git's header block early.
        raise SignatureError("signature to embed is empty or contains a blank line")
    lines = _split_lines(sig.encode("ascii"))
    block = header + b" " + lines[0] + b"".join(b" " + ln for ln in lines[1:])
    end = commit_raw.find(b"\n\n")
    pos = len(commit_raw) if end < 0 else end + 1
    return commit_raw[:pos] + block + commit_raw[pos:]


def split_gpgsig(commit_raw: bytes, *, object_format: str = "sha1") -> tuple[bytes, str | None]:
    """Undo ``insert_gpgsig``: return (the signed payload, the armored signature or None).

    Mirrors git's ``parse_buffer_signed_by_header``: signature headers for every object format
    are dropped from the payload, the one for ``object_format`` is returned.
    """
    header = _gpgsig_header(object_format)
    payload: list[bytes] = []
    signature: list[bytes] = []
    in_sig = other_sig = False
    lines = _split_lines(commit_raw)
    for i, line in enumerate(lines):
        if line.startswith(b"\n"):
            # End of headers: the message is copied through untouched.
            payload.extend(lines[i:])
            break
        if in_sig and line.startswith(b" "):
            signature.append(line[1:])
            continue
        in_sig = False
        if line.startswith(header + b" "):
            signature.append(line[len(header) + 1 :])
            in_sig, other_sig = True, False
            continue
        if line.startswith(b"gpgsig"):
            other_sig = True
            continue
        if other_sig and line.startswith(b" "):
            continue
        other_sig = False
        payload.append(line)
    sig = b"".join(signature).decode("ascii", errors="replace") if signature else None
    return b"".join(payload), sig
