"""``python -m benchmarks [NAME...] [--quick] [--scale F] [--json PATH] [--markdown PATH]``
(``make bench``); ``python -m benchmarks locomo --data PATH [--conversations N]`` for LoCoMo.

Runs every ``benchmarks/bench_*.py`` (or the named ones; ``write`` means ``bench_write``), each
in its own Python process so one benchmark's heap and peak RSS do not colour the next, and
prints each module's table as it finishes: figure, value, baseline, ratio, target.
Adding a benchmark is adding a ``bench_<name>.py`` with ``def run(quick: bool) -> list[Figure]``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import common
from .common import Figure

# The locomo benchmark's options, passed to its child process (benchmarks/bench_locomo.py).
LOCOMO_DATA_ENV = "TRUSS_LOCOMO"
LOCOMO_CONVERSATIONS_ENV = "TRUSS_LOCOMO_CONVERSATIONS"

PACKAGE = "benchmarks"


def discover() -> list[str]:
    """Every ``bench_*`` module of this package, sorted by name."""
    here = [str(Path(__file__).parent)]
    return sorted(m.name for m in pkgutil.iter_modules(here) if m.name.startswith("bench_"))


def resolve(names: list[str]) -> list[str]:
    known = discover()
    if not names:
        return known
    chosen = []
    for name in names:
        full = name if name.startswith("bench_") else f"bench_{name}"
        full = full.removesuffix(".py")
        if full not in known:
            raise SystemExit(f"no benchmark '{name}'; choose from: {', '.join(known)}")
        chosen.append(full)
    return chosen


def run_child(name: str, quick: bool, emit: Path) -> None:
    """Run one benchmark module in this process and write its figures as JSON to ``emit``."""
    module = importlib.import_module(f"{PACKAGE}.{name}")
    figures = module.run(quick)
    payload = {
        "module": name,
        "figures": [f.to_dict() for f in figures],
        "peak_rss_mb": common.peak_rss_mb(),
        # Free-form tables a module fills as it runs (e.g. bench_recall's side-by-side).
        "tables": list(getattr(module, "TABLES", [])),
    }
    emit.write_text(json.dumps(payload))


def run_module(name: str, quick: bool) -> dict[str, object]:
    """One benchmark in a fresh interpreter; progress streams to stderr as it runs."""
    with tempfile.TemporaryDirectory(prefix="truss-bench-") as tmp:
        emit = Path(tmp) / "figures.json"
        argv = [sys.executable, "-m", PACKAGE, "--child", name, "--emit", str(emit)]
        if quick:
            argv.append("--quick")
        start = time.perf_counter()
        # The repository root, so `-m benchmarks` resolves wherever the runner was started.
        done = subprocess.run(argv, stdout=sys.stderr, cwd=Path(__file__).resolve().parent.parent)
        took = time.perf_counter() - start
        if done.returncode != 0 or not emit.exists():
            return {"module": name, "error": f"exited {done.returncode}", "seconds": took}
        result: dict[str, object] = json.loads(emit.read_text())
        result["seconds"] = took
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run truss-files benchmarks; each figure beside a same-run baseline.",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="e.g. bench_write or write")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument(
        "--scale", type=float, help=f"multiply every size by this factor (env {common.SCALE_ENV})"
    )
    parser.add_argument("--json", metavar="PATH", help="also write all figures as JSON here")
    parser.add_argument(
        "--markdown",
        metavar="PATH",
        help="also write the figures as a docs page here (e.g. docs/reference/figures.md): "
        "the sections of the benchmarks run are replaced, the others kept",
    )
    parser.add_argument(
        "--data", metavar="PATH", help="LoCoMo's JSON for the locomo benchmark (read in place)"
    )
    parser.add_argument(
        "--conversations",
        type=int,
        metavar="N",
        help="how many LoCoMo conversations the locomo benchmark asks (default 1)",
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--emit", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.scale is not None:
        os.environ[common.SCALE_ENV] = str(args.scale)
    if args.data is not None:
        os.environ[LOCOMO_DATA_ENV] = str(Path(args.data).resolve())
    if args.conversations is not None:
        if args.conversations < 1:
            parser.error("--conversations must be at least 1")
        os.environ[LOCOMO_CONVERSATIONS_ENV] = str(args.conversations)
    if args.child:
        run_child(args.child, args.quick, Path(args.emit))
        return 0
    if args.list:
        print("\n".join(discover()))
        return 0

    names = resolve(args.names)
    mode = "quick" if args.quick else "full"
    print(
        f"truss-files benchmarks ({mode}, scale {common.scale():g}); "
        "ratio = value / baseline, both measured in this run",
        flush=True,
    )
    results = []
    failed = []
    for name in names:
        print(f"\n== {name}", flush=True)
        result = run_module(name, args.quick)
        results.append(result)
        if "error" in result:
            failed.append(name)
            print(f"{name} failed ({result['error']}); see its output above", flush=True)
            continue
        figures = [Figure.from_dict(f) for f in result["figures"]]  # type: ignore[attr-defined]
        common.print_table(figures)
        for table in result.get("tables", []):  # type: ignore[attr-defined]
            print(f"\n{table}", flush=True)
        print(f"({result['seconds']:.0f} s, peak RSS {result['peak_rss_mb']:.0f} MB)", flush=True)

    all_figures = [
        Figure.from_dict(f)
        for r in results
        for f in r.get("figures", [])  # type: ignore[attr-defined]
    ]
    targets = [f for f in all_figures if f.target is not None]
    if targets:
        missed = [f for f in targets if not f.met]
        print(f"\ntargets: {len(targets) - len(missed)} met, {len(missed)} missed", flush=True)
        for f in missed:
            print(f"  MISSED {f.name}: {common.fmt_value(f.value, f.unit)}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.markdown:
        write_markdown(Path(args.markdown), results, argv if argv is not None else sys.argv[1:])
    return 1 if failed else 0


PAGE_HEAD = """# Benchmark figures

Written by `python -m benchmarks ... --markdown PATH`: each section is the last run of that
benchmark, with the command that ran it; run it again to regenerate the section. Every ratio
is value / baseline, both measured in the same run on the same machine: compare ratios, never
milliseconds across sections.
"""


def write_markdown(path: Path, results: list[dict[str, object]], argv: list[str]) -> None:
    """Replace the sections of ``path`` for the benchmarks in ``results``; keep the others."""
    sections: dict[str, str] = {}
    if path.is_file():
        for part in path.read_text(encoding="utf-8").split("\n## ")[1:]:
            name, _, _ = part.partition("\n")
            sections[name.strip()] = "## " + part.rstrip() + "\n"
    shown: list[str] = []
    for arg, before in zip(argv, ["", *argv], strict=False):
        if arg == "--markdown" or arg.startswith("--markdown=") or before == "--markdown":
            continue
        shown.append(arg)
    command = " ".join(["python -m benchmarks", *shown])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    when = time.strftime("%Y-%m-%d", time.gmtime())
    for result in results:
        name = str(result["module"])
        if "error" in result:
            continue
        figures = [Figure.from_dict(f) for f in result["figures"]]  # type: ignore[attr-defined]
        body = [
            f"## {name}\n",
            f"`{command}` on {when}: {os.cpu_count()} cores, load average {load}, "
            f"{result['seconds']:.0f} s, peak RSS {result['peak_rss_mb']:.0f} MB.\n",
            common.markdown_table(figures),
        ]
        for table in result.get("tables", []):  # type: ignore[attr-defined]
            body.append(f"\n```text\n{table}\n```")
        sections[name] = "\n".join(body).rstrip() + "\n"
    text = PAGE_HEAD + "".join(f"\n{sections[name]}" for name in sorted(sections))
    path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
