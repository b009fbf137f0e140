"""The fast loop's rule holds: what it reads from the source, what its guard refuses, and
that ``pytest -m fast`` still reaches every folder of the package (docs/testing.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import fastloop

ROOT = fastloop.TESTS.parent

SOURCE = """
import subprocess
from tests.support.script import run
from tests.support import script
from tests.support.fastloop import runs_only_git

LIMIT = 3


def helper():
    return subprocess.run(["true"])


def indirect():
    return helper()


@runs_only_git
def git_only():
    return subprocess.run(["git", "--version"])


def test_direct():
    subprocess.run(["true"])


def test_through_a_helper():
    indirect()


def test_through_a_support_function():
    run(None, "key")


def test_through_a_support_module():
    script.truss(None, "key")


def test_in_process():
    assert LIMIT == 3


def test_through_git_only():
    git_only()


class TestGrouped:
    def test_method(self):
        helper()

    def test_pure_method(self):
        assert LIMIT
"""


def test_the_rule_reads_process_starts_from_the_source(tmp_path: Path) -> None:
    path = tmp_path / "test_sample.py"
    path.write_text(SOURCE)
    found = {
        name: fastloop.spawns(path, name)
        for name in (
            "test_direct",
            "test_through_a_helper",
            "test_through_a_support_function",
            "test_through_a_support_module",
            "test_in_process",
            "test_through_git_only",
            "TestGrouped.test_method",
            "TestGrouped.test_pure_method",
        )
    }
    assert found == {
        "test_direct": True,
        "test_through_a_helper": True,  # two calls deep, in the module
        "test_through_a_support_function": True,  # tests/support/script.py's run
        "test_through_a_support_module": True,  # script.truss, through the module
        "test_in_process": False,
        "test_through_git_only": False,  # declared: git alone
        "TestGrouped.test_method": True,
        "TestGrouped.test_pure_method": False,
    }


def test_a_fast_test_may_start_git_and_nothing_else() -> None:
    guard = fastloop.the_guard()
    guard.test = "tests/example.py::test_example"
    try:
        assert subprocess.run(["git", "--version"], capture_output=True).returncode == 0
        with pytest.raises(RuntimeError, match=r"marked fast but started 'python.*spawns"):
            subprocess.run([sys.executable, "-c", "pass"])
        with pytest.raises(RuntimeError, match="started 'sh'"):
            subprocess.run("true", shell=True)
    finally:
        guard.test = None
        caught = guard.take()
    assert len(caught) == 2 and all("docs/testing.md" in message for message in caught)
    # Outside a fast test the guard lets everything through.
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0


def _whole_suite(config: pytest.Config) -> bool:
    """Whether this run collected all of tests/ (not a file, a folder or a -k subset)."""
    if config.getoption("keyword") or config.getoption("markexpr") not in ("", "fast"):
        return False
    args = [Path(arg.split("::")[0]).resolve() for arg in config.args] or [ROOT]
    return all(arg in (ROOT, fastloop.TESTS) for arg in args)


def test_the_fast_loop_reaches_every_package_folder(request: pytest.FixtureRequest) -> None:
    """Every floor of the package with a test folder keeps at least one fast test there, so
    `make fast` exercises each; and the other tests run first (the long ones must not end
    the run alone on one worker)."""
    if not _whole_suite(request.config):
        pytest.skip("run with the whole suite (`make fast` or `make test`)")
    items = request.session.items
    floors = sorted(
        d.name
        for d in (ROOT / "truss_files").iterdir()
        if (d / "__init__.py").is_file() and (fastloop.TESTS / d.name).is_dir()
    )
    assert len(floors) >= 10, floors
    assert fastloop.uncovered(items, floors) == []
    fast = [item.get_closest_marker("fast") is not None for item in items]
    assert fast == sorted(fast), "a test that is not fast was collected after a fast one"
