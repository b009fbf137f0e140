"""A reproducible memory corpus for the recall benchmarks: same seed, same notes, same files.

``generate(n, seed)`` makes ``n`` entries of 20-200 words (uniform), words drawn from a
20,000-word pronounceable vocabulary with Zipf weights (s = 1, as in natural text), kinds
lesson / decision / fact / playbook, keys from 2,000 topics per kind, and 30% of them verified
with a verdict block of realistic size (the recall index keeps the block's text, so its size
matters; its signature is not a real one -- recall does not verify, ``audit`` does).

Files are rendered by filling a per-(kind, key, trust) template made with
``entryfile.serialize`` (100k files in seconds rather than minutes); every 997th file is
rendered the slow way too and must match byte for byte.

``queries(n, seed)`` draws 2-4 word queries from the same vocabulary, skipping its 20 most
common words (they sit in over half the notes, like stopwords) and weighting the rest by the
same Zipf law: queries use ordinary words, not only rare ones.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from truss_files import entryfile
from truss_files.model import Entry, Kind, Layer, Trust

from .common import PRINCIPAL, vocabulary

__all__ = ["Corpus", "generate", "queries"]

VOCAB_SIZE = 20_000
KINDS = (Kind.LESSON, Kind.DECISION, Kind.FACT, Kind.PLAYBOOK)
TOPICS = 2_000
VERIFIED_SHARE = 0.3
CREATED = "2026-01-01T00:00:00Z"
SKIP_COMMON = 20

_SIGNATURE = "\n".join(
    ["-----BEGIN SSH SIGNATURE-----"]
    + ["U1NIU0lHAAAAAQAAADMAAAALc3NoLWVkMjU1MTkAAAAgBzsoI7F4Gi8oEFXbVSOYX7L2Wt"] * 4
    + ["-----END SSH SIGNATURE-----"]
)


def _verdict(entry_id: str) -> dict[str, object]:
    return {
        "entry": entry_id,
        "key": f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAc7KCOxeBovKBBV21UjmF {PRINCIPAL}",
        "outcome": "PASS",
        "policy": "manual",
        "quorum": "1-of-1",
        "signature": _SIGNATURE,
        "signer": PRINCIPAL,
        "time": CREATED,
        "verdict_id": "0f" * 16,
        "votes": [
            {
                "evidence": {"note": "checked by the benchmark corpus generator"},
                "kind": "human",
                "reviewer": PRINCIPAL,
                "vote": "PASS",
            }
        ],
    }


@dataclasses.dataclass(frozen=True)
class Corpus:
    entries: list[Entry]
    files: dict[str, bytes]  # path -> file content

    @property
    def verified(self) -> list[Entry]:
        return [e for e in self.entries if e.trust is Trust.VERIFIED]


class _Renderer:
    def __init__(self) -> None:
        self._templates: dict[tuple[str, str, str], tuple[str, str]] = {}

    def render(self, entry: Entry) -> bytes:
        slot = (entry.kind.value, entry.key, entry.trust.value)
        found = self._templates.get(slot)
        if found is None:
            probe = _with_trust(dataclasses.replace(entry, body="x"), entry.trust)
            text = entryfile.serialize(probe)
            found = (text[: -len("x\n")], probe.id)
            self._templates[slot] = found
        template, probe_id = found
        # The probe's id appears in the id line and, when verified, in the verdict's entry.
        return (template.replace(probe_id, entry.id) + entry.body + "\n").encode()


def _with_trust(entry: Entry, trust: Trust) -> Entry:
    if trust is not Trust.VERIFIED:
        return entry
    prov = dataclasses.replace(entry.provenance, verified_by=_verdict(entry.id))
    return dataclasses.replace(entry, trust=Trust.VERIFIED, provenance=prov)


def generate(n: int, seed: int = 0, verified_share: float = VERIFIED_SHARE) -> Corpus:
    rng = random.Random(seed)
    words = vocabulary(VOCAB_SIZE, seed=7)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    cum = list(_accumulate(weights))
    renderer = _Renderer()
    entries: list[Entry] = []
    files: dict[str, bytes] = {}
    for i in range(n):
        kind = KINDS[rng.randrange(len(KINDS))]
        count = rng.randint(20, 200)
        text = " ".join(rng.choices(words, cum_weights=cum, k=count))
        base = Entry(
            kind=kind,
            key=f"{kind.value}-topic-{rng.randrange(TOPICS)}",
            body=f"{text}. (note {seed}-{i})",
            layer=Layer.TASK,
            author=f"agent:{PRINCIPAL}",
            created=CREATED,
        )
        trust = Trust.VERIFIED if rng.random() < verified_share else Trust.UNVERIFIED
        entry = _with_trust(base, trust)
        data = renderer.render(entry)
        if i % 997 == 0 and data != entryfile.serialize(entry).encode():
            raise AssertionError(f"fast rendering drifted from entryfile for {entry.id}")
        entries.append(entry)
        files[entry.path] = data
    return Corpus(entries, files)


def queries(n: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    words = vocabulary(VOCAB_SIZE, seed=7)[SKIP_COMMON:]
    weights = [1 / (rank + 1 + SKIP_COMMON) for rank in range(len(words))]
    cum = list(_accumulate(weights))
    return [" ".join(rng.choices(words, cum_weights=cum, k=rng.randint(2, 4))) for _ in range(n)]


def _accumulate(values: Sequence[float]) -> list[float]:
    total = 0.0
    out = []
    for value in values:
        total += value
        out.append(total)
    return out
