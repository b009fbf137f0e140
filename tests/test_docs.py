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


def _run_in_fresh_home(
    home: Path, script: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run README lines as a newcomer does: bash, the venv on PATH, a HOME of their own."""
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "TRUSS_", "GIT_"))}
    env |= {"HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_walkthrough_and_the_security_refusal_run_as_written(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = _run_in_fresh_home(home, _block_after("A store in five commands"))
    assert done.returncode == 0, done.stderr
    assert "ci-flakes" in done.stdout and "[verified]" in done.stdout
    store = home / "agent-memory"
    assert audit(GitStore(store), environ={}).ok

    refused = _run_in_fresh_home(home, _block_after("Security model"))
    assert refused.returncode == 0, refused.stderr
    assert "[signed] commit touches the store but is unsigned" in refused.stdout
    assert "untrusted_history" in refused.stderr or "fails the audit" in refused.stderr
    assert refused.stdout.rstrip().endswith("failures.")  # the last query serves ci-flakes
    assert audit(GitStore(store), environ={}).ok


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


def test_identity_walkthrough_runs_as_written(tmp_path: Path) -> None:
    from truss_files.context.proposal import SELF_TEMPLATE

    done = _run_in_fresh_home(tmp_path, _block_after("Identity and context"), timeout=180)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "Terse. Cites the commit behind every claim." in lines
    assert any(" failed " in line for line in lines)
    assert lines[-1] == SELF_TEMPLATE.splitlines()[-1]
    assert audit(GitStore(tmp_path / "agent-identity"), environ={}).ok


def test_enterprise_walkthrough_runs_as_written(tmp_path: Path) -> None:
    done = _run_in_fresh_home(tmp_path, _block_after("Enterprise memory"))
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"')]
    assert [r.get("status") for r in replies] == ["retained", "answered"]
    answer = replies[-1]
    assert answer["status"] == "answered" and answer["evidence"][0]["trust"] == "verified"
    assert "preview URL" in answer["evidence"][0]["body"]
    assert audit(GitStore(tmp_path / "enterprise-memory"), environ={}).ok


def test_context_walkthrough_runs_as_written(tmp_path: Path) -> None:
    done = _run_in_fresh_home(tmp_path, _block_after("Context for a run"), timeout=180)
    assert done.returncode == 0, done.stderr
    assert '"repin": true' in done.stdout and "prefix unchanged" in done.stdout
    assert '"key": "ci-flakes"' in done.stdout and '"to": "verified"' in done.stdout
