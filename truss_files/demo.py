"""``make demo``: answer a few memory questions from the project's own store.

Shows the main job — trust-filtered recall over signed memory — on ``memories/`` in this
repository: what is stored, what a query returns at the default (verified) floor, what only
appears when the caller widens the floor, and that the history audits clean.
"""

from __future__ import annotations

import sys
import textwrap
from collections import Counter
from pathlib import Path

from .audit import audit
from .model import Trust
from .recall.pipeline import Filter, recall
from .store import MemoryStore

QUESTIONS = (
    "how do I undo a bad promotion?",
    "why are entry ids hashes of their content?",
    "can unverified notes change how verified entries rank?",
    "adding a key for a new teammate",
)


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=88, initial_indent="      ", subsequent_indent="      ")


def main(path: str = ".") -> int:
    store = MemoryStore(path)
    snap = store.snapshot()
    entries = list(store.iter_entries(snap))
    by_trust = Counter(e.trust.value for e in entries)
    print(f"Store {Path(path).resolve()} at {snap.oid and snap.oid[:12]}: {len(entries)} entries")
    print("  " + ", ".join(f"{n} {t}" for t, n in sorted(by_trust.items())))

    for question in QUESTIONS:
        print(f"\n? {question}")
        hits = recall(entries, question, Filter(min_trust=Trust.VERIFIED), limit=2)
        if not hits:
            print("  (no verified memory matches)")
        for hit in hits:
            e = hit.entry
            print(f"  {e.kind.value}/{e.key}  [{e.trust.value}, score {hit.score:.2f}]")
            print(_wrap(e.body))

    question = "should JSON be the default output for agents?"
    print(f"\n? {question}")
    strict = recall(entries, question, Filter(min_trust=Trust.VERIFIED), limit=1)
    wide = recall(entries, question, Filter(min_trust=Trust.UNVERIFIED), limit=1)
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
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
