"""Bearer tokens for the HTTP API: only their SHA-256 hashes are kept, each with its scopes
and the tenant it is bound to.

``new_token`` adds one to a TOML file and returns the token, which is shown once and stored
nowhere. A token is 32 random bytes, so a plain SHA-256 is as hard to reverse as the token is
to guess (no salt or slow hash needed). ``TokenFile.check`` compares the presented token's
hash with every stored hash in constant time, whichever matches, so the answer's timing says
nothing about how close a guess came.

A token acts only for the tasks it is bound to: those whose task-registry entry names one of
its ``enterprises``, the task ids it lists (``tasks``), or any task (``any_task = true``);
each token has exactly one of the three. ``admit`` is the one check every HTTP route that
takes a task calls: token, scope, binding, then the task's registry entry. A token written
before tokens were bound has none of the three and acts for no task (403, saying to re-issue
it); an operator may instead add the binding line to its table by hand.

File format::

    [tokens.ci-reader]
    hash = "sha256:9f2c…"
    scopes = ["tasks:read"]
    enterprises = ["acme"]             # or: tasks = ["T-118"], or: any_task = true
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
from typing import TYPE_CHECKING, Any

from ...errors import AccessError, ConfigError, Forbidden, NotFound, ScopeError, UsageError
from .tasks import TASK_ID, TaskRegistry
from .watched import toml_tables

if TYPE_CHECKING:
    from ...runs.runcontext import RunContext

# tasks:panel: the review queue and a verdict's promote or reject over HTTP (the verdict is a
# panel member's, and the server commits it only with a key holding the panel role).
SCOPES = ("tasks:read", "tasks:write", "tasks:panel")
BINDING_FIELDS = ("enterprises", "tasks", "any_task")
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


# An enterprise id as the task registry holds it: a non-empty string, nothing a TOML line mangles.
ENTERPRISE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
BINDING_OPTIONS = "--enterprise E, --task T or --any-task"
UNBOUND = "UNBOUND (acts for no task: issue a new token, revoke this one)"


@dataclass(frozen=True)
class Binding:
    """The tasks a token acts for: exactly one of its enterprises, its task ids, or any task."""

    enterprises: frozenset[str] = frozenset()
    tasks: frozenset[str] = frozenset()
    any_task: bool = False

    def admits(self, task_id: str, entry: RunContext | None) -> bool:
        """Whether the token acts for this task (``entry``: its registry entry, if any). A task
        the registry lacks is admitted only by a token that would act for that id, so no token
        learns which of another tenant's task ids exist (it hears 403, not 404)."""
        if self.any_task or task_id in self.tasks:
            return True
        return entry is not None and entry.enterprise in self.enterprises

    def describe(self) -> dict[str, Any]:
        if self.any_task:
            return {"any_task": True}
        if self.tasks:
            return {"tasks": sorted(self.tasks)}
        return {"enterprises": sorted(self.enterprises)}

    def text(self) -> str:
        if self.any_task:
            return "any task"
        if self.tasks:
            return "task " + ",".join(sorted(self.tasks))
        return "enterprise " + ",".join(sorted(self.enterprises))


@dataclass(frozen=True)
class Token:
    name: str
    hash: str
    scopes: frozenset[str]
    created: str | None = None
    expires: datetime.datetime | None = None
    # None: a token written before tokens were bound to tenants; it acts for no task.
    binding: Binding | None = None

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
                "`truss-files tokens new --file tokens.toml --scope tasks:read --enterprise E`"
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

    def unbound(self) -> list[str]:
        """The names of tokens written before tokens were bound to tenants (they act for none)."""
        return [t.name for t in self.tokens if t.binding is None]

    def named(self, name: str) -> Token | None:
        return next((t for t in self.tokens if t.name == name), None)


def admit(
    tokens: TokenFile,
    header: str | None,
    need: str,
    task_id: str,
    registry: TaskRegistry,
    now: datetime.datetime,
) -> RunContext | None:
    """The one check of every HTTP route that takes a task: the ``Authorization`` header's
    token is ours, current and holds ``need`` (else AccessError, 401, or ScopeError, 403), it
    is bound to this task (else Forbidden, 403), and the task's registry entry, which is the
    call's whole run context. None: the registry has no such task (404), said only to a token
    that would act for that id."""
    presented = None
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer":
            raise AccessError("use `Authorization: Bearer <token>`")
        presented = value.strip()
    token = tokens.check(presented, need, now)
    binding = token.binding
    if binding is None:
        raise Forbidden(
            f"the bearer token '{token.name}' was made before tokens were bound to tenants and "
            "acts for no task; its operator issues a new one with `truss-files tokens new` and "
            f"{BINDING_OPTIONS}, then revokes this one (`truss-files tokens revoke`)"
        )
    entry = registry.get(task_id)
    if not binding.admits(task_id, entry):
        raise Forbidden(
            f"the bearer token '{token.name}' acts for {binding.text()} only, and this task "
            "is not one of them; use a token bound to this task's tenant"
        )
    return entry


def _binding(item: Mapping[str, Any], where: str) -> Binding | None:
    enterprises = item.get("enterprises")
    tasks = item.get("tasks")
    any_task = item.get("any_task")
    given = [k for k in BINDING_FIELDS if k in item]
    if not given:
        return None
    if len(given) > 1:
        raise ConfigError(
            f"{where}: holds {' and '.join(given)}; a token is bound by exactly one of "
            "enterprises, tasks or any_task"
        )
    if any_task is not None:
        if any_task is not True:
            raise ConfigError(f"{where}: 'any_task' must be true (or leave it out)")
        return Binding(any_task=True)
    if enterprises is not None:
        if not _names(enterprises, ENTERPRISE):
            raise ConfigError(f"{where}: 'enterprises' must list enterprise ids")
        return Binding(enterprises=frozenset(enterprises))
    if not _names(tasks, TASK_ID):
        raise ConfigError(f"{where}: 'tasks' must list task ids")
    return Binding(tasks=frozenset(tasks or ()))


def _names(value: Any, pattern: re.Pattern[str]) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, str) and pattern.match(v) for v in value)
    )


def _token(name: str, item: Any, source: str) -> Token:
    where = f"{source}: [tokens.{name}]"
    if not NAME.match(name):
        raise ConfigError(f"{where}: a token name is letters, digits, '.', '_' or '-'")
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: must be a table")
    unknown = set(item) - {"hash", "scopes", "created", "expires"} - set(BINDING_FIELDS)
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
    return Token(
        name,
        hashed,
        frozenset(scopes),
        str(created) if created else None,
        expires,
        _binding(item, where),
    )


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


def stamp(when: datetime.datetime) -> str:
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
    enterprises: Iterable[str] = (),
    tasks: Iterable[str] = (),
    any_task: bool = False,
    clock: Clock = _now,
) -> tuple[str, Token]:
    """Add a token to the file (its hash only) and return the token and its record. It is
    bound by exactly one of ``enterprises``, ``tasks`` or ``any_task``."""
    binding = bind(enterprises, tasks, any_task)
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
    record = Token(name, digest(token), frozenset(wanted), stamp(clock()), expires, binding)
    _write(Path(path), (*current.tokens, record))
    return token, record


def bind(enterprises: Iterable[str], tasks: Iterable[str], any_task: bool) -> Binding:
    """The binding of a new token; a usage error unless exactly one kind is given."""
    ents, ids = sorted(set(enterprises)), sorted(set(tasks))
    if [bool(ents), bool(ids), any_task].count(True) != 1:
        raise UsageError(
            f"bind the token to its tenant with exactly one of {BINDING_OPTIONS} "
            "(--enterprise and --task repeat)"
        )
    bad = [e for e in ents if not ENTERPRISE.match(e)] + [t for t in ids if not TASK_ID.match(t)]
    if bad:
        raise UsageError(
            f"{bad[0][:40]!r} is no enterprise or task id: letters, digits, '.', '_', ':' or '-'"
        )
    return Binding(frozenset(ents), frozenset(ids), any_task)


def revoke_token(path: str | os.PathLike[str], name: str) -> Token:
    """Remove the token ``name`` from the file (a server stops taking it at its next request)."""
    current = load(path)
    found = current.named(name)
    if found is None:
        names = ", ".join(t.name for t in current.tokens) or "none yet"
        raise NotFound(f"{path} has no token named {name!r}; its tokens: {names}")
    _write(Path(path), (t for t in current.tokens if t.name != name))
    return found


def _write(path: Path, tokens: Iterable[Token]) -> None:
    lines = [
        "# truss-files HTTP API tokens: only SHA-256 hashes are kept; a token is shown once.",
        "",
    ]
    for t in tokens:
        lines.append(f"[tokens.{t.name}]")
        lines.append(f'hash = "{t.hash}"')
        lines.append("scopes = [" + ", ".join(f'"{s}"' for s in sorted(t.scopes)) + "]")
        for field, value in (t.binding.describe() if t.binding else {}).items():
            shown = "true" if value is True else "[" + ", ".join(f'"{v}"' for v in value) + "]"
            lines.append(f"{field} = {shown}")
        if t.created:
            lines.append(f'created = "{t.created}"')
        if t.expires is not None:
            lines.append(f'expires = "{stamp(t.expires)}"')
        lines.append("")
    text = "\n".join(lines)
    # Written beside and renamed: a server reading the file never sees half of it.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise UsageError(
            f"cannot write the token file {path}: {exc.strerror or exc}; make its folder first "
            "or give another --file"
        ) from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def describe(tokens: TokenFile) -> list[Mapping[str, Any]]:
    """What ``tokens list`` shows: names, scopes, bindings and times, never a hash or a token.
    A ``binding`` of None: a token from before bindings, which acts for no task."""
    return [
        {
            "name": t.name,
            "scopes": sorted(t.scopes),
            "binding": t.binding.describe() if t.binding else None,
            "created": t.created,
            "expires": stamp(t.expires) if t.expires else None,
        }
        for t in tokens.tokens
    ]
