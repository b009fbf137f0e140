"""``make demo``: answer a few memory questions from the project's own store.

Shows the main job — trust-filtered recall over signed memory — on ``memories/`` in this
repository: what is stored, what a query returns at the default (verified) floor, what only
appears when the caller widens the floor, and that the history audits clean. Then, on a
scratch store, the prefix a run starts from (``context``) and a delta since its cursor.
"""

from __future__ import annotations

import os
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from truss_files.errors import TrussError
from truss_files.facade import MemoryStore
from truss_files.model import Trust
from truss_files.recall.engine import search_snapshot
from truss_files.recall.pipeline import Filter
from truss_files.signing import Ed25519Signer
from truss_files.store.initstore import init_store
from truss_files.trust.audit import audit

if TYPE_CHECKING:
    from truss_files.git.gitstore import Snapshot

QUESTIONS = (
    "how do I undo a bad promotion?",
    "why are entry ids hashes of their content?",
    "can unverified notes change how verified entries rank?",
    "adding a key for a new teammate",
)


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=88, initial_indent="      ", subsequent_indent="      ")


def main(path: str = ".") -> int:
    try:
        store = MemoryStore(path)
        snap = store.snapshot()
        has_config = snap.read("truss.toml") is not None
    except TrussError as exc:
        return _no_store(path, exc.message)
    if not has_config:
        return _no_store(path, f"{path} holds no truss.toml")
    return _run(store, snap, path)


def _no_store(path: str, why: str) -> int:
    """Outside a checkout: say what the demo needs, not a traceback."""
    print(
        f"examples.demo: no store to show at {Path(path).resolve()} ({why}).\n"
        "The demo answers from the truss-files repository's own store: run `make demo` in a "
        "checkout of it, or name a store: `python -m examples.demo /path/to/store`.",
        file=sys.stderr,
    )
    return 2


def _run(store: MemoryStore, snap: Snapshot, path: str) -> int:
    entries = list(store.iter_entries(snap))
    by_trust = Counter(e.trust.value for e in entries)
    print(f"Store {Path(path).resolve()} at {snap.oid and snap.oid[:12]}: {len(entries)} entries")
    print("  " + ", ".join(f"{n} {t}" for t, n in sorted(by_trust.items())))

    for question in QUESTIONS:
        print(f"\n? {question}")
        hits = search_snapshot(
            store, snap, question, Filter(min_trust=Trust.VERIFIED), 2, gate=store.gate
        ).hits
        if not hits:
            print("  (no verified memory matches)")
        for hit in hits:
            e = hit.entry
            print(f"  {e.kind.value}/{e.key}  [{e.trust.value}, score {hit.score:.2f}]")
            print(_wrap(e.body))

    question = "should JSON be the default output for agents?"
    print(f"\n? {question}")
    strict = search_snapshot(
        store, snap, question, Filter(min_trust=Trust.VERIFIED), 1, gate=store.gate
    ).hits
    wide = search_snapshot(
        store, snap, question, Filter(min_trust=Trust.UNVERIFIED), 1, gate=store.gate
    ).hits
    for label, hits in (("at the verified floor", strict), ("widened to unverified", wide)):
        for hit in hits:
            e = hit.entry
            print(f"  {label}: {e.kind.value}/{e.key} [{e.trust.value}]")
            print(_wrap(e.body))

    report = audit(store.git)
    verdict = "clean" if report.ok else f"{len(report.violations)} violation(s)"
    print(f"\nAudit: {report.checked} commits from root {report.root[:12]}: {verdict}")
    for violation in report.violations:
        print(f"  {violation}")
    if report.ok:
        show_context()
    return 0 if report.ok else 1


def show_context() -> None:
    """A run's prefix and a delta, on a scratch store (the project's own is never written)."""
    with tempfile.TemporaryDirectory(prefix="truss-demo-") as tmp:
        signer = Ed25519Signer.generate("demo@example.test")
        # The scratch store's writes and promotions take the layered settings (facade): no
        # agent table, contract or borrowed panel key of the caller's applies to it.
        skip = ("TRUSS_ROOT", "TRUSS_AGENT", "TRUSS_CONTRACT", "TRUSS_PANEL_KEY")
        env = {k: v for k, v in os.environ.items() if k not in skip}
        env.update(GIT_COMMITTER_NAME="Demo", GIT_COMMITTER_EMAIL="demo@example.test")
        init_store(Path(tmp), signer, "demo@example.test", environ=env)
        demo = MemoryStore(tmp, signer=signer, environ=env)

        def verified(kind: str, key: str, body: str) -> str:
            entry = demo.write(kind, key, body)
            demo.promote(entry.id, demo.sign_verdict(entry.id, "PASS", note="demo"))
            return entry.id

        verified("goal", "release", "Ship 0.2 with the context command documented.")
        lesson = verified("lesson", "ci-flakes", "Retry the network tests once.")
        prefix = demo.context("demo-run")
        data = prefix.render("anthropic")
        print("\nContext of run demo-run (anthropic format, cache order):")
        tools = ", ".join(t["name"] for t in data["tools"])
        print(f"  tools: {tools}  <- cache breakpoint")
        for block in data["system"]:
            first = block["text"].strip().splitlines()[0]
            mark = "  <- cache breakpoint" if "cache_control" in block else ""
            print(f"  system: {first[:70]}{mark}")
        for message in data["messages"]:
            print(_wrap(message["content"][0]["text"]).replace("      ", "  messages: ", 1))
        print(f"  tokens: {data['tokens']}")
        print(f"  cursor: {prefix.cursor}")

        demo.demote(lesson, "the retry hid a real race")
        verified("fact", "db", "Postgres 16 in production.")
        delta = demo.delta_since(prefix.cursor)
        print("\nDelta since that cursor (inject this on resume, not the store):")
        for change in delta.changes:
            print(f"  {change.kind}/{change.key}: {change.from_ or '(new)'} -> {change.to}")
        same = demo.context("demo-run").stable_bytes() == prefix.stable_bytes()
        print(f"  tools + system bytes of demo-run unchanged: {same}")


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
