"""The session-wide private sigstore instances, for tests that sign and verify keylessly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .instance import LocalSigstore


@pytest.fixture(scope="session")
def sigstore_local() -> Iterator[LocalSigstore]:
    instance = LocalSigstore.start()
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="session")
def sigstore_other() -> Iterator[LocalSigstore]:
    """An independent deployment (its own OIDC keys, CA, CT key and log): what it signs is
    untrusted under ``sigstore_local``'s trusted root."""
    with LocalSigstore.start() as instance:
        yield instance
