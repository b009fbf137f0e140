"""Attacks on keyless verdicts and commit attestations, each performed for real against the
private sigstore instance and sigstore's real verifier, and each refused by name with nothing
in the store (or on the server) changed:

- a verdict signed by another identity, or by the panel's identity from another issuer (also
  relabelled to claim the panel's principal);
- a verdict moved to another entry, or edited after signing;
- a certificate from a CA, or with an SCT from a CT log, the trusted root does not name; a
  second, independent sigstore deployment;
- a certificate expired (or not yet valid) when the log recorded the signature;
- a log entry whose inclusion proof, promise (SET) or checkpoint does not verify;
- a missing or malformed bundle;
- a trusted root swapped in by a non-operator;
- attestations moved to another commit, signed by an identity the store does not name, or
  deleted -- in the audit, and at the server's gate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pygit2
import pytest

import tests.support.hand_commits as hand
from tests.support.sigstore_local import LocalSigstore
from tests.support.sigstore_local import fixture as sigstore_fixtures
from tests.support.sigstore_support import keyless_verdict, principal, trust_instance
from truss_files.errors import KeylessError, UntrustedHistory
from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.model import Entry, Kind, Trust
from truss_files.signing import Ed25519Signer, keyless
from truss_files.signing.trustpolicy import TRUSTED_ROOT_PATH
from truss_files.store.store import _with_trust
from truss_files.trust.attest import NOTES_REF, attest, payload, read_notes
from truss_files.trust.audit import audit
from truss_files.trust.verdict import Verdict

# The local sigstore's fixtures, here only (they need the sigstore extra).
sigstore_local = sigstore_fixtures.sigstore_local
sigstore_other = sigstore_fixtures.sigstore_other

MALLORY = "mallory@example.test"
EVIL_ISSUER = "https://issuer.evil.example"


def _relabel(verdict: Verdict, **fields: Any) -> Verdict:
    return dataclasses.replace(verdict, **fields)


def _unchecked(sigstore: LocalSigstore, verdict: Verdict) -> Verdict:
    """The same verdict with a bundle made without the client's own checks."""
    bundle = sigstore.sign_unchecked(verdict.payload(), sigstore.issue_token())
    return _relabel(verdict, bundle=json.loads(bundle.to_json()))


Forge = Callable[[MemoryStore, LocalSigstore, Entry, Entry], Verdict]


def _in(knob: Callable[[LocalSigstore], contextlib.AbstractContextManager[Any]]) -> Forge:
    def forge(store: MemoryStore, sl: LocalSigstore, entry: Entry, _other: Entry) -> Verdict:
        with knob(sl):
            return keyless_verdict(store, sl, entry.id)

    return forge


FORGERIES: dict[str, tuple[Forge, str]] = {
    "another identity": (
        lambda store, sl, e, _o: keyless_verdict(store, sl, e.id, identity=MALLORY),
        "sigstore-identity",
    ),
    "another identity, relabelled as the panel's": (
        lambda store, sl, e, _o: _relabel(
            keyless_verdict(store, sl, e.id, identity=MALLORY), signer=principal(sl)
        ),
        "sigstore-identity",
    ),
    "another issuer": (
        lambda store, sl, e, _o: keyless_verdict(store, sl, e.id, issuer=EVIL_ISSUER),
        "sigstore-issuer",
    ),
    "another issuer, relabelled as the panel's": (
        lambda store, sl, e, _o: _relabel(
            keyless_verdict(store, sl, e.id, issuer=EVIL_ISSUER), signer=principal(sl)
        ),
        "sigstore-issuer",
    ),
    "another entry's verdict, relabelled": (
        lambda store, sl, e, other: _relabel(keyless_verdict(store, sl, other.id), entry=e.id),
        "sigstore-artifact",
    ),
    "votes edited after signing": (
        lambda store, sl, e, _o: _relabel(
            keyless_verdict(store, sl, e.id),
            votes=({"reviewer": "ci", "kind": "ci", "vote": "PASS", "evidence": {"note": "x"}},),
        ),
        "sigstore-artifact",
    ),
    "untrusted CA": (_in(lambda sl: sl.untrusted_ca()), "sigstore-untrusted-certificate"),
    "untrusted CT log": (
        lambda store, sl, e, _o: _ct_forged(store, sl, e),
        "sigstore-untrusted-certificate",
    ),
    "expired at logging": (_in(lambda sl: sl.log_time_shift(3600)), "sigstore-expired-certificate"),
    "not yet valid": (_in(lambda sl: sl.certificate_shift(3600)), "sigstore-expired-certificate"),
    "tampered inclusion proof": (_in(lambda sl: sl.tampered_log("proof")), "sigstore-log"),
    "tampered promise (SET)": (_in(lambda sl: sl.tampered_log("set")), "sigstore-log"),
    "tampered checkpoint": (_in(lambda sl: sl.tampered_log("checkpoint")), "sigstore-log"),
    "no bundle": (
        lambda store, sl, e, _o: _relabel(keyless_verdict(store, sl, e.id), bundle=None),
        "sigstore-bundle",
    ),
    "malformed bundle": (
        lambda store, sl, e, _o: _relabel(
            keyless_verdict(store, sl, e.id), bundle={"mediaType": "nonsense"}
        ),
        "sigstore-bundle",
    ),
}


def _ct_forged(store: MemoryStore, sl: LocalSigstore, entry: Entry) -> Verdict:
    honest = keyless_verdict(store, sl, entry.id)
    with sl.untrusted_ct_log():
        return _unchecked(sl, honest)


@pytest.fixture
def keyless_store(
    store: MemoryStore, sigstore_local: LocalSigstore
) -> tuple[MemoryStore, Entry, Entry]:
    trust_instance(store, sigstore_local)
    entry = store.write(Kind.FACT, "release-check", "The release check needs the preview URL.")
    other = store.write(Kind.FACT, "other", "Another fact entirely.")
    return store, entry, other


@pytest.mark.parametrize("case", sorted(FORGERIES))
def test_forged_keyless_verdict_is_refused_by_name(
    keyless_store: tuple[MemoryStore, Entry, Entry],
    sigstore_local: LocalSigstore,
    signed_commit: Callable[..., str],
    case: str,
) -> None:
    store, entry, other = keyless_store
    forge, rule = FORGERIES[case]
    verdict = forge(store, sigstore_local, entry, other)
    tip = store.git.tip()
    before = store.snapshot().read(store.resolve(entry.id))

    # promote: refused before anything is committed.
    with pytest.raises(KeylessError) as refused:
        store.promote(entry.id, verdict)
    assert refused.value.rule == rule, refused.value.message
    assert store.git.tip() == tip
    assert store.snapshot().read(store.resolve(entry.id)) == before
    assert store.get(entry.id).trust is Trust.UNVERIFIED

    # A hostile client that skips the library: the audit names the same rule.
    path = store.resolve(entry.id)
    smuggled = entryfile.serialize(_with_trust(entry, Trust.VERIFIED, verdict.to_dict()))
    commit = signed_commit(
        store,
        {path: smuggled.encode()},
        message=f"truss: promote\n\nTruss-Op: promote\nTruss-Entry: {entry.id}",
    )
    found = {(v.commit, v.path, v.rule) for v in audit(store.git).violations}
    assert (commit, path, rule) in found


def test_a_second_independent_deployment_is_untrusted(
    keyless_store: tuple[MemoryStore, Entry, Entry],
    sigstore_local: LocalSigstore,
) -> None:
    from truss_files.store.operators import grant_role
    from truss_files.trust.verdict import sign_keyless_verdict

    store, entry, _ = keyless_store
    with LocalSigstore() as other:
        grant_role(store, "panel", principal(other))
        verdict = sign_keyless_verdict(
            entry.id, "PASS", None, token=other.issue_token(),
            trust_config=str(other.trust_config_json), quorum="1-of-1", policy="manual",
            now="2026-11-29T12:00:00Z",
        )  # fmt: skip
    tip = store.git.tip()
    with pytest.raises(KeylessError) as refused:
        store.promote(entry.id, verdict)
    assert refused.value.rule == "sigstore-untrusted-certificate"
    assert store.git.tip() == tip and store.get(entry.id).trust is Trust.UNVERIFIED


def test_a_trusted_root_swapped_in_by_a_non_operator_vouches_for_nothing(
    keyless_store: tuple[MemoryStore, Entry, Entry],
    sigstore_local: LocalSigstore,
    add_signer: Callable[..., str],
    signed_commit: Callable[..., str],
) -> None:
    from truss_files.store.operators import grant_role
    from truss_files.trust.verdict import sign_keyless_verdict

    store, entry, _ = keyless_store
    agent = Ed25519Signer.generate("agent@example.test")
    add_signer(store, agent, "agent@example.test", ("agent", "panel"))
    with LocalSigstore() as rogue:
        grant_role(store, "panel", principal(rogue))
        swap = signed_commit(
            store, {TRUSTED_ROOT_PATH: rogue.trusted_root_json.read_bytes()}, signer=agent
        )
        verdict = sign_keyless_verdict(
            entry.id, "PASS", None, token=rogue.issue_token(),
            trust_config=str(rogue.trust_config_json), quorum="1-of-1", policy="manual",
            now="2026-11-29T12:00:00Z",
        )  # fmt: skip
    # The library writes nothing on a history the audit rejects; a promote signed by hand
    # (a client that skips it) is judged by the audit under the operator's root.
    with pytest.raises(UntrustedHistory):
        store.promote(entry.id, verdict)
    assert isinstance(store.signer, Ed25519Signer)
    promote = hand.promote(store, store.signer, entry.id, verdict)
    found = {(v.commit, v.rule) for v in audit(store.git).violations}
    assert (swap, "role") in found
    assert (promote, "sigstore-untrusted-certificate") in found


# --------------------------------------------------------------------------- attestations


def _attest(store: MemoryStore, sl: LocalSigstore, rev: str | None = None) -> list[str]:
    done = attest(store, rev, token=sl.issue_token(), trust_config=str(sl.trust_config_json))
    return [a.commit for a in done]


def _note(store: MemoryStore, commit: str, note: dict[str, Any]) -> None:
    sig = pygit2.Signature("Mallory", MALLORY)
    text = json.dumps(note, sort_keys=True) + "\n"
    store.git.repo.create_note(text, sig, sig, commit, NOTES_REF, True)


def _note_of(store: MemoryStore, commit: str) -> dict[str, Any]:
    blob = read_notes(store.git.repo)[commit]
    found: dict[str, Any] = json.loads(store.git.repo[blob].data)  # type: ignore[attr-defined]
    return found


@pytest.fixture
def attested(
    keyless_store: tuple[MemoryStore, Entry, Entry], sigstore_local: LocalSigstore
) -> tuple[MemoryStore, str, str]:
    store = keyless_store[0]
    first, second = _attest(store, sigstore_local, "HEAD~1..HEAD") + _attest(
        store, sigstore_local, "HEAD~1"
    )
    assert audit(store.git).ok
    return store, first, second


def test_an_attestation_moved_to_another_commit_is_refused(
    attested: tuple[MemoryStore, str, str], sigstore_local: LocalSigstore
) -> None:
    store, tip, older = attested
    entry = next(e for e in store.iter_entries() if e.key == "release-check")
    store.promote(entry.id, keyless_verdict(store, sigstore_local, entry.id))
    _note(store, older, _note_of(store, tip))
    found = {(v.commit, v.rule) for v in audit(store.git).violations}
    assert found == {(older, "sigstore-artifact")}
    # A note labels no entry's trust: the read gate still serves the verified entry.
    assert [h.entry.id for h in store.query("release check preview URL").hits] == [entry.id]


def test_an_attestation_relabelled_for_another_commit_is_refused(
    attested: tuple[MemoryStore, str, str],
) -> None:
    store, tip, older = attested
    _note(store, older, {**_note_of(store, tip), "commit": older})
    found = {(v.commit, v.rule) for v in audit(store.git).violations}
    assert found == {(older, "sigstore-artifact")}


@pytest.mark.parametrize(
    ("token", "rule"),
    [({"identity": MALLORY}, "sigstore-identity"), ({"issuer": EVIL_ISSUER}, "sigstore-issuer")],
)
def test_an_attestation_by_an_identity_the_store_does_not_name_is_refused(
    attested: tuple[MemoryStore, str, str],
    sigstore_local: LocalSigstore,
    token: dict[str, str],
    rule: str,
) -> None:
    store, tip, _ = attested
    who, bundle = keyless.sign(
        payload(tip),
        token=sigstore_local.issue_token(**token),
        trust_config=sigstore_local.trust_config_json,
    )
    _note(store, tip, {"commit": tip, "signer": who.principal, "bundle": bundle})
    found = {(v.commit, v.rule) for v in audit(store.git).violations}
    assert found == {(tip, rule)}


def _push(work: Path, *refspecs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "push", "origin", *refspecs], cwd=work, capture_output=True, text=True, timeout=120
    )


def test_the_gate_refuses_forged_and_deleted_attestations(
    server: Path,
    clone: Callable[[str], MemoryStore],
    tmp_path: Path,
    sigstore_local: LocalSigstore,
    git: Callable[..., str],
) -> None:
    from truss_files.store.sync import sync

    work = clone("work")
    trust_instance(work, sigstore_local)
    work.write(Kind.FACT, "k", "a body")
    tip, older = _attest(work, sigstore_local), str(work.git.tip().parents[0].id)  # type: ignore[union-attr]
    sync(work)
    server_repo = pygit2.Repository(str(server))
    honest = server_repo.references[NOTES_REF].target

    _note(work, older, _note_of(work, tip[0]))  # moved
    moved = _push(tmp_path / "work", f"{NOTES_REF}:{NOTES_REF}")
    assert moved.returncode != 0
    assert f"commit {older[:12]}: [sigstore-artifact]" in moved.stderr
    assert server_repo.references[NOTES_REF].target == honest

    git(tmp_path / "work", "update-ref", NOTES_REF, str(honest))
    sig = pygit2.Signature("Mallory", MALLORY)
    work.git.repo.lookup_note(tip[0], NOTES_REF).remove(sig, sig, NOTES_REF)
    deleted = _push(tmp_path / "work", f"+{NOTES_REF}:{NOTES_REF}")
    assert deleted.returncode != 0
    assert f"commit {tip[0][:12]}: [sigstore-note-delete]" in deleted.stderr
    assert server_repo.references[NOTES_REF].target == honest


def test_the_gate_refuses_a_forged_keyless_verdict(
    server: Path,
    clone: Callable[[str], MemoryStore],
    tmp_path: Path,
    sigstore_local: LocalSigstore,
    signed_commit: Callable[..., str],
) -> None:
    from truss_files.store.sync import sync

    work = clone("work")
    trust_instance(work, sigstore_local)
    entry = work.write(Kind.FACT, "k", "a body")
    sync(work)
    server_repo = pygit2.Repository(str(server))
    before = server_repo.references["refs/heads/main"].target
    forged = keyless_verdict(work, sigstore_local, entry.id, identity=MALLORY)
    path = work.resolve(entry.id)
    smuggled = entryfile.serialize(_with_trust(entry, Trust.VERIFIED, forged.to_dict()))
    commit = signed_commit(
        work,
        {path: smuggled.encode()},
        message=f"truss: promote\n\nTruss-Op: promote\nTruss-Entry: {entry.id}",
    )
    pushed = _push(tmp_path / "work", "main")
    assert pushed.returncode != 0
    assert f"commit {commit[:12]} {path}: [sigstore-identity]" in pushed.stderr
    assert server_repo.references["refs/heads/main"].target == before


def test_the_merge_driver_and_log_refuse_a_forged_keyless_verdict(
    keyless_store: tuple[MemoryStore, Entry, Entry],
    sigstore_local: LocalSigstore,
    signed_commit: Callable[..., str],
) -> None:
    from truss_files.review.merge import merge_entry

    store, entry, _ = keyless_store
    forged = keyless_verdict(store, sigstore_local, entry.id, identity=MALLORY)
    forged = _relabel(forged, signer=principal(sigstore_local))
    path = store.resolve(entry.id)
    plain = entryfile.serialize(entry).encode()
    smuggled = entryfile.serialize(_with_trust(entry, Trust.VERIFIED, forged.to_dict())).encode()
    merged = merge_entry(plain, plain, smuggled, path, store.policy())
    assert not merged.clean
    assert "their side's keyless verdict does not verify: [sigstore-identity]" in merged.reason
    assert b"<<<<<<<" in merged.text

    signed_commit(
        store,
        {path: smuggled},
        message=f"truss: promote\n\nTruss-Op: promote\nTruss-Entry: {entry.id}",
    )
    item = store.log(entry.id)[-1]
    assert item.keyless is not None and item.keyless.startswith("INVALID [sigstore-identity]")


def test_a_sigstore_principal_added_to_the_panel_by_a_non_operator_passes_nothing(
    store: MemoryStore,
    sigstore_local: LocalSigstore,
    add_signer: Callable[..., str],
    signed_commit: Callable[..., str],
) -> None:
    from truss_files.store.operators import pin_trusted_root

    pin_trusted_root(store, sigstore_local.trusted_root_json.read_bytes())
    agent = Ed25519Signer.generate("agent@example.test")
    add_signer(store, agent, "agent@example.test", ("agent", "panel"))
    mallory = principal(sigstore_local, MALLORY)

    def smuggle(snap: Any) -> dict[str, bytes | None]:
        toml = (snap.read("truss.toml") or b"").decode()
        return {"truss.toml": toml.replace("panel = [", f'panel = ["{mallory}", ', 1).encode()}

    grant = signed_commit(store, smuggle, signer=agent)
    # The library writes nothing on a history the audit rejects; signed by hand instead, the
    # audit judges them under the operator's [roles].
    with pytest.raises(UntrustedHistory):
        store.write(Kind.FACT, "k", "a body")
    assert isinstance(store.signer, Ed25519Signer)
    entry = hand.write(store, store.signer, "fact", "k", "a body")
    verdict = keyless_verdict(store, sigstore_local, entry.id, identity=MALLORY)
    promote = hand.promote(store, store.signer, entry.id, verdict)
    found = {(v.commit, v.rule) for v in audit(store.git).violations}
    assert (grant, "role") in found
    assert (promote, "sigstore-identity") in found


def test_git_merge_with_the_driver_refuses_a_forged_keyless_verdict_from_the_other_side(
    keyless_store: tuple[MemoryStore, Entry, Entry],
    sigstore_local: LocalSigstore,
    signed_commit: Callable[..., str],
) -> None:
    import sys

    store, entry, _ = keyless_store
    work = store.git.workdir
    assert work is not None

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=work, capture_output=True, text=True, timeout=120)

    run("git", "branch", "side")
    store.promote(entry.id, keyless_verdict(store, sigstore_local, entry.id))  # main: honest
    run("git", "checkout", "-q", "side")
    forged = _relabel(
        keyless_verdict(store, sigstore_local, entry.id, identity=MALLORY),
        signer=principal(sigstore_local),
    )
    path = store.resolve(entry.id)
    smuggled = entryfile.serialize(_with_trust(entry, Trust.VERIFIED, forged.to_dict()))
    signed_commit(store, {path: smuggled.encode()}, message="truss: promote\n\nTruss-Op: promote")
    run("git", "checkout", "-q", "main")
    honest = (work / path).read_bytes()
    assert run(sys.executable, "-m", "truss_files", "install-drivers").returncode == 0
    merged = run("git", "merge", "--no-edit", "side")
    assert merged.returncode != 0
    assert "their side's keyless verdict does not verify: [sigstore-identity]" in (
        merged.stdout + merged.stderr
    )
    run("git", "merge", "--abort")
    assert (work / path).read_bytes() == honest
