"""Per-provider instructions (context/instruction.py): the most specific one applies."""

from __future__ import annotations

import json
import tomllib

import pytest
from click.testing import CliRunner

from tests.context.test_context import add_config, set_file
from truss_files.config.settings import load_settings
from truss_files.context.instruction import pick
from truss_files.errors import ConfigError
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli

TABLE = {
    "default": "D",
    "anthropic": "A",
    "openai": "O",
    "claude-*": "C",
    "claude-opus-*": "CO",
    "gpt-4o": "G",
}
CONFIG = """[context.instruction]
default = "Memory: default note."
anthropic = "Memory: for Anthropic models."
openai = "Memory: for OpenAI models."
"claude-*" = "Memory: for Claude."
"claude-opus-*" = "Memory: for Claude Opus."
"""


@pytest.mark.parametrize(
    ("provider", "model", "want"),
    [
        (None, None, "default"),
        ("anthropic", None, "anthropic"),
        ("openai", None, "openai"),
        ("anthropic", "claude-sonnet-4-5", "claude-*"),
        ("anthropic", "claude-opus-4-1", "claude-opus-*"),
        (None, "claude-opus-4-1", "claude-opus-*"),
        ("openai", "gpt-4o", "gpt-4o"),
        ("openai", "gpt-4o-mini", "openai"),
        ("anthropic", "mistral", "anthropic"),
    ],
)
def test_the_most_specific_instruction_applies(
    provider: str | None, model: str | None, want: str
) -> None:
    found = pick(TABLE, provider, model)
    assert found is not None and found == (want, TABLE[want])


def test_an_exact_name_beats_a_pattern_and_nothing_configured_is_none() -> None:
    assert pick({"gpt-*": "P", "gpt-4o": "E", "g*": "W"}, None, "gpt-4o") == ("gpt-4o", "E")
    assert pick({"openai": "O"}, "anthropic", "claude-x") is None
    assert pick({}, "openai", "gpt-4o") is None


def memory_note(data: dict) -> str:
    return next(x["text"] for x in data["system"] if x["layer"] == "memory")


def test_context_picks_per_format_and_model_and_keeps_it_for_the_run(
    store: MemoryStore,
) -> None:
    add_config(store, CONFIG)
    opus = store.context("R1", fmt="anthropic", model="claude-opus-4-1")
    assert opus.render("json")["instruction"] == "claude-opus-*"
    assert memory_note(opus.render("json")) == "Memory: for Claude Opus."
    assert any(b["text"] == "Memory: for Claude Opus." for b in opus.render("anthropic")["system"])
    gpt = store.context("R2", fmt="openai", model="gpt-4o")
    assert gpt.render("json")["instruction"] == "openai"
    assert "Memory: for OpenAI models." in gpt.render("openai")["messages"][0]["content"]
    plain = store.context("R3")
    assert plain.render("json")["instruction"] == "default"
    again = store.context("R1", fmt="anthropic", model="claude-opus-4-1")
    assert again.stable_bytes("anthropic") == opus.stable_bytes("anthropic")


def test_a_started_run_keeps_its_instruction_when_the_table_changes(store: MemoryStore) -> None:
    add_config(store, '[context.instruction]\nanthropic = "First."\n')
    first = store.context("R1", fmt="anthropic")
    text = (store.snapshot().read("truss.toml") or b"").decode()
    set_file(store, "truss.toml", text.replace('"First."', '"Second."'), op="config")
    assert store.context("R1", fmt="anthropic").stable_bytes() == first.stable_bytes()
    assert "Second." in memory_note(store.context("R2", fmt="anthropic").render("json"))


@pytest.mark.parametrize("bad", ['default = ""', "anthropic = 3", '"claude-*" = ["x"]'])
def test_a_bad_instruction_is_a_config_error_naming_the_key(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"context\.instruction\."):
        load_settings(tomllib.loads(f"[context.instruction]\n{bad}\n"))


def test_config_show_names_the_instruction_in_force(store: MemoryStore) -> None:
    add_config(store, CONFIG)
    runner = CliRunner()
    base = ["--store", str(store.git.workdir), "config", "show"]
    out = runner.invoke(
        cli, [*base, "--provider", "anthropic", "--model", "claude-opus-4", "--format", "json"]
    )
    assert out.exit_code == 0, out.output
    said = json.loads(out.output)["instruction"]
    assert said["applies"] == "claude-opus-*" and said["source"].startswith("truss.toml")
    text = runner.invoke(cli, [*base, "--provider", "openai", "--format", "text"])
    assert text.exit_code == 0 and "instruction in force: openai" in text.output
    plain = runner.invoke(cli, [*base, "--format", "json"])
    assert json.loads(plain.output)["instruction"]["applies"] == "default"
