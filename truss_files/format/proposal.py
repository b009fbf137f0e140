"""The identity files and the format of an amendment proposal.

``identity/core.md`` (operator-signed, never amended by an agent), ``identity/self.md``
(amendable under ``[identity] policy``), ``identity/proposals/<id>.md`` (one proposed
``self.md`` each) and ``principals/<principal>.md`` (what the agent knows of one user).

A proposal file is a fenced header of ``name: <JSON value>`` lines, in a fixed order, then the
proposed ``self.md`` byte for byte, so a pull request shows the proposed text as text::

    ---
    id: "5b0c8f3e9d7a41c2b6e0f1a2d3c4b5a6"
    base: "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    author: "build-bot"
    run: "R-7f3a"
    call: "run:R-7f3a/12"
    created: "2026-11-29T11:02:33Z"
    status: "pending"
    decided_by: null
    verdict: null
    ---
    # Self ...

``id`` is the content address of the immutable fields (base, author, run, call, created and
the text); ``base`` is the git blob id of the ``self.md`` it amends ("" when there was none),
so a proposal never applies to a ``self.md`` it was not written against. ``status`` moves once,
from ``pending`` to ``approved`` / ``declined`` (an operator) or ``passed`` / ``failed`` (a
panel verdict against core, under ``self_amend``); ``verdict`` holds that verdict.

Deliberately free of pygit2: the audit and the hooks import it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import EntryError, UsageError

CORE_PATH = "identity/core.md"
SELF_PATH = "identity/self.md"
PROPOSALS_DIR = "identity/proposals"
PRINCIPALS_DIR = "principals"
MAX_IDENTITY = 64 * 1024  # bytes of one identity or principal file's text
MAX_PROPOSAL_FILE = MAX_IDENTITY + 64 * 1024  # the text plus a header with a verdict

PENDING = "pending"
DECIDED = ("approved", "declined", "passed", "failed")
STATUSES = (PENDING, *DECIDED)
APPLIED = ("approved", "passed")  # the decisions that write self.md
_FIELDS = ("id", "base", "author", "run", "call", "created", "status", "decided_by", "verdict")
_ID = re.compile(r"^[0-9a-f]{32}$")
_BLOB = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})?$")
# A principal's file name: what allowed_signers principals look like (an email, a name),
# with nothing a path could turn into a second segment or a hidden file.
_PRINCIPAL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9@._+-]{0,127}$")

SELF_TEMPLATE = """\
# Self (L0)

Voice, working persona and learned preferences. Amended only under [identity] policy in
truss.toml: proposed by the agent, approved by an operator (propose), or checked against
core by the panel (self_amend).

## Voice
- How the agent writes and speaks.

## Preferences
- Ways of working it has learned and keeps.
"""


def normalize_text(text: str, what: str = "the text") -> str:
    """LF line endings and exactly one final newline; bounded, valid UTF-8, not empty."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise UsageError(f"{what} is not valid UTF-8 text; save it as UTF-8") from None
    if "\0" in text:
        raise UsageError(f"{what} holds a NUL byte; identity files are plain text")
    if not text.strip():
        raise UsageError(f"{what} is empty; give the whole new file")
    if size > MAX_IDENTITY:
        raise UsageError(f"{what} is {size} bytes; the limit is {MAX_IDENTITY}")
    return text.rstrip("\n") + "\n"


def check_principal(name: str) -> str:
    if not _PRINCIPAL.match(name) or ".." in name:
        raise UsageError(
            f"'{name}' cannot name a principal file; use 1-128 letters, digits, '@', '.', "
            "'_', '+' or '-', starting with a letter or digit (as in allowed_signers)"
        )
    return name


def principal_path(name: str) -> str:
    return f"{PRINCIPALS_DIR}/{check_principal(name)}.md"


def principal_of_path(path: str) -> str | None:
    """The principal a ``principals/<name>.md`` path names; None for any other path."""
    prefix = f"{PRINCIPALS_DIR}/"
    if not path.startswith(prefix) or not path.endswith(".md"):
        return None
    name = path[len(prefix) : -len(".md")]
    try:
        return check_principal(name)
    except UsageError:
        return None


def proposal_path(proposal_id: str) -> str:
    return f"{PROPOSALS_DIR}/{proposal_id}.md"


def is_proposal_path(path: str) -> bool:
    prefix = f"{PROPOSALS_DIR}/"
    return (
        path.startswith(prefix) and path.endswith(".md") and bool(_ID.match(path[len(prefix) : -3]))
    )


def core_label(core_blob: str | None) -> str:
    """What a self_amend verdict records as its policy: the core it was judged against."""
    return f"self_amend core:{core_blob or 'none'}"


@dataclass(frozen=True)
class Proposal:
    base: str
    author: str
    created: str
    text: str
    run: str | None = None
    call: str | None = None
    status: str = PENDING
    decided_by: str | None = None
    verdict: Mapping[str, Any] | None = None

    @property
    def id(self) -> str:
        fields = {
            "base": self.base,
            "author": self.author,
            "run": self.run,
            "call": self.call,
            "created": self.created,
            "text": self.text,
        }
        data = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(b"truss-identity-proposal-v1\0" + data.encode()).hexdigest()[:32]

    @property
    def path(self) -> str:
        return proposal_path(self.id)

    def decided(self, status: str, by: str, verdict: Mapping[str, Any] | None = None) -> Proposal:
        return dataclasses.replace(self, status=status, decided_by=by, verdict=verdict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "author": self.author,
            "run": self.run,
            "call": self.call,
            "created": self.created,
            "status": self.status,
            "base": self.base,
            "decided_by": self.decided_by,
            "verdict": dict(self.verdict) if self.verdict else None,
            "text": self.text,
        }


def serialize(proposal: Proposal) -> bytes:
    values = proposal.to_dict()
    lines = ["---"]
    for name in _FIELDS:
        lines.append(f"{name}: {json.dumps(values[name], sort_keys=True, ensure_ascii=False)}")
    lines.append("---")
    return ("\n".join(lines) + "\n" + proposal.text).encode("utf-8")


def parse(data: bytes, path: str | None = None) -> Proposal:
    """A proposal file, checked: its fields, its id against its content and its path."""

    def bad(message: str, field: str | None = None) -> EntryError:
        return EntryError(message, path=path, field=field)

    if len(data) > MAX_PROPOSAL_FILE:
        raise bad(f"is {len(data)} bytes; a proposal file holds at most {MAX_PROPOSAL_FILE}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("is not UTF-8") from None
    lines = text.split("\n", len(_FIELDS) + 2)
    if len(lines) < len(_FIELDS) + 3 or lines[0] != "---" or lines[len(_FIELDS) + 1] != "---":
        raise bad(f"must open with a '---' header of {len(_FIELDS)} fields and close it")
    values: dict[str, Any] = {}
    for name, line in zip(_FIELDS, lines[1 : len(_FIELDS) + 1], strict=True):
        label, sep, raw = line.partition(": ")
        if not sep or label != name:
            raise bad(f"header line {line[:40]!r} should be '{name}: <JSON>'", name)
        try:
            values[name] = json.loads(raw)
        except json.JSONDecodeError:
            raise bad("is not a JSON value", name) from None
    for name in ("id", "base", "author", "created", "status"):
        if not isinstance(values[name], str):
            raise bad("must be a string", name)
    for name in ("run", "call", "decided_by"):
        if values[name] is not None and not isinstance(values[name], str):
            raise bad("must be a string or null", name)
    if values["verdict"] is not None and not isinstance(values["verdict"], dict):
        raise bad("must be a verdict object or null", "verdict")
    if values["status"] not in STATUSES:
        raise bad(f"is {values['status']!r}; use one of {', '.join(STATUSES)}", "status")
    if not _BLOB.match(values["base"]):
        raise bad("must be the git blob id of the self.md it amends, or empty", "base")
    body = lines[len(_FIELDS) + 2]
    try:
        if normalize_text(body) != body:
            raise bad("the proposed text must end with exactly one newline (LF)")
    except UsageError as exc:
        raise bad(exc.message) from None
    found = Proposal(
        base=values["base"],
        author=values["author"],
        created=values["created"],
        text=body,
        run=values["run"],
        call=values["call"],
        status=values["status"],
        decided_by=values["decided_by"],
        verdict=values["verdict"],
    )
    if values["id"] != found.id:
        raise bad(f"is {values['id']} but the content gives {found.id}", "id")
    if path is not None and path != found.path:
        raise bad(f"sits at {path}; a proposal with this id belongs at {found.path}")
    return found
