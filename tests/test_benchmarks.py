"""Smoke test for ``make bench``: the runner finds a benchmark, runs it and prints ratios.

Toy sizes (``--scale``), no timing assertions: a timing belongs in the benchmark's output.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RATIO = re.compile(r"\s(\d+\.\d+|inf)x(\s|$)")


def test_bench_write_quick_prints_figures_beside_baselines(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--quick",
            "--scale",
            "0.02",
            "--json",
            str(out),
            "bench_write",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("figure"))
    assert "baseline" in lines[header] and "ratio" in lines[header]
    rows = [line for line in lines[header + 2 :] if line.strip() and not line.startswith("(")]
    rows = rows[: next((i for i, r in enumerate(rows) if r == "notes:"), len(rows))]
    names = [r.split("  ")[0] for r in rows]
    # Every size's p50 and p95 beside the flat layout, the checkout case and the bulk import.
    assert sum("fan-out" in n and "write p50" in n for n in names) == 2
    assert any("checkout" in n for n in names)
    assert any(n.startswith("bulk import") for n in names)
    # 8 concurrent writer processes, p50 and p95, each beside a single writer.
    assert sum("8 concurrent writer processes" in n for n in names) == 2
    assert all(RATIO.search(r) for r in rows), rows
    assert all("flat layout" in r or "bare repo" in r or "single writer" in r for r in rows), rows
    assert '"baseline_value"' in out.read_text()


def test_unknown_benchmark_is_refused_with_the_choices() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "no_such_bench"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "bench_write" in done.stderr
