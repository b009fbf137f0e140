"""``entryfile.parse``'s fast path (``entryscan``) must agree with its YAML on every input."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from truss_files.errors import EntryError
from truss_files.format import entryfile
from truss_files.format import entryscan as scan_module
from truss_files.format.entryscan import VerdictBlock
from truss_files.model import Entry, Kind, Layer, Provenance, Trust, content_id

TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=40,
)
WORDISH = st.sampled_from(
    ["x", "yes", "null", "No", "a:b", "a: b", "it's", "'q'", '"q"', "#x", "x#y", "2026-01-01",
     "123", "0b101", "run:R-1/2", "event:e#1", "- x", "[x]", "{x: y}", "&a", "*a", "!t", "|",
     "a\nb", "tab\there", "ümlaut", "🚀", "  padded  ", "key: value\n    signer: evil"]
)  # fmt: skip
SIGNATURE = "-----BEGIN SSH SIGNATURE-----\nU1NI\n-----END SSH SIGNATURE-----"
SCALAR = st.one_of(WORDISH, TEXT.filter(lambda s: s.strip() != ""))


def verdict_dicts() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "entry": st.just("0" * 32),
            "outcome": st.sampled_from(["PASS", "FAIL"]),
            "signer": SCALAR,
            "verdict_id": st.sampled_from(["ab" * 16, "1" * 32, "0b" + "01" * 15]),
            "time": st.just("2026-11-29T11:02:33Z"),
            "signature": st.just(SIGNATURE),
            "votes": st.lists(
                st.fixed_dictionaries(
                    {"reviewer": SCALAR, "vote": st.just("PASS"), "evidence": st.dictionaries(
                        st.sampled_from(["note", "command"]), SCALAR, max_size=2)}
                ),
                max_size=2,
            ),
        }
    )  # fmt: skip


entries = st.builds(
    Entry,
    kind=st.sampled_from(list(Kind)),
    key=SCALAR.filter(lambda k: k.strip() and "\n" not in k and "\t" not in k),
    body=st.one_of(TEXT, st.just("plain body\nwith lines")).filter(lambda b: b.strip()),
    trust=st.sampled_from(list(Trust)),
    layer=st.sampled_from(list(Layer)),
    scope=st.dictionaries(st.sampled_from(["agent", "task", "a b"]), SCALAR, max_size=2),
    author=SCALAR,
    created=st.just("2026-11-29T11:02:33Z"),
    salience=st.sampled_from([0.0, 0.5, 1.0, 0.25, 1e-05]),
    provenance=st.builds(
        Provenance,
        produced_by=st.one_of(st.none(), SCALAR),
        sources=st.lists(SCALAR, max_size=2).map(tuple),
        verified_by=st.one_of(st.none(), verdict_dicts()),
    ),
    supersedes=st.one_of(st.none(), st.sampled_from(["ab" * 16, "1" * 32])),
    superseded_by=st.one_of(st.none(), st.just("cd" * 16)),
    checks=st.lists(SCALAR, max_size=2).map(tuple),
)


def scan(data: bytes, path: str) -> Entry:
    """What every caller gets: ``entryfile.parse``, the fast path first."""
    return entryfile.parse(data, path)


def agree(data: bytes, path: str) -> None:
    """Both succeed with equal entries, or both raise EntryError."""
    try:
        want: Entry | None = entryfile._parse_yaml(data, path, check_path=True)
    except EntryError:
        want = None
    try:
        got: Entry | None = scan(data, path)
    except EntryError:
        got = None
    assert got == want
    if got is not None:  # the id the fast path seeds is the content's address
        assert got.id == content_id(got) == path[-35:-3]


@settings(max_examples=300, deadline=None)
@given(entries)
def test_scan_equals_parse_on_canonical_files(entry: Entry) -> None:
    entry = dataclasses.replace(entry, body=entry.body.replace("\r", " ").strip() or "x")
    try:
        text = entryfile.serialize(entry).encode()
    except Exception:  # noqa: BLE001 - entries serialize refuses are not files
        return
    agree(text, entry.path)


def test_canonical_files_take_the_fast_path() -> None:
    entry = Entry(
        kind=Kind.LESSON, key="flaky-ci", body="Retry once.", created="2026-11-29T11:02:33Z"
    )
    vote = {"reviewer": "ops", "vote": "PASS", "evidence": {"note": "it's fine"}}
    verdict = {
        "entry": entry.id,
        "outcome": "PASS",
        "signer": "ops@example.test",
        "verdict_id": "ab" * 16,
        "time": "2026-11-29T11:02:33Z",
        "votes": [vote],
    }
    verified = dataclasses.replace(
        entry, trust=Trust.VERIFIED, provenance=Provenance(verified_by=verdict)
    )
    for item in (entry, verified):
        data = entryfile.serialize(item).encode()
        fast = scan_module._fast(data, item.path)  # no fallback needed
        assert fast == entryfile._parse_yaml(data, item.path, check_path=True)
    block = scan_module._fast(entryfile.serialize(verified).encode(), verified.path)
    assert isinstance(block.provenance.verified_by, VerdictBlock)
    assert block.provenance.verified_by.summary == {
        "verdict_id": "ab" * 16, "outcome": "PASS", "signer": "ops@example.test"
    }  # fmt: skip
    assert dict(block.provenance.verified_by) == verdict


BASE = entryfile.serialize(
    Entry(kind=Kind.LESSON, key="k", body="body", created="2026-11-29T11:02:33Z")
)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("trust: unverified", "trust: verified\ntrust: unverified"),  # repeated field
        ("trust: unverified", "trust: Verified"),
        ("key: k", "key: 'k"),  # unclosed quote
        ("key: k", "key: yes"),  # YAML reads a boolean
        ("key: k", 'key: "k"'),  # double quotes: the slow path decides
        ("layer: task", "layer: task # comment"),
        ("  verified_by: null", "  verified_by:\n    outcome: PASS\n    signer: 'x\nsigner: evil'"),
        ("  verified_by: null", "  verified_by:\n    outcome: PASS\n    outcome: FAIL"),
        ("  verified_by: null", "  verified_by:\n    a: &x 1\n    b: *x"),
        ("superseded_by: null", "superseded_by: null\nextra: 1"),
        ("salience: 0.5", "salience: 2.5"),
        ("---\nbody", "---\nbody\n---\nmore"),
    ],
)
def test_unusual_files_get_the_strict_verdict(old: str, new: str) -> None:
    assert old in BASE
    text = BASE.replace(old, new, 1)
    entry_id = entryfile.parse(BASE.encode(), None).id
    agree(text.encode(), f"memories/lesson/{entry_id[:2]}/{entry_id}.md")


def test_not_an_entry_raises_what_parse_raises() -> None:
    for data in (b"", b"no front matter", b"---\nkey: x\n", b"\xff\xfe", b"---\n[1, 2]\n---\n"):
        with pytest.raises(EntryError):
            scan(data, "memories/lesson/ab/x.md")


def test_wrong_path_or_id_is_refused() -> None:
    entry = Entry(kind=Kind.FACT, key="k", body="b", created="2026-11-29T11:02:33Z")
    data = entryfile.serialize(entry).encode()
    with pytest.raises(EntryError, match="wrong path"):
        scan(data, entry.path.replace("fact", "lesson"))
    with pytest.raises(EntryError, match="does not match the content"):
        scan(data.replace(b"\nb\n", b"\nedited\n"), entry.path)


def test_importing_entryfile_and_reading_a_canonical_file_import_no_yaml() -> None:
    """The cold tool path imports entryfile at module top: YAML only on the slow path."""
    import subprocess
    import sys

    entry = Entry(kind=Kind.FACT, key="k", body="b", created="2026-11-29T11:02:33Z")
    data = entryfile.serialize(entry).encode()
    code = (
        "import sys\nfrom truss_files.format import entryfile\n"
        f"e = entryfile.parse({data!r}, {entry.path!r})\n"
        "print(e.key, 'yaml' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["k", "False"]


def test_entry_of_fields_fills_every_field_as_the_dataclasses_would() -> None:
    """``entry_of_fields`` fills ``Entry`` and ``Provenance`` without their ``__init__``: it
    must set exactly their fields, so a field added to either cannot be silently missing from
    entries that the parser and the recall index return."""
    prov = Provenance(produced_by="run:r/1", sources=("entry:a",), verified_by=None)
    made = Entry(
        kind=Kind.FACT, key="k", body="b", trust=Trust.STALE, layer=Layer.TEAM,
        scope={"agent": "a"}, author="agent:x", created="2026-01-01T00:00:00Z", salience=0.7,
        provenance=prov, supersedes="s" * 32, superseded_by=None, checks=("c",),
    )  # fmt: skip
    fields = (
        made.kind, made.key, made.body, made.trust, made.layer, made.scope, made.author,
        made.created, made.salience, prov.produced_by, prov.sources, prov.verified_by,
        made.supersedes, made.superseded_by, made.checks,
    )  # fmt: skip
    filled = scan_module.entry_of_fields(fields)
    assert filled == made and filled.id == made.id
    assert set(vars(filled)) - {"_id"} == {f.name for f in dataclasses.fields(Entry)}
    assert set(vars(filled.provenance)) == {f.name for f in dataclasses.fields(Provenance)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        filled.key = "other"  # type: ignore[misc]
