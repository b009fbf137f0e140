"""Review and enforcement: what the pre-receive gate, ``diff`` and the merge driver cost.

A bare store gets N signed writes (1 in 10 promoted). Figures, each beside a baseline from the
same run:

- pushing the whole history (``git push``) into an empty bare repository with the
  pre-receive gate installed, against the same push into one without it: the gate's price;
- ``change_set`` + markdown over the N-commit range, against ``audit()`` of the same range
  (the diff runs the audit and then reads both trees): the semantic diff's price on top;
- ``merge_entry`` on three versions of one entry (one promoted, one promoted then demoted),
  against parsing the three versions: the driver's price on top of reading the files.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from truss_files.facade import MemoryStore
from truss_files.faces.hooks import install_hooks
from truss_files.format.entryfile import parse, serialize
from truss_files.review.diff import change_set
from truss_files.review.merge import merge_entry
from truss_files.review.render import to_markdown
from truss_files.trust.audit import audit

from .common import Figure, measure_pair, new_store, progress, scaled, scratch

REPEATS = 5


def _history(store: MemoryStore, writes: int) -> str:
    base = store.git.tip()
    assert base is not None
    for i in range(writes):
        entry = store.write("fact", f"review-{i}", f"review benchmark fact {i}")
        if i % 10 == 0:
            store.promote(entry.id, store.sign_verdict(entry.id, "PASS", note="bench"))
    return str(base.id)


def _targets(tmp: Path, name: str, count: int, *, gated: bool, root: str) -> list[Path]:
    out = []
    for i in range(count):
        path = tmp / f"{name}-{i}.git"
        subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
        if gated:
            install_hooks(path, server=True, root=root)
        out.append(path)
    return out


def run(quick: bool) -> list[Figure]:
    writes = scaled(200 if quick else 1_000)
    figures: list[Figure] = []
    with scratch("review") as tmp:
        store = new_store(tmp / "store.git")
        root = str(store.git.tip().id)  # type: ignore[union-attr]
        base = _history(store, writes)
        n = writes + writes // 10 + (1 if writes % 10 else 0)
        src = str(store.git.git_dir)
        progress(f"{n} signed commits; pushing them {REPEATS}x with and without the gate")
        runs = REPEATS + 1  # one warm-up each
        gated = _targets(tmp, "gated", runs, gated=True, root=root)
        plain = _targets(tmp, "plain", runs, gated=False, root=root)

        def push(targets: list[Path]) -> None:
            done = subprocess.run(
                ["git", "--git-dir", src, "push", "-q", str(targets.pop()), "main"],
                capture_output=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(done.stderr.decode()[-500:])

        gate_t, plain_t = measure_pair(lambda: push(gated), lambda: push(plain), REPEATS)
        figures.append(
            Figure(
                name=f"git push of {n} commits through pre-receive",
                value=gate_t.p50,
                unit="s",
                baseline_name="the same push, no hook",
                baseline_value=plain_t.p50,
                note=f"median of {REPEATS}; {gate_t.p50 / n * 1e3:.2f} ms per commit",
            )
        )

        progress(f"diff and audit of {base[:12]}..main")
        rng = f"{base}..main"
        diff_t, audit_t = measure_pair(
            lambda: to_markdown(change_set(store.git, rng, root=root, environ={})),
            lambda: audit(store.git, rng, root=root, environ={}),
            REPEATS,
        )
        figures.append(
            Figure(
                name=f"diff --format markdown of {n} commits",
                value=diff_t.p50,
                unit="s",
                baseline_name="audit() of the same range",
                baseline_value=audit_t.p50,
                note=f"median of {REPEATS}",
            )
        )

        entry = store.write("fact", "merge-bench", "merged a thousand times")
        verdict = store.sign_verdict(entry.id, "PASS", note="bench")
        promoted = store.promote(entry.id, verdict)
        demoted = store.demote(entry.id, "bench")
        sides = [serialize(e).encode() for e in (entry, promoted, demoted)]
        calls = 200

        def merge_many() -> None:
            for _ in range(calls):
                if not merge_entry(sides[0], sides[1], sides[2], entry.path).clean:
                    raise RuntimeError("the benchmark merge did not settle")

        def parse_many() -> None:
            for _ in range(calls):
                for data in sides:
                    parse(data, entry.path)

        merge_t, parse_t = measure_pair(merge_many, parse_many, REPEATS)
        figures.append(
            Figure(
                name="merge_entry (promoted vs demoted)",
                value=merge_t.p50 / calls * 1e3,
                unit="ms",
                baseline_name="parsing its three inputs",
                baseline_value=parse_t.p50 / calls * 1e3,
                note=f"median of {REPEATS} x {calls} calls",
            )
        )
    return figures
