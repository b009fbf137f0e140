"""Start-up of the ``truss-files`` command line: commands load lazily, each from its own
module, and a cold ``query`` loads the recall engine and nothing of the tools, the settings
layers or the store."""

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

from tests.support.gated import search
from tests.support.recall_support import mixed_store
from truss_files.facade import MemoryStore
from truss_files.faces.cli import app as cli_app
from truss_files.recall.pipeline import Filter

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
    assert set(cli_app.LAZY_COMMANDS) == everything
    # Each module defines exactly the commands the table sends to it.
    done = probe(
        "import importlib, json\n"
        "from truss_files.faces.cli import app as cli_app\n"
        "seen = set(cli_app.cli._registered)\n"
        "found = {}\n"
        "for module in cli_app.COMMAND_MODULES:\n"
        "    importlib.import_module('truss_files.faces.cli.' + module)\n"
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
        "from truss_files.faces.cli.main import cli\n"
        "result = CliRunner().invoke(cli, ['show', '--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "loaded = sorted(m.rsplit('.', 1)[1] for m in sys.modules\n"
        "                if m.startswith('truss_files.faces.cli.'))\n"
        "print(loaded)\n"
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "['app', 'main', 'output', 'read']"


def test_help_lists_every_command_with_its_short_help() -> None:
    result = CliRunner().invoke(cli_app.cli, ["--help"])
    assert result.exit_code == 0
    for name, command in cli_app.cli.commands.items():
        assert f"  {name} " in result.output
        assert command.get_short_help_str(limit=200)[:12] in result.output


def test_the_table_holds_each_commands_short_help() -> None:
    """The listing is printed from the table; each entry is its command's own first sentence."""
    commands = cli_app.cli.commands
    for name, (_module, summary) in cli_app.COMMANDS.items():
        assert summary == commands[name].get_short_help_str(limit=10_000), name


@pytest.mark.parametrize("width", [60, 80, 200])
def test_help_lists_what_click_would_print_from_the_commands(width: int) -> None:
    """Same rows, shortened the same way at each terminal width, as click's own listing, which
    imports every command module."""
    listed = CliRunner().invoke(cli_app.cli, ["--help"], terminal_width=width)
    group = cli_app.cli
    ctx = click.Context(group, info_name="truss-files", terminal_width=width, max_content_width=100)
    formatter = ctx.make_formatter()
    click.Group.format_commands(group, ctx, formatter)
    assert listed.exit_code == 0
    assert "  attest " in formatter.getvalue()
    assert listed.output.endswith(formatter.getvalue())


@pytest.mark.parametrize("argv", [["--help"], ["-h"], []], ids=lambda v: " ".join(v) or "bare")
def test_the_command_list_imports_no_command_module(argv: list[str]) -> None:
    shown = probe(
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from truss_files.faces.cli.main import cli\n"
        "result = CliRunner().invoke(cli, sys.argv[1:])\n"
        "assert result.exit_code in (0, 2), result.output\n"
        "assert 'Commands:' in result.output and '  write ' in result.output\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('truss_files.faces.cli.')\n"
        "                or m in ('pygit2', 'yaml', 'cryptography'))\n"
        "print(loaded)\n",
        *argv,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == (
        "['truss_files.faces.cli.app', 'truss_files.faces.cli.main',"
        " 'truss_files.faces.cli.output']"
    )


def test_an_unknown_command_is_still_a_usage_error() -> None:
    result = CliRunner().invoke(cli_app.cli, ["qeury", "x"])
    assert result.exit_code == 2 and "No such command 'qeury'" in result.output


# --------------------------------------------------------------------------- the plain query


def test_the_package_names_load_on_first_use() -> None:
    done = probe(
        "import sys, truss_files\n"
        "assert 'truss_files.model' not in sys.modules\n"
        "from truss_files import Entry, UsageError\n"
        "import truss_files.model as model\n"
        "assert Entry is model.Entry and truss_files.Entry is Entry\n"
        "assert 'truss_files.facade' not in sys.modules\n"
        "print(truss_files.MemoryStore.__module__)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "truss_files.facade"


def test_a_query_loads_only_its_command_module(store: MemoryStore) -> None:
    mixed_store(store)
    done = probe(
        "import sys, json\n"
        "from truss_files.faces.cli.main import main\n"
        "sys.argv = ['truss-files', '--store', sys.argv[1], 'query', 'flaky network']\n"
        "try:\n    main()\n"
        "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "loaded = sorted(m.rsplit('.', 1)[1] for m in sys.modules\n"
        "                if m.startswith('truss_files.faces.cli.'))\n"
        "print(json.dumps(loaded), file=sys.stderr)\n",
        str(store.git.workdir),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["entries"]
    assert json.loads(done.stderr.strip().splitlines()[-1]) == ["app", "main", "output", "query"]


# Kept off a plain query (text or JSON, every floor): the tool dispatcher, run context and
# registry, truss.toml's own reader and parser, salience policies (only when the store names
# one), the settings layers (only when one is in play) and the store. Each one loaded for
# nothing costs the cold query milliseconds. (threading is no sign of them: click loads it.)
OFF_THE_QUERY_PATH = (
    "truss_files.tools.dispatch",
    "truss_files.runs.runcontext",
    "truss_files.tools.registry",
    "truss_files.config.tipconfig",
    "truss_files.recall.salience",
    "truss_files.config.settings",
    "truss_files.facade",
    "truss_files.store.store",
    "truss_files.git.gitstore",
    "truss_files.signing.trustpolicy",
    "tomllib",
    "pygit2",
    "yaml",
    "cryptography",
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
        "from truss_files.faces.cli.main import main\n"
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


def test_the_layers_still_load_when_a_query_uses_them(store: MemoryStore, tmp_path: Path) -> None:
    """The other side of the list above: with a user config file the settings come back, and
    the answer honours them (the config's recall mode)."""
    mixed_store(store)
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "config.toml").write_text('[recall]\nmode = "hybrid"\n', encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, json\n"
            "from truss_files.faces.cli.main import main\n"
            "sys.argv = ['truss-files', '--store', sys.argv[1], 'query', 'flaky', "
            "'--agent', 'a1']\n"
            "try:\n    main()\n"
            "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
            "print(json.dumps([m for m in ('truss_files.config.settings', 'tomllib') "
            "if m in sys.modules]), file=sys.stderr)\n",
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
    assert loaded == ["truss_files.config.settings", "tomllib"]


@pytest.fixture
def queried(store: MemoryStore) -> Iterator[MemoryStore]:
    mixed_store(store)
    # Two verified entries on one key (keep-both-flagged): the output has a conflicts block.
    for body in ("Flaky CI: quarantine the network suite.", "Flaky CI: rerun it nightly."):
        rival = store.write("lesson", "flaky-quarantine", body)
        verdict = store.sign_verdict(rival.id, "PASS", note="checked")
        store.promote(rival.id, verdict, conflict="keep-both-flagged")
    yield store


# --------------------------------------------------------------------------- the console script


def script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize(
    "args",
    [
        ["query", "flaky network retry"],
        ["query", "flaky quarantine nightly", "--format", "text"],
        ["query", "--limit", "2", "flaky", "--min-trust", "unverified"],
        ["query", "no such words anywhere", "--format", "text"],
        ["query", "--mode", "exact", "--", "--flaky"],
    ],
    ids=" ".join,
)
def test_the_console_script_prints_what_the_group_prints(
    queried: MemoryStore, args: list[str]
) -> None:
    argv = ["--store", str(queried.git.workdir), *args]
    done = script(*argv)
    result = CliRunner().invoke(cli_app.cli, argv)
    assert (done.returncode, done.stdout, done.stderr) == (
        result.exit_code,
        result.stdout,
        result.stderr,
    )
    assert done.returncode == 0
    if "quarantine" in args[1]:
        assert "conflict" in done.stdout
    if "no such words" in args[1]:
        assert "nothing at or above verified matches" in done.stdout


def test_the_store_comes_from_the_environment_too(queried: MemoryStore) -> None:
    env = {**os.environ, "TRUSS_STORE": str(queried.git.workdir)}
    done = script("query", "flaky network", "--format", "json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["entries"]


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_query_outside_a_store_is_a_user_error(tmp_path: Path, fmt: str) -> None:
    done = script("--store", str(tmp_path / "nowhere"), "query", "x", "--format", fmt)
    assert done.returncode == 1
    if fmt == "json":
        error = json.loads(done.stdout)["error"]
        assert error["code"] and "truss-files init" in error["message"]
    else:
        assert done.stdout == "" and done.stderr.startswith("error: ")
        assert "truss-files init" in done.stderr


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["query"], "Missing argument 'TEXT'"),
        (["query", "a", "b"], "Got unexpected extra argument (b)"),
        (["query", "a", "--limit", "0"], "0 is not in the range 1<=x<=1000"),
        (["query", "a", "--limit", "x"], "'x' is not a valid integer range"),
        (["query", "a", "--mode", "fuzzy"], "'fuzzy' is not one of 'exact', 'semantic', 'hybrid'"),
        (["query", "a", "--kind", "lessons"], "'lessons' is not one of"),
        (["query", "a", "--min-trust", "rejected"], "'rejected' is not one of"),
        (["query", "-a"], "No such option '-a'"),
        (["query", "a", "--format"], "Option '--format' requires an argument"),
        (["--format", "json", "query", "a"], "No such option '--format'"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_a_bad_query_is_a_usage_error(argv: list[str], says: str) -> None:
    result = CliRunner().invoke(cli_app.cli, argv, prog_name="truss-files")
    assert result.exit_code == 2, result.output
    assert says in result.stderr
    assert "Error: " in result.stderr and result.stdout == ""


def test_a_bad_signer_in_the_environment_is_a_usage_error_even_for_a_query() -> None:
    done = script("query", "x", env={**os.environ, "TRUSS_SIGNER": "bogus"})
    assert done.returncode == 2
    assert "'bogus' is not one of 'builtin', 'ssh-keygen'" in done.stderr


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_query_help(flag: str) -> None:
    done = script("query", flag)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: truss-files query [OPTIONS] TEXT")
    for option in ("--min-trust [verified|stale|unverified]", "--mode [exact|semantic|hybrid]"):
        assert option in done.stdout
    assert "--scope [per-agent|per-project|shared]" in done.stdout


@pytest.mark.parametrize(("command", "collecting"), [("query", False), ("keys", True)])
def test_the_collector_stays_paused_for_a_query_only(
    store: MemoryStore, command: str, collecting: bool
) -> None:
    """A query answers and exits, so `main` never turns the cyclic collector on; any other
    command may run long (mcp, serve, verify) and gets it back."""
    args = ["query", "flaky"] if command == "query" else ["keys", "list"]
    done = probe(
        "import gc, sys\n"
        "from truss_files.faces.cli.main import main\n"
        "sys.argv = ['truss-files', '--store', sys.argv[1], *sys.argv[2:]]\n"
        "try:\n    main()\n"
        "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print(gc.isenabled(), file=sys.stderr)\n",
        str(store.git.workdir),
        *args,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == str(collecting)
