"""The values truss-files passes around: kinds, trust tiers, layers, entries, ledger refs.

All values are frozen; a change of trust makes a new ``Entry`` with ``dataclasses.replace``.
"""

from __future__ import annotations

import enum
import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import UsageError


class Kind(enum.StrEnum):
    GOAL = "goal"
    DECISION = "decision"
    FACT = "fact"
    LESSON = "lesson"
    PLAYBOOK = "playbook"
    ARTIFACT = "artifact"
    SCRATCH = "scratch"
    CONTEXT_SUMMARY = "context_summary"
    INFERENCE = "inference"
    PREFERENCE = "preference"
    CORRECTION = "correction"

    @classmethod
    def parse(cls, value: str) -> Kind:
        text = str(value).strip().lower().replace("-", "_")
        try:
            return cls(text)
        except ValueError:
            # "lessons" and "playbooks" are how people and the memory tool's paths say it.
            if text.endswith("s") and text[:-1] in cls._value2member_map_:
                return cls(text[:-1])
            raise UsageError(
                f"unknown kind '{value}'; use one of: {', '.join(k.value for k in cls)}"
            ) from None


class Trust(enum.StrEnum):
    UNVERIFIED = "unverified"
    VERIFIED = "verified"
    STALE = "stale"
    REJECTED = "rejected"

    @property
    def rank(self) -> int:
        """Order for trust floors: verified > stale > unverified; rejected never passes."""
        return _TRUST_RANK[self]

    @classmethod
    def floor(cls, value: str | Trust) -> Trust:
        """Parse a ``min_trust`` value; ``rejected`` is refused, never a floor."""
        try:
            trust = cls(str(value).strip().lower())
        except ValueError:
            raise UsageError(
                f"unknown min_trust '{value}'; use verified (default), stale or unverified"
            ) from None
        if trust is cls.REJECTED:
            raise UsageError(
                "min_trust 'rejected' is not allowed: rejected entries are kept for audit "
                "and never returned; use verified, stale or unverified"
            )
        return trust

    def passes(self, floor: Trust) -> bool:
        return self is not Trust.REJECTED and self.rank >= floor.rank


_TRUST_RANK = {Trust.REJECTED: -1, Trust.UNVERIFIED: 0, Trust.STALE: 1, Trust.VERIFIED: 2}

# The trust arrows: unverified -> verified or rejected, verified -> stale, stale -> verified.
# Reverts are judged separately (the inverse of a recorded move).
LEGAL_TRANSITIONS: frozenset[tuple[Trust, Trust]] = frozenset(
    {
        (Trust.UNVERIFIED, Trust.VERIFIED),
        (Trust.UNVERIFIED, Trust.REJECTED),
        (Trust.VERIFIED, Trust.STALE),
        (Trust.STALE, Trust.VERIFIED),
    }
)
# The same rule in words, for messages (a user has no design document to look up).
TRUST_RULE = (
    "trust moves only unverified -> verified or rejected, verified -> stale, and stale -> verified"
)


class Layer(enum.StrEnum):
    TASK = "task"
    MEMBER = "member"
    ROLE = "role"
    TEAM = "team"
    ENTERPRISE = "enterprise"

    @classmethod
    def parse(cls, value: str) -> Layer:
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise UsageError(
                f"unknown layer '{value}'; use one of: {', '.join(x.value for x in cls)}"
            ) from None


# Patterns, not compiled objects: ``re`` compiles each on its first use (and keeps it), so
# a query -- which checks no key and no ledger ref -- does not compile them at import.
# A write outside a run names the face and principal it came from: ``cli:<principal>``,
# ``api:``, ``tool:``, ``import:``, ``http:``, ``mcp:`` (ORIGINS). ``entry:<id>`` names a note
# a consolidated note merged (belief.consolidate), in its ``sources``.
ORIGINS = ("cli", "api", "tool", "import", "http", "mcp")
_LEDGER_REF = (
    r"^(git:[0-9a-f]{4,64}|run:[A-Za-z0-9._-]{1,128}/\d{1,12}|event:[^\s#]{1,256}(#[^\s#]{1,64})?"
    r"|(cli|api|tool|import|http|mcp):[^\s]{1,256}|entry:[0-9a-f]{32})$"
)


def check_ledger_ref(value: str) -> str:
    """A LedgerRef names the event behind a fact: git:<commit>, run:<id>/<seq>, event:<id>[#rev]."""
    if not re.fullmatch(_LEDGER_REF, value):
        raise UsageError(
            f"'{value}' is not a ledger ref; use git:<commit>, run:<run-id>/<seq>, "
            "event:<id>[#<revision>] or <face>:<principal> (face: " + ", ".join(ORIGINS) + ")"
        )
    return value


_KEY_BAD = r"[\x00-\x1f\x7f]"
MAX_KEY = 256
_SURROGATE = "[\ud800-\udfff]"
# Characters that change how a key or path reads without changing what it is: bidirectional
# controls (U+202E turns "txt.exe" into "exe.txt" on screen) and invisible marks. NFKC leaves
# them alone, so they are named here.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_INVISIBLE = frozenset("\u00ad\u180e\u200b\u2060\ufeff")
# Dots and slashes NFKC does not fold to '.' or '/' but a reader takes for them.
_LOOKALIKE = frozenset("\u0701\u0702\u2027\u2044\u2215\u2216\u2571\u2572\u29f5\u29f8\u29f9\ua4f8")


def check_key(key: str) -> str:
    if not key or not key.strip():
        raise UsageError("key must not be empty")
    if len(key) > MAX_KEY:
        raise UsageError(f"key is {len(key)} characters; the limit is {MAX_KEY}")
    if re.search(_KEY_BAD, key):
        raise UsageError("key must not contain control characters or newlines")
    if re.search(_SURROGATE, key):
        raise UsageError("key holds an unpaired surrogate, not Unicode text; fix its encoding")
    problem = confusable(key)
    if problem:
        raise UsageError(f"key {key!r} {problem}")
    return key


def confusable(text: str) -> str | None:
    """Why ``text`` (a key or a memory path) reads as something it is not, or None.

    Refused: bidirectional controls, invisible characters, and anything NFKC normalization
    would change -- fullwidth letters, ligatures, the dot leaders U+2024-2026 that show as
    '.', '..' and '...' -- plus a few dot and slash look-alikes NFKC keeps. Two keys that look
    the same on screen must be the same key. ASCII text never needs the check.
    """
    if text.isascii():
        return None
    for char in text:
        if char in _BIDI:
            return (
                f"contains {_name(char)}, a bidirectional control that makes text display "
                "in another order than it is stored; remove it"
            )
        if char in _INVISIBLE:
            return f"contains {_name(char)}, an invisible character; remove it"
        if char in _LOOKALIKE:
            return f"contains {_name(char)}, which looks like '.' or '/'; use plain ASCII"
    normal = unicodedata.normalize("NFKC", text)
    if normal == text:
        return None
    for char in text:
        folded = unicodedata.normalize("NFKC", char)
        if folded != char and any(c in folded for c in "./\\"):
            return f"contains {_name(char)}, which reads as {folded!r}; use plain ASCII instead"
        if folded != char:
            return (
                f"contains {_name(char)}, which reads as {folded!r}; write it in normalized "
                f"(NFKC) form: {normal!r}"
            )
    return f"is not in normalized (NFKC) form; write it as {normal!r}"


def _name(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, 'UNNAMED')}"


@dataclass(frozen=True)
class Provenance:
    produced_by: str | None = None
    sources: tuple[str, ...] = ()
    verified_by: Mapping[str, Any] | None = None
    # The kinds of credential an unattended write replaced by ``[secret:KIND]`` in the body
    # (format/secrets.py); empty for every other write, and then not in the file at all.
    masked: tuple[str, ...] = ()


@dataclass(frozen=True)
class Entry:
    """One memory entry: the front matter fields (kind, key, trust, ...) plus the body."""

    kind: Kind
    key: str
    body: str
    trust: Trust = Trust.UNVERIFIED
    layer: Layer = Layer.TASK
    scope: Mapping[str, str] = field(default_factory=dict)
    author: str = "agent:unknown"
    created: str = ""
    salience: float = 0.5
    provenance: Provenance = field(default_factory=Provenance)
    supersedes: str | None = None
    superseded_by: str | None = None
    checks: tuple[str, ...] = ()
    # The path the model wrote this entry at through the memory tool ("/memories/notes.md"),
    # None for every other write. Set, it is part of the content address and the body is the
    # file's text byte for byte (trailing newline, CRLF and trailing blanks kept).
    memory_path: str | None = None

    @property
    def id(self) -> str:
        # Kept once made: the fields it is the address of are frozen. The recall index seeds it
        # for the entries it returns (it checked each file's id against its content).
        found: str | None = self.__dict__.get("_id")
        if found is None:
            found = content_id(self)
            object.__setattr__(self, "_id", found)
        return found

    @property
    def path(self) -> str:
        return entry_path(self.kind, self.id)

    @property
    def ledger_ref(self) -> str | None:
        return self.provenance.produced_by

    def immutable(self) -> dict[str, Any]:
        """The fields the content address covers; trust, verdicts and links are excluded.
        ``memory_path`` only when set, so the ids of entries without one never change."""
        fields: dict[str, Any] = {
            "kind": self.kind.value,
            "key": self.key,
            "body": self.body,
            "layer": self.layer.value,
            "scope": dict(sorted(self.scope.items())),
            "author": self.author,
            "produced_by": self.provenance.produced_by,
        }
        if self.memory_path is not None:
            fields["memory_path"] = self.memory_path
        if self.provenance.masked:
            fields["masked"] = list(self.provenance.masked)
        return fields


def content_id(entry: Entry) -> str:
    import hashlib  # here: a query makes no ids, and hashlib costs its start-up (OpenSSL)

    canonical = json.dumps(
        entry.immutable(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def entry_path(kind: Kind, entry_id: str) -> str:
    # Fan-out by the id's first two hex characters: in one flat folder every commit would
    # rewrite one huge tree (``python -m benchmarks write`` measures both layouts).
    return f"memories/{kind.value}/{entry_id[:2]}/{entry_id}.md"


# The one limit on an entry's body, in UTF-8 bytes. Writes refuse a longer body and the codec
# refuses to read one, so the audit and the hooks (which parse every changed entry file) refuse
# a hand-committed one too, and reads never serve one.
MAX_BODY = 64 * 1024
# A bound on a whole entry file, checked before any parsing: the body's limit plus room for the
# front matter (a verdict with many votes and their evidence).
MAX_ENTRY_BYTES = MAX_BODY + 192 * 1024


# A source naming a note this one merged (``consolidate``): promoting it retires that note.
MERGED_PREFIX = "entry:"


def merged_notes(entry: Entry) -> list[str]:
    """The ids of the notes a consolidated note merged (its ``entry:<id>`` sources)."""
    return [
        s[len(MERGED_PREFIX) :] for s in entry.provenance.sources if s.startswith(MERGED_PREFIX)
    ]


# A body that starts with this is a deletion (a tombstone), written by the memory tool's
# delete and rename: once verified it hides the older entries of its kind and key.
TOMBSTONE_MARK = "<!-- truss:tombstone -->"


def check_unicode(text: str, what: str) -> str:
    """``text`` when it is Unicode text; ``UsageError`` when it holds an unpaired surrogate:
    bytes that were not UTF-8, which Python reads from argv and stdin as such (no file or
    commit can hold them)."""
    found = re.search(_SURROGATE, text)
    if found is not None:
        raise UsageError(
            f"{what} holds an unpaired surrogate at character {found.start() + 1} (bytes that "
            "were not UTF-8); give UTF-8 text, e.g. converted with iconv -t UTF-8"
        )
    return text


def body_size(body: str) -> int:
    """The size the body limit counts: UTF-8 bytes."""
    return len(body.encode("utf-8", "surrogatepass"))


def normalize_body(body: str) -> str:
    """Line endings become LF and trailing blank lines go: the body is stored canonically."""
    text = body.replace("\r\n", "\n").replace("\r", "\n") if "\r" in body else body
    return "\n".join(map(str.rstrip, text.split("\n"))).strip("\n")


# How a promotion settles a key that already holds a verified entry (``[policy] conflict``).
CONFLICT_POLICIES = ("verified-wins", "latest-wins", "panel-arbitrated", "keep-both-flagged")


@dataclass(frozen=True)
class Conflict:
    """Two or more live verified entries of one kind and key, as a read reports them."""

    kind: str
    key: str
    ids: tuple[str, ...]  # oldest first (``created``, then id)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "ids": list(self.ids)}
