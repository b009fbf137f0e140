"""Attacks on the review page (`truss-files review --web`), in a real headless Chromium and
over plain HTTP against the installed console script: markup in a body renders inert, no
request without the page's token (nor with it in a cookie or a POST's URL, nor from another
Origin or Host) reads or decides anything, each start makes a new token, and the page serves
on 127.0.0.1 only. tests/review_browser.py starts the page and the browser."""

from __future__ import annotations

import os
import subprocess
import urllib.parse
from pathlib import Path

import pytest
from review_browser import (  # noqa: F401 - the fixtures
    EXE,
    Served,
    browser_fixture,
    key_fixture,
    page_of_fixture,
    start_page,
    status,
    stop_page,
    tip_of,
)

from truss_files.errors import UsageError
from truss_files.facade import MemoryStore
from truss_files.model import Trust

XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2"> and "quotes"'


def test_a_body_with_script_renders_inert(store: MemoryStore, key: Path, browser: object) -> None:
    hostile = store.write("lesson", "xss", XSS)
    store.write("lesson", XSS[:40].replace(" ", "-"), "a key with markup in it")
    served = start_page(store, key)
    try:
        page = browser.new_page()  # type: ignore[attr-defined]
        for url in (served.url, f"{served.base}/entry/{hostile.id}?token={served.token}"):
            page.goto(url)
            assert page.locator("script").count() == 0
            assert page.locator("img").count() == 0
            assert page.evaluate("window.__xss") is None
            assert XSS in page.locator("pre.body").first.inner_text()  # shown as text
        page.close()
    finally:
        stop_page(served)


def test_without_the_token_the_browser_gets_403(browser: object, page_of: Served) -> None:
    page = browser.new_page()  # type: ignore[attr-defined]
    assert page.goto(page_of.base + "/").status == 403
    assert page.goto(page_of.base + "/?token=wrong").status == 403
    assert "no valid token" in page.inner_text("body")
    page.close()


def test_every_request_without_the_token_is_403_and_decides_nothing(
    store: MemoryStore, page_of: Served
) -> None:
    entry = store.write("lesson", "ci", "Retry once.")
    base, token = page_of.base, page_of.token
    assert status(page_of.url) == 200
    for path in ("/", "/entry/" + entry.id, "/nope", "/decide"):
        assert status(base + path) == 403
        assert status(f"{base}{path}?token={token[:-1]}") == 403
        assert status(f"{base}{path}?token={token}x") == 403
    tip = tip_of(store)
    form = {"id": entry.id, "outcome": "PASS"}
    body = urllib.parse.urlencode(form).encode()
    assert status(base + "/decide", data=body) == 403
    # A cookie is what a forged cross-site form would carry: it is not the token's place.
    assert status(base + "/decide", data=body, headers={"Cookie": f"token={token}"}) == 403
    assert status(f"{base}/decide?token={token}", data=body) == 403  # nor the URL of a POST
    good = urllib.parse.urlencode({**form, "token": token}).encode()
    assert status(base + "/decide", data=good, headers={"Origin": "https://evil.test"}) == 403
    assert status(page_of.url, headers={"Host": "evil.test"}) == 403  # DNS rebinding
    assert tip_of(store) == tip and store.get(entry.id).trust is Trust.UNVERIFIED
    # The token in the header works as in the form.
    assert status(base + "/decide", data=body, headers={"X-Truss-Token": token}) == 200
    assert store.get(entry.id).trust is Trust.VERIFIED


def test_each_start_makes_a_new_token(store: MemoryStore, key: Path, page_of: Served) -> None:
    second = start_page(store, key)
    try:
        assert second.token != page_of.token and len(second.token) >= 32
        assert status(f"{second.base}/?token={page_of.token}") == 403
        assert status(second.url) == 200
    finally:
        stop_page(second)


def test_a_host_other_than_127_0_0_1_is_refused(store: MemoryStore, key: Path) -> None:
    for host in ("0.0.0.0", "localhost", "::", "192.168.1.10"):
        done = subprocess.run(
            [EXE, "--store", str(store.git.workdir), "review", "--web", "--host", host],
            capture_output=True,
            text=True,
            env=dict(os.environ, TRUSS_KEY=str(key)),
            timeout=60,
            check=False,
        )
        assert done.returncode == 1
        assert f"--host {host}: the review page serves on 127.0.0.1 only" in done.stdout
        assert "review at" not in done.stdout
    from truss_files.faces.review_web import ReviewServer

    with pytest.raises(UsageError, match="127.0.0.1 only"):
        ReviewServer(store, host="0.0.0.0")
