"""The docs pages' shell snippets run, in order, as a newcomer would paste them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PAGES = ("export-import.md", "as-of.md", "forgetting.md")


def sh_blocks(page: str) -> str:
    text = (ROOT / "docs" / page).read_text()
    return "\n".join(m.group(1) for m in re.finditer(r"^```sh\n(.*?)^```$", text, re.M | re.S))


@pytest.mark.parametrize("page", [p for p in PAGES if (ROOT / "docs" / p).exists()])
def test_the_pages_snippets_run_in_order(page: str, tmp_path: Path) -> None:
    script = sh_blocks(page)
    assert script.strip(), f"docs/{page} has no sh block"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
