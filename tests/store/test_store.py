"""MemoryStore: writes land unverified; only valid panel verdicts move trust; every change is
one signed commit that the audit accepts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from truss_files.errors import (
    ConfigError,
    NotFound,
    SignatureError,
    TransitionError,
    UsageError,
    VerdictError,
)
from truss_files.facade import MemoryStore
from truss_files.format.trailers import parse_trailers, trailers
from truss_files.git.gitstore import Snapshot
from truss_files.model import Entry, Kind, Layer, Trust
from truss_files.signing import Ed25519Signer
from truss_files.store.store import Store
from truss_files.trust.audit import audit
from truss_files.trust.verdict import Verdict, sign_verdict

AGENT = "agent@example.test"
MARKER = 'conflict = "verified-wins"'


def _tip(store: MemoryStore) -> str | None:
    return store.snapshot().oid


def _assert_clean(store: MemoryStore) -> None:
    report = audit(store.git)
    assert report.ok, [str(v) for v in report.violations]


def _pass(store: MemoryStore, entry: Entry) -> Entry:
    return store.promote(entry.id, store.sign_verdict(entry.id, "PASS"))


def _set_conflict(store: MemoryStore, commit: Callable[..., str], policy: str) -> None:
    def changes(snap: Snapshot) -> dict[str, bytes | None]:
        text = (snap.read("truss.toml") or b"").decode()
        assert MARKER in text
        return {"truss.toml": text.replace(MARKER, f'conflict = "{policy}"').encode()}

    commit(store, changes)
    assert store.config().get("policy", "conflict") == policy


def _foreign_verdict(signer: Ed25519Signer, principal: str, entry_id: str) -> Verdict:
    return sign_verdict(
        entry_id,
        "PASS",
        [{"reviewer": principal, "kind": "human", "vote": "PASS", "evidence": {}}],
        signer=signer,
        principal=principal,
        quorum="1-of-1",
        policy="manual",
        now="2026-11-29T12:00:00Z",
    )


# --------------------------------------------------------------------------- write


def test_write_lands_unverified_with_provenance(
    store: MemoryStore, define_checks: Callable[..., str]
) -> None:
    define_checks(store, {"tests": "pytest -q"})
    entry = store.write(
        "lessons",
        "rust-borrow-checker",
        "  Scope the guard.  \r\n\r\n",
        layer="team",
        scope={"agent": "build-bot"},
        produced_by="run:R-7f3a/12",
        sources=["git:9e1d2c4", "event:evt_1#1"],
        salience=0.75,
        checks=["tests"],
    )
    assert entry.trust is Trust.UNVERIFIED
    assert entry.kind is Kind.LESSON and entry.layer is Layer.TEAM
    assert entry.body == "  Scope the guard."
    assert entry.author == "agent:operator@example.test"
    assert entry.created == "2026-11-29T11:00:01Z"
    assert entry.provenance.sources == ("git:9e1d2c4", "event:evt_1#1")
    assert store.get(entry.id) == entry
    assert parse_trailers(store.git.commit("HEAD").message)["Truss-Op"] == ["write"]
    _assert_clean(store)


def test_writing_identical_content_is_idempotent(store: MemoryStore) -> None:
    first = store.write("fact", "k", "same body")
    tip = _tip(store)
    again = store.write("fact", "k", "same body\n\n")  # created differs; content does not
    assert again == first and again.created == first.created
    assert _tip(store) == tip
    assert store.write("fact", "k", "other body").id != first.id


def test_identical_content_after_promotion_keeps_the_promotion(store: MemoryStore) -> None:
    entry = _pass(store, store.write("fact", "k", "body"))
    again = store.write("fact", "k", "body")
    assert again.trust is Trust.VERIFIED and again == entry


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"body": "   \n  "}, "body is empty"),
        ({"body": "x" * (64 * 1024 + 1)}, "limit"),
        ({"key": ""}, "key must not be empty"),
        ({"key": "a\nb"}, "newlines"),
        ({"kind": "memo"}, "unknown kind"),
        ({"layer": "galaxy"}, "unknown layer"),
        ({"produced_by": "yesterday"}, "not a ledger ref"),
        ({"sources": ["git:9e1d2c4", "nope"]}, "not a ledger ref"),
        ({"salience": 1.5}, "salience"),
    ],
)
def test_bad_writes_are_refused_and_commit_nothing(
    store: MemoryStore, kwargs: dict[str, object], words: str
) -> None:
    call: dict[str, object] = {"kind": "fact", "key": "k", "body": "body"}
    call.update(kwargs)
    tip = _tip(store)
    with pytest.raises(UsageError, match=words):
        store.write(**call)  # type: ignore[arg-type]
    assert _tip(store) == tip


def test_an_entry_whose_id_is_all_digits_is_stored_and_read_back(store: MemoryStore) -> None:
    entry = store.write("fact", "k8607965", "digits only", author="agent:x")
    assert entry.id == "04020947187793731492320886038804"
    assert store.get(entry.id) == entry
    assert [e.id for e in store.list_entries()] == [entry.id]
    _assert_clean(store)


# --------------------------------------------------------------------------- promote / reject


def test_promote_on_a_valid_pass_verdict(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "body")
    verdict = store.sign_verdict(entry.id, "PASS", note="checked by hand")
    promoted = store.promote(entry.id[:10], verdict)
    assert promoted.trust is Trust.VERIFIED
    assert promoted.provenance.verified_by == verdict.to_dict()
    assert promoted.id == entry.id  # trust is not content
    assert store.get(entry.id) == promoted
    fields = parse_trailers(store.git.commit("HEAD").message)
    assert fields["Truss-Op"] == ["promote"] and fields["Truss-Verdict"] == [verdict.id]
    _assert_clean(store)


def test_reject_on_a_valid_fail_verdict(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "wrong")
    rejected = store.reject(entry.id, store.sign_verdict(entry.id, "FAIL", note="false"))
    assert rejected.trust is Trust.REJECTED
    assert store.get(entry.id).trust is Trust.REJECTED  # kept for audit
    with pytest.raises(TransitionError):
        _pass(store, rejected)
    _assert_clean(store)


@pytest.fixture
def agent_key(store: MemoryStore, add_signer: Callable[..., str]) -> Ed25519Signer:
    """A key in allowed_signers whose principal holds only the agent role."""
    signer = Ed25519Signer.generate(AGENT)
    add_signer(store, signer, AGENT, ("agent",))
    return signer


def _bad_verdicts(
    store: MemoryStore, entry: Entry, other: Entry, agent: Ed25519Signer
) -> dict[str, tuple[str, Verdict]]:
    good = store.sign_verdict(entry.id, "PASS")
    edited_votes = dataclasses.replace(
        good, votes=({"reviewer": "mallory", "kind": "human", "vote": "PASS", "evidence": {}},)
    )
    return {
        "for another id": ("for entry", store.sign_verdict(other.id, "PASS")),
        "FAIL for a promotion": ("needs a PASS", store.sign_verdict(entry.id, "FAIL")),
        "signed by a non-panel key": ("panel role", _foreign_verdict(agent, AGENT, entry.id)),
        "signed by an unknown key": (
            "not in .truss/allowed_signers",
            _foreign_verdict(Ed25519Signer.generate("x"), "operator@example.test", entry.id),
        ),
        "edited votes": ("does not verify|signature", edited_votes),
        "no votes": (
            "no votes",
            store.sign_verdict(entry.id, "PASS", votes=[]),
        ),
        "names another key": (
            "does not match the data",
            dataclasses.replace(good, key=agent.public_line),
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "for another id",
        "FAIL for a promotion",
        "signed by a non-panel key",
        "signed by an unknown key",
        "edited votes",
        "no votes",
        "names another key",
    ],
)
def test_promote_refuses_an_invalid_verdict(
    store: MemoryStore, agent_key: Ed25519Signer, case: str
) -> None:
    entry = store.write("fact", "k", "body")
    other = store.write("fact", "other", "another body")
    words, verdict = _bad_verdicts(store, entry, other, agent_key)[case]
    tip = _tip(store)
    with pytest.raises(VerdictError, match=words):
        store.promote(entry.id, verdict)
    assert _tip(store) == tip
    assert store.get(entry.id).trust is Trust.UNVERIFIED
    _assert_clean(store)


def test_reject_refuses_a_pass_verdict_and_a_non_panel_fail(
    store: MemoryStore, agent_key: Ed25519Signer
) -> None:
    entry = store.write("fact", "k", "body")
    with pytest.raises(VerdictError, match="needs a FAIL"):
        store.reject(entry.id, store.sign_verdict(entry.id, "PASS"))
    forged = sign_verdict(
        entry.id,
        "FAIL",
        [{"reviewer": AGENT, "vote": "FAIL"}],
        signer=agent_key,
        principal=AGENT,
        quorum="1-of-1",
        policy="manual",
        now="2026-11-29T12:00:00Z",
    )
    with pytest.raises(VerdictError, match="panel role"):
        store.reject(entry.id, forged)
    assert store.get(entry.id).trust is Trust.UNVERIFIED


def test_a_verdict_edited_after_signing_is_refused_on_load(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "body")
    data = store.sign_verdict(entry.id, "PASS").to_dict()
    data["votes"][0]["vote"] = "PASS!"
    with pytest.raises(VerdictError, match="edited after signing"):
        Verdict.from_dict(data)
    del data["verdict_id"]  # without the id the signature still catches it
    with pytest.raises(VerdictError):
        store.promote(entry.id, Verdict.from_dict(data))


def test_a_non_panel_key_cannot_sign_verdicts_through_the_store(
    store_as: Callable[[Ed25519Signer], MemoryStore], store: MemoryStore, agent_key: Ed25519Signer
) -> None:
    entry = store.write("fact", "k", "body")
    with pytest.raises(UsageError, match="panel role"):
        store_as(agent_key).sign_verdict(entry.id, "PASS")


def test_a_non_panel_key_cannot_commit_a_promotion(
    store_as: Callable[[Ed25519Signer], MemoryStore], store: MemoryStore, agent_key: Ed25519Signer
) -> None:
    entry = store.write("fact", "k", "body")
    verdict = store.sign_verdict(entry.id, "PASS")
    tip = _tip(store)
    with pytest.raises(SignatureError, match="operator or panel role"):
        store_as(agent_key).promote(entry.id, verdict)
    assert _tip(store) == tip


def test_an_unknown_key_cannot_write(
    store_as: Callable[[Ed25519Signer], MemoryStore], store: MemoryStore
) -> None:
    tip = _tip(store)
    with pytest.raises(SignatureError, match="not in .truss/allowed_signers"):
        store_as(Ed25519Signer.generate("stranger")).write("fact", "k", "body")
    assert _tip(store) == tip


# --------------------------------------------------------------------------- demote / supersede


def test_demote_only_from_verified(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "body")
    with pytest.raises(TransitionError, match="only verified"):
        store.demote(entry.id, "no reason")
    verified = _pass(store, entry)
    with pytest.raises(UsageError, match="--reason"):
        store.demote(entry.id, "   ")
    stale = store.demote(entry.id, "the API changed")
    assert stale.trust is Trust.STALE
    assert stale.provenance.verified_by == verified.provenance.verified_by
    with pytest.raises(TransitionError):
        store.demote(entry.id, "again")
    fields = parse_trailers(store.git.commit("HEAD").message)
    assert fields["Truss-Reason"] == ["the API changed"]
    # A PASS re-check brings a stale entry back.
    assert _pass(store, stale).trust is Trust.VERIFIED
    _assert_clean(store)


def test_demote_refuses_rejected(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "body")
    store.reject(entry.id, store.sign_verdict(entry.id, "FAIL"))
    with pytest.raises(TransitionError):
        store.demote(entry.id, "x")


def test_supersede_requires_a_verified_new_entry(store: MemoryStore) -> None:
    old = _pass(store, store.write("fact", "old-key", "old belief"))
    new = store.write("fact", "new-key", "new belief")
    tip = _tip(store)
    with pytest.raises(TransitionError, match="promote it"):
        store.supersede(old.id, new.id)
    assert _tip(store) == tip
    with pytest.raises(UsageError, match="itself"):
        store.supersede(old.id, old.id)
    new = _pass(store, new)
    stale, newer = store.supersede(old.id[:8], new.id[:8])
    assert stale.trust is Trust.STALE and stale.superseded_by == new.id
    assert newer.trust is Trust.VERIFIED and newer.supersedes == old.id
    assert store.get(old.id) == stale and store.get(new.id) == newer
    _assert_clean(store)


def test_supersede_refuses_a_rejected_old_entry(store: MemoryStore) -> None:
    old = store.write("fact", "a", "bad")
    store.reject(old.id, store.sign_verdict(old.id, "FAIL"))
    new = _pass(store, store.write("fact", "b", "good"))
    with pytest.raises(TransitionError, match="rejected"):
        store.supersede(old.id, new.id)


# --------------------------------------------------------------------------- conflict policy


def test_verified_wins_by_default(store: MemoryStore) -> None:
    older = _pass(store, store.write("decision", "db", "use sqlite"))
    newer = _pass(store, store.write("decision", "db", "use postgres"))
    older = store.get(older.id)
    assert older.trust is Trust.STALE and older.superseded_by == newer.id
    assert newer.trust is Trust.VERIFIED and newer.supersedes == older.id
    # The promotion and the demotion are one commit.
    fields = parse_trailers(store.git.commit("HEAD").message)
    assert sorted(fields["Truss-Trust"]) == sorted(
        [f"{newer.id} unverified -> verified", f"{older.id} verified -> stale"]
    )
    # Other kinds and other keys are not rivals.
    other = _pass(store, store.write("fact", "db", "a fact, not a decision"))
    assert other.supersedes is None and store.get(newer.id).trust is Trust.VERIFIED
    _assert_clean(store)


def test_keep_both_flagged(store: MemoryStore, signed_commit: Callable[..., str]) -> None:
    _set_conflict(store, signed_commit, "keep-both-flagged")
    a = _pass(store, store.write("decision", "db", "use sqlite"))
    b = _pass(store, store.write("decision", "db", "use postgres"))
    assert store.get(a.id).trust is Trust.VERIFIED and b.trust is Trust.VERIFIED
    assert store.get(a.id).superseded_by is None and b.supersedes is None
    _assert_clean(store)


def test_latest_wins_newer_promotion_supersedes(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    _set_conflict(store, signed_commit, "latest-wins")
    older = _pass(store, store.write("decision", "db", "use sqlite"))
    newer = _pass(store, store.write("decision", "db", "use postgres"))
    assert store.get(older.id).trust is Trust.STALE
    assert newer.trust is Trust.VERIFIED and newer.supersedes == older.id
    _assert_clean(store)


def test_latest_wins_older_promotion_goes_stale_at_once(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    _set_conflict(store, signed_commit, "latest-wins")
    older = store.write("decision", "db", "use sqlite")
    newer = _pass(store, store.write("decision", "db", "use postgres"))
    late = _pass(store, older)
    assert late.trust is Trust.STALE and late.superseded_by == newer.id
    assert late.provenance.verified_by is not None  # it did pass the panel
    assert store.get(newer.id).trust is Trust.VERIFIED
    _assert_clean(store)
    # ... and that promotion can be reverted like any other.
    store.revert("HEAD")
    assert store.get(older.id).trust is Trust.UNVERIFIED
    _assert_clean(store)


def test_unknown_conflict_policy_is_a_config_error(
    store: MemoryStore, signed_commit: Callable[..., str]
) -> None:
    entry = store.write("decision", "db", "a")
    _set_conflict(store, signed_commit, "coin-toss")
    with pytest.raises(ConfigError, match="verified-wins"):
        _pass(store, entry)
    assert store.get(entry.id).trust is Trust.UNVERIFIED
    # The store's own check, below the layered settings the facade reads first.
    with pytest.raises(ConfigError, match="verified-wins"):
        Store.promote(store, entry.id, store.sign_verdict(entry.id, "PASS"))
    assert store.get(entry.id).trust is Trust.UNVERIFIED
    # And a write refuses before its commit, as `truss-files write` does: its settings are
    # read first (the verification policy), so a broken file never leaves it half done.
    tip = store.git.tip()
    with pytest.raises(ConfigError, match="verified-wins"):
        store.write("decision", "db", "b")
    assert store.git.tip() == tip


# --------------------------------------------------------------------------- revert


def test_revert_of_a_demote_restores_verified(store: MemoryStore) -> None:
    entry = _pass(store, store.write("fact", "k", "body"))
    store.demote(entry.id, "doubt")
    demote_commit = _tip(store)
    assert demote_commit is not None
    made = store.revert(demote_commit[:12])
    assert store.get(entry.id) == entry
    fields = parse_trailers(made.message)
    assert fields["Truss-Op"] == ["revert"] and fields["Truss-Reverts"] == [demote_commit]
    assert made.message.startswith('Revert "truss: demote')
    _assert_clean(store)


def test_revert_of_a_promotion_with_a_rival_restores_both(store: MemoryStore) -> None:
    older = _pass(store, store.write("decision", "db", "a"))
    newer = _pass(store, store.write("decision", "db", "b"))
    store.revert("HEAD")
    assert store.get(older.id) == older
    assert store.get(newer.id).trust is Trust.UNVERIFIED
    _assert_clean(store)


def test_revert_of_a_write_or_init_is_refused(store: MemoryStore) -> None:
    store.write("fact", "k", "body")
    tip = _tip(store)
    with pytest.raises(UsageError, match="a 'write'"):
        store.revert("HEAD")
    with pytest.raises(UsageError, match="a 'init'"):
        store.revert("HEAD~1")
    with pytest.raises(UsageError, match="no commit named"):
        store.revert("nope")
    assert _tip(store) == tip


def test_revert_refuses_when_the_entry_moved_on(store: MemoryStore) -> None:
    entry = _pass(store, store.write("fact", "k", "body"))
    promote_commit = _tip(store)
    store.demote(entry.id, "doubt")
    with pytest.raises(TransitionError, match="revert the later commits first"):
        store.revert(promote_commit or "")


# --------------------------------------------------------------------------- ids


def test_short_prefixes_resolve_like_git(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "body")
    for n in (8, 12, 32):
        assert store.get(entry.id[:n]) == entry
        assert store.get(entry.id[:n].upper()) == entry
    with pytest.raises(UsageError, match="8\\+"):
        store.get(entry.id[:7])
    with pytest.raises(UsageError, match="not an entry id"):
        store.get("not-hex-at-all")
    missing = ("0" if entry.id[0] != "0" else "1") * 12
    with pytest.raises(NotFound, match="truss-files list"):
        store.get(missing)


def test_an_ambiguous_prefix_names_the_candidates(store: MemoryStore) -> None:
    # Found by search: these two share their first eight hex characters.
    a = store.write("fact", "a17075", "ambiguous prefix", author="agent:x")
    b = store.write("fact", "a63043", "ambiguous prefix", author="agent:x")
    assert a.id[:8] == b.id[:8] == "d239f49c" and a.id != b.id
    with pytest.raises(UsageError, match="ambiguous") as info:
        store.get("d239f49c")
    assert a.id in info.value.message and b.id in info.value.message
    assert store.get(a.id[:9]) == a and store.get(b.id[:9]) == b


# --------------------------------------------------------------------------- listing and log


def test_list_filters(store: MemoryStore) -> None:
    a = store.write("fact", "k", "one", layer="team")
    b = _pass(store, store.write("lesson", "k", "two"))
    c = store.write("lesson", "other", "three")
    assert [e.id for e in store.list_entries()] == [a.id, b.id, c.id]
    assert [e.id for e in store.list_entries(kind=Kind.LESSON)] == [b.id, c.id]
    assert [e.id for e in store.list_entries(key="k")] == [a.id, b.id]
    assert [e.id for e in store.list_entries(trust=Trust.VERIFIED)] == [b.id]
    assert [e.id for e in store.list_entries(layer=Layer.TEAM)] == [a.id]


def test_log_lists_every_commit_with_signer_and_verdict(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "body")
    store.write("fact", "unrelated", "not in this log")
    verdict = store.sign_verdict(entry.id, "PASS")
    store.promote(entry.id, verdict)
    store.demote(entry.id, "doubt")
    items = store.log(entry.id[:8])
    assert [(i.op, i.trust, i.verdict) for i in items] == [
        ("write", "unverified", None),
        ("promote", "verified", verdict.id),
        ("demote", "stale", None),
    ]
    assert {i.signer for i in items} == {"operator@example.test"}
    assert all(len(i.commit) == 40 and i.time.endswith("Z") for i in items)


def test_trailers_round_trip() -> None:
    text = trailers(op="promote", entry="abc", trust=["a x -> y", "b y -> z"])
    assert text.splitlines()[0] == "Truss-Op: promote"
    assert parse_trailers("subject\n\n" + text) == {
        "Truss-Op": ["promote"],
        "Truss-Entry": ["abc"],
        "Truss-Trust": ["a x -> y", "b y -> z"],
    }


def test_principal_of_an_unknown_key_is_a_signature_error(
    store_as: Callable[[Ed25519Signer], MemoryStore],
) -> None:
    with pytest.raises(SignatureError, match="allowed_signers"):
        store_as(Ed25519Signer.generate("nobody")).principal()


def test_bare_store_supports_the_whole_cycle(bare_store: MemoryStore) -> None:
    entry = _pass(bare_store, bare_store.write("fact", "k", "body"))
    bare_store.demote(entry.id, "doubt")
    bare_store.revert("HEAD")
    assert bare_store.get(entry.id).trust is Trust.VERIFIED
    _assert_clean(bare_store)
