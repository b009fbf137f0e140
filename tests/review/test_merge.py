"""The merge driver: concurrent versions of one entry file settled by the trust state machine.

Unit tests on real entries and real signed verdicts, an exhaustive check that a clean merge is
never an illegal state, and merges through the real `git merge` with the driver configured.
"""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from truss_files.errors import ConflictError
from truss_files.facade import MemoryStore
from truss_files.format.entryfile import parse, serialize
from truss_files.model import LEGAL_TRANSITIONS, Entry, Trust
from truss_files.review.merge import merge_entries, merge_entry


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {proc.stdout}{proc.stderr}")
    return proc


def _verdict(store: MemoryStore, entry_id: str, outcome: str, note: str) -> dict[str, object]:
    return store.sign_verdict(entry_id, outcome, note=note).to_dict()


def _with(entry: Entry, trust: Trust, verdict: object = None, **links: object) -> Entry:
    prov = dataclasses.replace(entry.provenance, verified_by=verdict)
    return dataclasses.replace(entry, trust=trust, provenance=prov, **links)  # type: ignore[arg-type]


def _b(entry: Entry) -> bytes:
    return serialize(entry).encode()


@pytest.fixture
def states(store: MemoryStore) -> dict[str, Entry]:
    """One entry in every state the tests need, with real verdicts signed in time order."""
    e = store.write("lesson", "retry-flaky", "Retry the network tests once before failing.")
    v1 = _verdict(store, e.id, "PASS", "first panel")
    v2 = _verdict(store, e.id, "PASS", "second panel, later")
    f1 = _verdict(store, e.id, "FAIL", "does not hold")
    other = "ab" * 16
    return {
        "base": e,
        "verified_v1": _with(e, Trust.VERIFIED, v1),
        "verified_v2": _with(e, Trust.VERIFIED, v2),
        "stale_v1": _with(e, Trust.STALE, v1),
        "stale_v2": _with(e, Trust.STALE, v2),
        "rejected": _with(e, Trust.REJECTED, f1),
        "stale_v1_linked": _with(e, Trust.STALE, v1, superseded_by=other),
        "verified_v1_supersedes": _with(e, Trust.VERIFIED, v1, supersedes="cd" * 16),
    }


def test_one_side_promoted_takes_the_promotion(states: dict[str, Entry]) -> None:
    base, promoted = states["base"], states["verified_v1"]
    result = merge_entry(_b(base), _b(base), _b(promoted), promoted.path)
    assert result.clean
    assert result.text == _b(promoted)


def test_promoted_against_promoted_then_demoted_gives_stale(states: dict[str, Entry]) -> None:
    base, promoted, demoted = states["base"], states["verified_v1"], states["stale_v1"]
    one = merge_entry(_b(base), _b(promoted), _b(demoted), base.path)
    other = merge_entry(_b(base), _b(demoted), _b(promoted), base.path)
    assert one.clean and other.clean
    assert parse(one.text, base.path).trust is Trust.STALE
    assert one.text == other.text == _b(demoted)


def test_two_promotions_keep_the_later_verdict_on_every_machine(
    states: dict[str, Entry],
) -> None:
    base, v1, v2 = states["base"], states["verified_v1"], states["verified_v2"]
    one = merge_entry(_b(base), _b(v1), _b(v2), base.path)
    other = merge_entry(_b(base), _b(v2), _b(v1), base.path)
    assert one.clean and other.clean
    assert one.text == other.text == _b(v2)
    assert any("kept verified" in note for note in one.notes)


def test_rejected_against_verified_is_a_conflict_with_a_marker(
    states: dict[str, Entry],
) -> None:
    base, rejected, verified = states["base"], states["rejected"], states["verified_v1"]
    result = merge_entry(_b(base), _b(verified), _b(rejected), base.path)
    assert not result.clean
    assert "panel disagrees" in result.reason
    text = result.text.decode()
    assert text.startswith("<<<<<<< ours (truss-files could not merge this entry: ")
    assert "\n=======\n" in text and ">>>>>>> theirs" in text
    assert _b(verified).decode() in text and _b(rejected).decode() in text


def test_rejected_against_stale_is_a_conflict_too(states: dict[str, Entry]) -> None:
    result = merge_entry(
        _b(states["base"]), _b(states["stale_v1"]), _b(states["rejected"]), states["base"].path
    )
    assert not result.clean


def test_supersede_links_from_both_sides_merge(states: dict[str, Entry]) -> None:
    base = states["verified_v1"]
    superseded = states["stale_v1_linked"]  # supersede() on one side: stale, superseded_by
    linked = states["verified_v1_supersedes"]  # the other side recorded what it supersedes
    result = merge_entry(_b(base), _b(superseded), _b(linked), base.path)
    assert result.clean
    merged = parse(result.text, base.path)
    assert merged.trust is Trust.STALE
    assert merged.superseded_by == superseded.superseded_by
    assert merged.supersedes == linked.supersedes


def test_a_merge_that_would_be_illegal_is_a_conflict(states: dict[str, Entry]) -> None:
    # No base (added on both sides): one side still unverified but linked, the other stale.
    # Merging the link into stale would move the unverified side straight to stale.
    unverified_linked = dataclasses.replace(states["base"], superseded_by="ef" * 16)
    result = merge_entry(None, _b(unverified_linked), _b(states["stale_v2"]), states["base"].path)
    assert not result.clean
    assert "do not allow" in result.reason and "verified -> stale" in result.reason
    assert "§" not in result.text.decode() and "DESIGN" not in result.text.decode()


def test_unparseable_side_and_different_entries_are_conflicts(
    states: dict[str, Entry], store: MemoryStore
) -> None:
    base = states["base"]
    broken = merge_entry(_b(base), _b(base), b"not an entry\n", base.path)
    assert not broken.clean and "their side does not parse" in broken.reason
    other = store.write("lesson", "other", "Something else entirely.")
    with pytest.raises(ConflictError, match="different entries"):
        merge_entries(None, base, other)


def test_no_clean_merge_is_ever_an_illegal_state(states: dict[str, Entry]) -> None:
    """Every pair of states over every base: a clean result keeps the id, is symmetric, and
    equals each side or is one legal arrow away from it."""
    pool = list(states.values())
    clean = 0
    for base, a, b in itertools.product([None, *pool], pool, pool):
        try:
            merged, _ = merge_entries(base, a, b)
        except ConflictError:
            with pytest.raises(ConflictError):
                merge_entries(base, b, a)
            continue
        clean += 1
        assert merge_entries(base, b, a)[0] == merged, (base, a, b)
        assert merged.id == a.id
        for side in (a, b):
            if side == merged or side.trust is merged.trust:
                continue
            assert (side.trust, merged.trust) in LEGAL_TRANSITIONS, (side.trust, merged.trust)
    assert clean > len(pool) ** 2  # most combinations do settle


# -- through the real git merge ----------------------------------------------------------------


def _truss(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "truss_files", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_git_merge_with_the_driver_settles_by_the_state_machine(store: MemoryStore) -> None:
    work = store.git.workdir
    assert work is not None
    entry = store.write("fact", "deploy-window", "Deploys happen on Tuesdays.")
    first = store.sign_verdict(entry.id, "PASS", note="checked the calendar")
    later = store.sign_verdict(entry.id, "PASS", note="checked again")
    _git(work, "branch", "side")
    store.promote(entry.id, first)  # main: promoted
    _git(work, "checkout", "-q", "side")
    store.promote(entry.id, later)  # side: promoted (later panel), then demoted
    store.demote(entry.id, "the window moved")
    _git(work, "checkout", "-q", "main")

    # Without the driver git sees two edits of the same lines.
    plain = _git(work, "merge", "--no-edit", "side", check=False)
    assert plain.returncode != 0 and "CONFLICT" in plain.stdout
    _git(work, "merge", "--abort")

    installed = _truss(work, "install-drivers", "--format", "text")
    assert installed.returncode == 0, installed.stderr
    merged = _git(work, "merge", "--no-edit", "side", check=False)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    on_disk = parse((work / entry.path).read_bytes(), entry.path)
    assert on_disk.trust is Trust.STALE
    assert on_disk.provenance.verified_by == later.to_dict()
    assert _git(work, "status", "--porcelain", "--untracked-files=no").stdout == ""


def test_git_merge_leaves_a_panel_disagreement_as_a_marked_conflict(
    store: MemoryStore,
) -> None:
    work = store.git.workdir
    assert work is not None
    entry = store.write("fact", "cache-ttl", "The cache TTL is five minutes.")
    passed = store.sign_verdict(entry.id, "PASS", note="measured")
    failed = store.sign_verdict(entry.id, "FAIL", note="config says ten")
    _git(work, "branch", "side")
    store.promote(entry.id, passed)
    _git(work, "checkout", "-q", "side")
    store.reject(entry.id, failed)
    _git(work, "checkout", "-q", "main")
    assert _truss(work, "install-drivers").returncode == 0

    merged = _git(work, "merge", "--no-edit", "side", check=False)
    assert merged.returncode != 0
    assert "panel disagrees" in merged.stdout + merged.stderr
    text = (work / entry.path).read_text()
    assert text.startswith("<<<<<<< ours (truss-files could not merge this entry: the panel")
    assert "trust: verified" in text and "trust: rejected" in text
    assert "UU " + entry.path in _git(work, "status", "--porcelain").stdout
