"""The fast path of ``entryfile.parse``: canonical entry files read without YAML.

Building the index of a large store cannot afford ``entryfile.parse`` for every file: nearly
all of its time is YAML. Files written by truss-files are canonical (``entryfile.serialize``),
so ``canonical`` matches that one layout with a single strict pattern plus per-field checks
(content address included; the figures are in ``docs/measured.md``) and hands anything else
back (None) to ``entryfile.parse``'s YAML -- which also raises the error for a file that is
not an entry at all. Either way the result is
the same ``Entry``; ``tests/format/test_entryscan.py`` checks that property on generated and on
hostile files.

Why the fast path cannot disagree with the strict parser:

* Every front matter line must match its field's pattern, in canonical order, each field once;
  an unknown, repeated, reordered or unusual line sends the file to the strict parser.
* A plain scalar is accepted only when YAML could not read it as anything but that string
  (starts with a letter, no spaces, not ``yes``/``null``/...); a quoted one only when it opens and
  closes on its line. PyYAML lets a quoted scalar continue on a *less* indented line -- even at
  column 0 -- so an unclosed quote anywhere is a reason to take the slow path.
* The content address is recomputed: a misread kind, key, body, layer, scope, author or
  produced_by cannot produce the id the file claims, so it would fall back (and fail there).
* ``provenance.verified_by`` (the signed verdict) is not parsed here: the index shows its
  ``verdict_id``/``outcome``/``signer``, read from the block's own top-level lines, and keeps the
  block's text; ``VerdictBlock`` parses the whole of it with YAML when anything else is asked.
  A block with anchors, aliases, tags, flow collections, repeated keys or an unclosed quote
  takes the slow path.

Recall trusts the ``trust:`` line of the file, as the strict pipeline does; whether a verdict
really backs it is the audit's question.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from json.encoder import encode_basestring as _json_string
from json.encoder import encode_basestring_ascii as _json_ascii
from typing import Any, Final

from ..errors import EntryError
from ..model import (
    MAX_BODY,
    MAX_ENTRY_BYTES,
    MAX_KEY,
    Entry,
    Kind,
    Layer,
    Provenance,
    Trust,
    body_size,
    confusable,
    entry_path,
    normalize_body,
)
from .frontyaml import safe_yaml

__all__ = ["VerdictBlock", "canonical", "entry_of_fields", "verdict_block"]


_KINDS: Final = {k.value: k for k in Kind}
_TRUSTS: Final = {t.value: t for t in Trust}
_LAYERS: Final = {x.value: x for x in Layer}
_HEX32: Final = re.compile(r"[0-9a-f]{32}")
_BINARY: Final = re.compile(r"0b[01_]+")  # YAML 1.1 reads this as an int
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")  # model.check_key refuses these (and confusables)
# The canonical front matter of entryfile.serialize, field by field (between the '---' lines).
_CANONICAL: Final = re.compile(
    r"id: (?P<id>[^\n]+)\n"
    r"kind: (?P<kind>[a-z_]+)\n"
    r"key: (?P<key>[^\n]+)\n"
    r"trust: (?P<trust>[a-z]+)\n"
    r"layer: (?P<layer>[a-z]+)\n"
    r"scope: (?P<scope>[^\n]+)\n"
    r"author: (?P<author>[^\n]+)\n"
    r"created: (?P<created>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\n"
    r"salience: (?P<salience>\d\.\d{1,17})\n"
    r"provenance:\n"
    r"  produced_by: (?P<produced>[^\n]+)\n"
    r"  sources: (?P<sources>[^\n]+)\n"
    r"  verified_by:(?: null|(?P<block>(?:\n    [^\n]*)+))\n"
    r"supersedes: (?P<supersedes>[^\n]+)\n"
    r"superseded_by: (?P<superseded_by>[^\n]+)\n"
    r"(?:checks: (?P<checks>[^\n]+)\n)?"
)
# A plain scalar YAML reads back as exactly this string: no spaces, nothing YAML gives a
# meaning to (a leading digit could be a number or a date, a trailing ':' a mapping).
_PLAIN: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.:/@#+-]*(?<!:)")
_PLAIN_FLOW: Final = re.compile(r"[A-Za-z][A-Za-z0-9_./@+-]*")
# Plain words YAML 1.1 reads as booleans or null.
_SPECIAL: Final = frozenset(
    w.lower() for w in ("yes", "no", "true", "false", "on", "off", "null")
) | frozenset(
    v for w in ("yes", "no", "true", "false", "on", "off", "null") for v in (w.title(), w.upper())
)
_SINGLE: Final = re.compile(r"'((?:[^']|'')*)'")
# Over the verified_by block (lines indented 4+, each after a newline): what may stand before
# a quote or a flow collection that opens a value, a line at indent 4 that is neither a key nor
# a list item, and the block's own top-level keys. The last two start with a newline, so the
# regex engine skips from line to line instead of trying every character.
_VALUE_PREFIX: Final = re.compile(r" *(?:- )*(?:[A-Za-z0-9_]+: )?")
_QUOTED_LINE: Final = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"\\]|\\.)*\"")
_ODD_TOP: Final = re.compile(r"\n    (?! |- |[a-z_]+:(?: |\n|\Z))")
_TOP_KEY: Final = re.compile(r"\n    ([a-z_]+):(?: ([^\n]*))?(?=\n|\Z)")
_SUMMARY: Final = ("verdict_id", "outcome", "signer")


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
            front = "verified_by:\n" + "".join(f"  {line}\n" for line in self._text.split("\n"))
            found = safe_yaml(front, None)
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
            if other._text == self._text:
                return True  # one text is one parse: no YAML (a salience update compares all)
            other = other._load()
        if not isinstance(other, Mapping):
            return NotImplemented
        return self._load() == dict(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"VerdictBlock({self._summary!r}, ...)"


class _Slow(Exception):
    """The file is not in the canonical layout: let entryfile.parse decide."""


def canonical(data: bytes, path: str) -> Entry | None:
    """The ``Entry`` in ``data`` at ``path`` when it is a canonical file at its own path;
    None for anything else (``entryfile.parse`` then reads it with YAML)."""
    try:
        return _fast(data, path)
    except _Slow:
        return None


def _fast(data: bytes, path: str) -> Entry:
    entry = entry_of_fields(_fields(data, path))
    # ``_fields`` checked the claimed id against the content and the path against the id:
    # the id cache ``Entry.id`` reads is seeded, so nothing hashes the fields again.
    entry.__dict__["_id"] = path[-35:-3]
    return entry


_new: Final = object.__new__


def entry_of_fields(fields: Sequence[Any]) -> Entry:
    """The ``Entry`` of its fields in ``_fields`` order (kind, key, body, trust, layer, scope,
    author, created, salience, produced_by, sources, verified_by, supersedes, superseded_by,
    checks): the one unpacking this parser and the recall index's records (``recall.docs``)
    share.

    Both hand over fields already checked (this parser's patterns; the index's records, made
    from parsed entries and checked against their tags), so the frozen dataclasses are filled
    in directly rather than through ``__init__``'s one ``object.__setattr__`` a field, which
    costs several times more, and a query decodes every entry it returns.
    ``tests/format/test_entryscan.py`` checks the names against the dataclasses' fields."""
    (
        kind,
        key,
        body,
        trust,
        layer,
        scope,
        author,
        created,
        salience,
        produced_by,
        sources,
        verified_by,
        supersedes,
        superseded_by,
        checks,
    ) = fields
    provenance = _new(Provenance)
    provenance.__dict__.update(
        produced_by=produced_by, sources=sources, verified_by=verified_by, masked=()
    )
    entry = _new(Entry)
    entry.__dict__.update(
        kind=kind,
        key=key,
        body=body,
        trust=trust,
        layer=layer,
        scope=scope,
        author=author,
        created=created,
        salience=salience,
        provenance=provenance,
        supersedes=supersedes,
        superseded_by=superseded_by,
        checks=checks,
        memory_path=None,
    )
    return entry


def _fields(data: bytes, path: str) -> tuple[Any, ...]:
    """The entry's fields in ``Entry`` order, the provenance's three in line (kind, key, body,
    trust, layer, scope, author, created, salience, produced_by, sources, verified_by,
    supersedes, superseded_by, checks), or ``_Slow``."""
    if len(data) > MAX_ENTRY_BYTES or not data.startswith(b"---\n"):
        raise _Slow
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Slow from None
    end = text.find("\n---\n", 3)
    if end < 0:
        raise _Slow
    m = _CANONICAL.fullmatch(text, 4, end + 1)
    if m is None:
        raise _Slow
    claimed, kind_s, key_s, trust_s, layer_s, scope_s, author_s, created, salience_s = m.group(
        "id", "kind", "key", "trust", "layer", "scope", "author", "created", "salience"
    )
    claimed = _hex(claimed)
    kind = _KINDS.get(kind_s) or _slow()
    key = _str(key_s)
    if len(key) > MAX_KEY or _CONTROL.search(key) or confusable(key):
        raise _Slow
    salience = float(salience_s)
    if not 0.0 <= salience <= 1.0:
        raise _Slow
    produced = m.group("produced")
    block = m.group("block")
    checks = m.group("checks")
    body = text[end + 5 :]
    if body.endswith("\n"):
        body = body[:-1]
    body = normalize_body(body)
    # Over the limit only if its UTF-8 can be (4 bytes a character at most): encode rarely.
    if len(body) * 4 > MAX_BODY and body_size(body) > MAX_BODY:
        raise _Slow  # the strict parser names the problem
    layer = _LAYERS.get(layer_s) or _slow()
    scope = _flow_map(scope_s)
    author = _str(author_s)
    produced_by = None if produced == "null" else _str(produced)
    fields = (
        kind,
        key,
        body,
        _TRUSTS.get(trust_s) or _slow(),
        layer,
        scope,
        author,
        created,
        salience,
        produced_by,
        tuple(_flow_list(m.group("sources"))),
        None if block is None else _verdict_block(block),
        _opt_hex(m.group("supersedes")),
        _opt_hex(m.group("superseded_by")),
        () if checks is None else tuple(_flow_list(checks)),
    )
    if claimed != _content_id(kind, key, body, layer, scope, author, produced_by):
        raise _Slow  # the strict parser names the problem
    if path != entry_path(kind, claimed):
        raise _Slow
    return fields


def _content_id(
    kind: Kind,
    key: str,
    body: str,
    layer: Layer,
    scope: dict[str, str],
    author: str,
    produced_by: str | None,
) -> str:
    """``model.content_id`` of an entry the fast path read (string fields only), with the JSON
    written here: the same bytes as ``json.dumps(entry.immutable(), sort_keys=True, ...)``, faster
    (``docs/measured.md``). Were it ever to differ, the file would merely take the slow path.
    An ASCII body goes through the ASCII encoder (faster): the same text, except that it
    escapes DEL, which sends such a body to the slow path."""
    js = _json_string
    body_js = _json_ascii(body) if body.isascii() else js(body)
    items = ",".join([f"{js(k)}:{js(v)}" for k, v in sorted(scope.items())])
    produced = "null" if produced_by is None else js(produced_by)
    canonical = (
        f'{{"author":{js(author)},"body":{body_js},"key":{js(key)},'
        f'"kind":{js(kind._value_)},"layer":{js(layer._value_)},'
        f'"produced_by":{produced},"scope":{{{items}}}}}'
    )
    import hashlib  # only an index update hashes: a warm query skips its import (OpenSSL)

    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def _slow() -> Any:
    raise _Slow


def _str(value: str) -> str:
    if _PLAIN.fullmatch(value) and value not in _SPECIAL:
        return value
    quoted = _SINGLE.fullmatch(value)
    if quoted is not None:
        return quoted.group(1).replace("''", "'")
    raise _Slow


def _hex(value: str) -> str:
    """A 32-hex id; plain only where YAML reads it as a string (not all digits, not 0b...)."""
    if value.startswith("'"):
        value = _str(value)
    elif value.isdigit() or _BINARY.fullmatch(value):
        raise _Slow
    if not _HEX32.fullmatch(value):
        raise _Slow
    return value


def _opt_hex(value: str) -> str | None:
    return None if value == "null" else _hex(value)


def _flow_items(value: str, opener: str, closer: str) -> list[str] | None:
    if value == opener + closer:
        return []
    if not (value.startswith(opener) and value.endswith(closer)):
        raise _Slow
    items = value[1:-1].split(", ")
    return items if all(items) else None


def _flow_list(value: str) -> list[str]:
    items = _flow_items(value, "[", "]")
    if items is not None and all(_PLAIN_FLOW.fullmatch(i) and i not in _SPECIAL for i in items):
        return items
    found = _yaml_value(value)
    if not isinstance(found, list) or not all(isinstance(i, str) for i in found):
        raise _Slow
    return found


def _flow_map(value: str) -> dict[str, str]:
    items = _flow_items(value, "{", "}")
    if items is not None:
        pairs = [item.split(": ", 1) for item in items]
        if all(
            len(p) == 2 and all(_PLAIN_FLOW.fullmatch(s) and s not in _SPECIAL for s in p)
            for p in pairs
        ) and len({p[0] for p in pairs}) == len(pairs):
            return {p[0]: p[1] for p in pairs}
    found = _yaml_value(value)
    if not isinstance(found, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in found.items()
    ):
        raise _Slow
    return found


def _yaml_value(value: str) -> Any:
    """One single-line flow collection, read by YAML (scope and sources beyond plain words).

    A single line that opens and closes its collection cannot be continued by a later line,
    except through an unclosed quote -- and then YAML fails here, on this line alone.
    """
    if any(c in value for c in "&*!\n"):
        raise _Slow
    import yaml

    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(value, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError:
        raise _Slow from None


def verdict_block(block: list[str]) -> VerdictBlock:
    """The verified_by block's shown fields and text, or ``_Slow`` when YAML must decide."""
    return _verdict_block("\n" + "\n".join(block))


def _verdict_block(block: str) -> VerdictBlock:
    """``verdict_block`` of the block's lines, each after a newline (as the front matter has
    them: every line indented four spaces or more)."""
    if "&" in block or "*" in block or "!" in block:
        raise _Slow  # anchors, aliases and tags: the strict parser refuses them
    for opener in "'\"[{":
        pos = block.find(opener)
        while pos >= 0:
            # Where a value starts with a quote or a bracket (inside a plain scalar neither has
            # a meaning to YAML): one closed quoted scalar or an empty collection, nothing more.
            line_start = block.rfind("\n", 0, pos) + 1
            if _VALUE_PREFIX.fullmatch(block, line_start, pos):
                line_end = block.find("\n", pos)
                rest = block[pos : len(block) if line_end < 0 else line_end]
                if rest not in ("[]", "{}") and not _QUOTED_LINE.fullmatch(rest):
                    raise _Slow  # a flow collection, or a quote that may run on
            pos = block.find(opener, pos + 1)
    if _ODD_TOP.search(block):
        raise _Slow
    summary: dict[str, str] = {}
    seen: set[str] = set()
    for name, value in _TOP_KEY.findall(block):
        if name in seen:
            raise _Slow  # YAML would keep the last; the strict parser refuses both
        seen.add(name)
        if name in _SUMMARY:
            summary[name] = _hex(value) if name == "verdict_id" else _str(value)
    if len(summary) != len(_SUMMARY):
        raise _Slow
    # Every line starts with four spaces: dropping them after each newline unindents it.
    return VerdictBlock(summary, block.replace("\n    ", "\n")[1:])
