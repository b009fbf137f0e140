"""The entry file codec: markdown with YAML front matter, in one canonical form.

``serialize`` writes the fields in a fixed order with fixed quoting, so re-serializing an
unchanged entry changes no byte and a trust change is a one-line diff. ``parse`` is strict:
only plain YAML (no tags, no anchors or aliases), only known fields with the right types, and
an ``id`` that matches the content. Every error names the file, the field and the fix.

``parse`` is the one parser. It tries the canonical layout first (``entryscan``: what
``serialize`` writes, matched by one strict pattern, much faster than YAML, and handed on
whenever anything is unusual), then YAML, which judges every other file and names its errors:
both give the same ``Entry``, or both refuse (``tests/format/test_entryscan.py``). PyYAML is
imported on the slow path and by ``serialize`` only (``_yaml``), so importing this module and
reading a canonical file cost no YAML: the cold tool path imports it at module top.
"""

from __future__ import annotations

import datetime
import enum
import functools
import re
from collections.abc import Mapping
from typing import Any

from ..errors import EntryError, UsageError
from ..model import (
    MAX_BODY,
    MAX_ENTRY_BYTES,
    Entry,
    Kind,
    Layer,
    Provenance,
    Trust,
    body_size,
    check_key,
    content_id,
    normalize_body,
)
from .entryscan import canonical
from .frontyaml import BREAKS as _BREAKS
from .frontyaml import safe_yaml as _safe_yaml
from .frontyaml import yaml_codec as _yaml

FIELD_ORDER = (
    "id",
    "kind",
    "key",
    "memory_path",
    "trust",
    "layer",
    "scope",
    "author",
    "created",
    "salience",
    "provenance",
    "supersedes",
    "superseded_by",
    "checks",
)
REQUIRED = ("id", "kind", "key", "trust", "layer", "author", "created")
PROVENANCE_FIELDS = ("produced_by", "sources", "masked", "verified_by")

_CREATED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
_HEX = re.compile(r"^[0-9a-f]{32}$")
# Starts with a letter, then letters, digits, "_", "." or "-": YAML's resolvers read such a
# word as a string but for the bools and nulls below (YAML 1.1 spells them in three cases;
# every case is listed here, a miss only takes the long way). tests/format checks it agrees
# with the dump.
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
_YAML_WORDS = frozenset({"yes", "no", "true", "false", "on", "off", "null"})


def _scalar(value: Any) -> str:
    """One YAML scalar on one line, quoted only where YAML needs it."""
    # A rewrite of every entry (salience update) dumps the same keys, authors and values
    # again and again: each dump costs more than its lookup.
    if type(value) is str:
        # An id: 32 hex digits with a letter among them reads as no number, bool or null
        # to YAML, so it is written plain; dumping each (every id is new) cost an import a
        # fifth of its time. Only digits is an integer to YAML: that goes the long way.
        if len(value) == 32 and _HEX.match(value) and not value.isdigit():
            return value
        # A word such as most keys ("user-pref", "deploy.target"): plain, unless YAML reads
        # it as a bool or null. An import's keys are mostly distinct, so the cache below
        # misses and each dump cost it a tenth of its time.
        if _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
            return value
        return _str_scalar(value)
    if type(value) is float:
        return _float_scalar(repr(value))  # by repr: 0.0 == -0.0, but not as YAML
    if value is None or (type(value) in (dict, list) and not value):
        return _empty_scalar(type(value).__name__)  # null, {} and [] of every entry file
    return _dump_scalar(value)


@functools.lru_cache(maxsize=4)
def _empty_scalar(name: str) -> str:
    return _dump_scalar({"NoneType": None, "dict": {}, "list": []}[name])


@functools.lru_cache(maxsize=4096)
def _str_scalar(value: str) -> str:
    return _dump_scalar(value)


@functools.lru_cache(maxsize=4096)
def _float_scalar(text: str) -> str:
    return _dump_scalar(float(text))


def _dump_scalar(value: Any) -> str:
    if isinstance(value, str) and any(b in value for b in _BREAKS):
        # A literal block would span lines (and "|+" lose its kept newlines to the strip
        # below): a line break inside one field's value is written as an escape instead.
        y = _yaml()
        quoted: str = y.yaml.dump(
            value, Dumper=y.PlainDumper, default_style='"', width=1 << 30, allow_unicode=True
        )
        return quoted.rstrip("\n")
    y = _yaml()
    text: str = y.yaml.dump(
        value, Dumper=y.Dumper, default_flow_style=True, width=1 << 30, allow_unicode=True
    )
    if text.endswith("\n...\n"):
        text = text[: -len("\n...\n")]
    return text.rstrip("\n")


def _block(value: Mapping[str, Any], indent: int) -> str:
    y = _yaml()
    text: str = y.yaml.dump(
        dict(value),
        Dumper=y.Dumper,
        default_flow_style=False,
        sort_keys=True,
        width=1 << 30,
        allow_unicode=True,
    )
    if text.endswith("\n...\n"):
        # A last value kept with "|+" makes PyYAML end the document with "..."; indented
        # inside the front matter that marker would be a syntax error.
        text = text[: -len("...\n")]
    pad = " " * indent
    # split("\n"), not splitlines(): U+2028 and friends stay inside their quoted scalar.
    return "".join(pad + line + "\n" for line in text[:-1].split("\n"))


def key_line(key: str) -> bytes:
    """The exact ``key:`` line of a canonical file, for a fast scan before a full parse."""
    return f"\nkey: {_scalar(key)}\n".encode()


def serialize(entry: Entry) -> str:
    """The canonical text of an entry file (always ends with one newline)."""
    lines = ["---"]
    # Quoted only when YAML would misread it: an id of decimal digits is an integer to YAML.
    lines.append(f"id: {_scalar(entry.id)}")
    lines.append(f"kind: {entry.kind.value}")
    lines.append(f"key: {_scalar(entry.key)}")
    if entry.memory_path is not None:
        lines.append(f"memory_path: {_scalar(entry.memory_path)}")
    lines.append(f"trust: {entry.trust.value}")
    lines.append(f"layer: {entry.layer.value}")
    lines.append(f"scope: {_scalar(dict(sorted(entry.scope.items())))}")
    lines.append(f"author: {_scalar(entry.author)}")
    lines.append(f"created: {entry.created}")
    lines.append(f"salience: {_scalar(float(entry.salience))}")
    prov = entry.provenance
    lines.append("provenance:")
    lines.append(f"  produced_by: {_scalar(prov.produced_by)}")
    lines.append(f"  sources: {_scalar(list(prov.sources))}")
    if prov.masked:
        lines.append(f"  masked: {_scalar(list(prov.masked))}")
    if prov.verified_by is None:
        lines.append("  verified_by: null")
    else:
        lines.append("  verified_by:")
        lines.append(_block(prov.verified_by, 4).rstrip("\n"))
    lines.append(f"supersedes: {_scalar(entry.supersedes)}")
    lines.append(f"superseded_by: {_scalar(entry.superseded_by)}")
    if entry.checks:
        lines.append(f"checks: {_scalar(list(entry.checks))}")
    lines.append("---")
    return "\n".join(lines) + "\n" + entry.body + "\n"


def _split(text: str, path: str | None) -> tuple[str, str]:
    if not text.startswith("---\n"):
        raise EntryError(
            "does not start with a '---' front matter line; an entry file is YAML front "
            "matter between two '---' lines, then the markdown body",
            path=path,
        )
    end = text.find("\n---\n", 3)
    if end < 0:
        if text.endswith("\n---"):
            end = len(text) - 4
        else:
            raise EntryError("front matter is not closed by a '---' line", path=path)
    return text[4 : end + 1], text[end + 5 :]


def _want(value: Any, kind: type | tuple[type, ...], name: str, path: str | None) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise EntryError(
            f"must be {want}, got {type(value).__name__} {value!r}", path=path, field=name
        )
    return value


def _enum(parse: Any, value: Any, name: str, path: str | None) -> Any:
    _want(value, str, name, path)
    try:
        return parse(value)
    except (UsageError, ValueError) as exc:
        message = str(exc)
        if isinstance(parse, type) and issubclass(parse, enum.Enum):
            # The enum's own ValueError says what is wrong but not what would be right.
            allowed = ", ".join(str(m.value) for m in parse)
            message = f"unknown {name} {value!r}; use one of: {allowed}"
        raise EntryError(message, path=path, field=name) from None


def _opt_id(value: Any, name: str, path: str | None) -> str | None:
    if value is None:
        return None
    _want(value, str, name, path)
    if not _HEX.fullmatch(value):
        raise EntryError("must be a 32-character hex entry id or null", path=path, field=name)
    return str(value)


MAX_MEMORY_PATH = 512  # the memory tool's limit on a path


def _memory_path(value: Any, path: str | None) -> str | None:
    """The optional path a memory-tool entry was written at: below /memories, one line."""
    if value is None:
        return None
    _want(value, str, "memory_path", path)
    if (
        not value.startswith("/memories/")
        or len(value) > MAX_MEMORY_PATH
        or any(b in value for b in _BREAKS)
        or re.search(r"[\x00-\x1f\x7f\\]", value)
    ):
        raise EntryError(
            f"must be a path below /memories/ of at most {MAX_MEMORY_PATH} characters on one "
            "line, as the memory tool writes it; remove the field or fix the path",
            path=path,
            field="memory_path",
        )
    return str(value)


def parse(text: str | bytes, path: str | None = None, *, check_path: bool = True) -> Entry:
    """Parse and validate one entry file; raise ``EntryError`` naming file and field.

    A canonical file at its own path is read without YAML (``entryscan.canonical``); any
    other input goes through YAML, which judges it."""
    if isinstance(text, bytes) and path is not None and check_path:
        found = canonical(text, path)
        if found is not None:
            return found
    return _parse_yaml(text, path, check_path=check_path)


def _parse_yaml(text: str | bytes, path: str | None, *, check_path: bool) -> Entry:
    """``parse`` by YAML alone: the judge of every file, and of the fast path's answers."""
    if isinstance(text, bytes):
        if len(text) > MAX_ENTRY_BYTES:
            raise EntryError(
                f"is {len(text)} bytes; an entry file may hold at most {MAX_ENTRY_BYTES}",
                path=path,
            )
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EntryError(f"is not UTF-8 ({exc.reason})", path=path) from exc
    if len(text) > MAX_ENTRY_BYTES:
        raise EntryError(f"holds more than {MAX_ENTRY_BYTES} characters", path=path)
    front, body = _split(text, path)
    data = _safe_yaml(front, path)
    if not isinstance(data, dict):
        raise EntryError("front matter must be a YAML mapping of fields", path=path)
    unknown = sorted(set(map(str, data)) - set(FIELD_ORDER))
    if unknown:
        raise EntryError(
            f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(FIELD_ORDER)}",
            path=path,
        )
    for name in REQUIRED:
        if name not in data:
            raise EntryError("is missing; every entry needs it", path=path, field=name)

    kind = _enum(Kind, data["kind"], "kind", path)
    trust = _enum(Trust, data["trust"], "trust", path)
    layer = _enum(Layer, data["layer"], "layer", path)
    key = _want(data["key"], str, "key", path)
    try:
        check_key(key)
    except UsageError as exc:
        raise EntryError(str(exc), path=path, field="key") from None
    scope = data.get("scope") or {}
    _want(scope, dict, "scope", path)
    for k, v in scope.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise EntryError("must map names to strings", path=path, field="scope")
    author = _want(data["author"], str, "author", path)
    created = data["created"]
    if isinstance(created, datetime.datetime) and created.utcoffset() == datetime.timedelta(0):
        # YAML reads an unquoted timestamp as a datetime; the canonical text is unquoted.
        created = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    if not isinstance(created, str) or not _CREATED.fullmatch(created):
        raise EntryError(
            "must be a UTC time like 2026-11-29T11:02:33Z (quote-free)",
            path=path,
            field="created",
        )
    salience = _want(data.get("salience", 0.5), (int, float), "salience", path)
    if not 0.0 <= float(salience) <= 1.0:
        raise EntryError("must be between 0 and 1", path=path, field="salience")

    prov_data = data.get("provenance") or {}
    _want(prov_data, dict, "provenance", path)
    bad = sorted(set(map(str, prov_data)) - set(PROVENANCE_FIELDS))
    if bad:
        raise EntryError(
            f"unknown field(s) {', '.join(bad)}; allowed: {', '.join(PROVENANCE_FIELDS)}",
            path=path,
            field="provenance",
        )
    produced_by = prov_data.get("produced_by")
    if produced_by is not None:
        _want(produced_by, str, "provenance.produced_by", path)
    sources = prov_data.get("sources") or []
    _want(sources, list, "provenance.sources", path)
    for s in sources:
        _want(s, str, "provenance.sources", path)
    verified_by = prov_data.get("verified_by")
    if verified_by is not None:
        _want(verified_by, dict, "provenance.verified_by", path)
    masked = prov_data.get("masked") or []
    _want(masked, list, "provenance.masked", path)
    for m in masked:
        _want(m, str, "provenance.masked", path)
    checks = data.get("checks") or []
    _want(checks, list, "checks", path)
    for c in checks:
        _want(c, str, "checks", path)

    if body.endswith("\n"):
        body = body[:-1]
    memory_path = _memory_path(data.get("memory_path"), path)
    if memory_path is None:
        body = normalize_body(body)
    size = body_size(body)
    if size > MAX_BODY:
        raise EntryError(
            f"is {size} bytes; a body may hold at most {MAX_BODY}, the limit every write "
            "keeps: split the text into several entries",
            path=path,
            field="body",
        )
    entry = Entry(
        kind=kind,
        key=key,
        body=body,
        trust=trust,
        layer=layer,
        scope=dict(scope),
        author=author,
        created=created,
        salience=float(salience),
        provenance=Provenance(
            produced_by=produced_by,
            sources=tuple(sources),
            verified_by=verified_by,
            masked=tuple(masked),
        ),
        supersedes=_opt_id(data.get("supersedes"), "supersedes", path),
        superseded_by=_opt_id(data.get("superseded_by"), "superseded_by", path),
        checks=tuple(checks),
        memory_path=memory_path,
    )
    claimed = data["id"]
    actual = content_id(entry)
    if claimed != actual:
        raise EntryError(
            f"id {claimed!r} does not match the content (which hashes to {actual}); the body "
            "or an immutable field was edited — write a new entry that supersedes this one",
            path=path,
            field="id",
        )
    if check_path and path is not None and path != entry.path:
        raise EntryError(
            f"sits at the wrong path; kind {kind.value} and id {actual} belong at {entry.path}",
            path=path,
        )
    return entry
