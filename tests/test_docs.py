"""The README is tested: its set-up lines, its walk-through, and the project's own store."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

from truss_files.facade import MemoryStore
from truss_files.git.gitstore import GitStore
from truss_files.trust.audit import audit

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


@dataclass(frozen=True)
class Block:
    section: str
    lang: str
    text: str

    @property
    def first(self) -> str:
        return self.text.lstrip().splitlines()[0]


def _blocks() -> list[Block]:
    out: list[Block] = []
    section = ""
    for match in re.finditer(r"^## ([^\n]*)$|^```(\w*)\n(.*?)^```$", README, re.M | re.S):
        if match.group(1) is not None:
            section = match.group(1)
        else:
            out.append(Block(section, match.group(2), match.group(3)))
    return out


RUNNABLE = {"sh", "bash", "python"}
# What a newcomer reads but this test does not run, each with the reason and where it is tested.
NOT_RUN = {
    ("", "make demo"): "the two set-up commands themselves (CI runs `make test`)",
    ("Install", "pip install ."): "installs into the current environment; `make demo` did",
    ("Recall", 'cd "$(dirname "$VIRTUAL_ENV")"'): (
        "a benchmark of minutes; tests/test_benchmarks.py"
    ),
    ("Agent tools, durable runs and MCP", "claude mcp add"): "needs the Claude Code CLI",
    ("Agent tools, durable runs and MCP", "import anthropic"): (
        "needs an API key and a model; tests/faces/test_anthropic_async.py runs it verbatim "
        "against a scripted Messages API on 127.0.0.1"
    ),
    ("For reviewers: memory changes in pull requests", "truss-files diff origin/main"): (
        "runs in CI on a pull request ($BASE, $GITHUB_STEP_SUMMARY); tests/review/test_diff.py"
    ),
    ("For operators: enforcement and sync", "git init --bare /srv/git/memory.git"): (
        "sets up a server under /srv; tests/adversarial/test_gate_attacks.py runs it as "
        "written with the server in a temp dir, then attacks it"
    ),
    ("Reviewing pending memory: the queue and the page", "truss-files review --web"): (
        "serves until ^C; tests/review/test_review_page.py drives it in headless Chromium"
    ),
    ("Tests", "make test"): "the test suite itself",
    ("Benchmarks", "make bench"): "minutes of benchmarks; tests/test_benchmarks.py",
}


def _skipped(block: Block) -> bool:
    return any(
        block.section == section and block.first.startswith(prefix) for section, prefix in NOT_RUN
    )


def test_every_runnable_block_is_run_or_says_why_not() -> None:
    blocks = [b for b in _blocks() if b.lang in RUNNABLE]
    for section, prefix in NOT_RUN:
        assert any(b.section == section and b.first.startswith(prefix) for b in blocks), (
            f"NOT_RUN names a block the README no longer has: {section!r} {prefix!r}"
        )
    assert len([b for b in blocks if not _skipped(b)]) >= 10


def _newcomer_script() -> tuple[str, list[Block]]:
    """Every runnable block in README order, in one shell, each after a marker line."""
    run = [b for b in _blocks() if b.lang in RUNNABLE and not _skipped(b)]
    if shutil.which("curl") is None:
        warnings.warn("curl is not installed: the HTTP walk-through is left out", stacklevel=2)
        run = [b for b in run if b.section != "The HTTP API"]
    # Scaffolding, not README: a server a block started never outlives the script.
    parts = ["trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"]
    for n, block in enumerate(run):
        body = block.text
        if block.lang == "python":
            body = f"python - <<'PYTHON_BLOCK'\n{body}PYTHON_BLOCK\n"
        parts.append(f"echo '@@ block {n}'\n{body}")
    return "".join(parts), run


def run_as_newcomer(
    home: Path, script: str, *, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``script`` in bash from the checkout, with ``home`` as HOME, no truss or git settings
    of ours, and PATH without the venv (README blocks activate it themselves)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "TRUSS_", "GIT_"))}
    venv_bin = str(ROOT / ".venv" / "bin")
    path = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env |= {"HOME": str(home), "PATH": path}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def sh_block(section: str, prefix: str = "") -> str:
    """The first runnable block of ``section`` whose first line starts with ``prefix``."""
    return next(b.text for b in _blocks() if b.section == section and b.first.startswith(prefix))


def test_a_newcomer_runs_every_block_in_order_in_a_fresh_home(tmp_path: Path) -> None:
    """After `make demo`: a fresh HOME, PATH without the venv (the first block activates it),
    the checkout as the working directory, every block in order in one shell."""
    assert (ROOT / ".venv" / "bin" / "activate").is_file(), "run `make demo` or `make test` first"
    home = tmp_path / "home"
    home.mkdir()
    # No git identity: the README's own lines set one, as a newcomer would run them.
    assert not (home / ".gitconfig").exists()
    script, run = _newcomer_script()
    done = run_as_newcomer(home, script, timeout=900)
    outputs = re.split(r"^@@ block \d+$", done.stdout, flags=re.M)[1:]
    failed = run[len(outputs) - 1] if outputs else run[0]
    assert done.returncode == 0, f"block under {failed.section!r} failed:\n{done.stderr[-3000:]}"
    said: dict[str, str] = {}
    for block, out in zip(run, outputs, strict=False):  # a section's blocks, their outputs joined
        said[block.section] = said.get(block.section, "") + out

    assert "ci-flakes" in said["A store in five commands"]
    assert "[verified]" in said["A store in five commands"]
    assert "[signed] commit touches the store but is unsigned" in said["Security model"]
    assert said["Security model"].rstrip().endswith("failures.")  # served again
    assert "verified" in said["Python API"]
    assert "refused: bad_verdict" in said["A belief's life"]  # no replay after a revert

    lines = said["Identity and context"].splitlines()
    from truss_files.format.proposal import SELF_TEMPLATE

    assert "Terse. Cites the commit behind every claim." in lines
    assert any(" failed " in line for line in lines)
    assert lines[-1] == SELF_TEMPLATE.splitlines()[-1]

    why = said["For reviewers: memory changes in pull requests"]  # `why` on a run's note
    assert "verified: PASS 1/1 by" in why and "the release calendar says so" in why
    assert "verified: call #1 of run R-why (write_memory)" in why
    assert "| commit | when | op | trust | signer | verdict |" in why

    operators = said["For operators: enforcement and sync"]  # managing signers and roles
    assert "alice@example.com" in operators and "\tpanel" in operators
    assert "ok:" in operators.splitlines()[-1]

    context = said["Context for a run"]
    assert '"repin": true' in context and "prefix unchanged" in context
    # Resume, children and compaction: the delta with its body, a child listed, the summary.
    assert "('ci-runner', None, 'verified', 'CI runs on the self-hosted pool.')" in context
    assert "context_summary/summary-R-1" in context.splitlines()[-1]
    assert '"key": "ci-flakes"' in context and '"to": "verified"' in context

    replies = [
        json.loads(line) for line in said["Enterprise memory"].splitlines() if line.startswith('{"')
    ]
    assert [r.get("status") for r in replies] == ["retained", "answered"]
    assert replies[-1]["evidence"][0]["trust"] == "verified"
    assert "preview URL" in replies[-1]["evidence"][0]["body"]

    if "The HTTP API" in said:
        lines = said["The HTTP API"].splitlines()
        assert any(line.startswith("dashboard\ttasks:read") for line in lines)
        assert not any(line.startswith("tft_") for line in lines)  # tokens went to variables
        trained = json.loads(next(line for line in lines if '"status"' in line and "entry" in line))
        assert trained["status"] == "accepted"
        asked = json.loads(next(line for line in lines if '"answer"' in line))
        assert asked["status"] == "answered" and "preview URL" in asked["answer"]
        assert lines[-1] == "401"
        assert audit(GitStore(home / "harness" / "mem"), environ={}).ok

    queue = said["Reviewing pending memory: the queue and the page"]
    assert '"pending": [' in queue and '"key": "deploys"' in queue
    assert "done: 1 promoted, 0 rejected, 0 skipped, each in its own signed commit" in queue
    assert "done: 0 promoted, 1 rejected, 0 skipped, each in its own signed commit" in queue
    assert re.search(r"verified\s+lesson/deploys", queue)
    assert re.search(r"rejected\s+fact/vpn", queue)
    # The next conversation: the model judge (the fake provider) passed one note and failed
    # the other on write; a new MCP session is served the first and never the second.
    judged = said["Model judges and the next conversation"].splitlines()
    assert "today: the deploy note is rejected" in judged
    assert "tomorrow: 'editor' serves [('verified', 'The user edits in vim.')]" in judged
    assert "tomorrow: 'deploy password' serves []" in judged

    env_block = said["Environment variables"].splitlines()
    from importlib.metadata import version

    assert f"truss-files, version {version('truss-files')}" in env_block
    assert any(line.endswith("lesson/ci-flakes") for line in env_block)

    stores = (
        "agent-memory",
        "agent-identity",
        "ctx-store",
        "enterprise-memory",
        "review-demo",
        "judged-memory",
    )
    for store in stores:
        assert audit(GitStore(home / store), environ={}).ok, store
    for store in stores:
        left = subprocess.run(
            ["git", "status", "--porcelain"], cwd=home / store, capture_output=True, text=True
        ).stdout.strip()
        assert not left, f"a README block left files in {store}'s work tree: {left}"


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
