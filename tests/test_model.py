"""The values: kinds, trust tiers and floors, transitions, keys, ledger refs, content ids."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from truss_files.errors import UsageError
from truss_files.model import (
    LEGAL_TRANSITIONS,
    Entry,
    Kind,
    Layer,
    Provenance,
    Trust,
    check_key,
    check_ledger_ref,
    content_id,
    entry_path,
    normalize_body,
)


def _entry(**kw: object) -> Entry:
    fields: dict[str, object] = {
        "kind": Kind.LESSON,
        "key": "rust-borrow-checker",
        "body": "Scope the guard before any await.",
        "author": "agent:build-bot",
        "created": "2026-11-29T11:02:33Z",
    }
    fields.update(kw)
    return Entry(**fields)  # type: ignore[arg-type]


def test_kinds_are_the_design_list() -> None:
    assert [k.value for k in Kind] == [
        "goal",
        "decision",
        "fact",
        "lesson",
        "playbook",
        "artifact",
        "scratch",
        "context_summary",
        "inference",
        "preference",
        "correction",
    ]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("lesson", Kind.LESSON),
        ("lessons", Kind.LESSON),
        ("Playbooks", Kind.PLAYBOOK),
        (" fact ", Kind.FACT),
        ("context-summary", Kind.CONTEXT_SUMMARY),
    ],
)
def test_kind_parse_accepts_how_people_say_it(text: str, kind: Kind) -> None:
    assert Kind.parse(text) is kind


@pytest.mark.parametrize("text", ["memo", "s", "lessonss", ""])
def test_kind_parse_refuses_unknown_and_lists_the_kinds(text: str) -> None:
    with pytest.raises(UsageError, match="use one of: goal, decision"):
        Kind.parse(text)


def test_trust_floor_orders_verified_over_stale_over_unverified() -> None:
    assert Trust.VERIFIED.rank > Trust.STALE.rank > Trust.UNVERIFIED.rank > Trust.REJECTED.rank
    assert Trust.floor("verified") is Trust.VERIFIED
    assert Trust.floor(" Stale ") is Trust.STALE
    passing = {
        floor: {t for t in Trust if t.passes(floor)}
        for floor in (Trust.VERIFIED, Trust.STALE, Trust.UNVERIFIED)
    }
    assert passing[Trust.VERIFIED] == {Trust.VERIFIED}
    assert passing[Trust.STALE] == {Trust.VERIFIED, Trust.STALE}
    assert passing[Trust.UNVERIFIED] == {Trust.VERIFIED, Trust.STALE, Trust.UNVERIFIED}


def test_rejected_never_passes_any_floor_and_is_no_floor() -> None:
    for floor in Trust:
        assert not Trust.REJECTED.passes(floor)
    with pytest.raises(UsageError, match="never returned"):
        Trust.floor("rejected")
    with pytest.raises(UsageError, match="verified \\(default\\), stale or unverified"):
        Trust.floor("trusted")


def test_legal_transitions_are_the_arrows_of_section_2() -> None:
    assert {(a.value, b.value) for a, b in LEGAL_TRANSITIONS} == {
        ("unverified", "verified"),
        ("unverified", "rejected"),
        ("verified", "stale"),
        ("stale", "verified"),
    }
    # Nothing leaves rejected, and nothing goes back to unverified except by revert.
    assert not any(a is Trust.REJECTED for a, _ in LEGAL_TRANSITIONS)
    assert not any(b is Trust.UNVERIFIED for _, b in LEGAL_TRANSITIONS)


def test_layer_parse() -> None:
    assert Layer.parse("Team") is Layer.TEAM
    with pytest.raises(UsageError, match="use one of: task, member"):
        Layer.parse("galaxy")


@pytest.mark.parametrize(
    "ref",
    [
        "git:9e1d2c4",
        "git:" + "a" * 40,
        "run:R-7f3a/12",
        "run:x.y_z/0",
        "event:evt_1",
        "event:evt_1#1",
        "event:team:rollout#rev-2",
    ],
)
def test_ledger_refs_accepted(ref: str) -> None:
    assert check_ledger_ref(ref) == ref


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "git:",
        "git:xyz",
        "git:abc",  # too short to name a commit
        "GIT:9e1d2c4",
        "run:R-7f3a",
        "run:R 7f3a/1",
        "event:",
        "event:a b",
        "event:a#1#2",
        "https://example.com",
        "git:9e1d2c4\n",
    ],
)
def test_ledger_refs_refused_with_the_forms_listed(ref: str) -> None:
    with pytest.raises(UsageError, match="git:<commit>, run:<run-id>/<seq>"):
        check_ledger_ref(ref)


@pytest.mark.parametrize("key", ["", "   ", "a\nb", "tab\there", "nul\x00", "x" * 257])
def test_bad_keys(key: str) -> None:
    with pytest.raises(UsageError):
        check_key(key)


@pytest.mark.parametrize("key", ["k", "x" * 256, "路径/with spaces", "ends-with-dot."])
def test_good_keys(key: str) -> None:
    assert check_key(key) == key


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("a\r\nb\rc", "a\nb\nc"),
        ("\n\n  line  \n\n", "  line"),
        ("a   \nb\t\n", "a\nb"),
        ("already clean", "already clean"),
        ("   \n\t\n", ""),
    ],
)
def test_normalize_body(raw: str, clean: str) -> None:
    assert normalize_body(raw) == clean
    assert normalize_body(clean) == clean


def test_content_id_covers_exactly_the_immutable_fields() -> None:
    entry = _entry(scope={"b": "2", "a": "1"}, provenance=Provenance(produced_by="run:R/1"))
    assert len(entry.id) == 32 and int(entry.id, 16) >= 0
    assert entry.id == content_id(entry)
    content: list[dict[str, Any]] = [
        {"kind": Kind.FACT},
        {"key": "other"},
        {"body": "other"},
        {"layer": Layer.TEAM},
        {"scope": {"a": "1"}},
        {"author": "agent:other"},
        {"provenance": Provenance(produced_by="run:R/2")},
    ]
    for change in content:
        assert dataclasses.replace(entry, **change).id != entry.id, change
    mutable: list[dict[str, Any]] = [
        {"trust": Trust.VERIFIED},
        {"created": "2030-01-01T00:00:00Z"},
        {"salience": 0.9},
        {"supersedes": "a" * 32},
        {"superseded_by": "b" * 32},
        {"checks": ("pytest -q",)},
        {
            "provenance": Provenance(
                produced_by="run:R/1", sources=("git:abcd",), verified_by={"v": 1}
            )
        },
    ]
    for change in mutable:
        assert dataclasses.replace(entry, **change).id == entry.id, change
    # Scope order is not content.
    assert _entry(scope={"a": "1", "b": "2"}, provenance=entry.provenance).id == entry.id


def test_path_fans_out_by_the_id_prefix() -> None:
    entry = _entry()
    assert entry.path == f"memories/lesson/{entry.id[:2]}/{entry.id}.md"
    assert entry_path(Kind.CONTEXT_SUMMARY, "ab" + "0" * 30) == (
        "memories/context_summary/ab/ab" + "0" * 30 + ".md"
    )


def test_entries_are_frozen_and_ledger_ref_is_produced_by() -> None:
    entry = _entry(provenance=Provenance(produced_by="run:R-7f3a/12"))
    assert entry.ledger_ref == "run:R-7f3a/12"
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.trust = Trust.VERIFIED  # type: ignore[misc]


def test_an_entry_keeps_its_id_and_changes_make_a_new_one() -> None:
    entry = Entry(kind=Kind.FACT, key="k", body="b")
    fresh = Entry(kind=Kind.FACT, key="k", body="b")
    assert entry.id == content_id(fresh) and entry.__dict__["_id"] == entry.id
    assert entry == fresh  # the kept id is not a field
    changed = dataclasses.replace(entry, body="c")
    assert changed.id == content_id(Entry(kind=Kind.FACT, key="k", body="c")) != entry.id
