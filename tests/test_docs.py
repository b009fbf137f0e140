"""The README and the docs are tested: the set-up lines, every page's blocks run as a reader
runs them, the generated reference pages current, and the project's own store."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from tests.support import forkserver
from truss_files.facade import MemoryStore
from truss_files.git.gitstore import GitStore
from truss_files.trust.audit import audit

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_readme_opens_with_the_two_setup_commands() -> None:
    first_block = re.search(r"```sh\n(.*?)```", README, re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["make demo", "make test"]


def test_the_readme_is_a_front_page() -> None:
    assert len(README.splitlines()) <= 400, "the README is the front page: move detail to docs/"


# -- blocks ------------------------------------------------------------------------------------
# A page's shell and Python blocks run in order. A block that cannot run in a test says so on
# the line right above its fence, with the reason (and where else it is tested):
#     <!-- docs-test: skip (needs the Claude Code CLI and an account) -->

DOCS = ROOT / "docs"
RUNNABLE = {"sh", "bash", "python"}
SKIP = "<!-- docs-test: skip ("
_PARTS = re.compile(
    r"^(#{1,3}) ([^\n]*)$|^(<!-- docs-test: skip \(([^\n]*)\) -->\n)?```(\w*)\n(.*?)^```$",
    re.M | re.S,
)


@dataclass(frozen=True)
class Block:
    page: str  # README.md or docs/<page>.md
    section: str  # the heading above it (README: its ## section)
    lang: str
    text: str
    skip: str | None  # why it is not run

    @property
    def first(self) -> str:
        return self.text.lstrip().splitlines()[0]


def blocks(page: str) -> list[Block]:
    """Every fenced block of ``page`` (a path from the checkout), with its heading."""
    text = (ROOT / page).read_text(encoding="utf-8")
    top = 2 if page == "README.md" else 3  # the README's sections are its ## headings
    out: list[Block] = []
    section = ""
    for match in _PARTS.finditer(text):
        if match.group(1) is not None:
            if len(match.group(1)) <= top:
                section = match.group(2)
        else:
            out.append(Block(page, section, match.group(5), match.group(6), match.group(4)))
    return out


def pages() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md"))


def test_every_skip_says_why_and_sits_on_a_block() -> None:
    for page in ["README.md", *pages()]:
        text = (ROOT / page).read_text(encoding="utf-8")
        skipped = [b for b in blocks(page) if b.skip is not None]
        markers = sum(line.startswith(SKIP) for line in text.splitlines())
        assert markers == len(skipped), f"{page}: a skip marker not right above a fence"
        for block in skipped:
            assert block.lang in RUNNABLE, f"{page}: {block.first!r} is not a runnable block"
            assert len(block.skip or "") >= 15, f"{page}: {block.first!r}: say why it is skipped"
    runnable = [b for page in pages() for b in blocks(page) if b.lang in RUNNABLE]
    assert len([b for b in runnable if b.skip is None]) >= 30


def _script(run: list[Block]) -> str:
    """The blocks in order, in one shell, each after a marker line."""
    # Scaffolding, not docs: a server a block started never outlives the script.
    parts = ["trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"]
    for n, block in enumerate(run):
        body = block.text
        if block.lang == "python":
            body = f"python - <<'PYTHON_BLOCK'\n{body}PYTHON_BLOCK\n"
        parts.append(f"echo '@@ block {n}'\n{body}")
    return "".join(parts)


def run_as_newcomer(
    home: Path, script: str, *, timeout: float = 120, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """``script`` in bash from ``cwd`` (the checkout), with ``home`` as HOME, no truss or git
    settings of ours, and PATH without the venv (README blocks activate it themselves)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "TRUSS_", "GIT_"))}
    venv_bin = str(ROOT / ".venv" / "bin")
    path = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env |= {"HOME": str(home), "PATH": path}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def sh_block(section: str, prefix: str = "", page: str = "README.md") -> str:
    """The first runnable block of ``page`` under ``section`` (any, if empty) whose first line
    starts with ``prefix``."""
    return next(
        b.text
        for b in blocks(page)
        if b.lang in RUNNABLE
        and (not section or b.section == section)
        and b.first.startswith(prefix)
    )


def _said(run: list[Block], done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """Each section's output (its blocks' joined), after checking the script ran through."""
    outputs = re.split(r"^@@ block \d+$", done.stdout, flags=re.M)[1:]
    failed = run[len(outputs) - 1] if outputs else run[0]
    assert done.returncode == 0, (
        f"{failed.page}: block under {failed.section!r} starting {failed.first!r} failed:\n"
        f"{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
    )
    said: dict[str, str] = {}
    for block, out in zip(run, outputs, strict=False):
        said[block.section] = said.get(block.section, "") + out
    said[""] = done.stdout  # the whole page
    return said


def _stores_are_clean(home: Path) -> None:
    """Every store a page made under HOME audits clean and has nothing left in its work tree."""
    for toml in sorted([*home.glob("*/truss.toml"), *home.glob("*/*/truss.toml")]):
        store = toml.parent
        if not (store / ".git").exists():
            continue
        assert audit(GitStore(store), environ={}).ok, store
        left = subprocess.run(
            ["git", "status", "--porcelain"], cwd=store, capture_output=True, text=True
        ).stdout.splitlines()
        # What `setup HOST` writes into a project is the person's own (their host's config).
        left = [line for line in left if line not in HOST_FILES]
        assert not left, f"the blocks left files in {store}'s work tree: {left}"


HOST_FILES = {"?? .claude/", "?? .mcp.json"}


def test_a_newcomer_runs_every_readme_block_in_order_in_a_fresh_home(tmp_path: Path) -> None:
    """After `make demo`: a fresh HOME, PATH without the venv (the first block activates it),
    the checkout as the working directory, every block in order in one shell."""
    assert (ROOT / ".venv" / "bin" / "activate").is_file(), "run `make demo` or `make test` first"
    home = tmp_path / "home"
    home.mkdir()
    # No git identity: the README's own lines set one, as a newcomer would run them.
    assert not (home / ".gitconfig").exists()
    run = [b for b in blocks("README.md") if b.lang in RUNNABLE and b.skip is None]
    said = _said(run, run_as_newcomer(home, _script(run), timeout=300))

    assert "ci-flakes" in said["A store in five commands"]
    assert "[verified]" in said["A store in five commands"]
    assert said["A store in five commands"].count("\nG ") >= 3  # three good signatures
    team = said["The team path"]
    assert "+lesson 'ci-flakes' — verified — PASS 1/1" in team  # log -p shows the belief
    assert "pending" in said["With Claude Code"]
    _stores_are_clean(home)
    bare = home / "memory-server.git"
    assert (bare / "hooks" / "pre-receive").is_file()
    pushed = subprocess.run(
        ["git", "--git-dir", str(bare), "rev-parse", "main"], capture_output=True, text=True
    )
    assert pushed.returncode == 0, "the push through the server gate did not land"


# What each page's run must have said (beyond running through, every store auditing clean).
def _security(said: dict[str, str]) -> None:
    assert "[signed] commit touches the store but is unsigned" in said[""]
    assert said[""].rstrip().endswith("failures.")  # served again


def _belief(said: dict[str, str]) -> None:
    assert "refused: bad_verdict" in said[""]  # no replay after a revert


def _python(said: dict[str, str]) -> None:
    assert "verified" in said[""]


def _identity(said: dict[str, str]) -> None:
    from truss_files.format.proposal import SELF_TEMPLATE

    lines = said[""].splitlines()
    assert "Terse. Cites the commit behind every claim." in lines
    assert any(" failed " in line for line in lines)
    assert lines[-1] == SELF_TEMPLATE.splitlines()[-1]


def _pull_requests(said: dict[str, str]) -> None:
    why = said[""]
    assert "verified: PASS 1/1 by" in why and "the release calendar says so" in why
    assert "verified: call #1 of run R-why (write_memory)" in why
    assert "| commit | when | op | trust | signer | verdict |" in why


def _enforcement(said: dict[str, str]) -> None:
    out = said[""]
    assert "alice@example.com" in out and "\tpanel" in out  # managing signers and roles
    assert "ok:" in out.splitlines()[-1]
    # The merge of two branches that both moved: a signed merge, never a fast-forward.
    merged = re.search(r"^parents: (\w+) (\w+), signature: (\w)$", out, re.M)
    assert merged is not None and merged.group(3) == "G", out


def _context(said: dict[str, str]) -> None:
    context = said[""]
    assert '"repin": true' in context and "prefix unchanged" in context
    # Resume, children and compaction: the delta with its body, a child listed, the summary.
    assert "('ci-runner', None, 'verified', 'CI runs on the self-hosted pool.')" in context
    assert "context_summary/summary-R-1" in context.splitlines()[-1]
    assert '"key": "ci-flakes"' in context and '"to": "verified"' in context


def _enterprise(said: dict[str, str]) -> None:
    replies = [json.loads(line) for line in said[""].splitlines() if line.startswith('{"')]
    assert [r.get("status") for r in replies] == ["retained", "answered"]
    assert replies[-1]["evidence"][0]["trust"] == "verified"
    assert "preview URL" in replies[-1]["evidence"][0]["body"]


def _http(said: dict[str, str]) -> None:
    lines = said[""].splitlines()
    assert any(line.startswith("dashboard\ttasks:read") for line in lines)
    assert not any(line.startswith("tft_") for line in lines)  # tokens went to variables
    trained = json.loads(next(line for line in lines if '"status"' in line and "entry" in line))
    assert trained["status"] == "accepted"
    asked = json.loads(next(line for line in lines if '"answer"' in line))
    assert asked["status"] == "answered" and "preview URL" in asked["answer"]
    # The store routes: queued, promoted with the server's panel key, found, explained.
    promoted = json.loads(next(line for line in lines if line.startswith('{"id"')))
    assert promoted["trust"] == "verified"
    assert "1" in lines and "['verified']" in lines
    assert "[('write', 'unverified'), ('promote', 'verified')]" in lines
    assert lines[-1] == "401"


def _queue(said: dict[str, str]) -> None:
    queue = said[""]
    assert '"pending": [' in queue and '"key": "deploys"' in queue
    assert "done: 1 promoted, 0 rejected, 0 skipped, each in its own signed commit" in queue
    assert "done: 0 promoted, 1 rejected, 0 skipped, each in its own signed commit" in queue
    assert re.search(r"verified\s+lesson/deploys", queue)
    assert re.search(r"rejected\s+fact/vpn", queue)


def _model_judges(said: dict[str, str]) -> None:
    # The model judge (the fake provider) passed one note and failed the other on write; a
    # new MCP session is served the first and never the second.
    judged = said[""].splitlines()
    assert "today: the deploy note is rejected" in judged
    assert "tomorrow: 'editor' serves [('verified', 'The user edits in vim.')]" in judged
    assert "tomorrow: 'deploy password' serves []" in judged


def _environment(said: dict[str, str]) -> None:
    from importlib.metadata import version

    lines = said[""].splitlines()
    assert f"truss-files, version {version('truss-files')}" in lines
    assert any(line.endswith("lesson/ci-flakes") for line in lines)


def _quickstart(said: dict[str, str]) -> None:
    assert "[verified]" in said[""] and "ci-flakes" in said[""]


CHECKS: dict[str, Callable[[dict[str, str]], None]] = {
    "docs/quickstart.md": _quickstart,
    "docs/operators/security.md": _security,
    "docs/agents/belief.md": _belief,
    "docs/agents/python.md": _python,
    "docs/agents/identity.md": _identity,
    "docs/reviewers/pull-requests.md": _pull_requests,
    "docs/operators/enforcement.md": _enforcement,
    "docs/agents/context.md": _context,
    "docs/enterprise/memory.md": _enterprise,
    "docs/enterprise/http.md": _http,
    "docs/reviewers/queue.md": _queue,
    "docs/reviewers/model-judges.md": _model_judges,
    "docs/reference/environment.md": _environment,
}


def _runnable_pages() -> list[str]:
    return [p for p in pages() if any(b.lang in RUNNABLE and b.skip is None for b in blocks(p))]


def test_the_checks_name_pages_that_run() -> None:
    assert set(CHECKS) <= set(_runnable_pages()), set(CHECKS) - set(_runnable_pages())


@pytest.fixture(scope="module")
def forked_on_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path | None]:
    """A ``truss-files`` that forks one process which imported the package once
    (tests/support/forkserver.py): the pages' commands cost their work, not their imports.
    None with ``TRUSS_SLOW=1``: the pages run the installed script, as the README test does."""
    with forkserver.forked_script(tmp_path_factory.mktemp("forked")) as folder:
        yield folder


@pytest.mark.parametrize("page", _runnable_pages())
def test_a_reader_runs_every_block_of_a_page_in_order_in_a_fresh_home(
    page: str, tmp_path: Path, forked_on_path: Path | None
) -> None:
    """Each docs page on its own, as a reader who starts there: a new shell, a new HOME, the
    state Install leaves (truss-files on PATH from the venv, a git identity), HOME as the
    working directory, every block of the page in order."""
    assert (ROOT / ".venv" / "bin" / "activate").is_file(), "run `make demo` or `make test` first"
    run = [b for b in blocks(page) if b.lang in RUNNABLE and b.skip is None]
    if page == "docs/enterprise/http.md" and shutil.which("curl") is None:
        pytest.skip("curl is not installed: the HTTP walk-through uses it")
    home = tmp_path / "home"
    home.mkdir()
    installed = (
        f". {shlex.quote(str(ROOT / '.venv' / 'bin' / 'activate'))}\n"
        'git config --global user.email "you@example.com"\n'
        'git config --global user.name "Your Name"\n'
    )
    if forked_on_path is not None:
        installed += f"PATH={shlex.quote(str(forked_on_path))}:$PATH\n"
    done = run_as_newcomer(home, installed + _script(run), timeout=300, cwd=home)
    said = _said(run, done)
    CHECKS.get(page, lambda said: None)(said)
    _stores_are_clean(home)


def test_the_generated_pages_are_current() -> None:
    """The command, tool and settings references and the Architecture page are what
    `python docs/gen.py` writes from the code now."""
    gen = _load_gen()
    stale = gen.stale()
    assert not stale, f"stale: {stale}; run python docs/gen.py and commit the pages"


def test_the_generator_sees_a_change_in_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool renamed in the registry makes its page stale (the check can fail)."""
    gen = _load_gen()
    from truss_files.tools import registry

    tools = registry.all_tools()
    renamed = [dataclasses.replace(tools[0], name="memory_renamed"), *tools[1:]]
    monkeypatch.setattr(registry, "all_tools", lambda: renamed)
    assert gen.tools_page() != (DOCS / "reference" / "tools.md").read_text(encoding="utf-8")


def _load_gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_gen", DOCS / "gen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


# Pages the README links that are written on other branches; each leaves this list when it lands.
PENDING_PAGES: set[str] = set()


def test_every_readme_link_into_the_docs_resolves() -> None:
    for target in re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)]*)?\)", README):
        if (ROOT / target).exists():
            continue
        assert Path(target).stem in PENDING_PAGES and target.count("/") == 1, (
            f"README links {target}, which does not exist"
        )


def test_every_docs_page_is_in_the_nav() -> None:
    """mkdocs only mentions a page left out of the nav; here it fails (its reader would never
    find it), and so does a nav line naming no page."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s+(\S+\.md)\s*$", nav, re.M))
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert on_disk - listed == set(), "add these pages to mkdocs.yml's nav"
    assert listed - on_disk == set(), "mkdocs.yml's nav names pages that do not exist"
