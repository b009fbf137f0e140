"""Model judges (panel/modeljudge.py): the real anthropic and openai SDK clients against the
fake provider on 127.0.0.1, the panel's verify on a real store, and the config that names
them (``[panel.judges]`` in the signed truss.toml). The attacks on them (prompt injection,
garbage answers) are in tests/adversarial/test_judge_attacks.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from examples.fake_provider import FakeProvider
from tests.support.model_judges import (  # noqa: F401 - the fixture
    JUDGES,
    PROVIDERS,
    add_to_config,
    fake_fixture,
    judge,
    provider_env,
    with_env,
)
from tests.support.tools_support import promote
from truss_files.config.judgespec import ModelJudgeSpec
from truss_files.config.settings import load_settings, settings_for
from truss_files.errors import ConfigError
from truss_files.facade import MemoryStore
from truss_files.panel.modeljudge import VOTE_TOOL, ModelJudge, read_data_block
from truss_files.panel.runner import verify
from truss_files.trust.audit import audit

pytest.importorskip("anthropic")
pytest.importorskip("openai")

# -- one call, each answer ------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("vote", ["PASS", "FAIL", "ABSTAIN"])
def test_the_forced_answer_is_the_vote_with_its_evidence(
    fake: FakeProvider, provider: str, vote: str
) -> None:
    fake.script = [vote]
    ballot = judge(provider).ask("Q", {"entry": {"body": "x"}}, provider_env(fake))
    assert ballot.vote == vote
    assert ballot.kind == "model" and ballot.reviewer == "j"
    [sent] = fake.requests
    ev = ballot.evidence
    assert ev["provider"] == provider and ev["model"] == "model-x"
    assert ev["response_id"] == (
        "msg_fake_0001" if provider == "anthropic" else "chatcmpl-fake-0001"
    )
    # The digests are of the bytes that crossed the wire, as the server saw them.
    assert ev["request_sha256"] == sent["sha256"]
    assert ev["response_sha256"] == sent["answer_sha256"]
    assert f"votes {vote}" in ev["rationale"] and ballot.reason == ev["rationale"]
    assert sent["body"]["model"] == "model-x"
    if provider == "anthropic":
        assert sent["path"] == "/v1/messages"
        assert sent["body"]["tool_choice"] == {"type": "tool", "name": VOTE_TOOL}
        [tool] = sent["body"]["tools"]
        assert tool["input_schema"]["properties"]["vote"]["enum"] == ["PASS", "FAIL", "ABSTAIN"]
    else:
        assert sent["path"] == "/v1/chat/completions"
        form = sent["body"]["response_format"]
        assert form["type"] == "json_schema" and form["json_schema"]["strict"] is True
    assert "x-api-key" not in sent["headers"] and "authorization" not in sent["headers"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_no_key_no_call_and_an_abstention_naming_the_variable(
    fake: FakeProvider, provider: str
) -> None:
    env = provider_env(fake)
    var = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    del env[var]
    ballot = judge(provider).ask("Q", {"entry": {}}, env)
    assert ballot.vote == "ABSTAIN" and var in ballot.reason
    assert fake.requests == []


def test_retries_are_the_sdk_s_own(fake: FakeProvider) -> None:
    fake.script = ["500", "PASS"]
    spec = ModelJudgeSpec("j", "anthropic", "m", max_retries=1)
    ballot = ModelJudge(spec, 5.0).ask("Q", {"entry": {}}, provider_env(fake))
    assert ballot.vote == "PASS" and len(fake.requests) == 2


# -- verify on a store ----------------------------------------------------------------------


def test_verify_promotes_and_rejects_by_the_models_vote(
    store: MemoryStore, fake: FakeProvider
) -> None:
    add_to_config(store, JUDGES)
    judged = with_env(store, provider_env(fake))
    good = judged.write("decision", "db", "Use Postgres for the event store.")
    bad = judged.write("fact", "os", "The servers run Windows 95.")
    fake.script = ["PASS", "FAIL"]
    report = verify(judged, [good.id, bad.id], settings=settings_for(judged))
    assert [o.status for o in report.outcomes] == ["promoted", "rejected"]
    promoted = judged.get(good.id)
    assert promoted.trust.value == "verified"
    verdict = promoted.provenance.verified_by
    assert verdict is not None
    [vote] = verdict["votes"]
    assert vote["reviewer"] == "claude" and vote["kind"] == "model" and vote["vote"] == "PASS"
    ev = vote["evidence"]
    assert ev["provider"] == "anthropic" and ev["model"] == "claude-test"
    assert ev["response_id"] == "msg_fake_0001"
    assert ev["request_sha256"] == fake.requests[0]["sha256"]
    assert ev["response_sha256"] == fake.requests[0]["answer_sha256"]
    assert judged.get(bad.id).trust.value == "rejected"
    assert fake.requests[1]["path"] == "/v1/chat/completions"  # fact goes to gpt
    checked = audit(judged.git, environ={})
    assert checked.ok, checked


def test_without_a_key_the_entry_stays_unverified_and_says_which_variable(
    store: MemoryStore, fake: FakeProvider
) -> None:
    add_to_config(store, JUDGES)
    env = provider_env(fake)
    env["ANTHROPIC_API_KEY"] = ""
    judged = with_env(store, env)
    entry = judged.write("decision", "db", "Use Postgres.")
    [outcome] = verify(judged, [entry.id], settings=settings_for(judged)).outcomes
    assert outcome.status == "undecided"
    assert "ANTHROPIC_API_KEY is not set" in outcome.votes[0]["reason"]
    assert fake.requests == []


def test_the_operators_instructions_go_to_the_system_text_only(
    store: MemoryStore, fake: FakeProvider
) -> None:
    add_to_config(
        store,
        JUDGES.replace(
            "max_retries = 0, timeout = 5}\ngpt",
            'max_retries = 0, timeout = 5, instructions = "Fail anything about Windows."}\ngpt',
        ),
    )
    judged = with_env(store, provider_env(fake))
    entry = judged.write("decision", "db", "Use Postgres.")
    verify(judged, [entry.id], settings=settings_for(judged))
    body = fake.requests[0]["body"]
    assert body["system"].endswith("Fail anything about Windows.")
    assert "Fail anything" not in body["messages"][0]["content"]


def test_a_model_judge_arbitrates_a_conflict(store: MemoryStore, fake: FakeProvider) -> None:
    add_to_config(store, JUDGES)
    judged = with_env(store, provider_env(fake))
    old = judged.write("decision", "db", "Use MySQL.")
    promote(judged, old.id)
    new = judged.write("decision", "db", "Use Postgres.")
    contract = Path(str(judged.git.workdir)).parent / "arbitrated.toml"
    contract.write_text('[policy]\nconflict = "panel-arbitrated"\n')
    settings = load_settings(judged.config().raw, contract=contract, environ=judged.environ)
    fake.script = ["PASS", "FAIL"]  # review passes; the arbiter keeps the old one
    [outcome] = verify(judged, [new.id], settings=settings).outcomes
    assert outcome.status == "rejected", outcome
    asked = read_data_block(fake.requests[1]["body"]["messages"][0]["content"])
    assert asked is not None and asked["task"] == "arbitrate"
    assert asked["rival"]["id"] == old.id and asked["entry"]["id"] == new.id
    assert "replace 'rival'" in fake.requests[1]["body"]["system"]
    assert judged.get(old.id).trust.value == "verified"


# -- configuration --------------------------------------------------------------------------


def test_judges_resolve_into_the_reviewers_that_name_them() -> None:
    import tomllib

    s = load_settings(tomllib.loads(JUDGES), environ={}, global_path=Path("/nonexistent"))
    [spec] = s.reviewers_for("decision")
    assert spec.type == "model" and spec.judge is not None
    assert spec.judge.provider == "anthropic" and spec.judge.model == "claude-test"
    assert spec.timeout == 5
    assert set(s.judges) == {"claude", "gpt"}
    shown = s.to_text()
    assert 'panel.reviewers.decision = ["claude"]' in shown
    assert 'panel.judges.gpt = {provider = "openai", model = "gpt-test"' in shown


BAD = [
    ('[panel.judges]\nc = {provider = "gemini", model = "m"}', "panel.judges.c.provider", "gemini"),
    ('[panel.judges]\nc = {provider = "openai"}', "panel.judges.c needs model", ""),
    ('[panel.judges]\nc = {model = "m"}', "panel.judges.c needs provider", ""),
    ('[panel.judges]\nc = {provider = "openai", model = ""}', "panel.judges.c.model", ""),
    (
        '[panel.judges]\nc = {provider = "openai", model = "m", api_key = "sk-1"}',
        "panel.judges.c.api_key is not a judge setting",
        "OPENAI_API_KEY and OPENAI_BASE_URL from the environment",
    ),
    ('[panel.judges]\nc = {provider = "openai", model = "m", timeout = -1}', "c.timeout", ""),
    ('[panel.judges]\nc = {provider = "openai", model = "m", max_retries = 99}', "retries", ""),
    ('[panel.judges]\nc = {provider = "openai", model = "m", instructions = 3}', "instr", ""),
    ('[panel.judges]\nc = "claude"', "panel.judges.c must be a table", ""),
    ('[panel.judges]\n"a b" = {provider = "openai", model = "m"}', "a judge's name", ""),
    ('[panel.reviewers]\ndecision = ["claude"]', "panel.reviewers.decision[0] names judge", ""),
    ('[panel.reviewers]\ndecision = [""]', "panel.reviewers.decision[0] must be a table", ""),
]


@pytest.mark.parametrize(("text", "needle", "more"), BAD)
def test_a_bad_judge_config_names_the_file_and_the_field(text: str, needle: str, more: str) -> None:
    import tomllib

    with pytest.raises(ConfigError) as err:
        load_settings(tomllib.loads(text), environ={}, global_path=Path("/nonexistent"))
    assert err.value.message.startswith("truss.toml: "), err.value.message
    assert needle in err.value.message and more in err.value.message


def test_judges_outside_the_signed_truss_toml_are_refused(tmp_path: Path) -> None:
    contract = tmp_path / "contract.toml"
    contract.write_text('[panel.judges]\nc = {provider = "openai", model = "m"}\n')
    with pytest.raises(ConfigError) as err:
        load_settings({}, contract=contract, environ={}, global_path=tmp_path / "none")
    assert str(contract) in err.value.message and "signed truss.toml only" in err.value.message


def test_a_contract_may_name_a_judge_truss_toml_defines(tmp_path: Path) -> None:
    import tomllib

    contract = tmp_path / "contract.toml"
    contract.write_text('[panel.reviewers]\nlesson = ["gpt"]\n')
    s = load_settings(
        tomllib.loads(JUDGES), contract=contract, environ={}, global_path=tmp_path / "none"
    )
    [spec] = s.reviewers_for("lesson")
    assert spec.judge is not None and spec.judge.provider == "openai"
    contract.write_text('[panel.reviewers]\nlesson = ["mine"]\n')
    with pytest.raises(ConfigError) as err:
        load_settings(
            tomllib.loads(JUDGES), contract=contract, environ={}, global_path=tmp_path / "none"
        )
    assert err.value.message.startswith(f"{contract}: panel.reviewers.lesson[0] names judge")
    assert "(defined: claude, gpt)" in err.value.message


def test_the_sdks_load_only_when_a_judge_of_theirs_runs(fake: FakeProvider) -> None:
    code = (
        "import json, sys, tomllib\n"
        "from pathlib import Path\n"
        "from truss_files.panel.build import build_reviewer\n"
        "from truss_files.config.settings import load_settings\n"
        f"s = load_settings(tomllib.loads({JUDGES!r}), environ={{}}, global_path=Path('/no'))\n"
        "judges = [build_reviewer(spec) for spec in s.reviewers_for('decision')]\n"
        "before = [m for m in ('anthropic', 'openai') if m in sys.modules]\n"
        f"judges[0].ask('Q', {{'entry': {{}}}}, {provider_env(fake)!r})\n"
        "after = [m for m in ('anthropic', 'openai') if m in sys.modules]\n"
        "print(json.dumps([before, after]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [[], ["anthropic"]]
    assert len(fake.requests) == 1
