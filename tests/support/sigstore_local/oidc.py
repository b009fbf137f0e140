"""An OpenID Connect issuer for the tests: ES256 JWTs, one signing key per issuer URL.

The instance stands in for every OIDC provider a test names (its own URL, GitHub Actions'
``https://token.actions.githubusercontent.com``, any other): each issuer gets its own key the
first time a token is issued for it, and the CA accepts a token only when its signature
verifies under the key of the issuer it claims. The instance's own issuer serves its discovery
document and JWKS over HTTP, as a real provider does.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

from .encoding import new_p256

GITHUB_ACTIONS_ISSUER = "https://token.actions.githubusercontent.com"
DEFAULT_IDENTITY = "https://github.com/org/repo/.github/workflows/verify.yml@refs/heads/main"
AUDIENCE = "sigstore"


class TokenRefused(Exception):
    """A token the CA must not accept; the message names the failed check."""


class OidcIssuer:
    def __init__(self, issuer_url: str) -> None:
        self.issuer_url = issuer_url
        self._keys: dict[str, tuple[str, ec.EllipticCurvePrivateKey]] = {}
        self._lock = threading.Lock()
        self._key_for(issuer_url)

    def _key_for(self, issuer: str) -> tuple[str, ec.EllipticCurvePrivateKey]:
        with self._lock:
            if issuer not in self._keys:
                self._keys[issuer] = (uuid.uuid4().hex, new_p256())
            return self._keys[issuer]

    def issue_token(
        self,
        identity: str = DEFAULT_IDENTITY,
        issuer: str | None = None,
        *,
        audience: str = AUDIENCE,
        expires_in: int = 600,
        extra_claims: dict[str, Any] | None = None,
    ) -> str:
        """A signed JWT. An identity with ``@`` and no scheme is an e-mail (``email`` claim,
        verified); anything else is the ``sub`` and becomes a URI SAN, as GitHub Actions
        workflow identities do."""
        iss = issuer or self.issuer_url
        kid, key = self._key_for(iss)
        issued = int(time.time())
        claims: dict[str, Any] = {
            "iss": iss,
            "aud": audience,
            "sub": identity,
            "iat": issued,
            "nbf": issued,
            "exp": issued + expires_in,
            "jti": uuid.uuid4().hex,
        }
        if is_email(identity):
            claims["email"] = identity
            claims["email_verified"] = True
        claims.update(extra_claims or {})
        return jwt.encode(claims, key, algorithm="ES256", headers={"kid": kid})

    def verify_token(self, token: str) -> dict[str, Any]:
        """The claims of a token this instance signed for the issuer it names, unexpired and
        for the sigstore audience; raises TokenRefused naming the check that failed."""
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenRefused(f"malformed token: {exc}") from exc
        iss = unverified.get("iss")
        with self._lock:
            known = self._keys.get(iss) if isinstance(iss, str) else None
        if known is None:
            raise TokenRefused(f"untrusted issuer {iss!r}")
        kid, key = known
        if header.get("kid") != kid or header.get("alg") != "ES256":
            raise TokenRefused("token is not signed by the issuer's key")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.public_key(),
                algorithms=["ES256"],
                audience=AUDIENCE,
                issuer=iss,
                options={"require": ["iss", "aud", "sub", "iat", "exp"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise TokenRefused("token expired") from exc
        except jwt.InvalidAudienceError as exc:
            raise TokenRefused(f"token audience is not {AUDIENCE!r}") from exc
        except jwt.PyJWTError as exc:
            raise TokenRefused(f"token refused: {exc}") from exc
        if "email" in claims and claims.get("email_verified") is not True:
            raise TokenRefused("token e-mail is not verified")
        return claims

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer_url,
            "jwks_uri": f"{self.issuer_url}/keys",
            "authorization_endpoint": f"{self.issuer_url}/auth",
            "token_endpoint": f"{self.issuer_url}/token",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        }

    def jwks(self) -> dict[str, Any]:
        kid, key = self._key_for(self.issuer_url)
        jwk = json.loads(ECAlgorithm.to_jwk(key.public_key()))
        jwk.update({"kid": kid, "use": "sig", "alg": "ES256"})
        return {"keys": [jwk]}


def is_email(identity: str) -> bool:
    return "@" in identity and "://" not in identity


def token_identity(claims: dict[str, Any]) -> str:
    """The SAN value Fulcio would certify for these claims."""
    email = claims.get("email")
    return str(email) if isinstance(email, str) else str(claims["sub"])
