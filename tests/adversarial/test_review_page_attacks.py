"""Attacks on the review page (`truss-files review --web`), in a real headless Chromium and
over plain HTTP against the installed console script: markup in a body renders inert, no
request without the page's token (nor with it in a cookie or a POST's URL, nor from another
Origin or Host) reads or decides anything, each start makes a new token, and the page serves
on 127.0.0.1 only. tests/support/review_browser.py starts the page and the browser.

And over raw sockets, what a client may hold: half-sent heads (and heads trickled a byte at
a time) are dropped after --header-timeout while a whole request is answered at once; a flood
of idle connections holds no thread and at most the cap of connections; a Content-Length that
is not a number (``abc``, ``-1``) is 400, one the body does not fill is 408 (400 when the client
ends it short) within --body-timeout and decides nothing, one past the cap is 413 -- never a
traceback, and the page answers a normal GET after all of it."""

from __future__ import annotations

import os
import select
import socket
import time
import urllib.parse
from pathlib import Path

import pytest

from tests.support import console
from tests.support.review_browser import (  # noqa: F401 - the fixtures
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
from truss_files.faces.review_web import DEFAULT_MAX_CONNECTIONS
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
        done = console.run(
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


# -- what a client may hold (raw sockets; timeouts of 1 s instead of the default 10) ---------

FAST = ("--header-timeout", "1", "--body-timeout", "1")
SLACK = 2.5  # seconds past a timeout a loaded machine may take to act on it


def _port(served: Served) -> int:
    return int(served.base.rsplit(":", 1)[1])


def _dial(served: Served, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", _port(served)), timeout=10)
    sock.sendall(data)
    return sock


def _ask(served: Served, data: bytes, *, end: bool = False, wait: float = 6.0) -> tuple[int, float]:
    """Send ``data`` on a new connection (``end``: then close our side) and read to the end:
    the answer's status and the seconds it took. A connection held open fails the test."""
    start = time.monotonic()
    got = b""
    with _dial(served, data) as sock:
        if end:
            sock.shutdown(socket.SHUT_WR)
        sock.settimeout(wait)
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except TimeoutError:
            pytest.fail(f"no answer and not closed within {wait} s: {data[:80]!r}")
    assert got.startswith(b"HTTP/1.0 "), f"no answer to {data[:80]!r}: {got[:80]!r}"
    return int(got.split(b" ", 2)[1]), time.monotonic() - start


def _post(served: Served, fields: bytes, body: bytes = b"", path: str = "/decide") -> bytes:
    return (
        (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{_port(served)}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n"
        ).encode()
        + fields
        + b"\r\n"
        + body
    )


def _gone(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (without waiting)."""
    ready, _, _ = select.select([sock], [], [], 0)
    if not ready:
        return False
    try:
        return sock.recv(65536) == b""
    except OSError:
        return True


def _stop_quietly(served: Served) -> None:
    out, err = stop_page(served)
    assert out == "", f"the page printed more than its URL line: {out!r}"
    assert "Traceback" not in err, err
    assert "review page:" not in err, err  # the loop's one-line note of a failure: none


def test_half_sent_heads_are_dropped_after_the_header_timeout(
    store: MemoryStore, key: Path
) -> None:
    served = start_page(store, key, *FAST)
    try:
        start = time.monotonic()
        # Fewer than the cap (the flood past it is the next test): none is evicted early.
        idle = [_dial(served, b"GET /?token=") for _ in range(DEFAULT_MAX_CONNECTIONS - 10)]
        # A byte every 0.2 s: a timeout reset by each byte would never fire for these.
        trickle = [_dial(served, b"G") for _ in range(5)]
        assert status(served.url) == 200  # a whole request meanwhile: answered at once
        left = set(idle + trickle)
        closed_at: list[float] = []
        while left and time.monotonic() < start + 1 + SLACK:
            for sock in list(left):
                if _gone(sock):
                    left.discard(sock)
                    closed_at.append(time.monotonic() - start)
                elif sock in trickle:
                    try:
                        sock.send(b"E")
                    except OSError:
                        left.discard(sock)
                        closed_at.append(time.monotonic() - start)
            time.sleep(0.2)
        for sock in idle + trickle:
            sock.close()
        assert not left, f"{len(left)} half-sent heads still held after {1 + SLACK} s"
        assert min(closed_at) >= 0.8  # by the deadline, not at once
        assert status(served.url) == 200
    finally:
        _stop_quietly(served)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="counts threads in /proc")
def test_a_flood_of_connections_holds_no_thread_and_at_most_the_cap(page_of: Served) -> None:
    pid = page_of.proc.pid

    def threads() -> int:
        status_file = Path(f"/proc/{pid}/status").read_text()
        return int(status_file.split("Threads:", 1)[1].split()[0])

    def descriptors() -> int:
        return len(os.listdir(f"/proc/{pid}/fd"))

    assert status(page_of.url) == 200
    threads_before, fds_before = threads(), descriptors()
    flood = [_dial(page_of, b"GET /?token=") for _ in range(3 * DEFAULT_MAX_CONNECTIONS)]
    try:
        # Past the cap the oldest idle connection makes room: a browser is never locked out.
        assert status(page_of.url) == 200
        time.sleep(0.3)
        assert threads() <= threads_before + 4, f"{threads()} threads (was {threads_before})"
        assert descriptors() <= fds_before + DEFAULT_MAX_CONNECTIONS + 2
        held = [sock for sock in flood if not _gone(sock)]
        assert len(held) <= DEFAULT_MAX_CONNECTIONS
    finally:
        for sock in flood:
            sock.close()
    assert status(page_of.url) == 200


def test_a_content_length_that_is_not_a_number_is_400_without_a_traceback(
    store: MemoryStore, key: Path
) -> None:
    served = start_page(store, key, *FAST)
    try:
        for value in (b"abc", b"-1", b"+5", b"0x10", b"1.5", b"5, 5", b"\xd9\xa3", b""):
            code, _took = _ask(served, _post(served, b"Content-Length: " + value + b"\r\n"))
            assert code == 400, value  # at once: not the body timeout's 408
        two = b"Content-Length: 5\r\nContent-Length: 6\r\n"
        assert _ask(served, _post(served, two, b"id=ab"))[0] == 400
        assert status(served.url) == 200
    finally:
        _stop_quietly(served)


def test_a_body_shorter_than_its_length_is_refused_in_time_and_decides_nothing(
    store: MemoryStore, key: Path
) -> None:
    entry = store.write("lesson", "ci", "Retry once.")
    tip = tip_of(store)
    served = start_page(store, key, *FAST)
    try:
        form = urllib.parse.urlencode({"id": entry.id, "outcome": "PASS", "token": served.token})
        body = form.encode()
        fields = f"Content-Length: {len(body) + 10}\r\n".encode()
        # The client keeps the connection open and sends no more: 408 by the body timeout.
        for sent in (body, b""):
            code, took = _ask(served, _post(served, fields, sent))
            assert code == 408 and 0.8 <= took <= 1 + SLACK, (code, took)
        # The client ends its side short of the length: 400 at once, not the timeout's 408.
        assert _ask(served, _post(served, fields, body), end=True)[0] == 400
        assert tip_of(store) == tip and store.get(entry.id).trust is Trust.UNVERIFIED
        assert status(served.url) == 200
    finally:
        _stop_quietly(served)


def test_a_length_past_the_cap_is_413_for_any_method(store: MemoryStore, key: Path) -> None:
    served = start_page(store, key, *FAST)
    try:
        huge = b"Content-Length: 1000000000\r\n"
        assert _ask(served, _post(served, huge))[0] == 413
        get = f"GET /?token={served.token} HTTP/1.1\r\nHost: 127.0.0.1:{_port(served)}\r\n"
        assert _ask(served, get.encode() + huge + b"\r\n")[0] == 413
        # More digits than int() converts (4300): a traceback and no answer from http.server.
        assert _ask(served, _post(served, b"Content-Length: " + b"9" * 5000 + b"\r\n"))[0] == 413
        # A body past the cap sent whole: the 413 arrives, not a reset.
        over = 64 * 1024 + 1
        fields = f"Content-Length: {over}\r\n".encode()
        assert _ask(served, _post(served, fields, b"x" * over), end=True)[0] == 413
        # No length to check: refused rather than read to the end of the connection.
        chunked = b"Transfer-Encoding: chunked\r\n"
        assert _ask(served, _post(served, chunked, b"5\r\nid=ab\r\n0\r\n\r\n"))[0] == 411
        assert status(served.url) == 200
    finally:
        _stop_quietly(served)
