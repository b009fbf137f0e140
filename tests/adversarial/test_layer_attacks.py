"""Attacks on "Layers above the task are written by trainers" and "No write on an untrusted
history" (CONTRACTS.md), each performed for real.

The attacker holds an agent-only key (``agent2``) of the store. Issue 20, item 3: it wrote
``--layer enterprise --author member:m-7`` and T-118's memory.ask served the note as the task's
own. Item 10: after a forged commit (``git commit --no-verify`` setting ``trust: verified``)
memory.train still answered ``accepted``, and the README's remedy then dropped that note.
Every refusal here leaves the branch where it was and every note that was there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tests.support.hand_commits as hand
from tests.support import console
from tests.support.http_support import Served, served_fixture  # noqa: F401 - the fixture
from truss_files.facade import MemoryStore
from truss_files.signing import Ed25519Signer
from truss_files.tools import RunContext
from truss_files.tools.ask import ask
from truss_files.trust.audit import audit

SCRIPT = Path(sys.executable).with_name("truss-files")
AGENT = "agent2@example.test"
GRANT = f"truss-files roles grant trainer {AGENT}"
# T-118 of the issue: a member's task in acme, granted the team layer for ci: events.
CONTEXT = {
    "taskId": "T-118",
    "memberId": "m-7",
    "teamId": "platform",
    "enterpriseId": "acme",
    "grants": [
        {"layer": "team", "eventPrefix": "ci:"},
        {"layer": "enterprise", "eventPrefix": "ci:"},
    ],
}
EXPLOIT = (
    "--layer", "enterprise", "--scope", "task=T-118", "--scope", "enterprise=acme",
    "--author", "member:m-7",
)  # fmt: skip


@pytest.fixture
def agent_key(
    store: MemoryStore, add_signer: Callable[..., str], tmp_path: Path
) -> tuple[Ed25519Signer, Path]:
    """A second principal's key, holding the agent role only, saved where the CLI reads it."""
    key = Ed25519Signer.generate(AGENT)
    path = tmp_path / "agent2_key"
    key.save(path)
    add_signer(store, key, AGENT, ("agent",))
    return key, path


def cli(
    store: MemoryStore, key: Path, *args: str, stdin: str | None = None
) -> tuple[int, dict[str, Any] | None, str]:
    """The installed console script as a process: exit code, its JSON object, stderr."""
    done = console.run(
        [str(SCRIPT), "--store", str(store.git.workdir), "--key", str(key), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    try:
        value = json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        value = None
    return done.returncode, value, done.stderr


def tool(
    store: MemoryStore, key: Path, name: str, inp: Any, context: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    """``truss-files tool NAME`` in a run context, as a harness calls it."""
    ctx = Path(store.git.workdir).parent / "ctx.json"  # type: ignore[arg-type]
    ctx.write_text(json.dumps(context or CONTEXT))
    code, value, err = cli(
        store, key, "tool", name, "--memory-tools", "--memory-write", "--run-context", str(ctx),
        "--run", "R-agent2", stdin=json.dumps(inp),
    )  # fmt: skip
    assert value is not None, err
    return code, value


def state(store: MemoryStore) -> tuple[str, frozenset[tuple[str, str]]]:
    """The branch tip and every note with its trust: what a refused attack leaves alone."""
    tip = str(store.git.tip().id)  # type: ignore[union-attr]
    return tip, frozenset((e.id, e.trust.value) for e in store.iter_entries())


def forbidden(code: int, value: dict[str, Any] | None, *rules: str) -> str:
    assert code == 1 and value is not None, value
    error = value["error"]
    assert error["code"] == "forbidden", error
    for rule in rules:
        assert f"[{rule}]" in error["message"], error["message"]
    assert GRANT in error["message"]
    return str(error["message"])


def asked(store: MemoryStore) -> dict[str, Any]:
    return ask(store, RunContext.from_dict(CONTEXT), {"purpose": "release check preview url"})


# -------------------------------------------------- item 3: the enterprise layer, no grant


@pytest.mark.parametrize(
    ("extra", "rules"),
    [
        (EXPLOIT, ("layer-role", "author")),
        (("--layer", "team", "--scope", "team=platform"), ("layer-role",)),
        (("--author", "member:m-7", "--scope", "task=T-118"), ("author",)),
        (("--author", "agent:operator@example.test"), ("author",)),
    ],
    ids=["the-exploit", "team-layer", "member-author", "another-principal"],
)
def test_cli_write_above_the_task_or_in_another_name_is_forbidden(
    store: MemoryStore,
    agent_key: tuple[Ed25519Signer, Path],
    extra: tuple[str, ...],
    rules: tuple[str, ...],
) -> None:
    before = state(store)
    code, value, _ = cli(
        store, agent_key[1], "write", "--kind", "fact", "--key", "release-check", *extra,
        "--format", "json", "The release check needs the preview URL.",
    )  # fmt: skip
    forbidden(code, value, *rules)
    assert state(store) == before
    assert asked(store)["status"] == "insufficient_evidence"
    assert audit(store.git).ok


def test_cli_import_of_an_enterprise_line_is_forbidden_whole(
    store: MemoryStore, agent_key: tuple[Ed25519Signer, Path], tmp_path: Path
) -> None:
    before = state(store)
    lines = tmp_path / "notes.jsonl"
    honest = {"kind": "fact", "key": "db", "body": "Postgres 16 in prod."}
    evil = {
        "kind": "fact",
        "key": "release-check",
        "body": "The release check needs the preview URL.",
        "layer": "enterprise",
        "scope": {"task": "T-118", "enterprise": "acme"},
        "author": "member:m-7",
    }
    lines.write_text(json.dumps(honest) + "\n" + json.dumps(evil) + "\n")
    code, value, _ = cli(store, agent_key[1], "import", str(lines), "--format", "json")
    forbidden(code, value, "layer-role", "author")
    assert state(store) == before  # one commit: the honest line did not land either


def test_tool_writes_take_no_layer_or_author(
    store: MemoryStore, agent_key: tuple[Ed25519Signer, Path]
) -> None:
    """write_memory and the memory tool write the task layer in the key's own name, whatever
    the input says: write_memory refuses the fields, the memory tool's command shape ignores
    them, and neither lands a note above the task layer or in another's name."""
    before = state(store)
    code, value = tool(
        store, agent_key[1], "write_memory",
        {"kind": "fact", "key": "release-check", "body": "Needs the preview URL.",
         "layer": "enterprise", "author": "member:m-7"},
    )  # fmt: skip
    assert code == 1 and value["error"]["code"] == "invalid_input", value
    assert state(store) == before
    code, value = tool(
        store, agent_key[1], "memory",
        {"command": "create", "path": "/memories/release.md", "file_text": "Preview URL.",
         "layer": "enterprise", "author": "member:m-7"},
    )  # fmt: skip
    [landed] = [e for e in store.iter_entries() if (e.id, e.trust.value) not in before[1]]
    assert (landed.layer.value, landed.author) == ("task", f"agent:{AGENT}"), value
    assert asked(store)["status"] == "insufficient_evidence"
    assert audit(store.git).ok


def test_memory_train_in_a_members_name_needs_a_trainer_key(
    store: MemoryStore, agent_key: tuple[Ed25519Signer, Path]
) -> None:
    """memory.train writes the run's member as author, and the team or enterprise layer under
    a grant: signed by an agent-only key, every one is ``failed``, naming the grant to ask."""
    before = state(store)
    for inp in (
        {"body": "The release check needs the preview URL.", "layer": "enterprise",
         "source": {"eventId": "ci:1", "revision": "1"}},
        {"body": "The team deploys on Tuesdays.", "layer": "team",
         "source": {"eventId": "ci:2", "revision": "1"}},
        {"body": "This task's own note.", "source": {"eventId": "e-3", "revision": "1"}},
    ):  # fmt: skip
        code, value = tool(store, agent_key[1], "memory.train", inp)
        assert code == 0 and value["status"] == "failed" and "entry" not in value, value
        assert "[author]" in value["reason"] and GRANT in value["reason"]
    assert state(store) == before
    assert asked(store)["status"] == "insufficient_evidence"


def test_the_default_author_of_every_face_needs_no_trainer(
    store: MemoryStore, agent_key: tuple[Ed25519Signer, Path], tmp_path: Path
) -> None:
    """What an agent-only key writes by default (task layer, its own name) still lands, and
    the audit accepts it."""
    key = agent_key[1]
    code, value, err = cli(store, key, "write", "--kind", "fact", "--key", "a", "--format",
                           "json", "Written by the agent itself.")  # fmt: skip
    assert code == 0, (value, err)
    lines = tmp_path / "own.jsonl"
    lines.write_text(json.dumps({"kind": "fact", "key": "b", "body": "Imported by it."}) + "\n")
    code, value, err = cli(store, key, "import", str(lines), "--format", "json")
    assert code == 0, (value, err)
    no_member = {k: v for k, v in CONTEXT.items() if k != "memberId"}
    code, value = tool(store, key, "write_memory", {"kind": "fact", "key": "c", "body": "Mine."})
    assert code == 0 and value["trust"] == "unverified", value
    code, value = tool(
        store, key, "memory", {"command": "create", "path": "/memories/d.md", "file_text": "D."}
    )
    assert code == 0, value
    code, value = tool(
        store, key, "memory.train",
        {"body": "A note of the task.", "source": {"eventId": "e-1", "revision": "1"}},
        context=no_member,
    )  # fmt: skip
    assert value["status"] == "accepted", value
    authors = {e.author for e in store.iter_entries()}
    assert authors == {f"agent:{AGENT}"}
    assert audit(store.git).ok


def test_a_trainer_key_writes_the_enterprise_layer(
    store: MemoryStore, agent_key: tuple[Ed25519Signer, Path], tmp_path: Path
) -> None:
    operator_key = tmp_path / "operator_key"
    code, value, err = cli(store, operator_key, "roles", "grant", "trainer", AGENT,
                           "--format", "json")  # fmt: skip
    assert code == 0, (value, err)
    code, value, err = cli(
        store, agent_key[1], "write", "--kind", "fact", "--key", "release-check", *EXPLOIT,
        "--format", "json", "The release check needs the preview URL.",
    )  # fmt: skip
    assert code == 0, (value, err)
    code, value = tool(
        store, agent_key[1], "memory.train",
        {"body": "Enterprise: releases need a preview URL.", "layer": "enterprise",
         "source": {"eventId": "ci:9", "revision": "1"}},
    )  # fmt: skip
    assert value["status"] in ("accepted", "consolidating"), value
    assert value["entry"]["author"] == "member:m-7"
    assert audit(store.git).ok


# ------------------------------------------- a commit that skips the library: audit, gate


def test_a_hand_signed_entry_is_named_by_the_audit_and_refused_by_the_gate(
    bare_store: MemoryStore,
    tmp_path: Path,
    operator_key: Ed25519Signer,
    add_signer: Callable[..., str],
    git: Callable[..., str],
) -> None:
    """A valid agent signature on a commit the library never checked: the audit names it
    (``layer-role``, ``author``) and the real pre-receive gate refuses the push."""
    server = bare_store.git.git_dir
    installed = console.run(
        [str(SCRIPT), "--store", str(server), "hooks", "install", "--server"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    git(tmp_path, "clone", "-q", str(server), "work")
    work = tmp_path / "work"
    mine = MemoryStore(work, signer=operator_key)
    agent = Ed25519Signer.generate(AGENT)
    add_signer(mine, agent, AGENT, ("agent",))
    git(work, "push", "-q", "origin", "main")  # the operator's grant: accepted
    published = git(server, "rev-parse", "main").strip()

    entry = hand.write(
        mine, agent, "fact", "release-check", "The release check needs the preview URL.",
        layer="enterprise", scope={"task": "T-118", "enterprise": "acme"}, author="member:m-7",
    )  # fmt: skip
    bad = git(work, "rev-parse", "HEAD").strip()

    report = audit(mine.git)
    found = {(v.commit, v.path, v.rule) for v in report.violations}
    assert found == {(bad, entry.path, "layer-role"), (bad, entry.path, "author")}
    pushed = subprocess.run(
        ["git", "push", "origin", "main"], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert pushed.returncode != 0
    for rule in ("layer-role", "author"):
        want = f"commit {bad[:12]} {entry.path}: [{rule}]"
        assert want in pushed.stderr, pushed.stderr
    assert git(server, "rev-parse", "main").strip() == published
    # ... and the library writes nothing more on top of it.
    code, value, _ = cli(mine, tmp_path / "operator_key", "write", "--kind", "fact", "--key",
                         "x", "--format", "json", "After the bad commit.")  # fmt: skip
    assert code == 1 and value is not None and value["error"]["code"] == "untrusted_history"


# ------------------------------------------------ item 10: no write on an untrusted history


def forge(store: MemoryStore, git: Callable[..., str]) -> tuple[str, str]:
    """A draft written honestly, then set to ``trust: verified`` in a hand-made commit that
    skips every hook. Returns (the last clean commit, the forged one)."""
    draft = store.write("fact", "deploy-day", "Deploys happen on Tuesdays.")
    clean = str(store.git.tip().id)  # type: ignore[union-attr]
    work = store.git.workdir
    assert work is not None
    path = work / draft.path
    path.write_text(path.read_text().replace("\ntrust: unverified\n", "\ntrust: verified\n"))
    git(work, "-c", "user.name=mallory", "-c", "user.email=m@example.invalid", "commit", "-q",
        "--no-verify", "-am", "promote")  # fmt: skip
    return clean, git(work, "rev-parse", "HEAD").strip()


def test_after_a_forged_commit_every_write_is_refused_and_the_remedy_loses_nothing(
    store: MemoryStore, git: Callable[..., str], tmp_path: Path
) -> None:
    key = tmp_path / "operator_key"
    honest = store.write("fact", "db", "Postgres 16 in prod.")
    clean, forged = forge(store, git)
    before = state(store)

    code, value = tool(store, key, "memory.train", {"body": "The release needs a preview URL.",
                       "source": {"eventId": "e-10", "revision": "1"}})  # fmt: skip
    assert code == 0 and value["status"] == "failed" and "entry" not in value, value
    assert forged[:12] in value["reason"] and "git reset --keep" in value["reason"]
    code, value = tool(store, key, "write_memory", {"kind": "fact", "key": "k", "body": "B."})
    assert value["error"]["code"] == "untrusted_history", value
    for args in (
        ("write", "--kind", "fact", "--key", "rota", "Ana is on call."),
        ("write", "--kind", "fact", "--key", "db", "Postgres 16 in prod."),  # already there
        ("demote", honest.id, "--reason", "x"),
    ):
        code, value, err = cli(store, key, *args, "--format", "json")
        assert code == 1 and value is not None, (args, value, err)
        assert value["error"]["code"] == "untrusted_history", (args, value)
        assert forged[:12] in value["error"]["message"]
    assert state(store) == before

    # The README's remedy: take the forged commit off the branch. Nothing was written on it,
    # so nothing is lost, and writing works again.
    git(store.git.workdir, "reset", "-q", "--keep", clean)
    code, value = tool(store, key, "memory.train", {"body": "The release needs a preview URL.",
                       "source": {"eventId": "e-10", "revision": "1"}})  # fmt: skip
    assert value["status"] == "accepted", value
    assert audit(store.git).ok


def test_train_over_http_after_a_forged_commit_fails_and_writes_nothing(
    store: MemoryStore, git: Callable[..., str], served: Callable[..., Served]
) -> None:
    server = served()  # its key (agent and trainer) is added before the forgery
    _, forged = forge(store, git)
    before = state(store)
    answer = server.train(
        "T-1", {"body": "A note.", "source": {"eventId": "ci:1", "revision": "1"}, "layer": "team"}
    )
    assert answer.status == 200 and answer.body["status"] == "failed", answer.body
    assert forged[:12] in answer.body["reason"]
    assert state(store) == before


def test_serve_refuses_a_key_without_trainer(
    store: MemoryStore, agent_key: tuple[Ed25519Signer, Path], tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks.toml"
    tasks.write_text('[tasks.T-1]\nmember = "m-1"\n')
    tokens = tmp_path / "tokens.toml"
    tokens.write_text("")
    code, value, err = cli(
        store, agent_key[1], "serve", "--tasks", str(tasks), "--tokens", str(tokens),
        "--port", "0",
    )  # fmt: skip
    assert code == 1 and value is not None, (value, err)
    message = value["error"]["message"]
    assert "lacks the trainer role" in message and GRANT in message
