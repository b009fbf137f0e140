"""The private sigstore instance, exercised by sigstore's real client and real verifier.

Signing goes through ``SigningContext`` (Fulcio certificate with an embedded SCT, Rekor entry);
verification is ``Verifier.verify_artifact`` with the instance's trusted root and no network at
all. Each forged case is produced for real and must be refused by the real verifier.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ObjectIdentifier
from sigstore import dsse
from sigstore.errors import VerificationError
from sigstore.models import Bundle, ClientTrustConfig, TrustedRoot
from sigstore.oidc import IdentityToken
from sigstore.sign import SigningContext
from sigstore.verify import Verifier
from sigstore.verify.policy import Identity

from tests.support.sigstore_local import DEFAULT_IDENTITY, GITHUB_ACTIONS_ISSUER, LocalSigstore
from tests.support.sigstore_local import fixture as sigstore_fixtures
from tests.support.sigstore_local.merkle import MerkleTree, leaf_hash, node_hash

# The local sigstore's fixtures, here only (they need the sigstore extra).
sigstore_local = sigstore_fixtures.sigstore_local
sigstore_other = sigstore_fixtures.sigstore_other

ARTIFACT = b"verdict: pass\nentry: memories/fact/abc.md\n"
OIDC_ISSUER_V1 = ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
OIDC_ISSUER_V2 = ObjectIdentifier("1.3.6.1.4.1.57264.1.8")


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in these tests may reach past 127.0.0.1."""
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"network access outside loopback: {address}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


@contextmanager
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Verification is offline: any connection at all fails the test."""

    def refuse(self: socket.socket, address: Any) -> None:
        raise AssertionError(f"verification touched the network: {address}")

    with monkeypatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse)
        yield


def sign(sigstore: LocalSigstore, artifact: bytes = ARTIFACT, **token: Any) -> Bundle:
    context = SigningContext.from_trust_config(sigstore.trust_config)
    with context.signer(IdentityToken(sigstore.issue_token(**token))) as signer:
        bundle = signer.sign_artifact(artifact)
    # Through the wire form, as a bundle stored in a verdict or a git note is read back.
    return Bundle.from_json(bundle.to_json())


def verify(
    monkeypatch: pytest.MonkeyPatch,
    root: TrustedRoot,
    bundle: Bundle,
    *,
    artifact: bytes = ARTIFACT,
    identity: str = DEFAULT_IDENTITY,
    issuer: str,
) -> None:
    with no_network(monkeypatch):
        Verifier(trusted_root=root).verify_artifact(
            artifact, bundle, Identity(identity=identity, issuer=issuer)
        )


def test_real_client_signs_and_real_verifier_accepts_offline(
    sigstore_local: LocalSigstore, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = sign(sigstore_local)
    verify(monkeypatch, sigstore_local.trusted_root, bundle, issuer=sigstore_local.issuer_url)

    cert = bundle.signing_certificate
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert san.critical
    assert san.value.get_values_for_type(x509.UniformResourceIdentifier) == [DEFAULT_IDENTITY]
    issuer_v1 = cert.extensions.get_extension_for_oid(OIDC_ISSUER_V1).value
    issuer_v2 = cert.extensions.get_extension_for_oid(OIDC_ISSUER_V2).value
    assert isinstance(issuer_v1, x509.UnrecognizedExtension)
    assert isinstance(issuer_v2, x509.UnrecognizedExtension)
    assert issuer_v1.value == sigstore_local.issuer_url.encode()
    # v2 is a DER UTF8String
    assert issuer_v2.value[0] == 0x0C and issuer_v2.value[2:] == sigstore_local.issuer_url.encode()
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == datetime.timedelta(minutes=10)
    scts = cert.extensions.get_extension_for_class(x509.PrecertificateSignedCertificateTimestamps)
    assert len(scts.value) == 1
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.CODE_SIGNING in eku

    entry = json.loads(bundle.to_json())["verificationMaterial"]["tlogEntries"][0]
    assert entry["kindVersion"] == {"kind": "hashedrekord", "version": "0.0.1"}
    assert entry["inclusionPromise"]["signedEntryTimestamp"]
    assert entry["inclusionProof"]["checkpoint"]["envelope"].count("\u2014 ") == 1
    assert int(entry["integratedTime"]) > 0


def test_email_and_github_actions_identities(
    sigstore_local: LocalSigstore, monkeypatch: pytest.MonkeyPatch
) -> None:
    email = sign(sigstore_local, identity="panel@example.test")
    verify(
        monkeypatch,
        sigstore_local.trusted_root,
        email,
        identity="panel@example.test",
        issuer=sigstore_local.issuer_url,
    )
    sans = email.signing_certificate.extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value
    assert sans.get_values_for_type(x509.RFC822Name) == ["panel@example.test"]

    actions = sign(sigstore_local, issuer=GITHUB_ACTIONS_ISSUER)
    verify(monkeypatch, sigstore_local.trusted_root, actions, issuer=GITHUB_ACTIONS_ISSUER)


def test_many_entries_each_proves_inclusion_in_a_growing_tree(
    sigstore_local: LocalSigstore, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = SigningContext.from_trust_config(sigstore_local.trust_config)
    bundles: list[tuple[bytes, Bundle]] = []
    with context.signer(IdentityToken(sigstore_local.issue_token())) as signer:
        for n in range(9):
            artifact = f"artifact {n}".encode()
            bundles.append((artifact, Bundle.from_json(signer.sign_artifact(artifact).to_json())))
    sizes = {b.log_entry._inner.inclusion_proof.tree_size for _, b in bundles}
    assert len(sizes) == 9
    for artifact, bundle in bundles:
        verify(
            monkeypatch,
            sigstore_local.trusted_root,
            bundle,
            artifact=artifact,
            issuer=sigstore_local.issuer_url,
        )


def test_dsse_statement_signed_and_verified(
    sigstore_local: LocalSigstore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-toto statements go to the log as dsse 0.0.1 entries."""
    statement = (
        dsse.StatementBuilder()
        .subjects(
            [
                dsse.Subject(
                    name="commit",
                    digest=dsse.DigestSet(root={"sha256": hashlib.sha256(ARTIFACT).hexdigest()}),
                )
            ]
        )
        .predicate_type("https://truss-files.test/verdict/v1")
        .predicate({"verdict": "pass"})
        .build()
    )
    context = SigningContext.from_trust_config(sigstore_local.trust_config)
    with context.signer(IdentityToken(sigstore_local.issue_token())) as signer:
        bundle = Bundle.from_json(signer.sign_dsse(statement).to_json())
    assert bundle.log_entry._inner.kind_version.kind == "dsse"
    policy = Identity(identity=DEFAULT_IDENTITY, issuer=sigstore_local.issuer_url)
    with no_network(monkeypatch):
        payload_type, payload = Verifier(trusted_root=sigstore_local.trusted_root).verify_dsse(
            bundle, policy
        )
    assert payload_type == "application/vnd.in-toto+json"
    assert json.loads(payload)["predicate"] == {"verdict": "pass"}
    with (
        no_network(monkeypatch),
        pytest.raises(VerificationError, match="SANs do not match"),
    ):
        Verifier(trusted_root=sigstore_local.trusted_root).verify_dsse(
            bundle, Identity(identity="someone@example.test", issuer=sigstore_local.issuer_url)
        )


def test_trust_files_drive_a_signer_in_another_process(
    sigstore_local: LocalSigstore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    artifact = tmp_path / "verdict.txt"
    artifact.write_bytes(ARTIFACT)
    out = tmp_path / "verdict.sigstore.json"
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from sigstore.models import ClientTrustConfig\n"
        "from sigstore.oidc import IdentityToken\n"
        "from sigstore.sign import SigningContext\n"
        "config = ClientTrustConfig.from_json(Path(sys.argv[1]).read_text())\n"
        "context = SigningContext.from_trust_config(config)\n"
        "token = IdentityToken(Path(sys.argv[2]).read_text())\n"
        "with context.signer(token) as signer:\n"
        "    bundle = signer.sign_artifact(Path(sys.argv[3]).read_bytes())\n"
        "Path(sys.argv[4]).write_text(bundle.to_json())\n"
    )
    token_file = tmp_path / "token"
    token_file.write_text(sigstore_local.issue_token())
    subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(sigstore_local.trust_config_json),
            str(token_file),
            str(artifact),
            str(out),
        ],
        check=True,
        timeout=60,
        env={**os.environ, "NO_PROXY": "127.0.0.1"},
    )
    root = TrustedRoot.from_file(str(sigstore_local.trusted_root_json))
    bundle = Bundle.from_json(out.read_bytes())
    verify(monkeypatch, root, bundle, issuer=sigstore_local.issuer_url)
    assert ClientTrustConfig.from_json(sigstore_local.trust_config_json.read_text())


def test_concurrent_signers_in_separate_processes_get_distinct_verifiable_entries(
    sigstore_local: LocalSigstore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from sigstore.models import ClientTrustConfig\n"
        "from sigstore.oidc import IdentityToken\n"
        "from sigstore.sign import SigningContext\n"
        "config = ClientTrustConfig.from_json(Path(sys.argv[1]).read_text())\n"
        "token = IdentityToken(sys.argv[2])\n"
        "out = Path(sys.argv[3])\n"
        "with SigningContext.from_trust_config(config).signer(token) as signer:\n"
        "    for n in range(10):\n"
        "        b = signer.sign_artifact(f'{out.name} {n}'.encode())\n"
        "        (out.parent / f'{out.name}.{n}.json').write_text(b.to_json())\n"
    )
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                script,
                str(sigstore_local.trust_config_json),
                sigstore_local.issue_token(),
                str(tmp_path / f"w{w}"),
            ]
        )
        for w in range(4)
    ]
    assert [worker.wait(timeout=120) for worker in workers] == [0] * 4
    indexes = set()
    for path in sorted(tmp_path.glob("w*.json")):
        worker, n, _ = path.name.split(".")
        bundle = Bundle.from_json(path.read_bytes())
        indexes.add(bundle.log_entry._inner.log_index)
        verify(
            monkeypatch,
            sigstore_local.trusted_root,
            bundle,
            artifact=f"{worker} {n}".encode(),
            issuer=sigstore_local.issuer_url,
        )
    assert len(indexes) == 40


# Forged cases: each is produced for real and refused by the real verifier ---------------


def _forge(
    case: str, sigstore: LocalSigstore, other: LocalSigstore
) -> tuple[Bundle, dict[str, Any]]:
    """A bundle for ``case`` and the verify() arguments it is checked with."""
    honest: dict[str, Any] = {"issuer": sigstore.issuer_url}
    knobs: dict[str, Callable[[], AbstractContextManager[None]]] = {
        "tampered inclusion proof": lambda: sigstore.tampered_log("proof"),
        "bad signed entry timestamp": lambda: sigstore.tampered_log("set"),
        "bad checkpoint signature": lambda: sigstore.tampered_log("checkpoint"),
        "checkpoint for another tree": lambda: sigstore.tampered_log("checkpoint-root"),
        "expired at integrated time": lambda: sigstore.log_time_shift(11 * 60),
        "not yet valid at integrated time": lambda: sigstore.certificate_shift(120),
        "untrusted CA with the trusted CA's names": sigstore.untrusted_ca,
    }
    if case == "another identity":
        return sign(sigstore, identity="https://github.com/org/other/.github/w.yml@x"), honest
    if case == "another issuer":
        return sign(sigstore, issuer=GITHUB_ACTIONS_ISSUER), honest
    if case == "another artifact":
        return sign(sigstore, artifact=b"another verdict"), honest
    if case == "untrusted CA and log":
        return sign(other, issuer=sigstore.issuer_url), honest
    with knobs.get(case, nullcontext)():
        return sign(sigstore), honest


FORGED = [
    ("another identity", "SANs do not match"),
    ("another issuer", "Certificate's OIDCIssuer does not match"),
    ("another artifact", "digest mismatch"),
    ("untrusted CA and log", "failed to build timestamp certificate chain"),
    ("untrusted CA with the trusted CA's names", "failed to build timestamp certificate chain"),
    ("expired at integrated time", "certificate chain"),
    ("not yet valid at integrated time", "certificate chain"),
    ("tampered inclusion proof", "invalid log entry: inclusion proof contains invalid root hash"),
    ("bad signed entry timestamp", "invalid log entry: SET: invalid inclusion promise"),
    ("bad checkpoint signature", "invalid log entry: checkpoint: invalid signature"),
    ("checkpoint for another tree", "Inclusion proof contains invalid root hash signature"),
]


@pytest.mark.parametrize(("case", "message"), FORGED, ids=[c for c, _ in FORGED])
def test_real_verifier_refuses_forged_bundle(
    case: str,
    message: str,
    sigstore_local: LocalSigstore,
    sigstore_other: LocalSigstore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bundle, args = _forge(case, sigstore_local, sigstore_other)
    with pytest.raises(VerificationError, match=message):
        verify(monkeypatch, sigstore_local.trusted_root, bundle, **args)
    # The knobs were restored: an honest bundle still verifies against the same instance.
    verify(
        monkeypatch,
        sigstore_local.trusted_root,
        sign(sigstore_local),
        issuer=sigstore_local.issuer_url,
    )


def test_sct_from_untrusted_ct_key_is_refused_by_signer_and_verifier(
    sigstore_local: LocalSigstore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The helper makes bundles the verifier accepts when nothing is forged...
    honest = sigstore_local.sign_unchecked(ARTIFACT)
    verify(monkeypatch, sigstore_local.trusted_root, honest, issuer=sigstore_local.issuer_url)
    with sigstore_local.untrusted_ct_log():
        # ...sigstore's own signer checks the SCT before it signs anything...
        with pytest.raises(VerificationError, match="SCT verify failed"):
            sign(sigstore_local)
        forged = sigstore_local.sign_unchecked(ARTIFACT)
    # ...and the verifier refuses the certificate whose SCT no trusted CT key signed.
    with pytest.raises(VerificationError, match="failed to verify SCT on signing certificate"):
        verify(monkeypatch, sigstore_local.trusted_root, forged, issuer=sigstore_local.issuer_url)


def test_ambient_github_actions_credential_in_another_process(
    sigstore_local: LocalSigstore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A "CI" process finds its token the way sigstore does (the ``id`` package)."""
    out = tmp_path / "bundle.json"
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "import id\n"
        "from sigstore.models import ClientTrustConfig\n"
        "from sigstore.oidc import IdentityToken\n"
        "from sigstore.sign import SigningContext\n"
        "token = IdentityToken(id.detect_credential('sigstore'))\n"
        "config = ClientTrustConfig.from_json(Path(sys.argv[1]).read_text())\n"
        "with SigningContext.from_trust_config(config).signer(token) as signer:\n"
        "    Path(sys.argv[2]).write_text(signer.sign_artifact(sys.argv[3].encode()).to_json())\n"
    )
    env = {**os.environ, **sigstore_local.ambient_env()}
    argv = [sys.executable, "-c", script, str(sigstore_local.trust_config_json), str(out), "ci"]
    subprocess.run(argv, check=True, timeout=60, env=env)
    verify(
        monkeypatch,
        sigstore_local.trusted_root,
        Bundle.from_json(out.read_bytes()),
        artifact=b"ci",
        issuer=GITHUB_ACTIONS_ISSUER,
    )

    env["ACTIONS_ID_TOKEN_REQUEST_TOKEN"] = "guessed"
    refused = subprocess.run(argv, timeout=60, env=env, capture_output=True, text=True)
    assert refused.returncode != 0 and "unknown ACTIONS_ID_TOKEN_REQUEST_TOKEN" in refused.stderr


def test_bundle_edited_after_signing_is_refused(
    sigstore_local: LocalSigstore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log entry changed after the fact: a later integrated time breaks the promise."""
    raw = json.loads(sign(sigstore_local).to_json())
    entry = raw["verificationMaterial"]["tlogEntries"][0]
    entry["integratedTime"] = str(int(entry["integratedTime"]) + 1)
    with pytest.raises(VerificationError, match="SET: invalid inclusion promise"):
        verify(
            monkeypatch,
            sigstore_local.trusted_root,
            Bundle.from_json(json.dumps(raw)),
            issuer=sigstore_local.issuer_url,
        )


# The servers' own checks: refused before anything is certified or logged ----------------


def _post(url: str, body: Any, token: str | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def _csr() -> tuple[x509.CertificateSigningRequest, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([]))
        .sign(key, hashes.SHA256())
    )
    return csr, base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode()


def _forged_token(sigstore: LocalSigstore) -> str:
    """Right issuer and key id in the header, signed by a key that is not the issuer's."""
    honest = sigstore.issue_token()
    header = jwt.get_unverified_header(honest)
    claims = jwt.decode(honest, options={"verify_signature": False})
    return jwt.encode(claims, ec.generate_private_key(ec.SECP256R1()), "ES256", headers=header)


def _wrong_pop_csr() -> str:
    """A CSR whose signature does not verify under the key it carries."""
    der = bytearray(_csr()[0].public_bytes(serialization.Encoding.DER))
    der[-5] ^= 0x01  # inside the signature's last INTEGER
    broken = x509.load_der_x509_csr(bytes(der))
    return base64.b64encode(broken.public_bytes(serialization.Encoding.PEM)).decode()


TOKEN_CASES = [
    ("no token", lambda s: None, 401, "Bearer"),
    ("forged signature", _forged_token, 401, "token refused"),
    ("expired", lambda s: s.issue_token(expires_in=-60), 401, "token expired"),
    ("wrong audience", lambda s: s.issue_token(audience="other"), 401, "audience"),
    (
        "unverified e-mail",
        lambda s: s.issue_token("a@example.test", extra_claims={"email_verified": False}),
        401,
        "not verified",
    ),
]


@pytest.mark.parametrize(
    ("case", "token", "status", "message"), TOKEN_CASES, ids=[c[0] for c in TOKEN_CASES]
)
def test_ca_refuses_bad_token(
    case: str,
    token: Callable[[LocalSigstore], str | None],
    status: int,
    message: str,
    sigstore_local: LocalSigstore,
) -> None:
    _, csr = _csr()
    code, answer = _post(
        f"{sigstore_local.url}/api/v2/signingCert",
        {"certificateSigningRequest": csr},
        token(sigstore_local),
    )
    assert code == status and message in answer["message"], (case, answer)


def test_ca_refuses_token_of_another_deployment(
    sigstore_local: LocalSigstore, sigstore_other: LocalSigstore
) -> None:
    _, csr = _csr()
    code, answer = _post(
        f"{sigstore_local.url}/api/v2/signingCert",
        {"certificateSigningRequest": csr},
        sigstore_other.issue_token(),
    )
    assert code == 401 and "untrusted issuer" in answer["message"]


def test_ca_refuses_request_without_proof_of_possession(sigstore_local: LocalSigstore) -> None:
    code, answer = _post(
        f"{sigstore_local.url}/api/v2/signingCert",
        {"certificateSigningRequest": _wrong_pop_csr()},
        sigstore_local.issue_token(),
    )
    assert code == 400 and "proof of possession" in answer["message"]


def _hashedrekord(sigstore: LocalSigstore) -> dict[str, Any]:
    return json.loads(sign(sigstore).log_entry._inner.canonicalized_body)


def _other_digest(sigstore: LocalSigstore) -> dict[str, Any]:
    body = _hashedrekord(sigstore)
    body["spec"]["data"]["hash"]["value"] = hashlib.sha256(b"something else").hexdigest()
    return body


def _dsse_request(sigstore: LocalSigstore, *, signer_is_certified: bool = True) -> dict[str, Any]:
    """A dsse entry request as sigstore's client builds it, for a certificate the CA issued."""
    from sigstore._internal.rekor.client import RekorClient

    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([]))
        .sign(key, hashes.SHA256())
    )
    code, answer = _post(
        f"{sigstore.url}/api/v2/signingCert",
        {
            "certificateSigningRequest": base64.b64encode(
                csr.public_bytes(serialization.Encoding.PEM)
            ).decode()
        },
        sigstore.issue_token(),
    )
    assert code == 201, answer
    pems = answer["signedCertificateEmbeddedSct"]["chain"]["certificates"]
    cert = x509.load_pem_x509_certificate(pems[0].encode())
    statement = (
        dsse.StatementBuilder()
        .subjects([dsse.Subject(name="x", digest=dsse.DigestSet(root={"sha256": "00" * 32}))])
        .predicate_type("https://truss-files.test/x")
        .build()
    )
    signer = key if signer_is_certified else ec.generate_private_key(ec.SECP256R1())
    return dict(RekorClient(sigstore.url)._build_dsse_request(dsse._sign(signer, statement), cert))


def _dsse_other_payload(sigstore: LocalSigstore) -> dict[str, Any]:
    """A real envelope's signature moved onto another payload."""
    request = _dsse_request(sigstore)
    envelope = json.loads(request["spec"]["proposedContent"]["envelope"])
    envelope["payload"] = base64.b64encode(b'{"forged": true}').decode()
    request["spec"]["proposedContent"]["envelope"] = json.dumps(envelope)
    return request


def test_log_accepts_honest_dsse_request(sigstore_local: LocalSigstore) -> None:
    """The baseline of the dsse refusals below: the same request, unforged, is logged."""
    before = len(sigstore_local.rekor.tree)
    code, answer = _post(f"{sigstore_local.url}/api/v1/log/entries", _dsse_request(sigstore_local))
    assert code == 201, answer
    assert len(sigstore_local.rekor.tree) == before + 1


LOG_REFUSALS = [
    ("signature over another digest", _other_digest, "does not verify"),
    ("dsse signature over another payload", _dsse_other_payload, "does not verify"),
    (
        "dsse signed by a key not the certificate's",
        lambda s: _dsse_request(s, signer_is_certified=False),
        "does not verify",
    ),
    ("unknown kind", lambda s: {"kind": "rekord", "apiVersion": "0.0.1"}, "only hashedrekord"),
    ("not an object", lambda s: ["hashedrekord"], "entry has no kind"),
    (
        "undecodable signature",
        lambda s: {
            **_hashedrekord(s),
            "spec": {**_hashedrekord(s)["spec"], "signature": {"content": "%%", "publicKey": {}}},
        },
        "entry has no spec.signature.publicKey.content",
    ),
]


@pytest.mark.parametrize(
    ("case", "body", "message"), LOG_REFUSALS, ids=[c[0] for c in LOG_REFUSALS]
)
def test_log_refuses_entry_that_does_not_verify(
    case: str,
    body: Callable[[LocalSigstore], Any],
    message: str,
    sigstore_local: LocalSigstore,
) -> None:
    proposed = body(sigstore_local)
    before = len(sigstore_local.rekor.tree)
    code, answer = _post(f"{sigstore_local.url}/api/v1/log/entries", proposed)
    assert code == 400 and message in answer["message"], (case, answer)
    assert len(sigstore_local.rekor.tree) == before


def test_merkle_tree_matches_rfc6962_definition() -> None:
    def mth(leaves: list[bytes]) -> bytes:
        if len(leaves) == 1:
            return leaf_hash(leaves[0])
        k = 1 << ((len(leaves) - 1).bit_length() - 1)
        return node_hash(mth(leaves[:k]), mth(leaves[k:]))

    tree = MerkleTree()
    data = [f"leaf {i}".encode() for i in range(33)]
    for item in data:
        tree.append(item)
    for size in range(1, 34):
        assert tree.root(size) == mth(data[:size])
        for index in range(size):
            assert _fold(leaf_hash(data[index]), index, size, tree.inclusion_path(index, size)) == (
                tree.root(size)
            ), (index, size)


def _fold(node: bytes, index: int, size: int, path: list[bytes]) -> bytes:
    """The root an inclusion path leads to (RFC 9162 2.1.3.2)."""
    fn, sn = index, size - 1
    for sibling in path:
        assert sn > 0, "path longer than the tree"
        if fn & 1 or fn == sn:
            node = node_hash(sibling, node)
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            node = node_hash(node, sibling)
        fn, sn = fn >> 1, sn >> 1
    assert sn == 0, "path shorter than the tree"
    return node


@pytest.mark.parametrize("length", ["-1", str((1 << 20) + 1), "many"])
def test_servers_refuse_unbounded_request_bodies(
    sigstore_local: LocalSigstore, length: str
) -> None:
    with socket.create_connection(("127.0.0.1", int(sigstore_local.url.rsplit(":", 1)[1]))) as conn:
        conn.sendall(
            b"POST /api/v1/log/entries HTTP/1.1\r\nHost: x\r\nContent-Length: "
            + length.encode()
            + b"\r\n\r\n{}"
        )
        conn.settimeout(10)
        # The server closes the connection: the unread body cannot frame another request.
        answer = b"".join(iter(lambda: conn.recv(65536), b"")).decode()
    assert answer.startswith("HTTP/1.1 400")
    assert "Content-Length must be a number of bytes up to 1048576" in answer
