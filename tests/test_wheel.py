"""The wheel as a newcomer installs it: built from the checkout, installed into an empty venv
with no index and (where the kernel allows a private network namespace) no network at all,
then `init`, `write` and `query`; it ships py.typed and the licence, so mypy reads our types."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _offline() -> list[str]:
    """A prefix that runs a command with no network (a fresh user + network namespace)."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0:
        return [unshare, "-rn"]
    return []


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the tracked files (and this worktree's edits)."""
    src = tmp_path_factory.mktemp("src")
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, tracked):
        if name.startswith(("tests/", "memories/", "benchmarks/")) or not (ROOT / name).is_file():
            continue
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "-q", "-w", str(out)],
        cwd=src,
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("truss_files-*.whl")
    return built


def test_the_wheel_ships_py_typed_and_the_licence(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "truss_files/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names[-8:]
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "License-Expression: MIT" in text
    assert "Classifier: Typing :: Typed" in text
    assert "Project-URL: Source, " in text
    assert "pypi" not in text.lower()


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only the wheel; its dependencies are read from the dev venv's
    site-packages (a path on sys.path, so the dev venv's editable truss_files is not)."""
    env_dir = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "dev-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run(
        [*_offline(), sys.executable, "-m", "pip", "--python", str(python), "install"]
        + ["--no-index", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    return env_dir


def test_an_empty_venv_runs_init_write_query_offline(installed: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "TRUSS_", "GIT_"))}
    env |= {
        "HOME": str(home),
        "PATH": f"{installed / 'bin'}{os.pathsep}/usr/bin:/bin",
        "GIT_AUTHOR_NAME": "New Comer",
        "GIT_AUTHOR_EMAIL": "new@example.com",
        "GIT_COMMITTER_NAME": "New Comer",
        "GIT_COMMITTER_EMAIL": "new@example.com",
    }
    env.pop("VIRTUAL_ENV", None)
    script = """
        python -c 'import sys, truss_files as t; assert t.__file__.startswith(sys.prefix)'
        truss-files init "$HOME/mem"
        cd "$HOME/mem"
        truss-files write --kind lesson --key ci "Retry the network tests once." >/dev/null
        truss-files query "network tests" --min-trust unverified --format text
    """
    done = subprocess.run(
        [*_offline(), "bash", "-euo", "pipefail", "-c", script],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Retry the network tests once." in done.stdout


def test_mypy_reads_the_installed_packages_types(installed: Path, tmp_path: Path) -> None:
    user = tmp_path / "user.py"
    user.write_text(
        "from truss_files import MemoryStore\n\n"
        "def count(store: MemoryStore) -> int:\n"
        "    return len(list(store.iter_entries()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--python-executable"]
        + [str(installed / "bin" / "python"), "--follow-imports=skip", str(user)],
        cwd=tmp_path,  # no pyproject: none of our own mypy settings (ignore_missing_imports)
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "missing library stubs" not in done.stdout, done.stdout
    assert "import-untyped" not in done.stdout, done.stdout
    assert done.returncode == 0, done.stdout


def test_no_doc_installs_by_a_name_no_index_serves() -> None:
    """README, docs and hook manifest install from git or a wheel: `pip install truss-files`
    (or `'truss-files[x]'` with no `@ git+…`) would ask an index that has no such project."""
    bare = re.compile(r"""(pip|pipx|uv pip) install\s+['"]?truss-files(\[[\w,]+\])?(?!\S* @ )""")
    files = [ROOT / "README.md", ROOT / ".pre-commit-hooks.yaml", *ROOT.glob("docs/**/*")]
    files += [*ROOT.glob("deploy/**/*")]
    for path in (p for p in files if p.is_file()):
        text = path.read_text(encoding="utf-8")
        for line in text.splitlines():
            assert not bare.search(line), f"{path.name}: {line.strip()}"
        assert "pypi.org" not in text and "test.pypi" not in text, path.name


def test_the_readmes_hook_ids_are_the_manifests_and_no_tag_is_invented() -> None:
    import yaml

    manifest = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    defined = {hook["id"] for hook in manifest}
    readme = (ROOT / "docs" / "operators" / "enforcement.md").read_text()
    section = readme[: readme.index("\n## Managing signers and roles")]
    named = set(re.findall(r"(?:- |\{)id: ([\w-]+)", section)) | set(
        re.findall(r"`(truss-[\w-]+)`", section.split("```yaml", 1)[0])
    )
    named -= {"truss-files"}
    assert named == defined, (named, defined)
    for block in re.findall(r"```yaml\n(.*?)```", section, re.S):
        for repo in yaml.safe_load(block)["repos"]:
            assert {h["id"] for h in repo["hooks"]} == defined
            if repo["repo"] != "local":
                assert re.fullmatch(r"[0-9a-f]{40}", repo["rev"]), repo["rev"]
    tags = subprocess.run(
        ["git", "tag", "--list"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for text in (readme, (ROOT / ".pre-commit-hooks.yaml").read_text()):
        for rev in re.findall(r"rev: (v[\w.]+)", text):
            assert rev in tags, f"rev: {rev} names a tag this repository does not have"
