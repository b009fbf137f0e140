"""`git merge` of store branches with the hooks installed: a signed merge finishes without a
Truss-Op trailer and audits clean; a merge whose resolution forges a promotion is refused by
the commit-msg hook, judged against both parents."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BIN = str(Path(sys.executable).parent)


def _sh(home: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "TRUSS_", "GIT_"))}
    env |= {"HOME": str(home), "PATH": f"{BIN}{os.pathsep}{env['PATH']}"}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


SETUP = """
git config --global user.email new@example.com
git config --global user.name "New Comer"
truss-files init ~/mem >/dev/null
cd ~/mem
truss-files hooks install >/dev/null
KEY=$(truss-files keys list --format text | awk 'NR == 1 {print $3}')
git switch -q -c side
ID=$(truss-files write --kind fact --key cache "The cache lives in S3.")
git switch -q -
truss-files write --kind fact --key deploy "Deploys happen on Tuesdays." >/dev/null
"""


def test_a_signed_git_merge_of_store_branches_finishes_and_audits(tmp_path: Path) -> None:
    done = _sh(
        tmp_path,
        SETUP
        + """
git -c gpg.format=ssh -c user.signingkey="$KEY" merge -q -S --no-edit side >/dev/null
git log -1 --format=%P | wc -w
truss-files audit --format text
""",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].strip() == "2"  # a real merge commit
    assert "ok" in done.stdout.splitlines()[-1]


def test_a_merge_that_forges_a_promotion_is_refused(tmp_path: Path) -> None:
    done = _sh(
        tmp_path,
        SETUP
        + """
git -c gpg.format=ssh -c user.signingkey="$KEY" merge -S --no-commit --no-ff side
FILE=$(git ls-files memories | xargs grep -l "S3" | head -n1)
sed -i 's/^trust: unverified$/trust: verified/' "$FILE"
git add "$FILE"
if git -c gpg.format=ssh -c user.signingkey="$KEY" commit -S --no-edit; then
  echo FORGED-MERGE-COMMITTED
fi
""",
    )
    assert "FORGED-MERGE-COMMITTED" not in done.stdout, done.stderr
    assert "truss-files" in done.stderr and "verified" in done.stderr, done.stderr
