"""The local sigstore's fixtures, for the tests here that sign keyless."""

from __future__ import annotations

from tests.support.sigstore_local.fixture import sigstore_local, sigstore_other  # noqa: F401 - fixtures
