"""The entry codec: canonical round trips (hypothesis) and checked-in hostile files."""

from __future__ import annotations

import dataclasses
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from truss_files.errors import EntryError, UsageError
from truss_files.format import entryfile
from truss_files.model import Entry, Kind, Layer, Provenance, Trust, check_key, normalize_body

ASSETS = Path(__file__).parents[1] / "assets" / "entries"
GOOD = ASSETS / "good" / "memories" / "fact" / "13" / "13df56f00d86d33a04995e27bbca1e7b.md"

# --------------------------------------------------------------------------- strategies

HEX = "0123456789abcdef"
_ids = st.text(alphabet=HEX, min_size=32, max_size=32)


def _valid_key(key: str) -> bool:
    try:
        check_key(key)
    except UsageError:
        return False
    return True


# Characters YAML treats specially (breaks, indicators, BOM, escapes) far more often than
# st.text() alone would draw them.
TRICKY = "ab \n\r\t\x85\u2028\u2029#:-'\"|>\\{}[],&*!%@`?é✓\x00\x1b\ufeff."


def texts(min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(min_size=min_size, max_size=max_size),
        st.text(alphabet=TRICKY, min_size=min_size, max_size=max_size),
    )


keys = texts(1, 40).filter(_valid_key)
bodies = texts(1, 300).map(normalize_body).filter(bool)
names = texts(0, 12)
_token = st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1, max_size=20)
ledger_refs = st.one_of(
    st.text(alphabet=HEX, min_size=4, max_size=40).map(lambda h: f"git:{h}"),
    st.builds(lambda r, n: f"run:{r}/{n}", _token, st.integers(0, 10**9)),
    st.builds(
        lambda e, rev: f"event:{e}" + (f"#{rev}" if rev else ""),
        _token,
        st.one_of(st.none(), _token),
    ),
)
# What a verdict holds: nested JSON values, with multi-line strings (signatures, notes).
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    texts(0, 60),
    st.lists(texts(0, 20), min_size=2, max_size=4).map("\n".join),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(names, inner, max_size=4)),
    max_leaves=12,
)
verdicts = st.dictionaries(names, json_values, min_size=1, max_size=6)
stamps = st.datetimes(
    min_value=__import__("datetime").datetime(1970, 1, 1),
    max_value=__import__("datetime").datetime(9999, 12, 31),
).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ"))

entries = st.builds(
    Entry,
    kind=st.sampled_from(list(Kind)),
    key=keys,
    body=bodies,
    trust=st.sampled_from(list(Trust)),
    layer=st.sampled_from(list(Layer)),
    scope=st.dictionaries(names, texts(0, 20), max_size=3),
    author=texts(1, 30),
    created=stamps,
    salience=st.floats(0.0, 1.0),
    provenance=st.builds(
        Provenance,
        produced_by=st.one_of(st.none(), ledger_refs),
        sources=st.lists(ledger_refs, max_size=3).map(tuple),
        verified_by=st.one_of(st.none(), verdicts),
    ),
    supersedes=st.one_of(st.none(), _ids),
    superseded_by=st.one_of(st.none(), _ids),
    checks=st.lists(texts(1, 30), max_size=3).map(tuple),
)

PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- properties


@PROPS
@given(entries)
def test_parse_inverts_serialize(entry: Entry) -> None:
    text = entryfile.serialize(entry)
    assert entryfile.parse(text, entry.path) == entry
    assert entryfile.parse(text.encode("utf-8"), entry.path) == entry


@PROPS
@given(entries)
def test_reserializing_canonical_text_changes_no_byte(entry: Entry) -> None:
    text = entryfile.serialize(entry)
    again = entryfile.serialize(entryfile.parse(text, entry.path))
    assert again.encode("utf-8") == text.encode("utf-8")
    assert text.startswith("---\n") and text.endswith("\n") and not text.endswith("\n\n")


@PROPS
@given(entries)
def test_key_line_finds_the_key_in_canonical_text(entry: Entry) -> None:
    # same_key() scans blobs for this exact line before parsing; a miss loses a conflict.
    assert entryfile.key_line(entry.key) in entryfile.serialize(entry).encode("utf-8")


@PROPS
@given(entries, st.sampled_from(list(Trust)))
def test_a_trust_change_is_a_one_line_diff(entry: Entry, trust: Trust) -> None:
    before = entryfile.serialize(entry).splitlines()
    after = entryfile.serialize(dataclasses.replace(entry, trust=trust)).splitlines()
    assert len(before) == len(after)
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert changed == (
        [] if trust is entry.trust else [(f"trust: {entry.trust}", f"trust: {trust}")]
    )


@PROPS
@given(entries)
def test_id_ignores_mutable_fields(entry: Entry) -> None:
    other = dataclasses.replace(
        entry,
        trust=Trust.STALE,
        salience=0.25,
        created="2000-01-01T00:00:00Z",
        provenance=dataclasses.replace(entry.provenance, verified_by={"x": "y"}, sources=()),
        supersedes=None,
        superseded_by="f" * 32,
    )
    assert other.id == entry.id
    assert dataclasses.replace(entry, body=entry.body + " edited").id != entry.id


def test_an_id_of_only_digits_survives_the_round_trip() -> None:
    # Found by search: this content hashes to an id of decimal digits, which unquoted YAML
    # reads as an integer. One entry in ~3 million; a 100k-entry store has a ~3 % chance.
    entry = Entry(
        kind=Kind.FACT,
        key="k5751348",
        body="digits only",
        author="agent:x",
        created="2026-01-01T00:00:00Z",
    )
    assert entry.id == "57889972034035173988172772944936"
    text = entryfile.serialize(entry)
    assert entryfile.parse(text, entry.path) == entry
    assert entryfile.serialize(entryfile.parse(text, entry.path)) == text


@given(
    st.text(alphabet="abeflnorstuyABEFLNORSTUY019_.-", min_size=1, max_size=8)
    | st.sampled_from(["yes", "No", "TRUE", "off", "On", "null", "Null", "NULL", "y", "n"])
)
def test_a_word_written_plain_is_what_yaml_writes(word: str) -> None:
    # The writer's shortcut for word-like scalars (keys) against YAML's own dump: every
    # case variant of the bools and nulls, digits, dots and dashes.
    assert entryfile._scalar(word) == entryfile._dump_scalar(word)


def test_canonical_layout_of_a_verified_entry() -> None:
    good = GOOD.read_text()
    entry = entryfile.parse(good, "memories/fact/13/13df56f00d86d33a04995e27bbca1e7b.md")
    assert entryfile.serialize(entry) == good
    verdict = {
        "entry": entry.id,
        "signature": "-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n",
        "votes": [{"vote": "PASS", "evidence": {"note": "line one\nline two"}}],
    }
    verified = dataclasses.replace(
        entry,
        trust=Trust.VERIFIED,
        provenance=dataclasses.replace(entry.provenance, verified_by=verdict),
    )
    text = entryfile.serialize(verified)
    # Multi-line values are literal blocks, so a signature reads as it was armored.
    assert "    signature: |\n      -----BEGIN SSH SIGNATURE-----\n      AAAA\n" in text
    assert [line for line in text.splitlines() if line.startswith("id: ")] == [f"id: {entry.id}"]
    assert entryfile.parse(text, verified.path) == verified


def test_crlf_body_is_normalised_to_the_same_entry() -> None:
    good = GOOD.read_text()
    path = "memories/fact/13/13df56f00d86d33a04995e27bbca1e7b.md"
    crlf = good.replace("starts.\n", "starts.  \r\n\r\n")
    assert entryfile.parse(crlf, path) == entryfile.parse(good, path)


# --------------------------------------------------------------------------- hostile files

# file -> (the field the error must name, or None for a whole-file error; words it must say)
BAD: dict[str, tuple[str | None, str]] = {
    "malformed-yaml.md": (None, "malformed YAML"),
    "python-object-tag.md": (None, "tag"),
    "python-name-tag.md": (None, "tag"),
    "alias-bomb.md": (None, "anchors and aliases"),
    "alias-in-field.md": (None, "anchors and aliases"),
    "duplicate-field.md": ("trust", "more than once"),
    "missing-author.md": ("author", "missing"),
    "missing-trust.md": ("trust", "missing"),
    "unknown-field.md": (None, "colour"),
    "unknown-provenance-field.md": ("provenance", "signed_by"),
    "wrong-type-key.md": ("key", "must be str"),
    "wrong-type-key-bool.md": ("key", "must be str"),
    "empty-key.md": ("key", "empty"),
    "wrong-type-salience.md": ("salience", "must be"),
    "salience-out-of-range.md": ("salience", "between 0 and 1"),
    "wrong-type-scope.md": ("scope", "must be dict"),
    "wrong-type-scope-value.md": ("scope", "strings"),
    "wrong-type-provenance.md": ("provenance", "must be dict"),
    "wrong-type-sources.md": ("provenance.sources", "must be list"),
    "wrong-type-produced-by.md": ("provenance.produced_by", "must be str"),
    "wrong-type-verified-by.md": ("provenance.verified_by", "must be dict"),
    "wrong-type-created.md": ("created", "UTC time"),
    "created-with-offset.md": ("created", "UTC time"),
    "created-trailing-newline.md": ("created", "UTC time"),
    "wrong-type-checks.md": ("checks", "must be list"),
    "bad-supersedes.md": ("supersedes", "hex entry id"),
    "supersedes-trailing-newline.md": ("supersedes", "hex entry id"),
    "unknown-kind.md": ("kind", "use one of"),
    "unknown-trust.md": ("trust", "use one of"),
    "unknown-layer.md": ("layer", "use one of"),
    "id-mismatch.md": ("id", "does not match the content"),
    "id-mismatch-author.md": ("id", "does not match the content"),
    "not-a-mapping.md": (None, "mapping"),
    "no-front-matter.md": (None, "front matter"),
    "unclosed-front-matter.md": (None, "not closed"),
    "non-utf8.md": (None, "not UTF-8"),
    "oversized.md": (None, "at most"),
    "wrong-path/memories/lesson/13/13df56f00d86d33a04995e27bbca1e7b.md": (None, "wrong path"),
    "wrong-path/memories/fact/zz/13df56f00d86d33a04995e27bbca1e7b.md": (None, "wrong path"),
    "wrong-path/memories/fact/13/00000000000000000000000000000000.md": (None, "wrong path"),
}


def _store_path(asset: str) -> str:
    # Assets under wrong-path/ are named as they would sit in a store.
    return asset.split("/", 1)[1] if asset.startswith("wrong-path/") else asset


def test_every_asset_has_an_expectation() -> None:
    found = {str(p.relative_to(ASSETS)) for p in ASSETS.rglob("*.md") if not p.is_relative_to(GOOD)}
    assert found - {str(GOOD.relative_to(ASSETS))} == set(BAD)


def test_the_good_asset_parses() -> None:
    path = str(GOOD.relative_to(ASSETS / "good"))
    entry = entryfile.parse(GOOD.read_bytes(), path)
    assert entry.path == path and entry.kind is Kind.FACT


@pytest.mark.parametrize("asset", sorted(BAD))
def test_bad_asset_is_refused_naming_file_and_field(asset: str) -> None:
    field, words = BAD[asset]
    path = _store_path(asset)
    data = (ASSETS / asset).read_bytes()
    with pytest.raises(EntryError) as info:
        entryfile.parse(data, path, check_path=asset.startswith("wrong-path/"))
    err = info.value
    assert err.path == path
    assert err.message.startswith(path)
    assert words in err.message
    assert err.field == field
    if field is not None:
        assert f"field '{field}'" in err.message


@pytest.mark.parametrize("asset", ["alias-bomb.md", "python-object-tag.md", "oversized.md"])
def test_bad_asset_as_text_is_refused_too(asset: str) -> None:
    text = (ASSETS / asset).read_text()
    with pytest.raises(EntryError):
        entryfile.parse(text, asset, check_path=False)


def _mutate(good: str, old: str, new: str) -> str:
    assert old in good
    return good.replace(old, new, 1)


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("trust: unverified", "trust: Verified", "trust"),  # the canonical spelling only
        ("kind: fact", "kind: facts", "kind"),
        ("salience: 0.5", "salience: true", "salience"),
        ("supersedes: null", "supersedes: ABCDEF", "supersedes"),
        ("author: agent:build-bot", "author: [a, b]", "author"),
    ],
)
def test_non_canonical_values_are_refused(old: str, new: str, field: str) -> None:
    text = _mutate(GOOD.read_text(), old, new)
    with pytest.raises(EntryError) as info:
        entryfile.parse(text, "x.md", check_path=False)
    assert info.value.field == field


def test_error_without_path_still_says_what_is_wrong() -> None:
    with pytest.raises(EntryError) as info:
        entryfile.parse("no front matter")
    assert info.value.path is None
    assert "front matter" in info.value.message


def _entry(**kw: Any) -> Entry:
    base: dict[str, Any] = {
        "kind": Kind.LESSON,
        "key": "k",
        "body": "b",
        "author": "agent:a",
        "created": "2026-11-29T11:02:33Z",
    }
    base.update(kw)
    return Entry(**base)


def test_body_may_contain_front_matter_fences() -> None:
    entry = _entry(body="---\nnot: front matter\n---\nstill body")
    assert entryfile.parse(entryfile.serialize(entry), entry.path) == entry


def test_a_body_over_the_write_limit_is_refused_by_parse() -> None:
    from truss_files.model import MAX_BODY, MAX_ENTRY_BYTES

    # Multi-byte text: the limit counts UTF-8 bytes, as writes do.
    fits = Entry(Kind.FACT, "big", "é" * (MAX_BODY // 2), created="2026-11-29T12:00:00Z")
    over = dataclasses.replace(fits, body=fits.body + "x")
    assert entryfile.parse(entryfile.serialize(fits), fits.path) == fits
    text = entryfile.serialize(over).encode()
    assert len(text) < MAX_ENTRY_BYTES  # the file bound alone would let it through
    with pytest.raises(EntryError, match=f"field 'body': is {MAX_BODY + 1} bytes"):
        entryfile.parse(text, over.path)
