"""The review queue (`truss-files review`): the pending list, its JSON, and decisions made on a
real terminal (a pty) or from an answer stream, each one signed commit git itself verifies."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pexpect
import pytest

from tests.support import console
from truss_files.errors import TransitionError, UsageError
from truss_files.facade import MemoryStore
from truss_files.format.trailers import parse_trailers
from truss_files.git.gitstore import Snapshot
from truss_files.model import Kind, Trust
from truss_files.review.queue import decide, pending
from truss_files.signing import Ed25519Signer
from truss_files.signing.trustpolicy import CONFIG_PATH

EXE = str(Path(sys.executable).with_name("truss-files"))
CONTRACT_KEYS = {
    "session",
    "id",
    "kind",
    "key",
    "body",
    "author",
    "produced_by",
    "created",
    "supersedes",
    "votes",
}


def _env(key: Path) -> dict[str, str]:
    return dict(os.environ, TRUSS_KEY=str(key), COLUMNS="200")


def _run(
    store: MemoryStore, key: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return console.run(
        [EXE, "--store", str(store.git.workdir), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=_env(key),
        check=False,
        timeout=60,
    )


def _tip(store: MemoryStore) -> str:
    tip = store.git.tip()
    assert tip is not None
    return str(tip.id)


def _commits_since(store: MemoryStore, base: str) -> list[str]:
    out = subprocess.run(
        ["git", "rev-list", "--reverse", f"{base}..HEAD"],
        cwd=store.git.workdir,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def _verify_commit(store: MemoryStore, commit: str) -> subprocess.CompletedProcess[str]:
    """git's own verify-commit against the store's allowed signers."""
    return subprocess.run(
        ["git", "-c", "gpg.ssh.allowedSignersFile=.truss/allowed_signers", "verify-commit", commit],
        cwd=store.git.workdir,
        capture_output=True,
        text=True,
        check=False,
    )


def _fingerprint(root: Path) -> dict[str, str]:
    """Every file of the repository, work tree and .git (caches under .git/truss too), by
    path and content."""
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def key(tmp_path: Path, store: MemoryStore) -> Path:
    """The operator's key (operator, panel and agent), as the console script reads it."""
    return tmp_path / "operator_key"


def _four(store: MemoryStore) -> list[str]:
    return [
        store.write("lesson", "ci", "Retry the network tests once.").id,
        store.write("fact", "db", "Postgres 16 in prod.").id,
        store.write("lesson", "dns", "Pin the resolver.").id,
        store.write("decision", "queue", "Use SQS.").id,
    ]


# -- the terminal, through a real pty ------------------------------------------------------


def test_terminal_pass_fail_skip_quit_each_decision_one_signed_commit(
    store: MemoryStore, key: Path
) -> None:
    a, b, c, d = _four(store)
    base = _tip(store)
    child = pexpect.spawn(
        EXE,
        ["--store", str(store.git.workdir), "review"],
        env=_env(key),
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 200),
    )
    child.expect(r"4 pending, newest session first; deciding as operator@example\.test")
    child.expect(r"== written outside a run: 4 notes ==")
    child.expect(r"\[1/4\] lesson/ci  " + a[:12])
    child.expect(r"Retry the network tests once\.")
    child.expect(r"q quit .*\?")
    child.send("m")  # not an answer: on a terminal it asks again
    child.expect("'m'\\? press p, f, s, q or n")
    child.expect(r"q quit .*\?")
    child.send("p")  # one key decides, no Enter
    child.expect(a[:12] + r" is now verified: PASS signed by operator@example\.test, commit")
    child.expect(r"\[2/4\] fact/db")
    child.expect(r"q quit .*\?")
    child.send("n")
    child.expect("note: ")
    child.sendline("not reproduced on staging")
    child.expect(r"q quit .*\?")
    child.send("f")
    child.expect(b[:12] + r" is now rejected: FAIL")
    child.expect(r"\[3/4\] lesson/dns")
    child.expect(r"q quit .*\?")
    child.sendline("s")  # an Enter after a key is ignored, never taken for the next answer
    child.expect(r"\[4/4\] decision/queue")
    child.expect(r"q quit .*\?")
    child.send("q")
    child.expect(r"done: 1 promoted, 1 rejected, 1 skipped, each in its own signed commit; 2 still")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    commits = _commits_since(store, base)
    assert len(commits) == 2  # one per decision, none for the skip and the quit
    ops = [parse_trailers(store.git.commit(c).message)["Truss-Op"] for c in commits]
    assert ops == [["promote"], ["reject"]]
    for commit in commits:
        checked = _verify_commit(store, commit)
        assert checked.returncode == 0, checked.stderr
        assert 'Good "git" signature for operator@example.test' in checked.stderr
    assert store.get(a).trust is Trust.VERIFIED
    rejected = store.get(b)
    assert rejected.trust is Trust.REJECTED
    verdict = rejected.provenance.verified_by
    assert verdict is not None and verdict["outcome"] == "FAIL"
    assert verdict["votes"][0]["evidence"]["note"] == "not reproduced on staging"
    assert {store.get(c).trust, store.get(d).trust} == {Trust.UNVERIFIED}
    assert _run(store, key, "audit").returncode == 0


def _as_from_a_shell() -> None:
    """^C reaches the child as it reaches a command typed in a shell: a test worker may have
    had SIGINT ignored or blocked, which a child would otherwise inherit across exec."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_on_the_terminal_keeps_what_was_decided(store: MemoryStore, key: Path) -> None:
    a, b, *_ = _four(store)
    base = _tip(store)
    child = pexpect.spawn(
        EXE,
        ["--store", str(store.git.workdir), "review"],
        env=_env(key),
        encoding="utf-8",
        preexec_fn=_as_from_a_shell,
    )
    child.expect(r"q quit .*\?")
    child.sendline("p")
    child.expect("is now verified")
    child.expect(r"q quit .*\?")
    child.sendintr()
    child.expect(r"stopped: 1 promoted, 0 rejected, 0 skipped, each in its own signed commit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert len(_commits_since(store, base)) == 1
    assert store.get(a).trust is Trust.VERIFIED and store.get(b).trust is Trust.UNVERIFIED


def test_an_entry_decided_elsewhere_meanwhile_is_skipped_not_decided_twice(
    store: MemoryStore, key: Path
) -> None:
    a, b, *_ = _four(store)
    child = pexpect.spawn(
        EXE, ["--store", str(store.git.workdir), "review"], env=_env(key), encoding="utf-8"
    )
    child.expect(r"\[1/4\] lesson/ci")
    child.expect(r"q quit .*\?")
    elsewhere = decide(store, a, "PASS")  # another reviewer, while this one reads
    child.sendline("f")
    child.expect(r"skipped: decided elsewhere: entry " + a + " is verified, not pending")
    child.expect(r"q quit .*\?")
    child.sendline("q")
    child.expect(r"done: 0 promoted, 0 rejected, 1 skipped; 3 still pending")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert _tip(store) == elsewhere.commit and store.get(a).trust is Trust.VERIFIED
    assert store.get(b).trust is Trust.UNVERIFIED


# -- without a terminal --------------------------------------------------------------------


def test_no_terminal_and_no_answers_says_what_to_do_and_changes_nothing(
    store: MemoryStore, key: Path
) -> None:
    _four(store)
    before = _fingerprint(store.git.workdir)  # type: ignore[arg-type]
    done = _run(store, key, "review", "--format", "text", stdin="p\n")
    assert done.returncode == 1
    for hint in ("not one", "review --format json", "--answers -", "review --web"):
        assert hint in done.stderr
    assert _fingerprint(store.git.workdir) == before  # type: ignore[arg-type]


def test_answers_from_stdin_decide_in_order(store: MemoryStore, key: Path) -> None:
    a, b, c, d = _four(store)
    base = _tip(store)
    done = _run(store, key, "review", "--answers", "-", stdin="pass\nF wrong db\ns\n")
    assert done.returncode == 0, done.stderr
    assert "? pass\n" in done.stdout and "? F wrong db\n" in done.stdout  # the transcript
    assert "done: 1 promoted, 1 rejected, 1 skipped" in done.stdout
    assert "2 still pending" in done.stdout  # d: the answers ended before it
    assert [store.get(i).trust for i in (a, b, c, d)] == [
        Trust.VERIFIED,
        Trust.REJECTED,
        Trust.UNVERIFIED,
        Trust.UNVERIFIED,
    ]
    commits = _commits_since(store, base)
    assert len(commits) == 2
    assert all(_verify_commit(store, commit).returncode == 0 for commit in commits)


def test_a_bad_answer_line_is_refused_by_number_and_earlier_decisions_stay(
    store: MemoryStore, key: Path, tmp_path: Path
) -> None:
    a, b, *_ = _four(store)
    answers = tmp_path / "answers.txt"
    answers.write_text("p\nyes please\n")
    base = _tip(store)
    done = _run(store, key, "review", "--answers", str(answers), "--format", "text")
    assert done.returncode == 1
    assert "--answers line 2: 'yes' is not an answer; give p, f, s or q" in done.stderr
    assert len(_commits_since(store, base)) == 1
    assert store.get(a).trust is Trust.VERIFIED and store.get(b).trust is Trust.UNVERIFIED
    missing = _run(store, key, "review", "--answers", str(tmp_path / "nope.txt"))
    assert missing.returncode == 1 and "nope.txt" in missing.stdout


def test_kind_and_limit_narrow_the_queue(store: MemoryStore, key: Path) -> None:
    a, _b, c, _d = _four(store)
    done = _run(
        store, key, "review", "--kind", "lesson", "--limit", "1", "--answers", "-", stdin="p\n"
    )
    assert done.returncode == 0, done.stderr
    assert "1 pending (of 2)" in done.stdout
    assert store.get(a).trust is Trust.VERIFIED and store.get(c).trust is Trust.UNVERIFIED
    assert _run(store, key, "review", "--limit", "0", "--format", "json").returncode == 2


def test_a_key_without_the_panel_role_is_refused_before_anything_is_asked(
    store: MemoryStore,
    tmp_path: Path,
    add_signer: Callable[..., str],
) -> None:
    agent = Ed25519Signer.generate("agent@example.test")
    agent.save(tmp_path / "agent_key")
    add_signer(store, agent, "agent@example.test", ("agent",))
    _four(store)
    base = _tip(store)
    done = _run(store, tmp_path / "agent_key", "review", "--answers", "-", stdin="p\n")
    assert done.returncode == 1
    assert "agent@example.test does not hold the panel role" in done.stdout
    assert "roles grant panel agent@example.test" in done.stdout
    assert "q quit" not in done.stdout
    assert _commits_since(store, base) == []


def test_control_characters_in_a_body_cannot_drive_the_terminal(
    store: MemoryStore, key: Path
) -> None:
    store.write("lesson", "esc", "clear\x1b[2J\x1b]0;owned\x07 and \u202etxt.exe")
    done = _run(store, key, "review", "--answers", "-", stdin="q\n")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout and "\u202e" not in done.stdout
    assert "clear\\x1b[2J\\x1b]0;owned\\x07 and \\u202etxt.exe" in done.stdout


def test_nothing_pending_says_so(store: MemoryStore, key: Path) -> None:
    done = _run(store, key, "review", "--answers", "-", stdin="")
    assert done.returncode == 0 and done.stdout.strip() == "nothing is waiting for review"


# -- JSON ----------------------------------------------------------------------------------


def test_json_lists_the_contract_shape_and_changes_nothing(store: MemoryStore, key: Path) -> None:
    ids = _four(store)
    before = _fingerprint(store.git.workdir)  # type: ignore[arg-type]
    tip = _tip(store)
    done = _run(store, key, "review", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [p["id"] for p in data["pending"]] == ids  # oldest first
    for item in data["pending"]:
        assert set(item) == CONTRACT_KEYS
        assert item["votes"] == [] and item["supersedes"] == []
        assert item["author"] == "agent:operator@example.test"
    assert data["pending"][0]["body"] == "Retry the network tests once."
    assert _tip(store) == tip
    assert _fingerprint(store.git.workdir) == before  # type: ignore[arg-type]
    # JSON lists, it never decides: --answers and --web with it are refused.
    refused = _run(store, key, "review", "--format", "json", "--answers", "-", stdin="p\n")
    assert refused.returncode == 1 and "changes nothing" in refused.stdout
    assert _fingerprint(store.git.workdir) == before  # type: ignore[arg-type]


def test_json_shows_what_a_pass_would_supersede(
    store: MemoryStore, key: Path, signed_commit: Callable[..., str]
) -> None:
    old = store.write("fact", "db", "Postgres 15.")
    store.promote(old.id, store.sign_verdict(old.id, "PASS"))
    new = store.write("fact", "db", "Postgres 16.")
    other = store.write("fact", "cache", "Redis.")
    data = json.loads(_run(store, key, "review", "--format", "json").stdout)
    by_id = {p["id"]: p for p in data["pending"]}
    assert by_id[new.id]["supersedes"] == [old.id]
    assert by_id[other.id]["supersedes"] == []
    text = _run(store, key, "review", "--kind", "fact", "--answers", "-", stdin="q\n").stdout
    assert f"a pass turns stale: {old.id[:12]}  Postgres 15." in text

    def keep_both(snap: Snapshot) -> dict[str, bytes | None]:
        toml = (snap.read(CONFIG_PATH) or b"").decode()
        return {CONFIG_PATH: toml.replace('"verified-wins"', '"keep-both-flagged"').encode()}

    signed_commit(store, keep_both)
    data = json.loads(_run(store, key, "review", "--format", "json").stdout)
    assert {p["id"]: p for p in data["pending"]}[new.id]["supersedes"] == []


def test_votes_so_far_are_the_verdicts_the_store_recorded(store: MemoryStore, key: Path) -> None:
    entry = store.write("lesson", "ci", "Retry once.")
    done = decide(store, entry.id, "PASS", note="seen it twice")
    store.revert(done.commit)  # back to unverified: the PASS was recorded, then undone
    data = json.loads(_run(store, key, "review", "--format", "json").stdout)
    [item] = data["pending"]
    [vote] = item["votes"]
    assert vote == {
        "reviewer": "operator@example.test",
        "kind": "human",
        "vote": "PASS",
        "note": "seen it twice",
        "verdict": done.verdict.id,
        "outcome": "PASS",
        "signer": "operator@example.test",
        "commit": done.commit,
    }
    text = _run(store, key, "review", "--answers", "-", stdin="q\n").stdout
    assert 'vote so far: operator@example.test (human) PASS "seen it twice"' in text


# -- the engine ----------------------------------------------------------------------------


def test_decide_refuses_what_is_not_pending(store: MemoryStore) -> None:
    entry = store.write("lesson", "ci", "Retry once.")
    done = decide(store, entry.id, "PASS")
    assert done.commit == _tip(store) and done.entry.trust is Trust.VERIFIED
    with pytest.raises(TransitionError, match="is verified, not pending"):
        decide(store, entry.id, "FAIL")
    with pytest.raises(UsageError, match="PASS or FAIL"):
        decide(store, entry.id, "ABSTAIN")
    assert _tip(store) == done.commit


def test_pending_is_oldest_first_and_counts_what_the_limit_left_out(store: MemoryStore) -> None:
    ids = _four(store)
    queue = pending(store, kind=Kind.LESSON, limit=1)
    assert [p.entry.id for p in queue.items] == [ids[0]]
    assert queue.total == 2 and queue.to_dict()["more"] == 1
    with pytest.raises(UsageError, match="--limit 0"):
        pending(store, limit=0)


def test_a_file_that_does_not_parse_is_named_not_fatal(
    store: MemoryStore, key: Path, signed_commit: Callable[..., str]
) -> None:
    entry = store.write("lesson", "ci", "Retry once.")
    broken = "memories/lesson/00/00000000000000000000000000000000.md"
    signed_commit(store, {broken: b"---\nkind: [unclosed\n---\nbody\n"})
    data = json.loads(_run(store, key, "review", "--format", "json").stdout)
    assert [p["id"] for p in data["pending"]] == [entry.id]
    assert data["skipped"] == [broken]
    done = _run(store, key, "review", "--answers", "-", stdin="q\n")
    assert f"note: {broken} does not parse and is not in the queue" in done.stderr


# -- newest session first ----------------------------------------------------------------


def _sessions(store: MemoryStore) -> dict[str, list[str]]:
    """Notes from two host sessions (child runs of the project's agent run) and one written
    outside a run, interleaved in time: session one, outside, session two, session one."""
    from truss_files.tools import ToolSession

    def write(session: ToolSession, key: str, body: str) -> str:
        done = session.call("write_memory", {"kind": "lesson", "key": key, "body": body})
        assert done.ok, done.payload
        return str(done.payload["id"])

    one = ToolSession(store, flags=["memory_write"], run_id="host-1", parent="agent-proj")
    two = ToolSession(store, flags=["memory_write"], run_id="host-2", parent="agent-proj")
    first = write(one, "ci", "Retry the network tests once.")
    outside = store.write("fact", "db", "Postgres 16 in prod.").id
    second = write(two, "dns", "Pin the resolver.")
    third = write(two, "cache", "Redis 7 holds sessions.")
    late = write(one, "queue", "Use SQS for the mailer.")  # session one goes on after two
    return {"host-1": [first, late], "host-2": [second, third], "": [outside]}


def test_the_queue_comes_newest_session_first_grouped_oldest_first_within(
    store: MemoryStore, key: Path
) -> None:
    made = _sessions(store)
    data = json.loads(_run(store, key, "review", "--format", "json").stdout)
    order = [(p["session"], p["id"]) for p in data["pending"]]
    # host-1 wrote last, so it comes first, with its earlier note; then host-2; then the
    # note written outside a run, the oldest group
    assert order == [
        *(("host-1", i) for i in made["host-1"]),
        *(("host-2", i) for i in made["host-2"]),
        (None, made[""][0]),
    ]
    for item in data["pending"]:
        assert set(item) == CONTRACT_KEYS
        if item["session"] is not None:
            assert item["produced_by"].startswith(f"run:{item['session']}/")

    # --limit takes from the front: the newest session's notes
    limited = json.loads(_run(store, key, "review", "--format", "json", "--limit", "2").stdout)
    assert [p["id"] for p in limited["pending"]] == made["host-1"] and limited["more"] == 3

    # The terminal queue says where each group starts, and decides in the same order.
    done = _run(store, key, "review", "--answers", "-", stdin="p\ns\nf\ns\ns\n")
    assert done.returncode == 0, done.stderr
    heads = [line for line in done.stdout.splitlines() if line.startswith("==")]
    assert heads == [
        "== session host-1: 2 notes ==",
        "== session host-2: 2 notes ==",
        "== written outside a run: 1 note ==",
    ]
    assert store.get(made["host-1"][0]).trust is Trust.VERIFIED
    assert store.get(made["host-1"][1]).trust is Trust.UNVERIFIED  # skipped
    assert store.get(made["host-2"][0]).trust is Trust.REJECTED


def test_the_page_groups_by_session_and_gives_the_first_entry_its_keys(
    store: MemoryStore,
) -> None:
    from truss_files.review.page import index_page

    made = _sessions(store)
    html = index_page(pending(store), "tok", store="s")
    heads = [
        html.index('<h2 class="session">session <code>host-1</code>: 2 notes</h2>'),
        html.index('<h2 class="session">session <code>host-2</code>: 2 notes</h2>'),
        html.index('<h2 class="session">written outside a run: 1 note</h2>'),
    ]
    assert heads == sorted(heads)
    places = [html.index(f'data-id="{i}"') for i in [*made["host-1"], *made["host-2"]]]
    assert places == sorted(places) and places[2] < heads[1] < places[3]  # inside its first
    # one access key each, on the first entry's form only
    for key in ("p", "f", "n"):
        assert html.count(f'accesskey="{key}"') == 1
    assert html.index('accesskey="p"') < places[1]
