"""Keyless verdicts and commit attestations with sigstore, end to end.

The private instance (tests/sigstore_local) replaces only the public servers: the verdict is
signed in a "CI" process of the console script by sigstore's real client (an ambient GitHub
Actions identity, or a token from the test's OIDC issuer; the trust config by file), promoted,
pushed through the server's pre-receive gate, and audited offline in a fresh clone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support import console
from tests.support.sigstore_local import DEFAULT_IDENTITY, GITHUB_ACTIONS_ISSUER, LocalSigstore
from tests.support.sigstore_local import fixture as sigstore_fixtures
from tests.support.sigstore_support import (
    SCRIPT,
    audit_json,
    keyless_verdict,
    principal,
    run_offline,
    trust_instance,
)
from truss_files.errors import KeylessError, UsageError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.app import cli
from truss_files.model import Kind, Trust
from truss_files.signing import Ed25519Signer
from truss_files.signing.trustpolicy import TRUSTED_ROOT_PATH
from truss_files.store.operators import grant_role
from truss_files.store.sync import sync
from truss_files.trust.attest import NOTES_REF, attest, read_notes
from truss_files.trust.audit import audit

# The local sigstore's fixtures, here only (they need the sigstore extra).
sigstore_local = sigstore_fixtures.sigstore_local
sigstore_other = sigstore_fixtures.sigstore_other

CI_IDENTITY = "https://github.com/acme/memory/.github/workflows/verify.yml@refs/heads/main"


def test_ci_signs_keylessly_then_promote_push_and_offline_audit(
    server: Path,
    clone: Callable[[str], MemoryStore],
    tmp_path: Path,
    sigstore_local: LocalSigstore,
    operator_key: Ed25519Signer,
) -> None:
    work = clone("work")
    ci_principal = principal(sigstore_local, CI_IDENTITY, GITHUB_ACTIONS_ISSUER)
    trust_instance(work, sigstore_local, ci_principal)
    entry = work.write(Kind.FACT, "flaky-checks", "Retry the release check once, then stop.")
    sync(work)

    # The CI job: its own clone, no panel key at all, GitHub Actions' ambient OIDC identity
    # found by sigstore's own detection, the private deployment's trust config by file.
    clone("ci")
    verdict_file = tmp_path / "verdict.json"
    ci_env = {**os.environ, **sigstore_local.ambient_env(CI_IDENTITY)}
    signed = console.run(
        [SCRIPT, "--store", str(tmp_path / "ci"), "verdict", "sign", entry.id[:12], "--pass",
         "--sigstore", "--trust-config", str(sigstore_local.trust_config_json),
         "-o", str(verdict_file)],
        capture_output=True, text=True, timeout=120, env=ci_env,
    )  # fmt: skip
    assert signed.returncode == 0, signed.stderr
    verdict = json.loads(verdict_file.read_text())
    assert verdict["signer"] == ci_principal and verdict["key"] == "sigstore"
    assert verdict["signature"] == "" and "tlogEntries" in verdict["bundle"]["verificationMaterial"]

    explained = run_offline(
        "--store",
        str(tmp_path / "work"),
        "verdict",
        "verify",
        str(verdict_file),
        "--format",
        "text",
    )
    assert explained.returncode == 0, explained.stderr
    assert (
        f"keylessly by {CI_IDENTITY} (issuer {GITHUB_ACTIONS_ISSUER}, log index" in explained.stdout
    )

    # A developer promotes on it; the commit is signed with their SSH key as always.
    promoted = console.run(
        [SCRIPT, "--store", str(tmp_path / "work"), "--key", str(tmp_path / "operator_key"),
         "promote", entry.id, "--verdict", str(verdict_file)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert promoted.returncode == 0, promoted.stderr
    work = MemoryStore(tmp_path / "work", signer=operator_key)
    assert sync(work).pushed  # through the server's pre-receive gate

    fresh = clone("fresh")
    assert fresh.get(entry.id).trust is Trust.VERIFIED
    assert fresh.get(entry.id).provenance.verified_by["signer"] == ci_principal  # type: ignore[index]
    report = audit_json(tmp_path / "fresh")
    assert report["ok"], report["violations"]
    assert report["checked"] >= 5


def test_identity_token_by_option_and_the_store_records_the_bundle(
    store: MemoryStore, sigstore_local: LocalSigstore, tmp_path: Path
) -> None:
    name = trust_instance(store, sigstore_local)
    entry = store.write(Kind.LESSON, "guard-scope", "Scope the index guard before awaiting.")
    out = tmp_path / "v.json"
    result = CliRunner().invoke(
        cli,
        ["--store", str(store.git.workdir), "verdict", "sign", entry.id, "--fail", "--sigstore",
         "--identity-token", sigstore_local.issue_token(),
         "--trust-config", str(sigstore_local.trust_config_json), "-o", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    key = str(tmp_path / "operator_key")
    rejected = CliRunner().invoke(
        cli,
        [
            "--store",
            str(store.git.workdir),
            "--key",
            key,
            "reject",
            entry.id,
            "--verdict",
            str(out),
        ],
    )
    assert rejected.exit_code == 0, rejected.output
    assert store.get(entry.id).trust is Trust.REJECTED
    recorded = store.get(entry.id).provenance.verified_by
    assert recorded is not None and recorded["signer"] == name and recorded["bundle"]
    assert audit(store.git).ok


def test_a_token_for_an_identity_without_the_panel_role_signs_nothing(
    store: MemoryStore, sigstore_local: LocalSigstore
) -> None:
    trust_instance(store, sigstore_local)
    entry = store.write(Kind.FACT, "k", "some body")
    before = sigstore_local.rekor.info()["treeSize"]
    with pytest.raises(UsageError, match="does not hold the panel role"):
        store.sign_keyless_verdict(
            entry.id,
            "PASS",
            token=sigstore_local.issue_token("mallory@example.test"),
            trust_config=str(sigstore_local.trust_config_json),
        )
    assert sigstore_local.rekor.info()["treeSize"] == before  # refused before anything was logged


def test_roles_grant_takes_a_sigstore_principal_for_the_panel_only(
    store: MemoryStore, sigstore_local: LocalSigstore
) -> None:
    name = principal(sigstore_local)
    tip = store.git.tip()
    with pytest.raises(UsageError, match="panel role only"):
        grant_role(store, "operator", name)
    with pytest.raises(UsageError, match="sigstore:<issuer>\\|<identity>"):
        grant_role(store, "panel", "sigstore:not-a-url|x")
    assert store.git.tip() == tip
    done = grant_role(store, "panel", name)
    assert done.commit is not None and name in store.config().roles()["panel"]
    assert audit(store.git).ok


def test_pinning_the_trusted_root_is_an_operator_commit(
    store: MemoryStore, sigstore_local: LocalSigstore, tmp_path: Path
) -> None:
    bad = tmp_path / "root.json"
    bad.write_text('{"mediaType": "nonsense"}')
    runner = CliRunner()
    base = ["--store", str(store.git.workdir), "--key", str(tmp_path / "operator_key")]
    refused = runner.invoke(cli, [*base, "sigstore", "pin-root", str(bad)])
    assert refused.exit_code == 1 and "not a sigstore trusted root" in refused.output
    pinned = runner.invoke(
        cli,
        [*base, "sigstore", "pin-root", str(sigstore_local.trusted_root_json)],
    )
    assert pinned.exit_code == 0, pinned.output
    assert store.snapshot().read(TRUSTED_ROOT_PATH) == sigstore_local.trusted_root_json.read_bytes()
    assert audit(store.git).ok


def test_without_a_pinned_root_the_shipped_production_root_is_used_offline(
    store: MemoryStore, sigstore_local: LocalSigstore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    grant_role(store, "panel", principal(sigstore_local))
    entry = store.write(Kind.FACT, "k", "a body")
    verdict = keyless_verdict(store, sigstore_local, entry.id)
    tip = store.git.tip()

    def refuse(*_args: object) -> None:
        raise AssertionError("verification touched the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    # The private instance is no production CA: refused by name, against sigstore's own root.
    with pytest.raises(KeylessError) as refused:
        store.promote(entry.id, verdict)
    assert refused.value.rule == "sigstore-untrusted-certificate"
    assert store.git.tip() == tip


def test_attest_writes_notes_that_audit_verifies_and_sync_carries(
    server: Path,
    clone: Callable[[str], MemoryStore],
    tmp_path: Path,
    sigstore_local: LocalSigstore,
) -> None:
    work = clone("work")
    trust_instance(work, sigstore_local)
    work.write(Kind.FACT, "k", "attested body")
    env = {"TRUSS_SIGSTORE_TRUST_CONFIG": str(sigstore_local.trust_config_json)}
    result = CliRunner().invoke(
        cli,
        ["--store", str(tmp_path / "work"), "attest", "HEAD~2..HEAD", "--format", "json",
         "--identity-token", sigstore_local.issue_token()],
        env=env,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    attested = json.loads(result.output)["attested"]
    assert len(attested) == 2 and all(a["log_index"] >= 0 for a in attested)
    assert set(read_notes(work.git.repo)) == {a["commit"] for a in attested}
    report = audit(work.git)
    assert report.ok, [str(v) for v in report.violations]
    synced = sync(work)
    assert any(NOTES_REF in n for n in synced.notes)  # pushed through the gate

    fresh = clone("fresh")
    assert read_notes(fresh.git.repo) == {}  # a plain clone does not fetch notes
    sync(fresh)
    assert set(read_notes(fresh.git.repo)) == {a["commit"] for a in attested}
    report = audit_json(tmp_path / "fresh")
    assert report["ok"], report["violations"]


def test_attest_on_each_trust_transition(
    store: MemoryStore, sigstore_local: LocalSigstore, signed_commit: Callable[..., str]
) -> None:
    trust_instance(store, sigstore_local)
    signed_commit(
        store,
        lambda snap: {
            "truss.toml": (snap.read("truss.toml") or b"") + b"\n[sigstore]\nattest = true\n"
        },
    )
    entry = store.write(Kind.FACT, "k", "a body")
    token = sigstore_local.issue_token()
    store.environ = {
        **store.environ,
        "SIGSTORE_IDENTITY_TOKEN": token,
        "TRUSS_SIGSTORE_TRUST_CONFIG": str(sigstore_local.trust_config_json),
    }
    store.promote(entry.id, keyless_verdict(store, sigstore_local, entry.id))
    tip = str(store.git.tip().id)  # type: ignore[union-attr]
    assert tip in read_notes(store.git.repo)
    report = audit(store.git)
    assert report.ok, report.violations


def test_attest_refuses_an_identity_the_store_does_not_name(
    store: MemoryStore, sigstore_local: LocalSigstore
) -> None:
    trust_instance(store, sigstore_local)
    with pytest.raises(UsageError, match="may not attest"):
        attest(
            store,
            token=sigstore_local.issue_token("mallory@example.test"),
            trust_config=str(sigstore_local.trust_config_json),
        )
    assert read_notes(store.git.repo) == {}


def test_diff_markdown_and_log_name_the_keyless_signer_and_the_attestation(
    store: MemoryStore, sigstore_local: LocalSigstore
) -> None:
    trust_instance(store, sigstore_local)
    entry = store.write(Kind.FACT, "preview-url", "The release check needs the preview URL.")
    start = str(store.git.tip().id)  # type: ignore[union-attr]
    store.promote(entry.id, keyless_verdict(store, sigstore_local, entry.id))
    attest(
        store,
        token=sigstore_local.issue_token(),
        trust_config=str(sigstore_local.trust_config_json),
    )
    base = ["--store", str(store.git.workdir)]
    shown = CliRunner().invoke(cli, [*base, "diff", f"{start}..HEAD", "--format", "markdown"])
    assert shown.exit_code == 0, shown.output
    assert (
        f"keyless: {DEFAULT_IDENTITY} via {sigstore_local.issuer_url}, log index " in shown.output
    )
    logged = CliRunner().invoke(cli, [*base, "log", entry.id, "--format", "text"])
    assert logged.exit_code == 0, logged.output
    assert f"keyless verdict: {DEFAULT_IDENTITY} via {sigstore_local.issuer_url}, log index" in (
        logged.output
    )
    assert f"attested: {principal(sigstore_local)}, log index" in logged.output


def test_the_merge_driver_takes_a_valid_keyless_verdict(
    store: MemoryStore, sigstore_local: LocalSigstore
) -> None:
    from truss_files.format import entryfile
    from truss_files.review.merge import merge_entry
    from truss_files.store.store import _with_trust

    trust_instance(store, sigstore_local)
    entry = store.write(Kind.FACT, "k", "a body")
    verdict = keyless_verdict(store, sigstore_local, entry.id)
    plain = entryfile.serialize(entry).encode()
    passed = entryfile.serialize(_with_trust(entry, Trust.VERIFIED, verdict.to_dict())).encode()
    merged = merge_entry(plain, plain, passed, store.resolve(entry.id), store.policy())
    assert merged.clean and merged.text == passed
