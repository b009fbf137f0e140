"""LocalSigstore: the OIDC issuer, CA, CT key and log behind one HTTP server on 127.0.0.1."""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime
import json
import secrets
import shutil
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from .fulcio import CsrRefused, CtLog, FulcioCA, pem
from .oidc import DEFAULT_IDENTITY, GITHUB_ACTIONS_ISSUER, OidcIssuer, TokenRefused
from .rekor import TAMPER_KINDS, EntryRefused, TransparencyLog
from .trust import client_trust_config, signing_config, trusted_root
from .unchecked import sign_unchecked

if TYPE_CHECKING:
    from sigstore.models import Bundle, ClientTrustConfig, TrustedRoot

MAX_BODY = 1 << 20
SIGNING_CERT_PATH = "/api/v2/signingCert"
LOG_ENTRIES_PATH = "/api/v1/log/entries"
LOG_INFO_PATH = "/api/v1/log"
OIDC_PREFIX = "/oidc"
AMBIENT_PATH = "/actions/idtoken"


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes; with Nagle on, each answer on a kept-alive
    # connection would wait out the client's delayed ACK (~40 ms).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet: the tests read answers, not an access log."""

    def _send(self, status: int, payload: Any) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _refuse(self, status: int, message: str) -> None:
        self._send(status, {"code": status, "message": message})

    def _body(self) -> Any:
        length = self.headers.get("Content-Length") or "0"
        if not length.isdigit() or int(length) > MAX_BODY:
            # The body stays unread, so this connection cannot carry another request.
            self.close_connection = True
            raise ValueError(f"Content-Length must be a number of bytes up to {MAX_BODY}")
        try:
            return json.loads(self.rfile.read(int(length)) or b"null")
        except ValueError as exc:
            raise ValueError(f"request body is not JSON: {exc}") from exc

    def do_GET(self) -> None:  # noqa: N802 - stdlib hook name
        sigstore = self.server.sigstore
        path = self.path.split("?", 1)[0]
        if path == f"{OIDC_PREFIX}/.well-known/openid-configuration":
            self._send(200, sigstore.oidc.discovery())
        elif path == f"{OIDC_PREFIX}/keys":
            self._send(200, sigstore.oidc.jwks())
        elif path == LOG_INFO_PATH:
            self._send(200, sigstore.rekor.info())
        elif path == AMBIENT_PATH:
            self._ambient_token(sigstore)
        elif path == "/api/v2/trustBundle":
            chain = {"certificates": [pem(c) for c in sigstore.fulcio.chain]}
            self._send(200, {"chains": [chain]})
        else:
            self._refuse(404, f"no such path {path}")

    def _ambient_token(self, sigstore: LocalSigstore) -> None:
        """GitHub Actions' token request: a bearer request token and the audience wanted."""
        auth = self.headers.get("Authorization", "")
        grant = sigstore._ambient.get(auth.partition(" ")[2]) if " " in auth else None
        if grant is None:
            self._refuse(401, "unknown ACTIONS_ID_TOKEN_REQUEST_TOKEN")
            return
        audience = parse_qs(urlsplit(self.path).query).get("audience", ["sigstore"])[0]
        identity, issuer, expires_in = grant
        token = sigstore.issue_token(identity, issuer, audience=audience, expires_in=expires_in)
        self._send(200, {"value": token})

    def do_POST(self) -> None:  # noqa: N802 - stdlib hook name
        sigstore = self.server.sigstore
        try:
            body = self._body()
        except ValueError as exc:
            self._refuse(400, str(exc))
            return
        if self.path == SIGNING_CERT_PATH:
            self._signing_cert(sigstore, body)
        elif self.path == LOG_ENTRIES_PATH:
            try:
                self._send(201, sigstore.rekor.add(body))
            except EntryRefused as exc:
                self._refuse(400, str(exc))
        else:
            self._refuse(404, f"no such path {self.path}")

    def _signing_cert(self, sigstore: LocalSigstore, body: Any) -> None:
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            self._refuse(401, "Authorization: Bearer <OIDC token> is required")
            return
        try:
            claims = sigstore.oidc.verify_token(auth.removeprefix("Bearer ").strip())
        except TokenRefused as exc:
            self._refuse(401, str(exc))
            return
        csr_b64 = body.get("certificateSigningRequest") if isinstance(body, dict) else None
        if not isinstance(csr_b64, str):
            self._refuse(400, "certificateSigningRequest is required")
            return
        try:
            chain = sigstore.fulcio.issue(base64.b64decode(csr_b64, validate=True), claims)
        except (CsrRefused, binascii.Error) as exc:
            self._refuse(400, str(exc))
            return
        self._send(
            201,
            {"signedCertificateEmbeddedSct": {"chain": {"certificates": [pem(c) for c in chain]}}},
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    sigstore: LocalSigstore


class LocalSigstore:
    """A private sigstore deployment on 127.0.0.1: start(), use, stop() (or ``with``)."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.sigstore = self
        port = self._server.server_port
        host = "127.0.0.1"
        self.url = f"http://{host}:{port}"
        self.issuer_url = f"{self.url}{OIDC_PREFIX}"
        self.oidc = OidcIssuer(self.issuer_url)
        self.ct_log = CtLog()
        self.fulcio = FulcioCA(self.ct_log)
        self.rekor = TransparencyLog(origin=f"{host}:{port} - {port}")
        self._dir = Path(tempfile.mkdtemp(prefix="sigstore-local-"))
        self.trusted_root_json = self._dir / "trusted_root.json"
        self.trust_config_json = self._dir / "trust_config.json"
        root = trusted_root(
            self.url, self.fulcio.chain, self.rekor.key.public_key(), self.ct_log.key.public_key()
        )
        config = signing_config(self.url, self.issuer_url)
        self.trusted_root_json.write_text(json.dumps(root, indent=2))
        self.trust_config_json.write_text(json.dumps(client_trust_config(root, config), indent=2))
        self._thread: threading.Thread | None = None
        self._ambient: dict[str, tuple[str, str | None, int]] = {}

    @classmethod
    def start(cls) -> LocalSigstore:
        instance = cls()
        instance._thread = threading.Thread(
            target=instance._server.serve_forever, name="sigstore-local", daemon=True
        )
        instance._thread.start()
        return instance

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> LocalSigstore:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="sigstore-local", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # Trust material -------------------------------------------------------------------

    @property
    def trusted_root(self) -> TrustedRoot:
        from sigstore.models import TrustedRoot

        return TrustedRoot.from_file(str(self.trusted_root_json))

    @property
    def trust_config(self) -> ClientTrustConfig:
        from sigstore.models import ClientTrustConfig

        return ClientTrustConfig.from_json(self.trust_config_json.read_text())

    # Tokens -----------------------------------------------------------------------------

    def issue_token(
        self,
        identity: str = DEFAULT_IDENTITY,
        issuer: str | None = None,
        *,
        audience: str = "sigstore",
        expires_in: int = 600,
        extra_claims: dict[str, Any] | None = None,
    ) -> str:
        return self.oidc.issue_token(
            identity, issuer, audience=audience, expires_in=expires_in, extra_claims=extra_claims
        )

    def sign_unchecked(
        self, artifact: bytes, token: str | None = None, *, base_url: str | None = None
    ) -> Bundle:
        """A hashedrekord bundle made without sigstore's signer and its checks (see
        ``unchecked``); ``base_url`` points the requests at another deployment."""
        return sign_unchecked(base_url or self.url, token or self.issue_token(), artifact)

    def ambient_env(
        self,
        identity: str = DEFAULT_IDENTITY,
        issuer: str | None = GITHUB_ACTIONS_ISSUER,
        *,
        expires_in: int = 600,
    ) -> dict[str, str]:
        """Environment of a GitHub Actions job allowed ``id-token: write``: sigstore's own
        ambient detection (the ``id`` package) fetches a token for ``identity`` from here."""
        request_token = secrets.token_urlsafe(24)
        self._ambient[request_token] = (identity, issuer, expires_in)
        return {
            "GITHUB_ACTIONS": "true",
            "ACTIONS_ID_TOKEN_REQUEST_URL": f"{self.url}{AMBIENT_PATH}?api-version=2.0",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN": request_token,
        }

    # Knobs for forged cases (each restores the honest behaviour on exit) -----------------

    @contextlib.contextmanager
    def tampered_log(self, *parts: str) -> Iterator[None]:
        """Log answers whose ``proof`` (inclusion path), ``set`` (promise) or ``checkpoint``
        (signed note, by a key not the log's) does not verify, or whose ``checkpoint-root`` is
        signed by the log for another tree than the proof's."""
        unknown = set(parts) - TAMPER_KINDS
        if unknown or not parts:
            raise ValueError(f"tamper one of {sorted(TAMPER_KINDS)}, not {sorted(unknown)}")
        self.rekor.tamper = set(parts)
        try:
            yield
        finally:
            self.rekor.tamper = set()

    @contextlib.contextmanager
    def log_time_shift(self, seconds: int) -> Iterator[None]:
        """The log claims an integrated time ``seconds`` away from now: past the 10-minute
        certificate (or before it) gives a certificate expired at the time of logging."""
        self.rekor.integrated_time_offset = seconds
        try:
            yield
        finally:
            self.rekor.integrated_time_offset = 0

    @contextlib.contextmanager
    def certificate_shift(self, seconds: int) -> Iterator[None]:
        """Certificates start ``seconds`` from now: a positive shift gives a certificate not
        yet valid when the log integrates the entry."""
        self.fulcio.validity_shift = datetime.timedelta(seconds=seconds)
        try:
            yield
        finally:
            self.fulcio.validity_shift = datetime.timedelta(0)

    @contextlib.contextmanager
    def untrusted_ca(self) -> Iterator[None]:
        """Certificates from a CA outside the trusted root that copies the trusted CA's names
        (not its keys); SCTs and log entries stay honest."""
        honest = self.fulcio
        self.fulcio = FulcioCA(self.ct_log)
        self.fulcio.validity_shift = honest.validity_shift
        try:
            yield
        finally:
            self.fulcio = honest

    @contextlib.contextmanager
    def untrusted_ct_log(self) -> Iterator[None]:
        """Honest certificates whose embedded SCT is signed by a CT key outside the trusted
        root. sigstore's signer checks the SCT itself, so bundles for this case come from
        ``sign_unchecked``."""
        honest = self.fulcio.ct_log
        self.fulcio.ct_log = CtLog()
        try:
            yield
        finally:
            self.fulcio.ct_log = honest
