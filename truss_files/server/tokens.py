"""Bearer tokens for the HTTP API: only their SHA-256 hashes are kept, each with its scopes.

``new_token`` adds one to a TOML file and returns the token, which is shown once and stored
nowhere. A token is 32 random bytes, so a plain SHA-256 is as hard to reverse as the token is
to guess (no salt or slow hash needed). ``TokenFile.check`` compares the presented token's
hash with every stored hash in constant time, whichever matches, so the answer's timing says
nothing about how close a guess came.

File format::

    [tokens.ci-reader]
    hash = "sha256:9f2c…"
    scopes = ["tasks:read"]
    created = "2026-12-01T09:00:00Z"
    expires = "2026-12-31T00:00:00Z"   # optional
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AccessError, ConfigError, ScopeError, UsageError
from .watched import toml_tables

SCOPES = ("tasks:read", "tasks:write")
PREFIX = "tft_"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
# What a presented token may look like before we hash it: anything longer is no token of ours.
MAX_TOKEN = 128

Clock = Callable[[], datetime.datetime]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Token:
    name: str
    hash: str
    scopes: frozenset[str]
    created: str | None = None
    expires: datetime.datetime | None = None

    def expired(self, now: datetime.datetime) -> bool:
        return self.expires is not None and now >= self.expires


@dataclass(frozen=True)
class TokenFile:
    tokens: tuple[Token, ...]

    @classmethod
    def parse(cls, data: bytes, source: str = "tokens.toml") -> TokenFile:
        table = toml_tables(data, source, "tokens.NAME", "fix or recreate it")
        return cls(tuple(_token(name, item, source) for name, item in table.items()))

    def check(self, presented: str | None, need: str, now: datetime.datetime) -> Token:
        """The token presented, if it is ours, current and holds ``need``; raises otherwise."""
        if not presented:
            raise AccessError(
                "send `Authorization: Bearer <token>`; its operator makes one with "
                "`truss-files tokens new --file tokens.toml --scope tasks:read`"
            )
        want = digest(presented) if len(presented) <= MAX_TOKEN else "sha256:"
        found = None
        for token in self.tokens:
            # Every stored hash is compared, and compare_digest takes the same time whatever
            # prefix matches: which token (if any) matched shows neither in time nor in order.
            if hmac.compare_digest(token.hash, want):
                found = token
        if found is None:
            raise AccessError("the bearer token is not valid for this server; ask its operator")
        if found.expired(now):
            raise AccessError(f"the bearer token '{found.name}' has expired; ask for a new one")
        if need not in found.scopes:
            raise ScopeError(
                f"the bearer token '{found.name}' lacks the scope {need}; ask for a token with "
                f"--scope {need}"
            )
        return found


def _token(name: str, item: Any, source: str) -> Token:
    where = f"{source}: [tokens.{name}]"
    if not NAME.match(name):
        raise ConfigError(f"{where}: a token name is letters, digits, '.', '_' or '-'")
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: must be a table")
    unknown = set(item) - {"hash", "scopes", "created", "expires"}
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    hashed = item.get("hash")
    if not isinstance(hashed, str) or not HASH.match(hashed):
        raise ConfigError(f"{where}: 'hash' must be sha256:<64 hex digits>")
    scopes = item.get("scopes")
    if not isinstance(scopes, list) or not scopes or not set(scopes) <= set(SCOPES):
        raise ConfigError(f"{where}: 'scopes' must list some of {', '.join(SCOPES)}")
    expires = item.get("expires")
    if expires is not None:
        expires = _when(expires, f"{where}: 'expires'")
    created = item.get("created")
    return Token(name, hashed, frozenset(scopes), str(created) if created else None, expires)


def _when(value: Any, where: str) -> datetime.datetime:
    if isinstance(value, datetime.datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ConfigError(f"{where} must be an ISO time like 2026-12-31T00:00:00Z") from exc
    else:
        raise ConfigError(f"{where} must be an ISO time like 2026-12-31T00:00:00Z")
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def _stamp(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_expiry(text: str, now: datetime.datetime) -> datetime.datetime:
    """``--expires``: an ISO time, or a span from now like ``90s``, ``45m``, ``12h``, ``30d``."""
    span = re.fullmatch(r"(\d{1,6})([smhd])", text.strip())
    if span:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[span.group(2)]
        return now + datetime.timedelta(**{unit: int(span.group(1))})
    try:
        return _when(text, "--expires")
    except ConfigError as exc:
        raise UsageError(f"{exc.message}, or a span like 30d") from None


def load(path: str | os.PathLike[str]) -> TokenFile:
    file = Path(path)
    if not file.exists():
        return TokenFile(())
    return TokenFile.parse(file.read_bytes(), str(file))


def new_token(
    path: str | os.PathLike[str],
    scopes: Iterable[str],
    *,
    name: str | None = None,
    expires: datetime.datetime | None = None,
    clock: Clock = _now,
) -> tuple[str, Token]:
    """Add a token to the file (its hash only) and return the token and its record."""
    wanted = sorted(set(scopes))
    bad = [s for s in wanted if s not in SCOPES]
    if not wanted or bad:
        raise UsageError(
            f"unknown scope(s) {', '.join(bad)}; pass --scope with one of {', '.join(SCOPES)}"
            if bad
            else f"pass at least one --scope ({', '.join(SCOPES)})"
        )
    current = load(path)
    taken = {t.name for t in current.tokens}
    if name is None:
        name = next(f"token-{n}" for n in range(1, len(taken) + 2) if f"token-{n}" not in taken)
    if not NAME.match(name):
        raise UsageError(f"token name {name!r}: use letters, digits, '.', '_' or '-' (max 64)")
    if name in taken:
        raise UsageError(f"{path} already has a token named {name}; pick another --name")
    token = PREFIX + secrets.token_urlsafe(32)
    record = Token(name, digest(token), frozenset(wanted), _stamp(clock()), expires)
    _write(Path(path), (*current.tokens, record))
    return token, record


def _write(path: Path, tokens: Iterable[Token]) -> None:
    lines = [
        "# truss-files HTTP API tokens: only SHA-256 hashes are kept; a token is shown once.",
        "",
    ]
    for t in tokens:
        lines.append(f"[tokens.{t.name}]")
        lines.append(f'hash = "{t.hash}"')
        lines.append("scopes = [" + ", ".join(f'"{s}"' for s in sorted(t.scopes)) + "]")
        if t.created:
            lines.append(f'created = "{t.created}"')
        if t.expires is not None:
            lines.append(f'expires = "{_stamp(t.expires)}"')
        lines.append("")
    text = "\n".join(lines)
    # Written beside and renamed: a server reading the file never sees half of it.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def describe(tokens: TokenFile) -> list[Mapping[str, Any]]:
    """What ``tokens list`` shows: names, scopes and times, never a hash or a token."""
    return [
        {
            "name": t.name,
            "scopes": sorted(t.scopes),
            "created": t.created,
            "expires": _stamp(t.expires) if t.expires else None,
        }
        for t in tokens.tokens
    ]
