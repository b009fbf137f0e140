"""Credential-shaped values made at run time, and the look-alikes that must stay text.

Every value is joined from fragments here, so the repository holds no literal a secret
scanner would flag; none is a live credential (the tails are drawn from a fixed seed).
"""

from __future__ import annotations

import base64
import json
import random
import string

_RNG = random.Random(20261207)
_ALNUM = string.ascii_letters + string.digits


def _tail(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def _b64url(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def _pem() -> str:
    lines = [base64.b64encode(bytes(_RNG.randrange(256) for _ in range(48))).decode()]
    lines += [base64.b64encode(bytes(_RNG.randrange(256) for _ in range(48))).decode()]
    kind = "OPENSSH " + "PRIVATE KEY"
    return f"-----BEGIN {kind}-----\n" + "\n".join(lines) + f"\n-----END {kind}-----"


def _sha256ish() -> str:
    return _tail(64, "0123456789abcdef")


# kind -> a value of that kind. Shapes from detect-secrets' plugins and from our own table.
CREDENTIALS: dict[str, str] = {
    "github-token": "gh" + "p_" + _tail(36),
    "github-token (fine-grained)": "github" + "_pat_" + _tail(22) + "_" + _tail(59),
    "gitlab-token": "gl" + "pat-" + _tail(20),
    "aws-access-key-id": "AK" + "IA" + _tail(16, string.ascii_uppercase + string.digits),
    "private-key": _pem(),
    "password-in-url": "postgres://deploy:" + "Hx7" + _tail(12) + "@db.internal:5432/app",
    "anthropic-key": "sk-" + "ant-" + "api03-" + _tail(93) + "AA",
    "openai-key": "sk-" + "proj-" + _tail(48) + "T3Blbk" + "FJ" + _tail(48),
    "openai-key (service account)": "sk-" + "svcacct-" + _tail(64),
    "slack-token": "xo" + "xb-" + "1234567890" + "12-" + "1234567890123-" + _tail(24).lower(),
    "stripe-key": "sk" + "_live_" + _tail(24),
    "google-api-key": "AI" + "za" + "Sy" + _tail(33),
    "huggingface-token": "hf" + "_" + _tail(34, string.ascii_letters),
    "groq-key": "gs" + "k_" + _tail(52),
    "npm-token": "np" + "m_" + _tail(36),
    "sendgrid-key": "SG" + "." + _tail(22) + "." + _tail(43),
    "jwt": _b64url({"alg": "HS256", "typ": "JWT"})
    + "."
    + _b64url({"sub": "1234567890", "name": "ops"})
    + "."
    + _tail(43),
    "pypi-token": "pypi-" + "AgEIcHlwaS5vcmc" + _tail(80),
}

# The kind each value must be reported as (the table's key up to a space).
KIND = {name: name.split(" ")[0] for name in CREDENTIALS}

# Text that looks like a secret to a careless detector and must be stored as it is.
LOOKALIKES: dict[str, str] = {
    "git sha": "Fixed in 3f786850e387550fdab836ed7e6dc881de23001b on main.",
    "sha256 digest": "sha256:" + _sha256ish(),
    "docker digest": "image@sha256:" + _sha256ish(),
    "uuid": "run 123e4567-e89b-12d3-a456-426614174000 finished",
    "variable name": "Set OPENAI_API_KEY and ANTHROPIC_API_KEY in the CI secrets.",
    "the word password": "The password is in the team vault; ask ops for the password.",
    "url without credentials": "See https://example.com/docs?page=2#auth and ssh://git@example.com/repo.git",
    "prefix in prose": "Anthropic keys start with sk-ant- and GitHub's with ghp_.",
    "env reference": 'export GITHUB_TOKEN="$GITHUB_TOKEN"',
    "a key file's first line": "The file starts with -----BEGIN OPENSSH " + "PRIVATE KEY-----.",
    "a time": "Standup at 10:30, deploy at 14:45:00.",
    "an md5": "md5 " + _tail(32, "0123456789abcdef"),
    "base64 of a word": "aGVsbG8gd29ybGQ= decodes to hello world",
    "a long identifier": "TransactionCoordinatorServiceImplementationFactoryBean",
}

# Shapes only detect-secrets' plugins know, most of them a value assigned to a name: the
# kind each must be reported as, and a text holding one.
_HEX = "0123456789abcdef"
PLUGIN_SHAPES: dict[str, tuple[str, str]] = {
    "aws secret key": (
        "aws-secret-access-key",
        "aws_secret_" + 'access_key = "' + _tail(40, _ALNUM + "/+") + '"',
    ),
    "cloudant password": (
        "cloudant-credentials",
        "cloudant_" + 'password = "' + _tail(64, _HEX) + '"',
    ),
    "ibm cloud iam key": ("ibm-cloud-iam-key", "ibm_cloud_iam_" + 'api_key: "' + _tail(44) + '"'),
    "ibm cos hmac": ("ibm-cos-hmac-secret", "secret_access_" + 'key = "' + _tail(48, _HEX) + '"'),
    "softlayer key": ("softlayer-key", "softlayer_" + 'api_key = "' + _tail(64, _HEX) + '"'),
    "mailchimp key": ("mailchimp-key", _tail(32, _HEX) + "-" + "us12"),
    "telegram token": ("telegram-bot-token", "123456789" + ":" + _tail(35)),
    "discord token": ("discord-bot-token", "M" + _tail(23) + "." + _tail(6) + "." + _tail(27)),
    "twilio key": ("twilio-key", "A" + "C" + _tail(32, _HEX)),
    "slack webhook": (
        "slack-webhook",
        "https://hooks."
        + "slack.com/services/T"
        + _tail(8).upper()
        + "/B"
        + _tail(8).upper()
        + "/"
        + _tail(24),
    ),
    "artifactory token": ("artifactory-token", "AK" + "C" + _tail(10)),
    "npmrc token": (
        "npm-token",
        "//registry.npmjs.org/" + ":_authToken=" + "npm_" + _tail(36) + " (ci)",
    ),
    "azure storage key": (
        "azure-storage-key",
        "AccountName=ops;" + "Account" + "Key=" + _tail(86, _ALNUM + "+/") + "==;",
    ),
    "short password in url": ("password-in-url", "mysql://u:" + "Pz9" + _tail(3) + "@h"),
    "private key, short lines": (
        "private-key",
        "-----BEGIN RSA "
        + "PRIVATE KEY-----\n"
        + "\n".join(_tail(12) for _ in range(12))
        + "\n-----END RSA "
        + "PRIVATE KEY-----",
    ),
}
