"""Attacks on the promise that a read names every conflict it touches: two live verified
entries of one kind and key are reported to whoever is shown one of them -- also when the
rival was not returned, whatever face reads (the CLI's ``query``, the ``memory_query`` and
``memory_view`` tools), and whatever became of the recall index's files in between.

Every read goes through the installed console script, in its own process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import console
from truss_files.facade import MemoryStore
from truss_files.model import Entry

SCRIPT = Path(sys.executable).with_name("truss-files")


def _cli(store: MemoryStore, *args: str, stdin: str | None = None) -> dict[str, Any]:
    proc = console.run(
        [str(SCRIPT), "--store", str(store.git.workdir), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    found: dict[str, Any] = json.loads(proc.stdout)
    return found


def _reads(store: MemoryStore, shown: Entry) -> dict[str, list[dict[str, Any]]]:
    """The ``conflicts`` each face reports when asked for ``shown`` alone."""
    word = "zqxlite"  # in ``shown`` only: its rival is never returned
    query = _cli(store, "query", word, "--format", "json")
    assert [e["id"] for e in query["entries"]] == [shown.id]
    tool = _cli(store, "tool", "memory_query", stdin=json.dumps({"query": word}))
    view = _cli(store, "tool", "memory_view", stdin=json.dumps({"ids": [shown.id]}))
    return {name: out.get("conflicts", []) for name, out in [("query", query), ("tool", tool),
            ("view", view)]}  # fmt: skip


def _rivals(store: MemoryStore) -> tuple[Entry, Entry]:
    older = store.write("decision", "db", "We use postgres for the main database.")
    newer = store.write("decision", "db", "We use zqxlite for the main database.")
    for entry in (older, newer):
        verdict = store.sign_verdict(entry.id, "PASS", note="checked")
        store.promote(entry.id, verdict, conflict="keep-both-flagged")
    return older, newer


def test_every_face_names_the_rival_it_did_not_return(store: MemoryStore) -> None:
    older, newer = _rivals(store)
    # An unverified third note on the key is no rival: it must not join the report.
    store.write("decision", "db", "We use zqxlite in memory for the main database.")
    want = [{"kind": "decision", "key": "db", "ids": [older.id, newer.id]}]
    assert _reads(store, newer) == {"query": want, "tool": want, "view": want}


@pytest.mark.parametrize("part", ["fast", "term", "store"])
def test_a_damaged_index_never_hides_a_conflict(store: MemoryStore, part: str) -> None:
    """The verified floor's fast fields (the group codes a report reads), its terms (the
    group tags it searches) or its stored records garbled in place: the next read rebuilds
    and still names both rivals."""
    older, newer = _rivals(store)
    want = [{"kind": "decision", "key": "db", "ids": [older.id, newer.id]}]
    assert _reads(store, newer)["query"] == want  # the index exists and is current
    recall = Path(store.git.git_dir) / "truss" / "recall"
    hit = 0
    for path in recall.glob(f"floor-verified*/*.{part}"):
        data = bytearray(path.read_bytes())
        data[:] = os.urandom(len(data))
        path.write_bytes(bytes(data))
        hit += 1
    assert hit, sorted(p.name for p in recall.rglob("*"))
    assert _reads(store, newer) == {"query": want, "tool": want, "view": want}


def test_group_codes_that_contradict_their_tags_are_rebuilt_not_served(
    store: MemoryStore,
) -> None:
    """An index whose verified floor answers a query but holds group codes that are not its
    groups' (files from another build): the query's hits come from it, and the conflicts --
    worked out after the hits -- find the contradiction, rebuild and still name both rivals."""
    older, newer = _rivals(store)
    want = [{"kind": "decision", "key": "db", "ids": [older.id, newer.id]}]
    recall = Path(store.git.git_dir) / "truss" / "recall"
    shutil.rmtree(recall, ignore_errors=True)
    # A rebuild in a process whose group codes are all 7: the floors it leaves disagree.
    build = (
        "import sys; from truss_files.recall import floors; floors.group_code = lambda k, g: 7; "
        "from truss_files.facade import MemoryStore; MemoryStore(sys.argv[1]).query('zqxlite')"
    )
    subprocess.run([sys.executable, "-c", build, str(store.git.workdir)], check=True, timeout=120)
    built = sorted(recall.glob("floor-verified*"))
    assert built
    assert _reads(store, newer) == {"query": want, "tool": want, "view": want}
    assert sorted(recall.glob("floor-verified*")) != built  # rebuilt


def test_a_superseded_rival_is_no_longer_reported(store: MemoryStore) -> None:
    older, newer = _rivals(store)
    store.supersede(older.id, newer.id)
    assert _reads(store, newer) == {"query": [], "tool": [], "view": []}
