"""Layered configuration: default → global → truss.toml → [agents.NAME] → contract."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from truss_files.config.settings import (
    ReviewerSpec,
    global_config_path,
    load_settings,
    read_layer,
)
from truss_files.errors import ConfigError

STORE = {
    "roles": {"operator": ["op"]},
    "tools": {"memory": True},
    "policy": {"verification": "tiered", "allow_tools": ["memory_query"]},  # allow_tools: not ours
    "recall": {"mode": "exact", "embedder": "wordllama"},
    "memory": {"scope": "shared"},
    "agents": {
        "build-bot": {"panel": {"quorum": "majority"}, "policy": {"tiered": {"scratch": "off"}}}
    },
}


@pytest.fixture
def global_file() -> Path:
    path = global_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_defaults_when_nothing_is_configured() -> None:
    s = load_settings(None)
    assert (s.verification, s.conflict, s.recall_mode, s.memory_scope) == (
        "lazy",
        "verified-wins",
        "exact",
        "per-agent",
    )
    assert s.quorum.describe() == "unanimous" and s.timeout == 600 and s.entry_checks
    assert s.source("policy.verification") == "default"
    assert s.reviewers_for("fact") == () and s.layers == ()


def test_later_layers_override_earlier_ones_and_remember_where(
    global_file: Path, tmp_path: Path
) -> None:
    global_file.write_text(
        '[policy]\nverification = "eager"\nconflict = "latest-wins"\n'
        '[panel]\nquorum = 2\ntimeout = 30\n[memory]\nscope = "shared"\n'
    )
    contract = tmp_path / "contract.toml"
    contract.write_text('[policy]\nconflict = "keep-both-flagged"\n[memory]\nscope = "shared"\n')
    s = load_settings(STORE, agent="build-bot", contract=contract)
    assert s.layers == (
        "truss.toml",
        str(global_file),
        "truss.toml [agents.build-bot]",
        str(contract),
    )
    expect = {
        "policy.verification": ("eager", str(global_file)),  # the user's file beats the store
        "policy.conflict": ("keep-both-flagged", str(contract)),
        "panel.quorum": ("majority", "truss.toml [agents.build-bot]"),
        "panel.timeout": (30, str(global_file)),
        "memory.scope": ("shared", str(contract)),
        "recall.mode": ("exact", "truss.toml"),
        "policy.tiered.scratch": ("off", "truss.toml [agents.build-bot]"),
        "panel.entry_checks": (True, "default"),
    }
    for key, (value, source) in expect.items():
        assert (s.get(key), s.source(key)) == (value, source), key
    assert s.mode_for("scratch") == "eager"  # tiers apply only when verification is tiered
    no_global = load_settings(STORE, agent="build-bot", global_path=tmp_path / "absent.toml")
    assert no_global.verification == "tiered" and no_global.mode_for("scratch") == "off"
    shown = s.to_dict()["values"]
    assert shown["policy.conflict"] == {
        "value": "keep-both-flagged",
        "source": str(contract),
        "authority": "tighten",
    }
    assert shown["recall.mode"]["authority"] == "free"
    assert shown["panel.workdir"]["authority"] == "operator"
    text = s.to_text()
    assert 'policy.conflict = "keep-both-flagged"' in text and f"tighten   {contract}" in text


STORE_REVIEWERS = {
    "panel": {
        "reviewers": {
            "decision": ["decide"],
            "fact": [{"type": "check", "command": "make test", "timeout": 5}],
        },
        "checks": {"decide": "./verify-decision", "smoke": "true"},
    }
}


def test_reviewers_and_tiers_override_per_kind(global_file: Path, tmp_path: Path) -> None:
    # Reviewers with their commands come from truss.toml; the layers above name them, and
    # may add to a kind's list, never drop from it.
    global_file.write_text(
        '[panel.reviewers]\ndefault = ["smoke"]\n'
        '[policy]\nverification = "tiered"\n[policy.tiered]\ndecisions = "eager"\nfact = "off"\n'
    )
    contract = tmp_path / "c.toml"
    contract.write_text(
        '[panel.reviewers]\ndecision = ["decide", "smoke"]\n[policy.tiered]\nfact = "lazy"\n'
    )
    s = load_settings(STORE_REVIEWERS, contract=contract)
    decide = ReviewerSpec("check", "./verify-decision", "decide")
    smoke = ReviewerSpec("check", "true", name="smoke")
    assert s.reviewers_for("decision") == (decide, smoke)
    assert s.panel_for("decision") == ((decide,), (smoke,))  # truss.toml's; the one added
    assert s.reviewers_source("decision") == str(contract)
    assert s.reviewers_for("fact") == (ReviewerSpec("check", "make test", timeout=5),)
    assert s.reviewers_for("lesson") == (smoke,)
    assert s.panel_for("lesson") == ((), (smoke,))
    assert s.mode_for("decision") == "eager"  # "decisions" names the kind decision
    assert s.mode_for("fact") == "lazy" and s.source("policy.tiered.fact") == str(contract)
    assert s.policy.label("decision") == "tiered:eager"
    contract.write_text('[panel.reviewers]\ndecision = ["smoke"]\n')
    with pytest.raises(ConfigError, match=r"panel.reviewers.decision .* keep decide, beside"):
        load_settings(STORE_REVIEWERS, contract=contract)
    agent = load_settings(
        {**STORE_REVIEWERS, "agents": {"ci": {"panel": {"reviewers": {"lesson": [
            {"type": "check", "command": "make lint"}]}}}}},
        agent="ci",
        environ={},
        global_path=tmp_path / "none",
    )  # fmt: skip
    assert agent.reviewers_for("lesson") == (ReviewerSpec("check", "make lint"),)


@pytest.mark.parametrize("layer", ["global", "contract"])
@pytest.mark.parametrize("kind", ["check", "judge"])
@pytest.mark.parametrize("where", ["reviewers", "arbiters"])
def test_a_reviewer_that_runs_a_command_is_refused_outside_truss_toml(
    tmp_path: Path, layer: str, kind: str, where: str
) -> None:
    """Whoever can write the user config or a contract (an agent on the same machine) must
    not choose what runs as the panel when the operator verifies."""
    spec = f'[{{type = "{kind}", command = "touch {tmp_path}/ran"}}]'
    text = f"[panel]\narbiters = {spec}\n" if where == "arbiters" else (
        f"[panel.reviewers]\nfact = {spec}\n"
    )  # fmt: skip
    planted = tmp_path / "planted.toml"
    planted.write_text(text)
    kwargs: dict[str, Any] = (
        {"global_path": planted} if layer == "global" else {"contract": planted}
    )
    kwargs.setdefault("global_path", tmp_path / "none")
    with pytest.raises(ConfigError) as err:
        load_settings(STORE_REVIEWERS, environ={}, **kwargs)
    message = err.value.message
    assert message.startswith(f"{planted}: ") and "truss.toml" in message
    if where == "arbiters":  # the arbiters are the operator's, named or written out
        assert "panel.arbiters has authority operator" in message
    else:
        assert "runs a command" in message and "decide, smoke" in message
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[policy]\nverfication = "eager"\n', "policy.verfication"),
        ('[policy]\nverification = "sometimes"\n', "policy.verification"),
        ('[policy]\nconflict = "newest"\n', "policy.conflict"),
        ('[panel]\nquorum = "most"\n', "panel.quorum"),
        ("[panel]\nquorum = true\n", "panel.quorum"),
        ('[panel]\ntimeout = "10"\n', "panel.timeout"),
        ("[panel]\ntimeout = 0\n", "panel.timeout"),
        ('[panel]\nentry_checks = "yes"\n', "panel.entry_checks"),
        ('[panel.reviewers]\ndecision = "llm"\n', "panel.reviewers.decision"),
        ('[panel.reviewers]\ndecision = [{command = "x"}]\n', "panel.reviewers.decision[0]"),
        (
            '[panel.reviewers]\ndecision = [{type = "judge", command = "x", model = "y"}]\n',
            "panel.reviewers.decision[0].model",
        ),
        (
            '[panel.reviewers]\ndecision = [{type = "human", command = "x"}]\n',
            "panel.reviewers.decision[0].type",
        ),
        ('[panel.reviewers]\nmemes = [{type = "check", command = "x"}]\n', "panel.reviewers.memes"),
        ('[policy.tiered]\ndecision = "tiered"\n', "policy.tiered.decision"),
        ('[policy]\ntiered = "eager"\n', "policy.tiered"),
        ('[recall]\nmode = "fuzzy"\n', "recall.mode"),
        ('[memory]\nscope = "global"\n', "memory.scope"),
        ('[roles]\noperator = ["me"]\n', "[roles] has authority operator"),
        ("[tools]\nmemory = true\n", "[tools] has authority operator"),
        ("[agents.x.panel]\nquorum = 1\n", "[agents] has authority operator"),
        ('[policy]\nprovenance = "optional"\n', "policy.provenance has authority operator"),
        ('policy = "off"\n', "policy"),
    ],
)
def test_an_unknown_key_or_wrong_type_names_the_file_and_key(
    tmp_path: Path, global_file: Path, text: str, key: str
) -> None:
    contract = tmp_path / "contract.toml"
    contract.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(None, contract=contract)
    assert str(contract) in caught.value.message and key in caught.value.message
    # The same file as the global layer is named as that file.
    global_file.write_text(text)
    with pytest.raises(ConfigError) as again:
        load_settings(None)
    assert str(global_file) in again.value.message and key in again.value.message


def test_truss_toml_tolerates_other_readers_keys_but_not_unknown_panel_keys() -> None:
    s = load_settings(STORE)  # allow_tools, embedder, [roles], [tools], [agents]: not ours
    assert s.verification == "tiered"
    with pytest.raises(ConfigError, match=r"truss.toml: panel.quorom is not a known setting"):
        load_settings({"panel": {"quorom": 2}})
    with pytest.raises(ConfigError, match=r"truss.toml: policy.verification"):
        load_settings({"policy": {"verification": 3}})


def test_panel_checks_come_from_truss_toml_alone_and_show_with_their_source(
    tmp_path: Path, global_file: Path
) -> None:
    s = load_settings({"panel": {"checks": {"tests": "make test", "lint": "ruff check"}}})
    assert s.checks == {"tests": "make test", "lint": "ruff check"}
    assert s.source("panel.checks.tests") == "truss.toml"
    assert 'panel.checks.tests = "make test"' in s.to_text()
    for bad, words in (
        ({"x y": "true"}, "is not a check name"),
        ({"tests": ""}, "non-empty command"),
        ({"tests": ["make"]}, "non-empty command"),
        ("make test", "must be a table"),
    ):
        with pytest.raises(ConfigError, match=words):
            load_settings({"panel": {"checks": bad}})
    table = '[panel.checks]\ntests = "true"\n'
    contract = tmp_path / "contract.toml"
    contract.write_text(table)
    with pytest.raises(ConfigError, match=f"{contract}: .* signed truss.toml only"):
        load_settings(None, contract=contract)
    with pytest.raises(ConfigError, match=r"truss.toml \[agents.bot\]: .* truss.toml only"):
        load_settings({"agents": {"bot": {"panel": {"checks": {"t": "true"}}}}}, agent="bot")
    global_file.write_text(table)
    with pytest.raises(ConfigError, match=f"{global_file}: .* signed truss.toml only"):
        load_settings(None)


def test_agent_tables_are_strict_and_must_exist() -> None:
    bad = {"agents": {"bot": {"policy": {"verify": "eager"}}}}
    with pytest.raises(ConfigError, match=r"truss.toml \[agents.bot\]: policy.verify"):
        load_settings(bad, agent="bot")
    with pytest.raises(ConfigError, match=r"no \[agents.other\] table \(known agents: build-bot"):
        load_settings(STORE, agent="other")


def test_bad_toml_and_missing_contract_name_the_file(tmp_path: Path, global_file: Path) -> None:
    with pytest.raises(ConfigError, match="contract file .*nope.toml does not exist"):
        load_settings(None, contract=tmp_path / "nope.toml")
    global_file.write_text("[policy\n")
    with pytest.raises(ConfigError, match=f"{global_file}: not valid TOML"):
        load_settings(None)


def test_agent_and_contract_come_from_the_environment(tmp_path: Path) -> None:
    contract = tmp_path / "c.toml"
    contract.write_text('[memory]\nscope = "per-project"\n')
    env = dict(os.environ, TRUSS_AGENT="build-bot", TRUSS_CONTRACT=str(contract))
    s = load_settings(STORE, environ=env)
    assert (s.agent, s.memory_scope, s.quorum.describe()) == (
        "build-bot",
        "per-project",
        "majority",
    )


def test_workdir_comes_from_truss_toml_relative_to_the_work_tree(tmp_path: Path) -> None:
    contract = tmp_path / "ci" / "contract.toml"
    contract.parent.mkdir()
    contract.write_text('[panel]\nworkdir = "../src"\n')
    with pytest.raises(ConfigError, match=r"contract.toml: panel.workdir has authority operator"):
        load_settings(None, contract=contract)
    s = load_settings({"panel": {"workdir": "app"}})
    assert s.workdir(tmp_path) == tmp_path / "app"
    with pytest.raises(ConfigError, match="bare"):
        s.workdir(None)


def test_read_layer_lenient_mode_still_checks_types() -> None:
    assert read_layer({"policy": {"identity": "propose"}}, "truss.toml", strict=False) == {}
    with pytest.raises(ConfigError, match="identity"):
        read_layer({"policy": {"identity": "propose"}}, "contract.toml")


def test_the_docs_name_every_key_under_its_declared_authority() -> None:
    """The authority tables of the docs pages are the schema's, key by key (settings.SETTINGS):
    the panel page's, and the rows a page adds for its own keys (docs/hosts.md: learn)."""
    from truss_files.config.settings import SETTINGS

    rows: dict[str, str] = {}
    for page in sorted((Path(__file__).parents[2] / "docs").rglob("*.md")):
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith(("| `operator`", "| `tighten`", "| `free`")):
                authority = line.split("`")[1]
                rows[authority] = rows.get(authority, "") + line
    assert set(rows) == {"operator", "tighten", "free"}
    for key, declared in SETTINGS.items():
        forms = {
            key,
            key.replace(".*", ".<kind>"),
            key.replace(".*", ".<name>"),
            f"[{key}]",
            f"[{key}.NAME]",
            f"{key.split('.')[0]}.*",
        }
        row = rows[declared.authority]
        assert any(f"`{form}`" in row for form in forms), (key, declared.authority)
        others = [r for a, r in rows.items() if a != declared.authority]
        assert not any(f"`{form}`" in r for form in forms for r in others), key
