"""``VerdictBlock``: an entry's verdict as the recall index keeps it (see ``scan``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import EntryError

__all__ = ["VerdictBlock"]


class VerdictBlock(Mapping[str, Any]):
    """A verdict as it sits in an entry file: three fields read at once, the rest on demand.

    ``verdict_id``, ``outcome`` and ``signer`` -- what a query shows -- come from the block's
    top-level lines. Any other access parses the whole block with the strict parser's YAML
    rules. Equality with a plain dict compares the full parse, so an ``Entry`` holding one
    equals the ``Entry`` that ``entryfile.parse`` returns for the same file.
    """

    __slots__ = ("_summary", "_text", "_full")

    def __init__(self, summary: Mapping[str, str], text: str) -> None:
        self._summary = dict(summary)
        self._text = text
        self._full: dict[str, Any] | None = None

    @property
    def summary(self) -> dict[str, str]:
        return dict(self._summary)

    @property
    def text(self) -> str:
        return self._text

    def _load(self) -> dict[str, Any]:
        if self._full is None:
            from .. import entryfile

            front = "verified_by:\n" + "".join(f"  {line}\n" for line in self._text.split("\n"))
            found = entryfile._safe_yaml(front, None)
            if not isinstance(found, dict) or not isinstance(found.get("verified_by"), dict):
                raise EntryError("provenance.verified_by is not a mapping")
            self._full = found["verified_by"]
        return self._full

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._summary:
            return self._summary[key]
        return self._load().get(key, default)

    def __getitem__(self, key: str) -> Any:
        if key in self._summary:
            return self._summary[key]
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __bool__(self) -> bool:
        return True  # it holds at least the three summary fields; no need to parse for that

    def __eq__(self, other: object) -> bool:
        if isinstance(other, VerdictBlock):
            other = other._load()
        if not isinstance(other, Mapping):
            return NotImplemented
        return self._load() == dict(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"VerdictBlock({self._summary!r}, ...)"
