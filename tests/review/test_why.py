"""`truss-files why ID`: why the store believes an entry, through the installed console script.

Real git, real keys: each store is made by `truss-files init` (a key generated in the test's
own HOME), each entry written, promoted, demoted or superseded by the CLI, and each run's
ledger recorded by `tool --durable`. The checks look at what git itself says (git
verify-commit, git cat-file on the ledger ref) rather than at what `why` says of itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.support import console
from truss_files.facade import MemoryStore
from truss_files.format import entryfile
from truss_files.model import Trust
from truss_files.runs.ledger import canonical

SCRIPT = Path(sys.executable).parent / "truss-files"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed")


def tf(repo: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return console.run(
        [str(SCRIPT), *args],
        cwd=repo,
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )


def ok(repo: Path, *args: str, input: str | None = None) -> str:
    done = tf(repo, *args, input=input)
    assert done.returncode == 0, f"{args}: {done.stderr}{done.stdout}"
    return done.stdout


def git(repo: Path, *args: str, input: str | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, input=input, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"git {args}: {done.stderr}"
    return done.stdout.strip()


def why(repo: Path, ref: str) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(ok(repo, "why", ref, "--format", "json"))
    return answer


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "memory"
    ok(tmp_path, "init", str(path))
    return path


def principal(repo: Path) -> str:
    return str(tomllib.loads((repo / "truss.toml").read_text())["roles"]["panel"][0])


def write(repo: Path, key: str, body: str, *extra: str) -> str:
    return ok(
        repo, "write", "--kind", "lesson", "--key", key, *extra, "--format", "text", body
    ).strip()


def promote(repo: Path, eid: str, note: str = "seen in CI") -> None:
    verdict = ok(repo, "verdict", "sign", eid, "--pass", "--note", note)
    ok(repo, "promote", eid, "--verdict", "-", input=verdict)


def run_write(repo: Path, run: str, body: dict[str, Any], *flags: str) -> str:
    done = ok(
        repo, "tool", "write_memory", "--memory-write", "--run", run, *flags, input=json.dumps(body)
    )
    return str(json.loads(done)["id"])


def verify_commit(repo: Path, commit: str) -> bool:
    signers = repo / ".truss" / "allowed_signers"
    done = subprocess.run(
        [
            "git",
            "-c",
            "gpg.format=ssh",
            "-c",
            f"gpg.ssh.allowedSignersFile={signers}",
            "verify-commit",
            commit,
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode == 0


# -- a run's note, promoted on a signed verdict ---------------------------------------------


def test_a_run_write_promoted_is_traced_to_its_signed_call(repo: Path) -> None:
    who = principal(repo)
    ok(repo, "tool", "memory_query", "--run", "R-7f3a", "--durable", input='{"query": "x"}')
    note = {"kind": "fact", "key": "deploy-day", "body": "Deploys happen on Tuesdays."}
    eid = run_write(repo, "R-7f3a", note, "--durable")
    promote(repo, eid, note="the release calendar says so")

    answer = why(repo, eid)
    assert set(answer) == {"entry", "history", "produced_by", "sources"}
    assert answer["entry"]["id"] == eid and answer["entry"]["trust"] == "verified"
    history = answer["history"]
    assert [(h["op"], h["from"], h["to"]) for h in history] == [
        ("write", None, "unverified"),
        ("promote", "unverified", "verified"),
    ]
    assert {"commit", "op", "from", "to", "signer", "verdict"} <= set(history[0])
    assert [h["signer"] for h in history] == [who, who]
    assert all(verify_commit(repo, h["commit"]) for h in history)  # what git itself says
    assert history[0]["verdict"] is None
    verdict = history[1]["verdict"]
    assert verdict["valid"] is True and verdict["outcome"] == "PASS" and verdict["entry"] == eid
    trailer = "--format=%(trailers:key=Truss-Verdict,valueonly)"
    assert verdict["verdict_id"] == git(repo, "log", "-1", trailer, history[1]["commit"])
    assert verdict["votes"] == [
        {
            "reviewer": who,
            "kind": "human",
            "vote": "PASS",
            "evidence": {"note": "the release calendar says so"},
        }
    ]

    produced = answer["produced_by"]
    assert produced["ref"] == "run:R-7f3a/2"
    call = produced["resolved"]
    assert call["status"] == "verified" and call["tool"] == "write_memory"
    assert call["seq"] == 2 and call["signer"] == who and eid in call["produced"]
    # The digests are those of the signed ledger commit, read here with git itself.
    ledger = "refs/truss/runs/R-7f3a"
    assert call["commit"] == git(repo, "rev-parse", ledger)
    assert verify_commit(repo, call["commit"])
    recorded = json.loads(git(repo, "cat-file", "-p", f"{call['commit']}:calls/00000002.json"))
    assert (call["input_sha256"], call["result_sha256"]) == (
        recorded["input_sha256"],
        recorded["result_sha256"],
    )
    assert call["input_sha256"] == hashlib.sha256(canonical(note)).hexdigest()
    memo = subprocess.run(
        ["git", "cat-file", "blob", f"{ledger}:memo/{call['memo_key']}.json"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    assert hashlib.sha256(memo).hexdigest() == call["result_sha256"]
    assert answer["sources"] == []

    # A prefix answers the same; so does the Python API.
    assert why(repo, eid[:8]) == answer
    assert json.loads(json.dumps(MemoryStore(repo).why(eid))) == answer

    text = ok(repo, "why", eid[:8], "--format", "text")
    assert text.startswith(f"{eid[:12]}  fact/deploy-day  [verified]")
    assert "verified: PASS 1/1 by" in text
    assert "the release calendar says so" in text
    assert "verified: call #2 of run R-7f3a (write_memory)" in text
    assert f"result sha256 {call['result_sha256']}" in text


# -- demoted, superseded, rejected --------------------------------------------------------


def test_superseded_and_demoted_entries_say_how_they_left_verified(repo: Path) -> None:
    old = write(repo, "ci-flakes", "Retry the network tests once.")
    promote(repo, old)
    new = write(repo, "ci-flakes", "Retry once; quarantine after three failures.")
    promote(repo, new, note="the quarantine job exists now")

    # verified-wins: promoting the newer one turned the older stale in the same commit.
    answer = why(repo, old)
    assert answer["entry"]["trust"] == "stale" and answer["entry"]["superseded_by"] == new
    last = answer["history"][-1]
    assert (last["op"], last["from"], last["to"]) == ("promote", "verified", "stale")
    assert last["verdict"]["entry"] == new and last["verdict"]["valid"] is True
    text = ok(repo, "why", old, "--format", "text")
    assert f"stale: superseded by {new[:12]}" in text
    assert f"for entry {new[:12]}" in text  # the verdict was the rival's, not this entry's

    ok(repo, "demote", new, "--reason", "the runner | pool was replaced")
    answer = why(repo, new)
    last = answer["history"][-1]
    assert (last["op"], last["from"], last["to"]) == ("demote", "verified", "stale")
    assert last["reason"] == "the runner | pool was replaced" and last["verdict"] is None
    assert "stale: demoted, the runner | pool was replaced" in ok(
        repo, "why", new, "--format", "text"
    )
    md = ok(repo, "why", new, "--format", "markdown")
    rows = [line for line in md.splitlines() if line.startswith("| `")]
    assert len(rows) == len(answer["history"]) == 3
    # A '|' in a reason is escaped: every row keeps its six cells.
    assert all(row.replace("\\|", "").count("|") == 7 for row in rows)
    assert "the runner \\| pool was replaced" in rows[-1]

    # A revert of the demotion brings it back under the verdict it had.
    ok(repo, "revert", answer["history"][-1]["commit"])
    answer = why(repo, new)
    last = answer["history"][-1]
    assert (last["op"], last["from"], last["to"]) == ("revert", "stale", "verified")
    text = ok(repo, "why", new, "--format", "text")
    assert f"quorum 1-of-1) (made verified by revert {last['commit'][:12]})" in text


def test_an_explicit_supersede_and_a_rejection(repo: Path) -> None:
    a = write(repo, "db", "Use Postgres 15.")
    b = write(repo, "db-16", "Use Postgres 16.")
    promote(repo, a)
    promote(repo, b)
    ok(repo, "supersede", a, b)
    history = why(repo, a)["history"]
    assert [(h["op"], h["to"]) for h in history][-1] == ("supersede", "stale")

    bad = write(repo, "db-17", "Use Postgres 17 beta in prod.")
    verdict = ok(repo, "verdict", "sign", bad, "--fail", "--note", "not released")
    ok(repo, "reject", bad, "--verdict", "-", input=verdict)
    answer = why(repo, bad)
    last = answer["history"][-1]
    assert (last["op"], last["from"], last["to"]) == ("reject", "unverified", "rejected")
    assert last["verdict"]["outcome"] == "FAIL" and last["verdict"]["valid"] is True
    assert "rejected: FAIL 1/1" in ok(repo, "why", bad, "--format", "text")


# -- sources ---------------------------------------------------------------------------------


def test_sources_resolve_to_entries_commits_calls_and_say_what_they_cannot(repo: Path) -> None:
    ok(repo, "tool", "memory_query", "--run", "R-1", "--durable", input='{"query": "db"}')
    base = write(repo, "db", "Use Postgres.")
    promote(repo, base)
    pending = write(repo, "db-pool", "Pool size 20.")
    commit = git(repo, "rev-parse", "HEAD")
    line = {
        "kind": "decision",
        "key": "db-plan",
        "body": "Postgres with a pool of 20.",
        "source": "run:R-1/1",  # a call that wrote nothing: the claim is refused
        "sources": [
            f"git:{base}",
            f"git:{pending[:10]}",
            f"git:{commit[:12]}",
            "run:R-1/1",
            "run:R-1/7",
            "event:evt_1#2",
            "git:0123456789",
        ],
    }
    (repo.parent / "notes.jsonl").write_text(json.dumps(line) + "\n")
    ok(repo, "import", str(repo.parent / "notes.jsonl"))
    [entry] = json.loads(ok(repo, "list", "--key", "db-plan", "--format", "json"))
    answer = why(repo, entry["id"])

    produced = answer["produced_by"]["resolved"]
    assert produced["status"] == "refused" and "not this entry" in produced["detail"]
    got = {s["ref"]: s["resolved"] for s in answer["sources"]}
    assert [s["ref"] for s in answer["sources"]] == line["sources"]
    assert got[f"git:{base}"]["type"] == "entry"
    assert (got[f"git:{base}"]["status"], got[f"git:{base}"]["key"]) == ("verified", "db")
    assert (got[f"git:{pending[:10]}"]["status"], got[f"git:{pending[:10]}"]["id"]) == (
        "unverified",
        pending,
    )
    named = got[f"git:{commit[:12]}"]
    assert named["type"] == "commit" and named["commit"] == commit
    assert named["status"] == "verified" and named["entries"] == [pending]
    assert named["on_branch"] is True
    assert got["run:R-1/1"]["status"] == "verified"  # a source need not have written us
    assert got["run:R-1/1"]["tool"] == "memory_query"
    assert got["run:R-1/7"]["status"] == "refused" and "#7" in got["run:R-1/7"]["detail"]
    assert got["event:evt_1#2"]["status"] == "unresolvable"
    assert got["git:0123456789"]["status"] == "unresolvable"

    md = ok(repo, "why", entry["id"], "--format", "markdown")
    assert "| commit | when | op | trust | signer | verdict |" in md
    assert "- `event:evt_1#2`: **unresolvable**" in md
    assert "**Produced by** `run:R-1/1`: **refused**" in md


# -- a ledger that cannot vouch -------------------------------------------------------------


def _unsigned_call_on_top(repo: Path, ledger: str) -> None:
    """What a hand edit does: one more 'call' on the ledger ref, unsigned, with git itself."""
    tip = git(repo, "rev-parse", ledger)
    tree = git(repo, "rev-parse", f"{tip}^{{tree}}")
    message = (
        "truss: run R-9 #2 memory_query\n\nTruss-Op: tool-call\nTruss-Run: R-9\nTruss-Seq: 2\n"
    )
    forged = git(repo, "commit-tree", tree, "-p", tip, input=message)
    git(repo, "update-ref", ledger, forged, tip)


def _rolled_back(repo: Path, ledger: str) -> None:
    git(repo, "update-ref", ledger, f"{ledger}~1")


@pytest.mark.parametrize("tamper", [_unsigned_call_on_top, _rolled_back])
def test_a_tampered_ledger_is_refused_not_trusted(repo: Path, tamper: Any) -> None:
    note = {"kind": "fact", "key": "k", "body": "Cache for 5 min."}
    eid = run_write(repo, "R-9", note, "--durable")
    ok(repo, "tool", "memory_query", "--run", "R-9", "--durable", input='{"query": "cache"}')
    assert why(repo, eid)["produced_by"]["resolved"]["status"] == "verified"

    tamper(repo, "refs/truss/runs/R-9")
    resolved = why(repo, eid)["produced_by"]["resolved"]
    assert resolved["status"] == "refused"
    assert "unsigned" in resolved["detail"] or "rolled back" in resolved["detail"]
    assert resolved["claimed"]["tool"] == "write_memory"  # shown, labelled, not believed
    assert "input_sha256" not in resolved  # the digests are only given when they verify
    text = ok(repo, "why", eid, "--format", "text")
    assert "  refused: " in text and "verified: call" not in text
    assert "result sha256" not in text


def test_a_run_without_a_ledger_is_unresolvable(repo: Path) -> None:
    eid = run_write(repo, "R-2", {"kind": "fact", "key": "k", "body": "Not durable."})
    resolved = why(repo, eid)["produced_by"]["resolved"]
    assert resolved["status"] == "unresolvable" and "no ledger for run R-2" in resolved["detail"]
    plain = write(repo, "cli", "Written by hand.")
    produced = why(repo, plain)["produced_by"]
    assert produced["resolved"]["status"] == "unresolvable"


# -- refusals --------------------------------------------------------------------------------


def test_an_unknown_id_is_not_found(repo: Path) -> None:
    missing = tf(repo, "why", "0123456789abcdef", "--format", "json")
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["error"]["code"] == "not_found"
    text = tf(repo, "why", "0123456789abcdef", "--format", "text")
    assert text.returncode == 1 and text.stdout == "" and text.stderr.startswith("error: ")
    markdown = tf(repo, "why", "0123456789abcdef", "--format", "markdown")
    assert markdown.returncode == 1 and markdown.stdout == "" and "no entry" in markdown.stderr
    bad = tf(repo, "why", "not-an-id", "--format", "json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"]["code"] == "invalid_input"


def test_a_verified_entry_on_a_history_the_audit_rejects_is_refused(repo: Path) -> None:
    eid = write(repo, "ci", "Retry once.")
    promote(repo, eid)
    pending = write(repo, "ci-2", "Retry twice.")
    with (repo / "truss.toml").open("a") as toml:
        toml.write("\n# an unsigned hand edit\n")
    git(repo, "commit", "-qam", "unsigned edit")
    refused = tf(repo, "why", eid, "--format", "json")
    assert refused.returncode == 1
    assert json.loads(refused.stdout)["error"]["code"] == "untrusted_history"
    # An unverified entry is still explained, with the gate's note on stderr.
    shown = tf(repo, "why", pending, "--format", "json")
    assert shown.returncode == 0 and shown.stderr.startswith("note: ")
    assert json.loads(shown.stdout)["withheld"]


def test_a_forged_verdict_in_the_history_is_shown_invalid(repo: Path) -> None:
    """A hand edit that rejects an entry on a verdict edited after signing: `why` still
    explains the (rejected, so never served) entry, and says the verdict does not check."""
    eid = write(repo, "ci", "Retry once.")
    signed = json.loads(ok(repo, "verdict", "sign", eid, "--fail", "--note", "wrong"))
    signed["votes"][0]["evidence"]["note"] = "wrong, and a second reviewer agreed"
    [path] = git(repo, "ls-files", f"memories/lesson/*/{eid}.md").splitlines()
    entry = entryfile.parse((repo / path).read_bytes(), path)
    forged = entryfile.serialize(
        dataclasses.replace(
            entry,
            trust=Trust.REJECTED,
            provenance=dataclasses.replace(entry.provenance, verified_by=signed),
        )
    )
    (repo / path).write_text(forged)
    message = f"truss: reject\n\nTruss-Op: reject\nTruss-Entry: {eid}\n"
    message += f"Truss-Verdict: {signed['verdict_id']}\n"
    git(repo, "commit", "-q", "--no-verify", "-am", message)

    done = tf(repo, "why", eid[:10], "--format", "json")
    assert done.returncode == 0 and done.stderr.startswith("note: ")  # the gate's note
    last = json.loads(done.stdout)["history"][-1]
    assert (last["op"], last["to"], last["signer"]) == ("reject", "rejected", "unsigned")
    assert (
        last["verdict"]["valid"] is False and "edited after signing" in last["verdict"]["problem"]
    )
    assert "INVALID" in ok(repo, "why", eid[:10], "--format", "text")
