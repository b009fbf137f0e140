"""Attacks by damage on a real ``truss-files serve`` while it answers ``memory.ask``.

A red team cut, garbled, deleted and replaced files under ``.git/truss/`` while a server
answered 1,300 asks (recall modes exact and hybrid): six answers were HTTP 500. What the
contract allows is the right answer or unavailable (``status: unavailable`` in a 200, or HTTP
503 ``index_unavailable``), and once the damage stops, the right answer again.

In every recall mode this install has (semantic and hybrid need the semantic extra):

* during asks: four threads ask while a fifth damages a file under ``.git/truss/`` in a loop
  (a kind of cache file at random, then one of its files: cut, garbled in place, deleted,
  replaced by random bytes or by a link; now and then a whole folder removed), for
  ``TRUSS_DAMAGE_SECONDS`` (2 by default, 4 with ``TRUSS_SLOW=1``), and on a loaded machine
  longer, until a dozen asks were answered and a dozen files damaged. The variant marked
  ``slow`` runs ``TRUSS_DAMAGE_LONG_SECONDS`` (60) and only with ``TRUSS_SLOW=1``;
* between asks: each kind of cache file damaged each way, then one ask, then the next;
* a server started over damaged vector packs (read afresh, not from what a server kept).

Every answer is checked; the server's stderr must hold no traceback, no panic and no 500,
and the server must be up at the end. ``TRUSS_DAMAGE_SEED`` replays one run of damage (the
seed is named in a failure).
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.extras import needs_minilm
from tests.support.http_support import Answer, Served, served_fixture  # noqa: F401 - the fixture
from tests.support.recall_support import commit_toml
from truss_files.facade import MemoryStore
from truss_files.signing.trustpolicy import CONFIG_PATH

pytest.importorskip("uvicorn")

# Seconds of damage during asks: a bounded run by default, twice as long with TRUSS_SLOW=1.
SECONDS = float(
    os.environ.get("TRUSS_DAMAGE_SECONDS", "4" if os.environ.get("TRUSS_SLOW") == "1" else "2")
)
LONG_SECONDS = float(os.environ.get("TRUSS_DAMAGE_LONG_SECONDS", "60"))
ASKERS = 4
# What a run must reach whatever the machine's load: asks answered and files damaged (a loaded
# machine answers fewer per second), within a minute.
AT_LEAST = 12
AT_MOST_SECONDS = 60.0

NOTES = (
    "The release check needs the preview URL before it can start.",
    "Flaky CI network tests: retry once, then fix the race.",
    "The release train leaves on Tuesdays after the preview check.",
    "Postgres 16 runs behind pgbouncer in transaction pooling mode.",
    "The deploy key lives in the vault, never in the repository.",
    "Cargo.lock and the toolchain file make up the CI cache key.",
    "Canary deploys are watched for ten minutes before the full rollout.",
    "BorrowChecker errors in store.rs: scope the guard before the await.",
)
PURPOSES = (
    "what does the release check need",
    "how do we handle flaky network tests",
    "where is the deploy key kept",
)
SEMANTIC = [
    pytest.param("hybrid", id="hybrid", marks=needs_minilm),
    pytest.param("semantic", id="semantic", marks=needs_minilm),
]
MODES = [pytest.param("exact", id="exact"), *SEMANTIC]
DAMAGES = ("truncate", "garble", "delete", "link", "replace")


def set_mode(store: MemoryStore, mode: str) -> None:
    toml = (store.snapshot().read(CONFIG_PATH) or b"").decode()
    assert '[recall]\nmode = "exact"' in toml
    if mode != "exact":
        commit_toml(store, toml.replace('[recall]\nmode = "exact"', f'[recall]\nmode = "{mode}"'))


def trained_server(served: Callable[..., Served], store: MemoryStore, mode: str) -> Served:
    set_mode(store, mode)
    server = served()
    for n, text in enumerate(NOTES):
        made = server.train("T-1", {"body": text, "source": {"eventId": f"e{n}", "revision": "1"}})
        assert made.status == 200 and made.body["status"] == "accepted", made.raw
    return server


def evidence(answer: Answer) -> list[str]:
    return [e["id"] for e in answer.body["evidence"]]


def wanted(server: Served) -> dict[str, list[str]]:
    """The answer to each purpose on a whole cache (asked twice: the second from what the
    server kept)."""
    want: dict[str, list[str]] = {}
    for purpose in PURPOSES:
        first = server.ask("T-1", purpose=purpose)
        assert first.status == 200 and first.body["status"] == "answered", first.raw
        want[purpose] = evidence(first)
        assert want[purpose], "the ask found nothing: the attack tests nothing"
        again = server.ask("T-1", purpose=purpose)
        assert again.status == 200 and evidence(again) == want[purpose], again.raw
    return want


def judge(answer: Answer, want: list[str]) -> str | None:
    """What is wrong with an answer given while the cache may be damaged (None: nothing)."""
    if answer.status == 503:
        code = (answer.body or {}).get("error", {}).get("code")
        return None if code == "index_unavailable" else f"503 {answer.raw[:300]!r}"
    if answer.status != 200:
        return f"HTTP {answer.status}: {answer.raw[:300]!r}"
    status = answer.body.get("status")
    if status == "unavailable":
        return None
    if status != "answered" or evidence(answer) != want:
        return f"a wrong answer: {answer.raw[:300]!r}"
    return None


def right(server: Served, want: dict[str, list[str]]) -> None:
    """Every purpose answered right, the server up, its log quiet."""
    for purpose, ids in want.items():
        found = server.ask("T-1", purpose=purpose)
        assert found.status == 200 and found.body["status"] == "answered", found.raw
        assert evidence(found) == ids, found.raw
    assert server.proc.poll() is None, "the server died"
    assert server.request("GET", "/healthz").status == 200
    quiet(server)


def bugs(server: Served) -> list[str]:
    """The lines of the server's log that say something went wrong: a 500 (its exception
    type and where it was raised), a Python traceback, a Rust panic."""
    log = server.log.read_text(errors="replace")
    words = ("unexpected", "Traceback", "panicked", " 500 ")
    return [line for line in log.splitlines() if any(w in line for w in words)]


def quiet(server: Served) -> None:
    found = bugs(server)
    assert not found, found[:20]


# -- damage ------------------------------------------------------------------------------


def cache_files(root: Path) -> list[Path]:
    """Every regular file under ``root`` now (one that vanishes while listed is left out)."""
    found: list[Path] = []
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                found.append(path)
    return found


def kind_of(root: Path, path: Path) -> str:
    """A cache file's kind: one per part of a floor index, the vector packs, else its name."""
    name = str(path.relative_to(root))
    if name.startswith("recall/floor-"):
        return "floor meta.json" if path.name == "meta.json" else f"floor {path.suffix}"
    return "vectors" if name.startswith("vectors/") else name


def damage(path: Path, how: str, rng: random.Random, spare: Path) -> None:
    """``path`` damaged ``how``. A file that vanished meanwhile (an updater replaced it, or
    an earlier damage removed it) is no error, nor a folder an updater wrote into while it
    was removed."""
    try:
        if how == "truncate":
            os.truncate(path, rng.randrange(max(1, path.stat().st_size)))
        elif how == "delete":
            path.unlink()
        elif how == "rmtree":
            shutil.rmtree(path)
        else:
            data = bytearray(path.read_bytes())
            at = rng.randrange(max(1, len(data)))
            data[at : at + 64] = bytes(b ^ 0x5A for b in data[at : at + 64]) or b"\x5a"
            if how == "garble":  # in place: the same inode and length
                with open(path, "r+b") as handle:
                    handle.write(bytes(data))
            elif how == "replace":  # random bytes renamed over it
                tmp = path.with_name(f".planted-{rng.randrange(1 << 30)}")
                tmp.write_bytes(rng.randbytes(max(1, len(data) // rng.choice((1, 2, 3)))))
                os.replace(tmp, path)
            else:  # a link to a garbled copy
                copy = spare / f"planted-{rng.randrange(1 << 30)}"
                copy.write_bytes(bytes(data))
                path.unlink()
                path.symlink_to(copy)
    except OSError:
        pass


# -- during asks -------------------------------------------------------------------------


def attack_during_asks(
    served: Callable[..., Served], store: MemoryStore, tmp_path: Path, mode: str, seconds: float
) -> None:
    server = trained_server(served, store, mode)
    want = wanted(server)
    root = store.git.git_dir / "truss"
    spare = tmp_path / "spare"
    spare.mkdir()
    seed = int(os.environ.get("TRUSS_DAMAGE_SEED", str(random.randrange(1 << 30))))
    stop = threading.Event()
    lock = threading.Lock()
    seen: list[tuple[int, str | None]] = []
    done: dict[str, int] = {}
    crashed: list[BaseException] = []

    def asker(n: int) -> None:
        rng = random.Random(seed + n + 1)
        try:
            while not stop.is_set():
                purpose = rng.choice(PURPOSES)
                answer = server.ask("T-1", purpose=purpose)
                with lock:
                    seen.append((answer.status, judge(answer, want[purpose])))
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            crashed.append(exc)

    def damager() -> None:
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                if rng.random() < 0.03:
                    folders = [Path(f) for f, _d, _n in os.walk(root)]
                    victim, how = (rng.choice(folders), "rmtree") if folders else (root, "-")
                else:
                    # A kind first, then one of its files: the few small files (the index
                    # head, the read gate's record, the store's mark...) are hit as often as
                    # the many files of the floor indexes.
                    kinds: dict[str, list[Path]] = {}
                    for path in cache_files(root):
                        kinds.setdefault(kind_of(root, path), []).append(path)
                    if not kinds:
                        continue
                    victim = rng.choice(kinds[rng.choice(sorted(kinds))])
                    how = rng.choice(DAMAGES)
                damage(victim, how, rng, spare)
                done[how] = done.get(how, 0) + 1
                time.sleep(rng.uniform(0, 0.01))
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            crashed.append(exc)

    threads = [threading.Thread(target=asker, args=(n,)) for n in range(ASKERS)]
    threads.append(threading.Thread(target=damager))
    for thread in threads:
        thread.start()
    start = time.monotonic()
    while time.monotonic() - start < seconds or (
        min(len(seen), sum(done.values())) < AT_LEAST
        and time.monotonic() - start < AT_MOST_SECONDS
        and not crashed
    ):
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join(120)
    assert not crashed, (seed, crashed)
    statuses = {s: sum(1 for t, _w in seen if t == s) for s in {t for t, _w in seen}}
    assert min(len(seen), sum(done.values())) >= AT_LEAST, (seed, done, statuses)
    wrong = [what for _status, what in seen if what is not None]
    assert not wrong, (seed, statuses, len(wrong), wrong[:5], bugs(server)[:10])
    right(server, want)


@pytest.mark.parametrize("mode", MODES)
def test_serve_answers_right_or_unavailable_while_its_caches_are_damaged(
    served: Callable[..., Served], store: MemoryStore, tmp_path: Path, mode: str
) -> None:
    """Asks from four threads while a fifth damages the cache in a loop: every answer is 200
    and right or unavailable, or 503 ``index_unavailable``; never a 500, a traceback or a
    panic; and once the damage stops, every ask is right."""
    attack_during_asks(served, store, tmp_path, mode, SECONDS)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_serve_outlasts_a_long_run_of_damage_during_asks(
    served: Callable[..., Served], store: MemoryStore, tmp_path: Path, mode: str
) -> None:
    """The attack above for ``TRUSS_DAMAGE_LONG_SECONDS`` (a minute by default)."""
    attack_during_asks(served, store, tmp_path, mode, LONG_SECONDS)


# -- between asks ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_serve_answers_right_after_each_kind_of_cache_file_is_damaged(
    served: Callable[..., Served], store: MemoryStore, tmp_path: Path, mode: str
) -> None:
    """Each kind of file under ``.git/truss/`` (the index head, each part of the floor
    indexes, the vector packs, the read gate's record, the writers, the store's mark of the
    branch it follows, the usage file, the locks), every file of the kind damaged each way
    between two asks: the first is right or unavailable (never a 500), the next is right."""
    server = trained_server(served, store, mode)
    want = wanted(server)
    root = store.git.git_dir / "truss"
    spare = tmp_path / "spare"
    spare.mkdir()
    rng = random.Random(int(os.environ.get("TRUSS_DAMAGE_SEED", "7")))
    # The whole cache removed first: every file is then one the server made for itself.
    shutil.rmtree(root)
    right(server, want)
    kinds = sorted({kind_of(root, p) for p in cache_files(root)})
    for must in ("recall/head", "floor meta.json", "floor .store", "floor .term", "audited"):
        assert must in kinds, kinds
    assert ("vectors" in kinds) is (mode != "exact"), kinds
    failures: list[str] = []
    purposes = iter(PURPOSES * len(kinds) * len(DAMAGES))
    for kind in kinds:
        for how in DAMAGES:
            for victim in [p for p in cache_files(root) if kind_of(root, p) == kind]:
                damage(victim, how, rng, spare)
            purpose = next(purposes)
            what = judge(server.ask("T-1", purpose=purpose), want[purpose])
            if what is not None:
                failures.append(f"{kind} {how}: {what}")
            after = server.ask("T-1", purpose=purpose)
            if after.status != 200 or after.body.get("status") != "answered":
                failures.append(f"{kind} {how}, the next ask: {after.raw[:300]!r}")
            elif evidence(after) != want[purpose]:
                failures.append(f"{kind} {how}, the next ask is wrong: {after.raw[:300]!r}")
    assert not failures, (failures, bugs(server)[:10])
    right(server, want)


# Both modes read the packs through one loader: a server per damage in hybrid mode too is the
# long run's.
@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("hybrid", id="hybrid", marks=[needs_minilm, pytest.mark.slow]),
        pytest.param("semantic", id="semantic", marks=needs_minilm),
    ],
)
def test_a_server_started_over_damaged_vector_packs_answers_right(
    served: Callable[..., Served], store: MemoryStore, tmp_path: Path, mode: str
) -> None:
    """A server keeps the vector packs it read: damage under a running one is never read.
    Here every pack is damaged each way while no server runs, then a new one starts and
    reads them afresh: a pack cut short, garbled, replaced or turned into a link is never
    scored from (its rows are embedded again), so every answer is right."""
    server = trained_server(served, store, mode)
    want = wanted(server)
    server.stop()
    quiet(server)
    root = store.git.git_dir / "truss"
    spare = tmp_path / "spare"
    spare.mkdir()
    rng = random.Random(int(os.environ.get("TRUSS_DAMAGE_SEED", "7")))
    for how in DAMAGES:
        packs = [p for p in cache_files(root) if kind_of(root, p) == "vectors"]
        assert packs, f"no vector pack to damage ({how})"
        for victim in packs:
            damage(victim, how, rng, spare)
        fresh = served()
        try:
            for purpose, ids in want.items():
                found = fresh.ask("T-1", purpose=purpose)
                assert found.status == 200 and found.body["status"] == "answered", found.raw
                assert evidence(found) == ids, (how, found.raw)
            quiet(fresh)
        finally:
            fresh.stop()
