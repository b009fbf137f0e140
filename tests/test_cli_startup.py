"""Start-up of the ``truss-files`` command line: commands load lazily, and a plain ``query``
runs without click -- printing exactly what the click command prints, exiting the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from test_recall_support import mixed_store

from truss_files.faces import cli as cli_module
from truss_files.faces import cli_app
from truss_files.faces.query import FLOORS, MODES
from truss_files.model import Kind
from truss_files.recall.engine import RECALL_MODES
from gated import search
from truss_files.recall.pipeline import Filter
from truss_files.store import MemoryStore

SCRIPT = Path(sys.executable).parent / "truss-files"


def probe(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )


# --------------------------------------------------------------------------- lazy commands


def test_every_command_is_in_the_lazy_table() -> None:
    group = cli_app.cli
    assert isinstance(group, cli_app.LazyGroup)
    everything = set(group.commands)  # reading .commands imports every module
    assert set(cli_app.LAZY_COMMANDS) == everything - {"init", "keys"}
    # Each module defines exactly the commands the table sends to it.
    done = probe(
        "import importlib, json\n"
        "from truss_files.faces import cli_app\n"
        "seen = set(cli_app.cli._registered)\n"
        "found = {}\n"
        "for module in cli_app.COMMAND_MODULES:\n"
        "    importlib.import_module('truss_files.faces.' + module)\n"
        "    now = set(cli_app.cli._registered)\n"
        "    found.update(dict.fromkeys(now - seen, module))\n"
        "    seen = now\n"
        "print(json.dumps(found))\n"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == cli_app.LAZY_COMMANDS


def test_a_command_loads_only_its_module() -> None:
    shown = probe(
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from truss_files.faces.cli import cli\n"
        "result = CliRunner().invoke(cli, ['show', '--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "loaded = sorted(m.rsplit('.', 1)[1] for m in sys.modules\n"
        "                if m.startswith('truss_files.faces.cli_'))\n"
        "print(loaded)\n"
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "['cli_app', 'cli_read']"


def test_help_lists_every_command_with_its_short_help() -> None:
    result = CliRunner().invoke(cli_app.cli, ["--help"])
    assert result.exit_code == 0
    for name, command in cli_app.cli.commands.items():
        assert f"  {name} " in result.output
        assert command.get_short_help_str(limit=200)[:12] in result.output


def test_an_unknown_command_is_still_a_usage_error() -> None:
    result = CliRunner().invoke(cli_app.cli, ["qeury", "x"])
    assert result.exit_code == 2 and "No such command 'qeury'" in result.output


# --------------------------------------------------------------------------- the plain query


def test_the_console_module_imports_nothing_heavy() -> None:
    """Not click, not the model (dataclasses), not even typing: `main` pauses the garbage
    collector before any of that loads."""
    done = probe(
        "import sys, json, truss_files.faces.cli\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('truss_files')\n"
        "                        or m in ('click', 'typing', 'dataclasses'))))\n"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["truss_files", "truss_files.faces", "truss_files.faces.cli"]


def test_the_package_names_load_on_first_use() -> None:
    done = probe(
        "import sys, truss_files\n"
        "assert 'truss_files.model' not in sys.modules\n"
        "from truss_files import Entry, UsageError\n"
        "import truss_files.model as model\n"
        "assert Entry is model.Entry and truss_files.Entry is Entry\n"
        "assert 'truss_files.store' not in sys.modules\n"
        "print(truss_files.MemoryStore.__module__)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "truss_files.store"


def test_a_plain_query_imports_neither_click_nor_the_command_modules(
    store: MemoryStore,
) -> None:
    mixed_store(store)
    done = probe(
        "import sys, json\n"
        "from truss_files.faces.cli import main\n"
        "sys.argv = ['truss-files', '--store', sys.argv[1], 'query', 'flaky network']\n"
        "main()\n"
        "loaded = [m for m in sys.modules if m == 'click' or m.startswith('click.')\n"
        "          or m.startswith('truss_files.faces.cli_')]\n"
        "print(json.dumps(loaded), file=sys.stderr)\n",
        str(store.git.workdir),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["entries"]
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []


# Kept off a plain query (text or JSON, every floor): the tool dispatcher, run context and
# registry (threading, seven dataclasses), truss.toml's own reader and parser, memory scopes
# (only with --agent/--project/--scope), salience policies (only when the store names one),
# the settings layers (only when one is in play) and the store. Each one loaded for nothing
# costs the cold query milliseconds.
OFF_THE_QUERY_PATH = (
    "truss_files.tools.dispatch",
    "truss_files.tools.context",
    "truss_files.tools.registry",
    "truss_files.tools.tipconfig",
    "truss_files.scope",
    "truss_files.recall.salience",
    "truss_files.settings",
    "truss_files.store",
    "truss_files.gitstore",
    "truss_files.config",
    "tomllib",
    "threading",
)


@pytest.mark.parametrize(
    "args",
    [
        ["flaky network"],
        ["flaky network", "--format", "text"],
        ["no such words anywhere", "--min-trust", "unverified"],
        ["flaky", "--kind", "lesson", "--layer", "team", "--mode", "exact"],
    ],
    ids=" ".join,
)
def test_a_plain_query_keeps_the_tools_scopes_and_settings_off_its_path(
    store: MemoryStore, args: list[str]
) -> None:
    mixed_store(store)
    search(store.git.workdir, "warm", Filter())  # the index is current, as for any later query
    done = probe(
        "import sys, json\n"
        "from truss_files.faces.cli import main\n"
        "sys.argv = ['truss-files', '--store', sys.argv[1], 'query', *sys.argv[2:]]\n"
        "try:\n    main()\n"
        "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
        f"print(json.dumps([m for m in {OFF_THE_QUERY_PATH!r} if m in sys.modules]),"
        " file=sys.stderr)\n",
        str(store.git.workdir),
        *args,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()  # it answered
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []


def test_the_layers_and_scopes_still_load_when_a_query_uses_them(
    store: MemoryStore, tmp_path: Path
) -> None:
    """The other side of the list above: with a user config file or --agent, the modules come
    back, and the answer honours them (the config's recall mode; the agent's scope)."""
    mixed_store(store)
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "config.toml").write_text('[recall]\nmode = "hybrid"\n', encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, json\n"
            "from truss_files.faces.cli import main\n"
            "sys.argv = ['truss-files', '--store', sys.argv[1], 'query', 'flaky', "
            "'--agent', 'a1']\n"
            "main()\n"
            "print(json.dumps([m for m in ('truss_files.scope', 'truss_files.settings', "
            "'tomllib') if m in sys.modules]), file=sys.stderr)\n",
            str(store.git.workdir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TRUSS_CONFIG_DIR": str(config_dir)},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["recall_mode"] == "hybrid"
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert loaded == ["truss_files.scope", "truss_files.settings", "tomllib"]


def test_the_fast_path_accepts_what_the_click_command_accepts() -> None:
    """Its option table is the click group's and the `query` command's, choice for choice."""
    group = {p.opts[0]: p for p in cli_app.cli.params if isinstance(p, click.Option)}
    for name, rule in cli_module.GLOBAL_OPTIONS.items():
        option = group[name]
        assert option.envvar == cli_module.ENVIRONMENT[name]
        if rule is None:
            assert not isinstance(option.type, click.Choice)
        else:
            assert isinstance(option.type, click.Choice) and tuple(option.type.choices) == rule
    query = cli_app.cli.commands["query"]
    options = {p.opts[0]: p for p in query.params if isinstance(p, click.Option)}
    assert set(options) - {"--help", "-h"} == set(cli_module.QUERY_OPTIONS)
    for name, query_rule in cli_module.QUERY_OPTIONS.items():
        option_type = options[name].type
        if query_rule == "kind":
            assert isinstance(option_type, click.Choice)
            assert tuple(option_type.choices) == tuple(k.value for k in Kind)
        elif query_rule == "limit":
            assert isinstance(option_type, click.IntRange)
            assert (option_type.min, option_type.max) == (1, 1000)
            assert options[name].default == 10
        elif query_rule is None:
            assert not isinstance(option_type, click.Choice)
        else:
            assert isinstance(option_type, click.Choice)
            assert tuple(option_type.choices) == query_rule
    assert options["--min-trust"].default == "verified"
    assert tuple(options["--min-trust"].type.choices) == FLOORS  # type: ignore[attr-defined]
    assert MODES == RECALL_MODES == cli_module.QUERY_OPTIONS["--mode"]
    arguments = [p for p in query.params if isinstance(p, click.Argument)]
    assert [a.name for a in arguments] == ["text"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["query", "--help"],
        ["query", "-h"],
        ["query"],
        ["query", "a", "b"],
        ["query", "a", "--limit", "0"],
        ["query", "a", "--limit", "5_0"],
        ["query", "a", "--limit", " 5"],
        ["query", "a", "--mode", "fuzzy"],
        ["query", "a", "--kind", "lessons"],
        ["query", "a", "--limit", "3", "--limit", "4"],
        ["query", "a", "--key", "-x"],
        ["query", "-a"],
        ["query", "a", "--format"],
        ["--format", "json", "query", "a"],
        ["--store", "s", "--store", "t", "query", "a"],
        ["write", "--kind", "lesson", "--key", "k", "query"],
        ["keys", "list"],
    ],
    ids=" ".join,
)
def test_anything_but_a_plain_query_goes_to_click(argv: list[str]) -> None:
    assert cli_module.parse_plain_query(argv, {}) is None


def test_plain_queries_are_read_as_click_reads_them() -> None:
    parse = cli_module.parse_plain_query
    assert parse(["query", "flaky ci"], {}) == ({}, "flaky ci", {})
    assert parse(["--store=/s", "query", "--limit=7", "x", "--kind", "lesson"], {}) == (
        {"--store": "/s"},
        "x",
        {"--limit": "7", "--kind": "lesson"},
    )
    assert parse(["query", "--mode", "exact", "--", "-x"], {}) == ({}, "-x", {"--mode": "exact"})
    env = {"TRUSS_STORE": "/env", "TRUSS_SIGNER": ""}
    assert parse(["query", "x"], env) == ({"--store": "/env"}, "x", {})
    assert parse(["--store", "/s", "query", "x"], env) == ({"--store": "/s"}, "x", {})
    assert parse(["query", "x"], {"TRUSS_SIGNER": "bogus"}) is None  # click reports it


@pytest.fixture
def queried(store: MemoryStore) -> Iterator[MemoryStore]:
    mixed_store(store)
    # Two verified entries on one key (keep-both-flagged): the output has a conflicts block.
    for body in ("Flaky CI: quarantine the network suite.", "Flaky CI: rerun it nightly."):
        rival = store.write("lesson", "flaky-quarantine", body)
        verdict = store.sign_verdict(rival.id, "PASS", note="checked")
        store.promote(rival.id, verdict, conflict="keep-both-flagged")
    yield store


CASES = [
    ["query", "flaky network retry"],
    ["query", "flaky network retry", "--format", "text"],
    ["query", "flaky quarantine nightly"],
    ["query", "flaky quarantine nightly", "--format", "text"],
    ["query", "--limit", "2", "flaky", "--min-trust", "unverified"],
    ["query", "flaky", "--kind", "lesson", "--key", "flaky-ci", "--min-trust", "stale"],
    ["query", "postgres", "--mode", "exact", "--format=json"],
    ["query", "no such words anywhere"],
    ["query", "no such words anywhere", "--format", "text"],
    ["query", "--", "--flaky"],
    ["query", "x", "--mode", "semantic", "--format", "json"],
]


@pytest.mark.parametrize("args", CASES, ids=" ".join)
def test_fast_and_click_paths_print_the_same(
    queried: MemoryStore, args: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    argv = ["--store", str(queried.git.workdir), *args]
    plain = cli_module.parse_plain_query(argv, {})
    assert plain is not None
    code = cli_module.run_plain_query(*plain)
    fast = capfd.readouterr()
    result = CliRunner().invoke(cli_app.cli, argv)
    assert (code, fast.out, fast.err) == (result.exit_code, result.stdout, result.stderr)
    if "quarantine" in args[1]:
        assert "conflict" in fast.out


def test_errors_match_too(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    for fmt in ("json", "text"):
        argv = ["--store", str(tmp_path / "nowhere"), "query", "x", "--format", fmt]
        plain = cli_module.parse_plain_query(argv, {})
        assert plain is not None
        code = cli_module.run_plain_query(*plain)
        fast = capfd.readouterr()
        result = CliRunner().invoke(cli_app.cli, argv)
        assert code == result.exit_code == 1
        assert (fast.out, fast.err) == (result.stdout, result.stderr)
        assert "truss-files init" in fast.out + fast.err


def test_console_script_both_ways(queried: MemoryStore) -> None:
    """The installed script: a plain query (no click) and the same query through click."""
    args = ["--store", str(queried.git.workdir), "query", "flaky network"]
    fast = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    slow = probe(
        "import sys\nfrom truss_files.faces.cli_app import cli\ncli(prog_name='truss-files')\n",
        *args,
    )
    assert fast.returncode == slow.returncode == 0, fast.stderr + slow.stderr
    assert fast.stdout == slow.stdout and json.loads(fast.stdout)["entries"]
