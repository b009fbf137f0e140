"""Attacks by damage: the caches under ``.git/truss/`` and git's own files.

Caches (index segments, floor indexes, vectors, the read gate's and the glossary's files) are
truncated in place, garbled, deleted or replaced by links while a long-lived process holds
them open -- a Python caller, a real ``truss-files serve`` and a real ``truss-files mcp``, each
in a child process, so a crash (SIGBUS from a mapping of a file cut short) fails the test
instead of killing pytest. Every answer is right (the cache rebuilt) or unavailable (HTTP 503,
tool error ``index_unavailable``), never a crash, an HTTP 500 or an unexpected tool error, and
the next call is right again.

git's own files (a truncated ``.git/index``, a truncated pack, a malformed ``refs/heads/main``)
make the console script and the tool face exit 1 with ``repository_damaged`` naming the file
and what to run, never exit 3 and "please report".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support import console
from tests.support.http_support import Served, served_fixture  # noqa: F401 - the fixture
from tests.support.recall_support import commit_toml, mixed_store
from tests.support.sample import covering
from truss_files.facade import MemoryStore
from truss_files.signing.trustpolicy import CONFIG_PATH

SCRIPT = Path(sys.executable).with_name("truss-files")
QUERY = "flaky CI network tests retry postgres"
DAMAGES = ("truncate", "garble", "delete", "link")
# Vector packs carry a checksum and are never read through a link (``recall/embed.py``): the
# hybrid runs damage them every way too.
HYBRID_DAMAGES = DAMAGES


def damage_caches(
    git_dir: Path, how: str, spare: Path, *, head: bool = False, part: str = "all"
) -> list[str]:
    """Every regular file under ``.git/truss`` (``part``: of one kind, ``PARTS``) damaged
    ``how``, in place (same inode) for a cut or a garble; the recall index's ``head`` too
    only with ``head`` (whole, it names the damaged files and a reader that trusts it reads
    them). Returns the files hit."""
    hit: list[str] = []
    root = git_dir / "truss"
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        if path == root / "recall" / "head" and not head:
            continue
        if not PARTS[part](str(path.relative_to(root))):
            continue
        size = path.stat().st_size
        if how == "truncate":
            os.truncate(path, size // 2)
        elif how == "delete":
            path.unlink()
        else:
            data = bytearray(path.read_bytes())
            at = len(data) // 3
            data[at : at + 64] = bytes(b ^ 0x5A for b in data[at : at + 64])
            if how == "garble":
                with open(path, "r+b") as handle:
                    handle.write(bytes(data))
            else:
                copy = spare / f"planted-{len(hit)}"
                copy.write_bytes(bytes(data))
                path.unlink()
                path.symlink_to(copy)
        hit.append(str(path.relative_to(git_dir)))
    assert hit, "nothing under .git/truss to damage: the attack tested nothing"
    return hit


PARTS: dict[str, Callable[[str], bool]] = {
    "all": lambda name: True,
    "records": lambda name: name.startswith("recall/floor-") and name.endswith(".store"),
    "floor": lambda name: name.startswith("recall/floor-"),
    "vec": lambda name: name.endswith(".vec"),
}
# (mode, damage, part) for the servers: the whole cache, or one kind of file at a time (a
# server whose floor indexes are all cut rebuilds before it reads its vectors again).
SERVED = [("exact", how, part) for how in DAMAGES for part in ("all", "records", "floor")] + [
    ("hybrid", how, part) for how in HYBRID_DAMAGES for part in ("all", "vec")
]


def set_mode(store: MemoryStore, mode: str) -> None:
    if mode == "exact":
        return
    toml = (store.snapshot().read(CONFIG_PATH) or b"").decode()
    assert '[recall]\nmode = "exact"' in toml
    commit_toml(store, toml.replace('[recall]\nmode = "exact"', f'[recall]\nmode = "{mode}"'))


# -- a Python caller ------------------------------------------------------------------------

_CALLER = """
import json, sys
from pathlib import Path
from tests.adversarial.test_damage_attacks import damage_caches
from truss_files.errors import IndexUnavailable
from truss_files.model import Trust
from tests.support.gated import Searcher
from truss_files.recall.pipeline import Filter

store, how, mode = sys.argv[1], sys.argv[2], sys.argv[3]
searcher = Searcher(store)
flt = Filter(min_trust=Trust.UNVERIFIED)

def ask():
    return [h.entry.id for h in searcher.query(sys.argv[6], flt, 10, mode=mode).hits]

before = ask()
ask()  # the second call keeps what the first opened (a server's state)
damage_caches(Path(store) / ".git", how, Path(sys.argv[5]), head=sys.argv[7] == "head")
try:
    after = ask()
except IndexUnavailable as exc:
    after = "unavailable: " + exc.message
print(json.dumps({"before": before, "after": after, "again": ask()}))
"""


@pytest.mark.parametrize(
    ("mode", "how", "head"),
    covering(
        (mode, how, head)
        for head in ("head", "no-head")
        for mode, hows in (("exact", DAMAGES), ("hybrid", HYBRID_DAMAGES))
        for how in hows
    ),
)
def test_a_python_caller_outlives_its_caches_damaged_under_it(
    store: MemoryStore, tmp_path: Path, mode: str, how: str, head: str
) -> None:
    """A process that keeps a ``Searcher`` (segments, floor indexes, vectors open) has every
    cache file damaged between two queries: it answers right or unavailable, then right."""
    mixed_store(store)
    spare = tmp_path / "spare"
    spare.mkdir()
    here = str(Path(__file__).parent)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _CALLER,
            str(store.git.workdir),
            how,
            mode,
            here,
            str(spare),
            QUERY,
            head,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(here).parent.parent)},
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    found = json.loads(proc.stdout.splitlines()[-1])
    assert found["before"], "the query found nothing: the attack tested nothing"
    assert found["after"] == found["before"] or str(found["after"]).startswith("unavailable")
    assert found["again"] == found["before"]


# -- a real server ----------------------------------------------------------------------------


# The hybrid and semantic cases of a server, damage during asks included, are in
# test_damage_during_asks_attacks.py.
@pytest.mark.parametrize(("mode", "how", "part"), covering(c for c in SERVED if c[0] == "exact"))
def test_serve_outlives_its_caches_damaged_under_it(
    served: Callable[..., Served],
    store: MemoryStore,
    tmp_path: Path,
    mode: str,
    how: str,
    part: str,
) -> None:
    set_mode(store, mode)
    server = served()
    for n, text in enumerate(
        (
            "The release check needs the preview URL before it can start.",
            "Flaky CI network tests: retry once, then fix the race.",
            "The release train leaves on Tuesdays after the preview check.",
        )
    ):
        made = server.train("T-1", {"body": text, "source": {"eventId": f"e{n}", "revision": "1"}})
        assert made.status == 200 and made.body["status"] == "accepted", made.raw
    purpose = "what does the release check need"
    first = server.ask("T-1", purpose=purpose)
    assert first.status == 200 and first.body["status"] == "answered", first.raw
    want = [e["id"] for e in first.body["evidence"]]
    assert server.ask("T-1", purpose=purpose).status == 200
    spare = tmp_path / "spare"
    spare.mkdir()
    damage_caches(store.git.git_dir, how, spare, part=part)
    during = server.ask("T-1", purpose=purpose)
    assert during.status in (200, 503), during.raw
    if during.status == 200:
        assert during.body["status"] in ("answered", "unavailable"), during.raw
        if during.body["status"] == "answered":
            assert [e["id"] for e in during.body["evidence"]] == want
    again = server.ask("T-1", purpose=purpose)
    assert again.status == 200 and [e["id"] for e in again.body["evidence"]] == want, again.raw
    assert server.proc.poll() is None, "the server died"
    assert server.request("GET", "/healthz").status == 200


# -- a real MCP server ------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "how", "part"), covering(SERVED))
def test_mcp_outlives_its_caches_damaged_under_it(
    store: MemoryStore, tmp_path: Path, mode: str, how: str, part: str
) -> None:
    pytest.importorskip("mcp")
    from mcp import Client, StdioServerParameters

    mixed_store(store)
    set_mode(store, mode)
    env = {k: v for k, v in os.environ.items() if k.startswith(("GIT_", "TRUSS_", "HOME", "XDG_"))}
    params = StdioServerParameters(
        command=str(SCRIPT), args=["mcp", "--store", str(store.git.workdir)], env=env
    )
    spare = tmp_path / "spare"
    spare.mkdir()
    query = {"query": QUERY, "min_trust": "unverified"}

    def ids(found: Any) -> list[str]:
        assert found.structured_content is not None
        return [e["id"] for e in found.structured_content["entries"]]

    async def main() -> None:
        with anyio.fail_after(240):
            await session(Client(params))

    async def session(client_cm: Any) -> None:
        async with client_cm as client:
            first = await client.call_tool("memory_query", query)
            assert not first.is_error, first
            want = ids(first)
            assert want, "the query found nothing: the attack tested nothing"
            assert ids(await client.call_tool("memory_query", query)) == want
            damage_caches(store.git.git_dir, how, spare, part=part)
            during = await client.call_tool("memory_query", query)
            if during.is_error:
                assert during.structured_content is not None, during
                assert during.structured_content["error"]["code"] == "index_unavailable"
            else:
                assert ids(during) == want
            assert ids(await client.call_tool("memory_query", query)) == want

    anyio.run(main)


# -- git's own files ------------------------------------------------------------------------


def _break(store: MemoryStore, what: str) -> Path:
    git_dir = store.git.git_dir
    if what == "index":
        victim = git_dir / "index"
        os.truncate(victim, victim.stat().st_size // 2)
    elif what == "pack":
        (victim,) = (git_dir / "objects" / "pack").glob("*.pack")
        os.truncate(victim, victim.stat().st_size // 2)
    else:
        victim = git_dir / "refs" / "heads" / "main"
        victim.write_text("not-a-commit-id\n")
    return victim


def _run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return console.run(
        [str(SCRIPT), *args], input=stdin, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("what", ["index", "pack", "ref"])
def test_a_damaged_repository_is_a_user_error_that_names_the_file(
    store: MemoryStore, tmp_path: Path, what: str, git: Callable[..., str]
) -> None:
    """A read (query, list), a write, the audit and the tool face on a repository whose
    ``.git/index`` is cut short, whose pack is cut short or whose branch ref is garbage:
    exit 1, ``repository_damaged``, the file named and ``git fsck`` / ``truss-files repair``
    said; never exit 3. A damaged ``.git/index`` only caches the work tree, so the reads
    (which never use it) still answer, from the commits; the write, which must keep it in
    step, is refused before anything moves."""
    mixed_store(store)
    work = store.git.workdir
    assert work is not None
    git(work, "gc", "-q")  # every object in one pack, every ref packed
    git(work, "update-ref", "refs/heads/main", "HEAD")  # and main a loose ref again
    tip = git(work, "rev-parse", "refs/heads/main").strip()
    victim = _break(store, what)
    at = ["--store", str(work)]
    key = ["--key", str(tmp_path / "operator_key")]
    write = ["write", "--kind", "fact", "--key", "z", "body", "--format", "json"]
    tool_input = '{"query": "flaky", "min_trust": "unverified"}'
    calls = {
        "query": _run([*at, "query", "flaky", "--min-trust", "unverified", "--format", "json"]),
        "list": _run([*at, "list", "--format", "json"]),
        "write": _run([*at, *key, *write]),
        "audit": _run([*at, "audit", "--format", "json"]),
        "tool": _run([*at, "tool", "memory_query"], tool_input),
    }  # fmt: skip
    reads = {"query", "list", "audit", "tool"}
    for name, proc in calls.items():
        assert proc.returncode != 3 and "please report" not in proc.stderr, (name, proc.stderr)
        if what == "index" and name in reads:
            assert proc.returncode == 0, (name, proc.stdout, proc.stderr)
            continue
        assert proc.returncode == 1, (name, proc.returncode, proc.stdout, proc.stderr)
        error = json.loads(proc.stdout)["error"]
        assert error["code"] == "repository_damaged", (name, error)
        assert str(victim) in error["message"], (name, error)
        assert "git" in error["message"] and "truss-files repair" in error["message"]
    # Nothing moved: the branch is where it was (read past the damage, from git itself).
    if what != "ref":
        assert git(work, "rev-parse", "refs/heads/main").strip() == tip
    else:
        assert victim.read_text() == "not-a-commit-id\n"


def test_crash_signals_are_told_apart_from_failures() -> None:
    """The child-process tests above read a crash as a return code: SIGBUS is -7 here."""
    proc = subprocess.run(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGBUS)"]
    )
    assert proc.returncode == -signal.SIGBUS
