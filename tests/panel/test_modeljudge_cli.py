"""A model judge through the installed console script: configure it in truss.toml (an
operator-signed git commit, as a person would), write, verify, see the entry promoted by the
model's vote; a bad judge config is refused naming the file and the field. The provider is
the fake one, as its own process (``python -m examples.fake_provider``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import console

SCRIPT = Path(sys.executable).with_name("truss-files")
pytestmark = [
    pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed"),
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("anthropic") is None, reason="no anthropic SDK"
    ),
]

JUDGE = """
[panel.judges]
claude = {provider = "anthropic", model = "claude-test", max_retries = 0, timeout = 10}

[panel.reviewers]
decision = ["claude"]
"""


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    log = tmp_path / "provider.jsonl"
    argv = [sys.executable, "-m", "examples.fake_provider", "--port", "0"]
    argv += ["--fail-if", "mysql", "--log", str(log)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening on http://127.0.0.1:"), line
    try:
        yield line.split()[-1], log
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def run(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return console.run(
        [str(SCRIPT), *args], cwd=repo, capture_output=True, text=True, timeout=120, env=env
    )


def operator_commit(repo: Path, env: dict[str, str], message: str) -> None:
    key = run(repo, env, "keys", "list", "--format", "text").stdout.split("\t")[2].strip()
    subprocess.run(
        ["git", "-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"]
        + ["commit", "-qS", "-am", message],
        cwd=repo,
        check=True,
        env=env,
    )


def test_a_configured_model_judge_promotes_through_the_console_script(
    tmp_path: Path, provider: tuple[str, Path]
) -> None:
    url, log = provider
    env = dict(os.environ, ANTHROPIC_API_KEY="sk-ant-fake", ANTHROPIC_BASE_URL=url)
    repo = tmp_path / "memory"
    assert run(tmp_path, env, "init", str(repo)).returncode == 0
    with open(repo / "truss.toml", "a", encoding="utf-8") as fh:
        fh.write(JUDGE)
    operator_commit(repo, env, "truss: a model judge for decisions")

    shown = run(repo, env, "config", "show")
    assert shown.returncode == 0, shown.stderr
    values = json.loads(shown.stdout)["values"]
    assert values["panel.judges.claude"] == {
        "value": {
            "provider": "anthropic",
            "model": "claude-test",
            "timeout": 10,
            "max_retries": 0,
        },
        "source": "truss.toml",
        "authority": "operator",
    }
    assert values["panel.reviewers.decision"]["value"] == ["claude"]

    ids = []
    for body in ("Use Postgres for the event store.", "Use MySQL for the event store."):
        wrote = run(repo, env, "write", "--kind", "decision", "--key", "db", body)
        assert wrote.returncode == 0, wrote.stderr
        ids.append(json.loads(wrote.stdout)["id"])
    done = run(repo, env, "verify", "--pending", "--format", "json")
    assert done.returncode == 0, done.stderr
    outcomes = {o["id"]: o for o in json.loads(done.stdout)["entries"]}
    assert outcomes[ids[0]]["status"] == "promoted"
    assert outcomes[ids[1]]["status"] == "rejected"
    assert outcomes[ids[0]]["votes"][0]["reviewer"] == "claude"

    hits = json.loads(run(repo, env, "query", "event store").stdout)["entries"]
    assert [h["id"] for h in hits] == [ids[0]]
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["path"] for r in sent] == ["/v1/messages", "/v1/messages"]
    entry = json.loads(run(repo, env, "show", ids[0], "--format", "json").stdout)
    assert entry["trust"] == "verified"
    # The entry file's front matter holds the signed verdict, with the model's evidence.
    front = (repo / entry["path"]).read_text()
    # The panel may judge the two pending entries in either order: find this entry's call.
    ((n, call),) = [(n, r) for n, r in enumerate(sent, 1) if "Postgres" in json.dumps(r["body"])]
    for needed in (call["sha256"], call["answer_sha256"], f"msg_fake_{n:04d}", "claude-test"):
        assert needed in front
    audited = run(repo, env, "audit")
    assert audited.returncode == 0, audited.stdout


def test_a_bad_judge_config_is_refused_naming_file_and_field(
    tmp_path: Path, provider: tuple[str, Path]
) -> None:
    url, log = provider
    env = dict(os.environ, ANTHROPIC_API_KEY="sk-ant-fake", ANTHROPIC_BASE_URL=url)
    repo = tmp_path / "memory"
    assert run(tmp_path, env, "init", str(repo)).returncode == 0
    with open(repo / "truss.toml", "a", encoding="utf-8") as fh:
        fh.write(JUDGE.replace('"anthropic"', '"gemini"'))
    operator_commit(repo, env, "truss: a judge of an unknown provider")
    wrote = run(repo, env, "write", "--kind", "decision", "--key", "db", "Use Postgres.")
    done = run(repo, env, "verify", "--pending", "--format", "json")
    assert done.returncode == 1
    error = json.loads(done.stdout or done.stderr)["error"]
    assert error["message"].startswith("truss.toml: panel.judges.claude.provider is 'gemini'")
    assert "anthropic, openai" in error["message"]
    assert not log.exists()  # nothing was asked
    # The write is refused too, before anything is committed: the same message.
    assert wrote.returncode == 1
    assert json.loads(wrote.stdout)["error"]["message"] == error["message"]
    listed = subprocess.run(
        ["git", "ls-files", "memories"], cwd=repo, capture_output=True, text=True, check=True
    )
    assert listed.stdout == ""
