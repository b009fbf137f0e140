"""Audit of ~1,000 signed commits that each carry a sigstore attestation (a git note), beside
the same audit of the same commits without the notes.

The store trusts a private sigstore deployment (the tests' instance on 127.0.0.1: an OIDC
issuer, a Fulcio-style CA with embedded SCTs, a Rekor-style log) through a pinned
``.truss/trusted_root.json``. Every commit is attested with sigstore's real client (one
certificate, one log entry per commit); ``audit()`` then verifies every note offline with
sigstore's real verifier -- certificate chain, SCT, inclusion proof, checkpoint, promise,
signature and identity -- on top of the usual checks. The baseline is ``audit()`` of the same
history with the notes ref removed (the objects stay), so the ratio is what the notes cost.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pygit2

from truss_files.facade import MemoryStore
from truss_files.store.operators import grant_role, pin_trusted_root
from truss_files.trust.attest import NOTES_REF, payload, read_notes
from truss_files.trust.audit import audit

from .common import Figure, freeze_heap, measure, new_store, progress, scaled, scratch, timed

# The private instance lives with the tests that build it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def attest_all(store: MemoryStore, instance: object, since: str) -> int:
    """A note on every commit after ``since`` (where the attester was named), signed by one
    short-lived certificate."""
    from sigstore.oidc import IdentityToken
    from sigstore.sign import SigningContext

    from tests.support.sigstore_local import DEFAULT_IDENTITY, LocalSigstore

    assert isinstance(instance, LocalSigstore)
    repo = store.git.repo
    tip = store.git.tip()
    assert tip is not None
    signer_name = f"sigstore:{instance.issuer_url}|{DEFAULT_IDENTITY}"
    sig = pygit2.Signature("Bench", "bench@example.test")
    context = SigningContext.from_trust_config(instance.trust_config)
    count = 0
    walker = repo.walk(tip.id)
    walker.hide(pygit2.Oid(hex=since))
    with context.signer(IdentityToken(instance.issue_token())) as signer:
        for commit in walker:
            bundle = json.loads(signer.sign_artifact(payload(str(commit.id))).to_json())
            note = {"commit": str(commit.id), "signer": signer_name, "bundle": bundle}
            text = json.dumps(note, sort_keys=True, separators=(",", ":")) + "\n"
            repo.create_note(text, sig, sig, str(commit.id), NOTES_REF, True)
            count += 1
    return count


def run(quick: bool) -> list[Figure]:
    from tests.support.sigstore_local import DEFAULT_IDENTITY, LocalSigstore

    writes = scaled(200 if quick else 1_000)
    figures: list[Figure] = []
    with scratch("sigstore") as tmp, LocalSigstore() as instance:
        store = new_store(tmp / "store.git")
        pin_trusted_root(store, instance.trusted_root_json.read_bytes())
        named = grant_role(store, "panel", f"sigstore:{instance.issuer_url}|{DEFAULT_IDENTITY}")
        assert named.commit is not None
        took = timed(
            lambda: [store.write("lesson", f"k-{i}", f"attested {i}") for i in range(writes)]
        )
        progress(f"{writes} signed writes in {took:.1f} s")
        notes: list[int] = []
        took = timed(lambda: notes.append(attest_all(store, instance, str(named.commit))))
        progress(f"{notes[0]} attestations in {took:.1f} s")
        freeze_heap()
        repo = store.git.repo
        tip = store.git.tip()
        assert tip is not None
        n = len(list(repo.walk(tip.id)))
        target = repo.references[NOTES_REF].target

        def audit_once() -> None:
            report = audit(store.git, environ={})
            if not report.ok or report.checked != n:
                raise AssertionError(f"audit found {report.violations[:3]} ({report.checked})")

        repeats = 3 if quick else 5
        assert len(read_notes(repo)) == notes[0]
        progress(f"audit of {n} commits with notes x {repeats}")
        with_notes = measure(audit_once, repeats, warmup=1)
        repo.references.delete(NOTES_REF)
        progress(f"audit of {n} commits without notes x {repeats}")
        without = measure(audit_once, repeats, warmup=1)
        repo.references.create(NOTES_REF, target)
        figures.append(
            Figure(
                name=f"audit() of {n} commits, {notes[0]} with a sigstore note",
                value=with_notes.p50,
                unit="s",
                baseline_name="the same audit without the notes",
                baseline_value=without.p50,
                note=(
                    f"medians of {repeats}; "
                    f"{(with_notes.p50 - without.p50) / notes[0] * 1e3:.2f} ms "
                    "per note verified offline"
                ),
            )
        )
    return figures
