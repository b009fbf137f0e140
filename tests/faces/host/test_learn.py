"""Learning from a transcript: what is sent to the model (never a memory read's answer,
never <private> text), what is stored (unverified notes naming their message, through the
one write path), and what learning the same transcript twice stores (nothing)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from examples.fake_provider import FakeProvider
from tests.support.credentials import CREDENTIALS
from tests.support.host_support import Transcript
from tests.support.model_judges import add_to_config, with_env
from truss_files.config.settings import load_settings, settings_for
from truss_files.errors import ConfigError, NotConfigured
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.faces.host.learn import learn
from truss_files.faces.host.transcript import read_transcript
from truss_files.model import Trust

LEARN = '\n[learn]\nprovider = "{provider}"\nmodel = "learn-test"\n'


@pytest.fixture(name="fake")
def fake_fixture() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


def _env(fake: FakeProvider) -> dict[str, str]:
    return {
        "ANTHROPIC_API_KEY": "sk-ant-fake",
        "ANTHROPIC_BASE_URL": fake.url,
        "OPENAI_API_KEY": "sk-fake",
        "OPENAI_BASE_URL": fake.url + "/v1",
    }


def _session(tmp_path: Path) -> tuple[Transcript, dict[str, int]]:
    t = Transcript(tmp_path / "s.jsonl", "sess-1", tmp_path)
    lines = {"ask": t.user("Why does deploy fail?")}
    t.system("Caveat: meta line.\nLesson: never learn a meta line.")
    t.assistant(
        "Checking memory.",
        [
            {"id": "tu_q", "name": "mcp__truss-files__memory_query", "input": {"query": "deploy"}},
            {"id": "tu_m", "name": "memory", "input": {"command": "view", "path": "/memories"}},
            {"id": "tu_b", "name": "Bash", "input": {"command": "make deploy"}},
        ],
    )
    t.tool_result("tu_q", "Fact: deploys need VPN (memory said so).")
    t.tool_result("tu_m", "Lesson: a view's answer is memory too.")
    t.tool_result("tu_b", "error: no route to host")
    lines["decision"] = t.assistant(
        "Decision: deploy from the CI runner, not laptops, since only it reaches the VPC."
    )
    lines["private"] = t.user(
        "<private>Fact: my password is hunter2</private>\nFact: staging lives in eu-west-1."
    )
    return t, lines


def _learn(store: MemoryStore, transcript: Path, state: Path) -> object:
    return learn(store, read_transcript(transcript), settings=settings_for(store), state=state)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_learn_stores_what_the_run_established_and_nothing_memory_said(
    store: MemoryStore, tmp_path: Path, fake: FakeProvider, provider: str
) -> None:
    add_to_config(store, LEARN.format(provider=provider))
    store = with_env(store, _env(fake))
    t, lines = _session(tmp_path)
    done = _learn(store, t.path, tmp_path / "state")
    notes = {n["key"]: n for n in done.to_dict()["notes"]}  # type: ignore[attr-defined]
    assert set(notes) == {
        "deploy-from-the-ci-runner",
        "staging-lives-in-eu-west",
    }, notes
    assert notes["deploy-from-the-ci-runner"]["produced_by"] == f"run:cc-sess-1/{lines['decision']}"
    assert notes["staging-lives-in-eu-west"]["produced_by"] == f"run:cc-sess-1/{lines['private']}"
    assert all(n["trust"] == "unverified" and n["new"] for n in notes.values())
    sent = json.dumps(fake.requests[-1]["body"])
    for never in ("VPN", "view's answer", "hunter2", "meta line"):
        assert never not in sent
    assert "no route to host" in sent  # other tools' results are part of the run
    stored = store.list_entries(trust=Trust.UNVERIFIED)
    assert {e.kind.value for e in stored} == {"decision", "fact"}


def test_learning_twice_stores_nothing_new_even_without_the_mark(
    store: MemoryStore, tmp_path: Path, fake: FakeProvider
) -> None:
    add_to_config(store, LEARN.format(provider="anthropic"))
    store = with_env(store, _env(fake))
    t, _lines = _session(tmp_path)
    first = _learn(store, t.path, tmp_path / "state")
    count = len(store.list_entries())
    tip = store.snapshot().oid
    asked = len(fake.requests)
    again = _learn(store, t.path, tmp_path / "state")
    assert again.to_dict()["sent"] == 0 and len(fake.requests) == asked  # type: ignore[attr-defined]
    lost = _learn(store, t.path, tmp_path / "other-state")  # the mark lost: asked again
    assert len(fake.requests) == asked + 1
    assert lost.to_dict()["stored"] == 0  # type: ignore[attr-defined]
    assert len(store.list_entries()) == count and store.snapshot().oid == tip
    assert first.to_dict()["stored"] == 2  # type: ignore[attr-defined]

    # The session goes on: only what is new is sent.
    t.assistant("Fact: the VPC peering was renewed today.")
    more = _learn(store, t.path, tmp_path / "state")
    body = json.dumps(fake.requests[-1]["body"])
    assert "peering" in body and "staging lives" not in body
    assert more.to_dict()["stored"] == 1  # type: ignore[attr-defined]


def test_a_note_naming_no_message_sent_is_dropped(
    store: MemoryStore, tmp_path: Path, fake: FakeProvider
) -> None:
    add_to_config(store, LEARN.format(provider="anthropic"))
    store = with_env(store, _env(fake))
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"role": "user", "content": "The sky is blue today."}]))
    fake.notes = [
        {"kind": "fact", "key": "Sky Colour", "body": "The sky is blue.", "message": 1},
        {"kind": "fact", "key": "made-up", "body": "Invented.", "message": 99},
        {"kind": "goal", "key": "g", "body": "Not a kind learn writes.", "message": 1},
    ]
    done = learn(store, read_transcript(path, "messages"), settings=settings_for(store))
    assert [n["key"] for n in done.notes] == ["sky-colour"]
    assert done.notes[0]["produced_by"] == f"run:{done.run}/1" and done.run.startswith("t-")
    assert done.dropped == ["fact/made-up: names message 99, not one sent"]


def test_without_a_model_learn_exits_1_says_how_and_stores_nothing(
    store: MemoryStore, tmp_path: Path
) -> None:
    t, _lines = _session(tmp_path)
    tip = store.snapshot().oid
    with pytest.raises(NotConfigured, match=r"\[learn\]"):
        _learn(store, t.path, tmp_path / "state")
    result = CliRunner().invoke(
        cli,
        [
            "--store",
            str(store.git.workdir),
            "--key",
            str(tmp_path / "operator_key"),
            "learn",
            "--transcript",
            str(t.path),
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 1
    error = json.loads(result.output)["error"]
    assert error["code"] == "config" and 'provider = "anthropic"' in error["message"]
    assert store.snapshot().oid == tip and not (tmp_path / "state").exists()


def test_learn_through_the_cli_with_the_messages_format(
    store: MemoryStore, tmp_path: Path, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_to_config(store, LEARN.format(provider="anthropic"))
    for name, value in _env(fake).items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "run.json"
    messages = [
        {"role": "user", "content": "Set up the cache."},
        {"role": "assistant", "content": [{"type": "text", "text": "Decision: use Redis 7."}]},
    ]
    path.write_text(json.dumps({"messages": messages}))
    args = ["--store", str(store.git.workdir), "--key", str(tmp_path / "operator_key"), "learn"]
    args += ["--transcript", str(path), "--format", "messages", "--run", "R-7"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    learned = json.loads(result.output)
    assert [(n["kind"], n["key"], n["produced_by"]) for n in learned["notes"]] == [
        ("decision", "use-redis-7", "run:R-7/2")
    ]
    args[-4] = "--transcript-format"  # with the output's --format beside it
    again = CliRunner().invoke(cli, [*args, "--format", "text"])
    assert "0 messages sent, 2 learned before" in again.output, again.output


def test_learn_instructions_are_the_operators(tmp_path: Path) -> None:
    user = tmp_path / "config.toml"
    user.write_text('[learn]\nprovider = "openai"\nmodel = "m"\ninstructions = "Keep it all."\n')
    with pytest.raises(ConfigError, match="learn.instructions has authority operator"):
        load_settings({}, global_path=user, environ={})
    user.write_text('[learn]\nprovider = "openai"\nmodel = "m"\n')
    settings = load_settings({}, global_path=user, environ={})
    assert settings.get("learn.provider") == "openai" and settings.source("learn.model") == str(
        user
    )
    user.write_text('[learn]\nprovider = "gemini"\n')
    with pytest.raises(ConfigError, match="anthropic, openai"):
        load_settings({}, global_path=user, environ={})
    assert os.environ.get("TRUSS_STATE_DIR") is None


def test_learn_for_an_agent_shows_its_notes_to_the_agents_next_session(
    store: MemoryStore, tmp_path: Path, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from truss_files.faces.host.hookrun import PENDING_HEAD, run_host_hook

    add_to_config(store, LEARN.format(provider="anthropic"))
    for name, value in {**_env(fake), "TRUSS_KEY": str(tmp_path / "operator_key")}.items():
        monkeypatch.setenv(name, value)
    t, _lines = _session(tmp_path)
    base = ["--store", str(store.git.workdir), "learn", "--transcript", str(t.path)]
    result = CliRunner().invoke(cli, [*base, "--agent", "agent-app-1", "--format", "json"])
    assert result.exit_code == 0, result.output
    out = io.StringIO()
    start = json.dumps({"session_id": "next", "source": "startup"}).encode()
    run_host_hook(
        "session-start",
        ["--agent", "agent-app-1"],
        store_path=str(store.git.workdir),
        stdin=io.BytesIO(start),
        stdout=out,
        environ=os.environ,
    )
    text = json.loads(out.getvalue())["hookSpecificOutput"]["additionalContext"]
    assert PENDING_HEAD in text and "staging lives in eu-west-1" in text
    other = CliRunner().invoke(cli, [*base, "--agent", "agent-other", "--format", "json"])
    assert other.exit_code == 1 and "already a child of agent-app-1" in other.output


def test_a_credential_in_what_is_learned_is_masked_not_stored(
    store: MemoryStore, tmp_path: Path, fake: FakeProvider
) -> None:
    """Learning is unattended: the lesson is kept with the value replaced by its kind, and
    the value reaches no blob of the repository."""
    token = CREDENTIALS["github-token"]
    add_to_config(store, LEARN.format(provider="anthropic"))
    store = with_env(store, _env(fake))
    t = Transcript(tmp_path / "s.jsonl", "sess-9", tmp_path)
    t.user("Deploy with the bot account.")
    t.assistant(f"Fact: the deploy bot authenticates with {token} from the vault.")
    done = _learn(store, t.path, tmp_path / "state")
    (note,) = done.to_dict()["notes"]  # type: ignore[attr-defined]
    entry = store.get(note["id"])
    assert "[secret:github-token]" in entry.body and token not in entry.body
    assert entry.provenance.masked == ("github-token",)
    repo = store.git.repo
    assert not any(token.encode() in repo[oid].read_raw() for oid in repo.odb)
