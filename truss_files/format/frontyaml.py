"""The YAML of front matter: PyYAML, made on first use, and a strict reading of it.

Strict: a key twice in one mapping, an anchor, an alias or a tag is an ``EntryError``, never a
value silently kept. Both the canonical fast path (``entryscan``, for a verdict block read in
full) and the codec (``entryfile``, for any other file and for writing) read YAML here only.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

from ..errors import EntryError

__all__ = ["BREAKS", "safe_yaml", "yaml_codec"]

BREAKS = ("\n", "\r", "\x85", "\u2028", "\u2029")  # what YAML reads as a line break


def _represent_str(dumper: Any, value: str) -> Any:
    style = "|" if "\n" in value else None
    if any(b in value for b in BREAKS[1:]):
        # PyYAML writes these raw inside a block and indents after them as if they were
        # "\n"; only double-quoted escapes survive being indented into the front matter.
        style = '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


@functools.cache
def yaml_codec() -> Any:
    """PyYAML and the loader and dumpers the codec uses, made on first use."""
    # Here, not at module top: only a file off the canonical layout and serialize need YAML
    # (slow to import), and the cold tool path imports this module.
    import yaml

    class Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
        """Multi-line strings (verdict signatures) as literal blocks, so diffs stay readable."""

    Dumper.add_representer(str, _represent_str)
    return SimpleNamespace(
        yaml=yaml,
        Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader),
        Dumper=Dumper,
        PlainDumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
    )


def safe_yaml(front: str, path: str | None) -> Any:
    y = yaml_codec()
    yaml = y.yaml
    try:
        # Keys seen per open mapping (None for a sequence): YAML keeps the last of two equal
        # keys, so a second `trust:` line far below the first would silently win.
        seen: list[tuple[set[str], list[bool]] | None] = []
        for event in yaml.parse(front, Loader=y.Loader):
            top = seen[-1] if seen else None
            if top is not None and isinstance(event, yaml.NodeEvent):
                keys, expect_key = top
                if expect_key[0] and isinstance(event, yaml.ScalarEvent):
                    if event.value in keys:
                        raise EntryError(
                            "appears more than once; keep exactly one", path=path, field=event.value
                        )
                    keys.add(event.value)
                expect_key[0] = not expect_key[0]
            if isinstance(event, yaml.MappingStartEvent):
                seen.append((set(), [True]))
            elif isinstance(event, yaml.SequenceStartEvent):
                seen.append(None)
            elif isinstance(event, yaml.CollectionEndEvent):
                seen.pop()
            # Refuse anchors, aliases and tags before constructing anything: an alias bomb
            # expands at construction time, and a tag is never part of an entry.
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise EntryError(
                    "YAML anchors and aliases are not allowed in front matter; write values "
                    "out in full",
                    path=path,
                )
            tag = getattr(event, "tag", None)
            if tag is not None:
                raise EntryError(
                    f"YAML tag {tag!r} is not allowed in front matter; use plain values",
                    path=path,
                )
        return yaml.load(front, Loader=y.Loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise EntryError(f"malformed YAML front matter{where}: {problem}", path=path) from exc
