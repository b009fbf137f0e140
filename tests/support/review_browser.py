"""The review page (`truss-files review --web`) for its tests: the installed console script
serving a real store, and Debian's Chromium driven by Playwright (tests/review/test_review_page.py,
and the attacks on the page in tests/adversarial/test_review_page_attacks.py).

The browser is the system's (``/usr/bin/chromium``; ``make test`` installs it as root when it
is missing), never one Playwright downloads. Under CI a missing browser fails those tests;
elsewhere they skip, loudly.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from truss_files.facade import MemoryStore

CHROMIUM = Path("/usr/bin/chromium")
EXE = str(Path(sys.executable).with_name("truss-files"))
URL_LINE = re.compile(r"^review at (http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_\-]+))\n$")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@dataclass
class Served:
    url: str
    base: str
    token: str
    proc: subprocess.Popen[str]


def start_page(store: MemoryStore, key: Path, *args: str) -> Served:
    proc = subprocess.Popen(
        [EXE, "--store", str(store.git.workdir), "review", "--web", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, TRUSS_KEY=str(key)),
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready, "the page did not print its URL within 60 s"
    line = proc.stdout.readline()
    found = URL_LINE.match(line)
    assert found, f"not the one URL line: {line!r}"
    url, port, token = found.groups()
    return Served(url, f"http://127.0.0.1:{port}", token, proc)


def stop_page(served: Served) -> tuple[str, str]:
    served.proc.terminate()
    out, err = served.proc.communicate(timeout=30)
    return out, err


@pytest.fixture(name="key")
def key_fixture(tmp_path: Path, store: MemoryStore) -> Path:
    return tmp_path / "operator_key"


@pytest.fixture(name="page_of")
def page_of_fixture(store: MemoryStore, key: Path) -> Iterator[Served]:
    served = start_page(store, key)
    yield served
    out, _err = stop_page(served)
    assert out == "", f"the page printed more than its URL line: {out!r}"  # exactly one line


@pytest.fixture(name="browser", scope="module")
def browser_fixture() -> Iterator[object]:
    if not CHROMIUM.exists():
        why = (
            "CHROMIUM IS NOT INSTALLED: the review page's browser tests did not run. Install "
            "it with `apt-get install -y chromium` (`make test` does so when run as root)"
        )
        if os.environ.get("CI"):  # CI installs it (make test): missing there is a failure
            pytest.fail(why)
        warnings.warn(why, stacklevel=1)  # in the summary even under -q, beside the skip
        pytest.skip(why)
    from playwright.sync_api import sync_playwright  # dev extra: only the browser tests

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def status(url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - 127.0.0.1
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def verify_commit(store: MemoryStore, commit: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "gpg.ssh.allowedSignersFile=.truss/allowed_signers", "verify-commit", commit],
        cwd=store.git.workdir,
        capture_output=True,
        text=True,
        check=False,
    )


def tip_of(store: MemoryStore) -> str:
    found = store.git.tip()
    assert found is not None
    return str(found.id)
