"""What memory.ask gave back to a run, so that memory.train never stores it back as learned.

"Train what the run observed, never what an ask just gave back": a run that asks, reads a
note's text in the evidence and trains that text again would turn one note into two, and an
echo into corroboration. Each ask in a run (the tool, and the consult at a run's start)
appends the evidence it returned to ``.git/truss/runs/asked/<run>`` (JSON lines, a cache
beside the run records: the notes it names are in the store anyway). memory.train in that run
then refuses a body that ``echoes`` one of them.

Echo, defined: both texts are cut into lowercase word tokens (``\\w+``). A body of fewer than
``MIN_TOKENS`` tokens echoes an evidence text only when its tokens are all of that text's, in
order (the same words, whatever the spacing and case). A longer body echoes when at least
``CONTAINMENT`` (0.8) of its ``SHINGLE``-token shingles (5 consecutive tokens) occur in the
evidence text: containment, not resemblance, so a note quoted whole inside a longer body is
still an echo when little else was added, and a body that adds more than a fifth of its own
shingles is the run's own observation.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ..git.gitdir import GitDir
from .ledger import check_run_id

__all__ = ["CONTAINMENT", "MIN_TOKENS", "SHINGLE", "containment", "echoes", "record_asked"]

CONTAINMENT: Final = 0.8
SHINGLE: Final = 5
MIN_TOKENS: Final = 8
MAX_FILE: Final = 4 * 1024 * 1024  # an asked log past this is read from its end only
_WORD = re.compile(r"\w+")


def _path(git: GitDir, run: str) -> str:
    return os.path.join(git.cache_str, "runs", "asked", check_run_id(run))


def record_asked(git: GitDir, run: str, evidence: Iterable[Mapping[str, Any]]) -> None:
    """Append the evidence an ask returned to ``run`` (its ids and texts)."""
    lines = [
        json.dumps({"id": item.get("id"), "body": item.get("body")}, ensure_ascii=False)
        for item in evidence
        if isinstance(item.get("body"), str) and item.get("body")
    ]
    if not lines:
        return
    path = _path(git, run)
    with contextlib.suppress(OSError):  # a cache: a full disk costs the guard, not the ask
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")


def _asked(git: GitDir, run: str) -> list[tuple[str, str]]:
    path = _path(git, run)
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - MAX_FILE))
            data = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    out = []
    for line in data.splitlines():
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            item = json.loads(line)
            if isinstance(item.get("body"), str):
                out.append((str(item.get("id")), item["body"]))
    return out


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _shingles(tokens: list[str], size: int) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)}


def containment(body: str, evidence: str) -> float:
    """How much of ``body`` is ``evidence``'s text, 0.0 to 1.0 (see the module docstring)."""
    mine, theirs = _tokens(body), _tokens(evidence)
    if not mine or not theirs:
        return 0.0
    if len(mine) < MIN_TOKENS:
        size = len(mine)
        return 1.0 if tuple(mine) in _shingles(theirs, size) else 0.0
    own = _shingles(mine, SHINGLE)
    return len(own & _shingles(theirs, SHINGLE)) / len(own)


def echoes(git: GitDir, run: str, body: str, *, skip: str = "") -> tuple[str, float] | None:
    """``(evidence id, containment)`` of the first note an ask returned to ``run`` that
    ``body`` echoes (other than ``skip``); None when it echoes none."""
    for entry_id, text in _asked(git, run):
        if skip and entry_id == skip:
            continue
        found = containment(body, text)
        if found >= CONTAINMENT:
            return entry_id, found
    return None
