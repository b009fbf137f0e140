"""docs/secrets.md: its shell block runs as a newcomer would, and says what happens."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "secrets.md"


def test_the_secrets_page_runs_and_refuses_the_token(tmp_path: Path) -> None:
    blocks = re.findall(r"^```sh\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), re.M | re.S)
    assert len(blocks) == 1
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "TRUSS_"))}
    env |= {"HOME": str(home), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", blocks[0]],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["exit 1", "0"]
    assert "field 'body', line 1, column 13: github-token" in done.stderr
    assert "ghp_" not in done.stderr and "a1B2c3D4e5" not in done.stdout + done.stderr
