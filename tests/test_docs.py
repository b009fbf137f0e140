"""The README is tested: its set-up lines, its walk-through, and the project's own store."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from truss_files.audit import audit
from truss_files.gitstore import GitStore
from truss_files.store import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _block_after(heading: str) -> str:
    section = README.split(f"\n## {heading}\n", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match, f"no sh block under '{heading}'"
    return match.group(1)


def test_readme_opens_with_the_two_setup_commands() -> None:
    first_block = re.search(r"```sh\n(.*?)```", README, re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["make demo", "make test"]


def test_walkthrough_runs_as_written(tmp_path: Path) -> None:
    script = _block_after("A store in five commands")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "ci-flakes" in done.stdout and "[verified]" in done.stdout
    store = Path(os.environ["HOME"]) / "agent-memory"
    assert audit(GitStore(store)).ok


def test_the_projects_own_store_is_signed_verified_and_audits_clean() -> None:
    store = MemoryStore(ROOT)
    entries = list(store.iter_entries())
    verified = [e for e in entries if e.trust.value == "verified"]
    assert len(verified) >= 24
    assert {e.trust.value for e in entries} == {"verified", "unverified", "stale", "rejected"}
    report = audit(store.git)
    assert report.ok, [str(v) for v in report.violations]
    assert report.checked > len(entries)


def test_no_private_key_is_committed() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    for name in filter(None, tracked):
        path = ROOT / name
        if path.is_file() and path.stat().st_size < 1_000_000:
            data = path.read_bytes()
            assert b"BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn" not in data, name


def test_enterprise_walkthrough_runs_as_written(tmp_path: Path) -> None:
    script = _block_after("Enterprise memory")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"')]
    assert [r.get("status") for r in replies] == ["retained", "answered"]
    answer = replies[-1]
    assert answer["status"] == "answered" and answer["evidence"][0]["trust"] == "verified"
    assert "preview URL" in answer["evidence"][0]["body"]
    store = Path(os.environ["HOME"]) / "enterprise-memory"
    assert audit(GitStore(store)).ok


def test_http_walkthrough_runs_as_written(tmp_path: Path) -> None:
    import shutil

    import pytest
    from click.testing import CliRunner

    from truss_files.faces.cli import cli

    if shutil.which("curl") is None:
        pytest.skip("the HTTP walk-through calls curl, which is not installed here")
    pytest.importorskip("uvicorn", reason="the HTTP walk-through needs the [http] extra")
    for command in ("signers", "roles"):
        if CliRunner().invoke(cli, [command, "--help"]).exit_code != 0:
            pytest.skip(
                f"the HTTP walk-through gives the server its agent key with `truss-files "
                f"{command}`, which this build does not have yet"
            )
    script = _block_after("The HTTP API")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("dashboard\ttasks:read") for line in lines), done.stdout
    assert not any(line.startswith("tft_") for line in lines)  # tokens went to variables
    trained = json.loads(next(line for line in lines if '"status"' in line and "entry" in line))
    assert trained["status"] == "accepted"
    asked = json.loads(next(line for line in lines if '"answer"' in line))
    assert asked["status"] == "answered" and "preview URL" in asked["answer"]
    assert lines[-1] == "401"
    assert audit(GitStore(tmp_path / "mem")).ok
