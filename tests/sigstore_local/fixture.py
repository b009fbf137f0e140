"""The session-wide private sigstore instance, for tests that sign and verify keylessly."""

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
