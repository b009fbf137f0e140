"""The review page (`truss-files review --web`) in a real headless browser: Debian's Chromium
driven by Playwright, against the installed console script serving a real store
(tests/support/review_browser.py starts both). The attacks on the page (markup in a body, a missing
or wrong token, a forged Origin or Host, another host) are in
tests/adversarial/test_review_page_attacks.py.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from tests.support.review_browser import (  # noqa: F401 - the fixtures
    Served,
    browser_fixture,
    key_fixture,
    page_of_fixture,
    start_page,
    status,
    stop_page,
    tip_of,
    verify_commit,
)
from truss_files.facade import MemoryStore
from truss_files.format.trailers import parse_trailers
from truss_files.model import Trust
from truss_files.review.queue import decide

# -- in the browser ------------------------------------------------------------------------


def test_the_page_lists_opens_a_timeline_and_passes_in_one_signed_commit(
    store: MemoryStore, key: Path, browser: object
) -> None:
    lesson = store.write("lesson", "ci", "Retry the network tests once.", produced_by="git:abc1234")
    fact = store.write("fact", "db", "Postgres 16 in prod.")
    served = start_page(store, key)
    try:
        page = browser.new_page()  # type: ignore[attr-defined]
        response = page.goto(served.url)
        assert response.status == 200
        items = page.locator("#pending > li")
        assert items.count() == 2
        assert items.nth(0).get_attribute("data-id") == lesson.id  # oldest first
        assert "Retry the network tests once." in items.nth(0).inner_text()
        assert "git:abc1234" in items.nth(0).inner_text()

        page.click(f'li[data-id="{lesson.id}"] a.entry-link')
        assert page.locator("#entry-id").inner_text() == lesson.id
        marks = page.locator("#timeline svg g.mark")
        assert marks.count() == 1 and marks.nth(0).get_attribute("data-op") == "write"
        assert "new → unverified" in page.locator("#timeline svg").inner_html()
        assert "git:abc1234" in page.locator("#provenance").inner_text()

        before = tip_of(store)
        page.fill('form.decide input[name="note"]', "seen it fail twice")
        page.click("form.decide button.pass")
        page.wait_for_selector(".flash")
        assert "decided: now verified" in page.locator(".flash").inner_text()
        marks = page.locator("#timeline svg g.mark")
        assert [marks.nth(i).get_attribute("data-op") for i in range(2)] == ["write", "promote"]
        assert marks.nth(1).get_attribute("data-after") == "verified"
        assert "unverified → verified" in page.locator("#timeline svg").inner_html()
        assert page.locator("form.decide").count() == 0  # decided: no more buttons

        # The store: verified, on one commit signed by the panel key, with the note.
        after = store.get(lesson.id)
        assert after.trust is Trust.VERIFIED
        verdict = after.provenance.verified_by
        assert verdict is not None
        assert verdict["votes"][0]["evidence"]["note"] == "seen it fail twice"
        tip = tip_of(store)
        assert str(store.git.commit(tip).parents[0].id) == before  # exactly one commit
        assert parse_trailers(store.git.commit(tip).message)["Truss-Op"] == ["promote"]
        checked = verify_commit(store, tip)
        assert checked.returncode == 0, checked.stderr

        # Fail from the list itself.
        page.goto(served.url)
        assert page.locator("#pending > li").count() == 1
        page.click(f'li[data-id="{fact.id}"] button.fail')
        page.wait_for_selector(".flash")
        assert store.get(fact.id).trust is Trust.REJECTED
        assert verify_commit(store, tip_of(store)).returncode == 0
        page.goto(served.url)
        assert page.locator("#empty").inner_text() == "Nothing is waiting for review."
        page.close()
    finally:
        out, _ = stop_page(served)
    assert out == ""


def test_a_timeline_shows_every_commit_with_trust_before_and_after(
    store: MemoryStore, browser: object, page_of: Served
) -> None:
    entry = store.write("lesson", "ci", "Retry once.")
    done = decide(store, entry.id, "PASS")
    store.revert(done.commit)
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(f"{page_of.base}/entry/{entry.id}?token={page_of.token}")
    marks = page.locator("#timeline svg g.mark")
    assert [marks.nth(i).get_attribute("data-op") for i in range(marks.count())] == [
        "write",
        "promote",
        "revert",
    ]
    assert [marks.nth(i).get_attribute("data-after") for i in range(3)] == [
        "unverified",
        "verified",
        "unverified",
    ]
    svg = page.locator("#timeline svg").inner_html()
    assert "verified → unverified" in svg and "PASS " + done.verdict.id[:8] in svg
    assert marks.nth(1).get_attribute("data-commit") == done.commit
    # Pending again: the PASS that was undone shows as a vote so far.
    assert "PASS" in page.locator(".votes").inner_text()
    page.close()


# -- the guards, over plain HTTP -----------------------------------------------------------


def test_decide_errors_show_on_the_page_and_change_nothing(
    store: MemoryStore, page_of: Served
) -> None:
    entry = store.write("lesson", "ci", "Retry once.")
    decide(store, entry.id, "PASS")
    tip = tip_of(store)
    body = urllib.parse.urlencode(
        {"id": entry.id, "outcome": "FAIL", "token": page_of.token}
    ).encode()
    assert status(page_of.base + "/decide", data=body) == 409  # already verified
    bad = urllib.parse.urlencode({"id": entry.id, "outcome": "MAYBE", "token": page_of.token})
    assert status(page_of.base + "/decide", data=bad.encode()) == 409
    unknown = urllib.parse.urlencode({"id": "0" * 32, "outcome": "PASS", "token": page_of.token})
    assert status(page_of.base + "/decide", data=unknown.encode()) == 404
    assert tip_of(store) == tip


def test_the_provenance_chain_links_what_an_entry_replaced_and_what_replaced_it(
    store: MemoryStore, browser: object, page_of: Served
) -> None:
    old = store.write("fact", "db", "Postgres 15.", produced_by="run:R-1/3")
    decide(store, old.id, "PASS")
    new = store.write("fact", "db", "Postgres 16.", sources=("git:abc1234", "event:ticket-9"))
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(page_of.url)
    pending = page.locator(f'li[data-id="{new.id}"] .supersedes')
    assert old.id[:12] in pending.inner_text() and "Postgres 15." in pending.inner_text()
    decide(store, new.id, "PASS", note="upgraded")
    page.goto(f"{page_of.base}/entry/{new.id}?token={page_of.token}")
    chain = page.locator("#provenance").inner_text()
    assert f"replaced: {old.id[:12]} fact/db stale" in chain
    assert "source: git:abc1234" in chain and "source: event:ticket-9" in chain
    assert "PASS signed by operator@example.test" in chain
    page.click(f'#provenance a[href*="{old.id}"]')  # follow the chain back
    assert page.locator("#entry-id").inner_text() == old.id
    chain = page.locator("#provenance").inner_text()
    assert "produced by run:R-1/3" in chain
    assert f"replaced by: {new.id[:12]} fact/db verified" in chain
    ops = page.locator("#timeline svg g.mark")
    assert [ops.nth(i).get_attribute("data-op") for i in range(ops.count())] == [
        "write",
        "promote",
        "promote",  # the commit that promoted the new entry turned this one stale
    ]
    assert ops.nth(2).get_attribute("data-after") == "stale"
    page.close()
