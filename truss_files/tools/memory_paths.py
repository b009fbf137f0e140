"""Paths of the memory tool: checked strictly, mapped onto a kind and key, shown back.

Only ``/memories`` and below. Refused before anything reads the store: ``..``, percent-
encoded dots, slashes, backslashes or NUL (also double-encoded), backslashes, NUL and other
control characters, look-alike characters (``model.confusable``), paths over ``MAX_PATH``
characters, and ``identity/`` or ``principals/`` anywhere a kind folder or a key could start.
The texts are the SDK's (``Path must start with /memories, got: …``, ``Path … would escape
/memories directory``) where it has one.

A first folder that names a kind (singular or plural) gives the kind; any other path is a key
under the default kind. An entry shows at the path the model wrote it at (``memory_path``),
when that path names exactly its kind and key; otherwise at ``/memories/<kind>/<key>.md``.
A tombstone's ``memory_path`` names the folder its delete or rename emptied, which stays.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..errors import BindingError, UsageError
from ..model import Entry, Kind, check_key, confusable

ROOT = "/memories"
MAX_PATH = 512
DEFAULT_KIND = Kind.FACT
_FORBIDDEN_ROOTS = ("identity", "principals")
# Percent-encoded '.', '/', '\' or NUL, however often the '%' itself is encoded again.
_ENCODED = re.compile(r"%(?:25)*(?:2e|2f|5c|00)", re.IGNORECASE)
_CONTROL = re.compile(r"[\x01-\x1f\x7f]")


def _kind_spellings() -> dict[str, Kind]:
    names: dict[str, Kind] = {}
    for kind in Kind:
        for base in {kind.value, kind.value.replace("_", "-")}:
            names[base] = kind
            plural = base[:-1] + "ies" if base.endswith("y") else base + "s"
            names[plural] = kind
    return names


KIND_SEGMENTS = _kind_spellings()


@dataclass(frozen=True)
class VPath:
    """A checked path below /memories: which kind folder, and the rest of the path in it.

    ``segments`` are the path's parts below /memories as written (``lessons``, ``ci.md``);
    ``norm`` joins them again (no empty or ``.`` parts): the path the listing shows."""

    text: str
    kind: Kind | None  # None: the /memories root
    rest: tuple[str, ...] = ()
    segments: tuple[str, ...] = ()

    @property
    def is_root(self) -> bool:
        return self.kind is None

    @property
    def key(self) -> str | None:
        """The entry key this path names as a file (None for the root or a kind folder)."""
        if not self.rest:
            return None
        joined = "/".join(self.rest)
        return joined[:-3] if joined.endswith(".md") and len(joined) > 3 else joined

    @property
    def norm(self) -> str:
        return "/".join([ROOT, *self.segments])

    @property
    def names_kind(self) -> bool:
        """Whether the first segment is a kind folder (``lessons``), not part of a key."""
        return len(self.segments) > len(self.rest)

    @property
    def canonical(self) -> str:
        if self.kind is None:
            return ROOT
        return "/".join([ROOT, self.kind.value, *self.rest])


def parse_path(path: Any, default_kind: Kind = DEFAULT_KIND) -> VPath:
    """Check a model-given path and map it onto (kind, key); raise BindingError if refused."""
    if not isinstance(path, str):
        raise BindingError(f"Path must be a string, got: {path!r}", "invalid_path")
    if len(path) > MAX_PATH:
        raise BindingError(
            f"Path is {len(path)} characters long; the limit is {MAX_PATH}. Use a shorter path.",
            "invalid_path",
        )
    if not path.startswith(ROOT):
        raise BindingError(f"Path must start with /memories, got: {path}", "invalid_path")
    tail = path[len(ROOT) :]
    if (
        (tail and not tail.startswith("/"))
        or "\x00" in path
        or "\\" in path
        or ".." in path
        or _ENCODED.search(path)
    ):
        raise BindingError(f"Path {path} would escape /memories directory", "invalid_path")
    if _CONTROL.search(path):
        raise BindingError(
            f"Path {path!r} contains control characters; use a plain path such as "
            "/memories/lessons/name.md",
            "invalid_path",
        )
    problem = confusable(path)
    if problem:
        raise BindingError(f"Path {path!r} {problem}", "invalid_path")
    segments = [s for s in tail.split("/") if s and s != "."]
    if not segments:
        return VPath(path, None)
    kind = KIND_SEGMENTS.get(segments[0])
    rest = segments[1:] if kind is not None else segments
    if rest and rest[0].lower() in _FORBIDDEN_ROOTS or segments[0].lower() in _FORBIDDEN_ROOTS:
        raise BindingError(
            f"Path {path} is not reachable through the memory tool: identity and principals "
            "are kept by the operator, not in /memories",
            "forbidden_path",
        )
    vp = VPath(path, kind or default_kind, tuple(rest), tuple(segments))
    if vp.key is not None:
        check_key(vp.key)
    return vp


def entry_path(entry: Entry) -> str:
    """The canonical path of an entry: /memories/<kind>/<key>.md."""
    return f"{ROOT}/{entry.kind.value}/{entry.key}.md"


@lru_cache(maxsize=4096)
def _written_path(memory_path: str, kind: Kind, key: str) -> bool:
    """Whether ``memory_path`` names exactly this kind and key (so a hand-made entry cannot
    show itself at another entry's path)."""
    try:
        vp = parse_path(memory_path, kind)
    except UsageError:
        return False
    return vp.kind is kind and vp.key == key and vp.norm == memory_path


def shown_path(entry: Entry) -> str:
    """Where the model sees an entry: the path it wrote it at, else its canonical path."""
    written = entry.memory_path
    if written is not None and _written_path(written, entry.kind, entry.key):
        return written
    return entry_path(entry)


def parent_folder(path: str) -> str | None:
    """The folder that holds ``path`` (a normalised path), None for the root."""
    head = path.rsplit("/", 1)[0]
    return head if head != ROOT else None


@lru_cache(maxsize=4096)
def _kept_folder(memory_path: str, kind: Kind, key: str) -> str | None:
    try:
        vp = parse_path(memory_path, kind)
    except UsageError:
        return None
    folders = key.split("/")[:-1]
    if vp.kind is not kind or vp.norm != memory_path or list(vp.rest) != folders[: len(vp.rest)]:
        return None
    return memory_path


def kept_folder(tombstone: Entry) -> str | None:
    """The folder a tombstone keeps (empty, as the SDK keeps a directory whose last file
    went): its ``memory_path``, when that names a folder its own key sat in, so a hand-made
    tombstone cannot make a folder appear anywhere else (a file's path keeps nothing)."""
    if tombstone.memory_path is None:
        return None
    return _kept_folder(tombstone.memory_path, tombstone.kind, tombstone.key)
