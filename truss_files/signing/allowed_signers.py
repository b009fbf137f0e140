"""git's ``allowed_signers`` file (``man ssh-keygen``, section ALLOWED SIGNERS).

Each line is ``principals [options] keytype base64-key [comment]``. We parse it the way
OpenSSH's ``sshsig.c`` does, because the same file is handed to ``git verify-commit`` (which
runs ``ssh-keygen -Y verify``): a line we accept but OpenSSH rejects would make the two
disagree about who may sign, so where OpenSSH is strict (quoted option values, unknown
options) we are strict too, with an error that says how to fix the line.

Only ssh-ed25519 lines can match a signature truss verifies. Lines with other key types and
``cert-authority`` lines are kept verbatim (so rewriting the file never drops an operator's
entry) but never match.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from truss_files.errors import ConfigError, SignatureError
from truss_files.signing.sshsig import KEY_TYPE, PublicKey, verify

__all__ = ["AllowedSigner", "AllowedSigners", "ForeignLine", "verify_allowed"]

ALLOWED_SIGNERS_PATH = ".truss/allowed_signers"

_KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ssh-dss",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
        "ssh-xmss@openssh.com",
    }
)
_CERT_SUFFIX = "-cert-v01@openssh.com"
# Anything shaped like a key type (rather than an option) so a typo like "ssh-ed2551" gets
# "unknown key type" instead of a confusing "unknown option".
_KEY_TYPE_SHAPE = re.compile(r"^(ssh|ecdsa|sk|rsa)-[A-Za-z0-9@.\-]+$")
_B64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")
_TIME = re.compile(r"^(\d{8})(\d{4}(\d{2})?)?(Z)?$")

# Builds the "<source>:<line>: ..." error for the line being parsed.
_Fail = Callable[[str], ConfigError]


@dataclass(frozen=True)
class AllowedSigner:
    """One ssh-ed25519 line: these principals may sign with ``key`` in ``namespaces``.

    ``valid_after``/``valid_before`` are the OpenSSH options of the same names (inclusive
    bounds, timezone-aware); ``None`` means unbounded.
    """

    principals: tuple[str, ...]
    key: PublicKey
    namespaces: tuple[str, ...] | None  # None = any namespace
    line: int
    valid_after: datetime | None = None
    valid_before: datetime | None = None

    def allows(self, key: PublicKey, namespace: str, at: datetime | None = None) -> bool:
        if key != self.key:
            return False
        if self.namespaces is not None and not _match_pattern_list(namespace, self.namespaces):
            return False
        # A naive time is local time, as in the file itself.
        when = datetime.now(UTC) if at is None else at.astimezone()
        if self.valid_after is not None and when < self.valid_after:
            return False
        return self.valid_before is None or when <= self.valid_before

    def render(self) -> str:
        options = []
        if self.namespaces is not None:
            options.append(f'namespaces="{",".join(self.namespaces)}"')
        if self.valid_after is not None:
            options.append(f'valid-after="{_render_time(self.valid_after)}"')
        if self.valid_before is not None:
            options.append(f'valid-before="{_render_time(self.valid_before)}"')
        fields = [_render_principals(self.principals)]
        if options:
            fields.append(",".join(options))
        fields.append(self.key.public_line)
        return " ".join(fields)


@dataclass(frozen=True)
class ForeignLine:
    """A line truss keeps but never matches: another key type, or a ``cert-authority``."""

    text: str
    line: int


@dataclass(frozen=True)
class AllowedSigners:
    signers: tuple[AllowedSigner, ...]
    foreign: tuple[ForeignLine, ...] = field(default=())

    @classmethod
    def parse(cls, text: str, source: str = "allowed_signers") -> AllowedSigners:
        signers: list[AllowedSigner] = []
        foreign: list[ForeignLine] = []
        for lineno, raw in enumerate(text.splitlines(), start=1):
            stripped = raw.strip()
            if not stripped or stripped.startswith("#"):
                continue
            parsed = _parse_line(stripped, lineno, source)
            if isinstance(parsed, AllowedSigner):
                signers.append(parsed)
            else:
                foreign.append(parsed)
        return cls(tuple(signers), tuple(foreign))

    def principals_for(
        self, key: PublicKey, namespace: str, *, at: datetime | None = None
    ) -> tuple[str, ...]:
        """Principals allowed to sign with ``key`` in ``namespace``; empty if none.

        ``at`` is the time checked against valid-after/valid-before (default: now, which is
        what ``ssh-keygen -Y verify`` uses unless told otherwise).
        """
        found: list[str] = []
        for signer in self.signers:
            if signer.allows(key, namespace, at):
                found.extend(p for p in signer.principals if p not in found)
        return tuple(found)

    def render(self) -> str:
        entries: list[tuple[int, str]] = [(s.line, s.render()) for s in self.signers]
        entries.extend((f.line, f.text) for f in self.foreign)
        entries.sort(key=lambda entry: entry[0])
        return "".join(text + "\n" for _, text in entries)

    def with_signer(
        self, principal: str, key: PublicKey, namespaces: tuple[str, ...] | None = None
    ) -> AllowedSigners:
        """A copy with one more line; unchanged if an identical line is already there."""
        _check_principal(principal)
        if namespaces is not None:
            for ns in namespaces:
                _check_namespace_pattern(ns)
        for signer in self.signers:
            if (
                signer.principals == (principal,)
                and signer.key == key
                and signer.namespaces == namespaces
                and signer.valid_after is None
                and signer.valid_before is None
            ):
                return self
        last = max((item.line for item in self._items()), default=0)
        added = AllowedSigner((principal,), key, namespaces, last + 1)
        return AllowedSigners((*self.signers, added), self.foreign)

    def _items(self) -> Iterator[AllowedSigner | ForeignLine]:
        yield from self.signers
        yield from self.foreign


def verify_allowed(
    armored: str,
    data: bytes,
    namespace: str,
    signers: AllowedSigners,
    *,
    at: datetime | None = None,
) -> tuple[str, PublicKey]:
    """Verify the signature, then require its key to be allowed for ``namespace``.

    Returns (first allowed principal, key) — the key carries the comment from the file.
    """
    key = verify(armored, data, namespace)
    principals = signers.principals_for(key, namespace, at=at)
    if principals:
        listed = next(s.key for s in signers.signers if s.key == key)
        return principals[0], listed
    known = [s for s in signers.signers if s.key == key]
    if known:
        lines = ", ".join(str(s.line) for s in known)
        raise SignatureError(
            f"key {key.fingerprint} is in allowed_signers (line {lines}) but not allowed to "
            f"sign {namespace!r} at this time; widen its namespaces=/valid-* options with a "
            "commit signed by an operator"
        )
    raise SignatureError(
        f"signed by unknown key {key.fingerprint} ; add it to {ALLOWED_SIGNERS_PATH} "
        "with a commit signed by an operator"
    )


# --------------------------------------------------------------------------- parsing


def _parse_line(text: str, lineno: int, source: str) -> AllowedSigner | ForeignLine:
    def fail(what: str) -> ConfigError:
        return ConfigError(f"{source}:{lineno}: {what}")

    principals_field, rest = _take_token(text, fail, "principals")
    principals = tuple(principals_field.split(","))
    if not rest:
        raise fail("missing key; expected 'principals [options] ssh-ed25519 AAAA... [comment]'")
    if any(not p for p in principals):
        raise fail(f"empty principal in {principals_field!r}; separate principals with commas")

    first, after = _split_token(rest)
    options: dict[str, str | bool] = {}
    if _looks_like_key_type(first):
        keytype, rest = first, after
    else:
        options = _parse_options(first, fail)
        keytype, rest = _split_token(after)
        if not keytype:
            raise fail("missing key after the options")
    if keytype not in _KEY_TYPES and not (
        keytype.endswith(_CERT_SUFFIX) and keytype[: -len(_CERT_SUFFIX)] in _KEY_TYPES
    ):
        raise fail(f"unknown key type {keytype!r}; expected e.g. 'ssh-ed25519 AAAA...'")
    b64, comment = _split_token(rest)
    if not b64 or not _B64.match(b64):
        raise fail(f"missing or invalid base64 key after {keytype!r}")

    if options.get("cert-authority") or keytype != KEY_TYPE:
        # OpenSSH would honour these, truss never will: keep them so rendering preserves them.
        return ForeignLine(text, lineno)
    try:
        key = PublicKey.from_line(f"{keytype} {b64} {comment}")
    except ConfigError as exc:
        raise fail(f"{exc.message}; copy the key from its .pub file") from exc

    namespaces_opt = options.get("namespaces")
    namespaces: tuple[str, ...] | None = None
    if isinstance(namespaces_opt, str):
        namespaces = tuple(ns.strip() for ns in namespaces_opt.split(","))
        if any(not ns for ns in namespaces):
            raise fail(f'empty namespace in namespaces="{namespaces_opt}"')
    return AllowedSigner(
        principals,
        key,
        namespaces,
        lineno,
        valid_after=_option_time(options, "valid-after", fail),
        valid_before=_option_time(options, "valid-before", fail),
    )


def _take_token(text: str, fail: _Fail, what: str) -> tuple[str, str]:
    # OpenSSH's strdelimw: the field ends at the first whitespace, unless a '"' comes first;
    # then the quote is dropped and the field runs to the next '"' (no escapes) and ends
    # there. So '"a b,c"' and 'c,"a b"' both work, '"a b",c' does not.
    match = re.search(r'[\s"]', text)
    if match is None:
        return text, ""
    if match.group(0) != '"':
        return text[: match.start()], text[match.start() :].strip()
    end = text.find('"', match.end())
    if end < 0:
        raise fail(f"unterminated quote in the {what}")
    token, rest = text[: match.start()] + text[match.end() : end], text[end + 1 :]
    if rest and not rest[0].isspace():
        raise fail(
            f"unexpected {rest.split()[0]!r} after the closing quote of the {what}; "
            'quote the whole field, e.g. "a b@example.com,c@example.com"'
        )
    return token, rest.strip()


def _split_token(text: str) -> tuple[str, str]:
    parts = text.split(None, 1)
    if not parts:
        return "", ""
    return parts[0], (parts[1].strip() if len(parts) == 2 else "")


def _looks_like_key_type(token: str) -> bool:
    return "=" not in token and '"' not in token and bool(_KEY_TYPE_SHAPE.match(token))


def _parse_options(text: str, fail: _Fail) -> dict[str, str | bool]:
    # Mirrors sshsigopt_parse: comma-separated, values must be double-quoted, repeats and
    # unknown names are errors. Quoted values may hold commas (and, there, whitespace).
    options: dict[str, str | bool] = {}
    pos = 0
    while pos < len(text):
        match = re.match(r"[A-Za-z-]+", text[pos:])
        name = match.group(0) if match else ""
        pos += len(name)
        if name == "cert-authority":
            value: str | bool = True
        elif name in ("namespaces", "valid-after", "valid-before"):
            if text[pos : pos + 2] != '="':
                raise fail(f'option {name} needs a double-quoted value, e.g. {name}="..."')
            end = text.find('"', pos + 2)
            if end < 0:
                raise fail(f"unterminated quote in option {name}")
            value = text[pos + 2 : end]
            pos = end + 1
        else:
            raise fail(
                f"unknown option {text[pos - len(name) :].split(',')[0]!r}; allowed are "
                'namespaces="...", valid-after="...", valid-before="..." and cert-authority'
            )
        if name in options:
            raise fail(f"option {name} given twice")
        options[name] = value
        if pos < len(text):
            if text[pos] != ",":
                raise fail(f"expected ',' between options, got {text[pos:]!r}")
            pos += 1
            if pos == len(text):
                raise fail("options end with a stray ','")
    return options


def _option_time(options: dict[str, str | bool], name: str, fail: _Fail) -> datetime | None:
    value = options.get(name)
    if not isinstance(value, str):
        return None
    try:
        return _parse_time(value)
    except ValueError as exc:
        raise fail(
            f'invalid {name}="{value}"; use YYYYMMDD[Z] or YYYYMMDDHHMM[SS][Z] ({exc})'
        ) from exc


def _parse_time(value: str) -> datetime:
    # OpenSSH parse_absolute_time: local time unless suffixed with Z (UTC).
    match = _TIME.match(value)
    if not match:
        raise ValueError("bad format")
    digits = match.group(1) + (match.group(2) or "")
    fmt = {8: "%Y%m%d", 12: "%Y%m%d%H%M", 14: "%Y%m%d%H%M%S"}[len(digits)]
    parsed = datetime.strptime(digits, fmt)
    return parsed.replace(tzinfo=UTC) if match.group(4) else parsed.astimezone()


def _render_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y%m%d%H%M%SZ")


def _render_principals(principals: tuple[str, ...]) -> str:
    joined = ",".join(principals)
    if any(ch.isspace() for ch in joined) or joined.startswith(("#", '"')):
        return f'"{joined}"'
    return joined


def _check_principal(principal: str) -> None:
    # Any line break (not only "\n"): str.splitlines would read "\r" or U+2028 as a new line.
    if not principal or '"' in principal or "," in principal or not principal.isprintable():
        raise ConfigError(
            f"invalid principal {principal!r}: it must be non-empty and contain no '\"', "
            "',' or control character (use something like 'name@example.com')"
        )


def _check_namespace_pattern(namespace: str) -> None:
    if not namespace or any(ch in namespace for ch in ',"') or namespace != namespace.strip():
        raise ConfigError(
            f"invalid namespace {namespace!r}: it must be non-empty, with no ',', '\"' "
            "or surrounding spaces"
        )


# --------------------------------------------------------------------------- patterns


def _match_pattern(text: str, pattern: str) -> bool:
    # OpenSSH match_pattern: '*' and '?' wildcards only, case-sensitive here (sshsig passes
    # dolower=0 for namespaces).
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, text, flags=re.DOTALL) is not None


def _match_pattern_list(text: str, patterns: tuple[str, ...]) -> bool:
    # OpenSSH match_pattern_list: any matching negated pattern ("!x") vetoes the whole list.
    matched = False
    for pattern in patterns:
        if pattern.startswith("!"):
            if _match_pattern(text, pattern[1:]):
                return False
        elif _match_pattern(text, pattern):
            matched = True
    return matched
