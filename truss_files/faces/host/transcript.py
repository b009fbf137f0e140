"""A host's transcript as the messages a model may learn from.

Two formats:

    claude-code   Claude Code's session file: JSON lines, one event each, with ``type``
                  (user, assistant, summary, system, ...), ``uuid``, ``sessionId`` and
                  ``message`` = {"role", "content": text | [blocks]}
    messages      a JSON list of {"role", "content"} (the Messages API's shape), or an object
                  with such a list under "messages", or the same as JSON lines

Each message keeps where it came from (``seq``: the line of the session file, or the place in
the list, from 1), so a note learned from it can name it. What is never sent to a model:

- what a memory read returned (the result of memory_query, memory_view, read_memory,
  memory_ask, or the memory tool's ``view``): a run must not learn back what memory told it;
- the context the session-start hook gave the session (it is memory too);
- text inside ``<private>…</private>``;
- thinking, and lines the host marks as meta.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ...errors import UsageError

__all__ = [
    "CONTEXT_MARK",
    "FORMATS",
    "Said",
    "Transcript",
    "is_memory_read",
    "read_transcript",
]

FORMATS: Final = ("claude-code", "messages")
# The first line of what session-start gives a session: a transcript line holding it is memory.
CONTEXT_MARK: Final = "[truss-files memory]"
MESSAGE_CHARS: Final = 4000  # one message's share of what a model is sent
RESULT_CHARS: Final = 1500  # one tool result's
READ_TOOLS: Final = frozenset(
    {"memory_query", "memory_view", "read_memory", "memory_ask", "memory.ask"}
)
_PRIVATE = re.compile(r"<private>.*?(</private>|\Z)", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Said:
    """One message as a model is shown it."""

    seq: int  # the line (claude-code) or place (messages), from 1
    role: str  # user or assistant
    text: str
    uuid: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"seq": self.seq, "role": self.role, "text": self.text}
        return data


@dataclass(frozen=True)
class Transcript:
    path: Path
    fmt: str
    session: str | None  # the host's session id, when it names one
    messages: tuple[Said, ...]
    dropped_reads: int  # memory reads' results left out


def is_memory_read(name: str, tool_input: Any) -> bool:
    """Whether a tool call reads memory (an MCP host prefixes its tools: mcp__server__name)."""
    base = name.rsplit("__", 1)[-1]
    if base in READ_TOOLS:
        return True
    return base == "memory" and isinstance(tool_input, dict) and tool_input.get("command") == "view"


def read_transcript(path: Path, fmt: str = "claude-code") -> Transcript:
    if fmt not in FORMATS:
        raise UsageError(f"unknown transcript format {fmt!r}; use one of: {', '.join(FORMATS)}")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(
            f"transcript {path} cannot be read ({exc.strerror}); check the path"
        ) from exc
    if fmt == "claude-code":
        events = list(_json_lines(text, path))
        session = next(
            (str(e["sessionId"]) for _n, e in events if isinstance(e.get("sessionId"), str)), None
        )
        raw = [
            (n, e.get("message"), e.get("uuid"))
            for n, e in events
            if e.get("type") in ("user", "assistant") and not e.get("isMeta")
        ]
    else:
        session = None
        raw = [(n, m, None) for n, m in _message_list(text, path)]
    reads: set[str] = set()
    out: list[Said] = []
    dropped = 0
    for n, message, uuid in raw:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        parts, skipped = _parts(message.get("content"), reads)
        dropped += skipped
        said = _clean("\n".join(parts))
        if said:
            out.append(Said(n, str(role), said, uuid if isinstance(uuid, str) else None))
    return Transcript(path, fmt, session, tuple(out), dropped)


def _json_lines(text: str, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written as we read, or a host's own noise: not a message
        if isinstance(data, dict):
            yield n, data


def _message_list(text: str, path: Path) -> list[tuple[int, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        lines = list(_json_lines(text, path))
        if not lines:
            raise UsageError(
                f"{path} is neither a JSON list of messages nor JSON lines; for a Claude Code "
                "session file pass --format claude-code"
            ) from None
        return [(i, m) for i, (_n, m) in enumerate(lines, start=1)]
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        data = data["messages"]
    if not isinstance(data, list):
        raise UsageError(f'{path}: expected a list of {{"role", "content"}} messages')
    return list(enumerate(data, start=1))


def _parts(content: Any, reads: set[str]) -> tuple[list[str], int]:
    """The text of one message's content, and how many memory reads' results it dropped.
    ``reads`` collects the ids of memory-read calls, so their results are known later."""
    if isinstance(content, str):
        return [content], 0
    parts: list[str] = []
    dropped = 0
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "tool_use":
            name = str(block.get("name", ""))
            if is_memory_read(name, block.get("input")):
                reads.add(str(block.get("id")))
                parts.append(f"[called {name} (a memory read)]")
            else:
                shown = json.dumps(block.get("input"), ensure_ascii=False)[:RESULT_CHARS]
                parts.append(f"[called {name}: {shown}]")
        elif kind == "tool_result":
            if str(block.get("tool_use_id")) in reads:
                dropped += 1
                continue
            result = "\n".join(_texts(block.get("content")))[:RESULT_CHARS]
            parts.append(f"[tool result: {result}]")
    return parts, dropped


def _texts(content: Any) -> Iterable[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                yield block["text"]


def _clean(text: str) -> str:
    if CONTEXT_MARK in text:
        return ""
    text = _PRIVATE.sub("[private]", text).strip()
    if len(text) > MESSAGE_CHARS:
        text = text[:MESSAGE_CHARS] + " [...]"
    return text
