"""A reproducible memory corpus for the recall benchmarks: same seed, same notes, same files.

``generate(n, seed)`` makes ``n`` entries of 20-200 words (uniform) that read like an agent's
working notes: prose whose commonest words are real English ones (``the``, ``to``, ``when``,
``retry``...), the rest drawn from a 20,000-word pronounceable vocabulary, all with Zipf weights
(s = 1, as in natural text), cut into sentences; plus 0-6 code identifiers a note (snake_case,
CamelCase, dotted paths, error codes, version numbers) drawn with Zipf weights from a pool of
4,000. Kinds lesson / decision / fact / playbook, keys from 2,000 topics per kind, and 30% of
them verified with a verdict block of realistic size (the recall index keeps the block's text,
so its size matters; its signature is not a real one -- recall does not verify, ``audit`` does).

Files are rendered by filling a per-(kind, key, trust) template made with
``entryfile.serialize`` (100k files in seconds rather than minutes); every 997th file is
rendered the slow way too and must match byte for byte.

``realistic_queries(n, seed)`` draws what agents ask: questions that carry common words ("why
does the ... fail"), identifiers alone or among words, and plain runs of 2-4 content words.
``classify`` puts a query in its class by measurement, not by intent: ``common-word`` when one
of its tokens is in more than half of the notes searched, else ``identifier`` when it holds one,
else ``plain``.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from truss_files.format import entryfile
from truss_files.model import Entry, Kind, Layer, Provenance, Trust

from .common import PRINCIPAL, vocabulary

__all__ = [
    "QUERY_CLASSES",
    "Corpus",
    "classify",
    "document_frequency",
    "generate",
    "identifiers",
    "realistic_queries",
    "words",
]

VOCAB_SIZE = 20_000
IDENTIFIERS = 4_000
KINDS = (Kind.LESSON, Kind.DECISION, Kind.FACT, Kind.PLAYBOOK)
TOPICS = 2_000
VERIFIED_SHARE = 0.3
CREATED = "2026-01-01T00:00:00Z"
QUERY_CLASSES = ("common-word", "identifier", "plain")

# The head of the Zipf law: English as engineers write it in notes, commonest first. Its first
# ~15 words land in more than half of the notes, as "the" and "to" do in real ones.
_ENGLISH = (
    "the error to test a fails and run of use in config is build for after on retry it "
    "check with cache when not should be this timeout we from before only if request but "
    "server by client so deploy then fix at update version log tests need new file branch "
    "value call set default path read write start again keep first instead because worker "
    "queue job token key user service release broken slow memory disk limit missing failed "
    "works wrong add remove change move rename open close send wait lock commit merge push "
    "pull schema field index query migrate rollback restart"
)
ENGLISH = tuple(_ENGLISH.split())
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


def words() -> list[str]:
    """The corpus's vocabulary in Zipf rank order: the English head, then invented words."""
    head = list(ENGLISH)
    taken = set(head)
    tail = [w for w in vocabulary(VOCAB_SIZE, seed=7) if w not in taken]
    return head + tail[: VOCAB_SIZE - len(head)]


def identifiers(count: int = IDENTIFIERS, seed: int = 11) -> list[str]:
    """Code identifiers of five shapes, made of the vocabulary's middle words (rank order)."""
    rng = random.Random(seed)
    pool = words()[200:5_000]
    made: dict[str, None] = {}
    while len(made) < count:
        a, b, c = rng.sample(pool, 3)
        shape = rng.randrange(5)
        if shape == 0:
            name = f"{a}_{b}" if rng.random() < 0.6 else f"{a}_{b}_{c}"
        elif shape == 1:
            name = a.capitalize() + b.capitalize() + rng.choice(("", "Error", "Policy", "Client"))
        elif shape == 2:
            name = f"{a}.{b}.{c}" if rng.random() < 0.5 else f"{a}.{b}"
        elif shape == 3:
            name = rng.choice((f"E{rng.randint(1000, 9999)}", f"ERR_{a.upper()}_{b.upper()}"))
        else:
            name = f"v{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 20)}"
        made[name] = None
    return list(made)


def generate(n: int, seed: int = 0, verified_share: float = VERIFIED_SHARE) -> Corpus:
    rng = random.Random(seed)
    vocab = words()
    cum = _zipf(len(vocab))
    idents = identifiers()
    ident_cum = _zipf(len(idents))
    renderer = _Renderer()
    entries: list[Entry] = []
    files: dict[str, bytes] = {}
    for i in range(n):
        kind = KINDS[rng.randrange(len(KINDS))]
        body = _prose(rng, rng.choices(vocab, cum_weights=cum, k=rng.randint(20, 200)))
        named = rng.choices(idents, cum_weights=ident_cum, k=rng.randint(0, 6))
        for name in named:
            at = rng.randrange(len(body) + 1)
            body[at:at] = [f"`{name}`" if rng.random() < 0.5 else name]
        base = Entry(
            kind=kind,
            key=f"{kind.value}-topic-{rng.randrange(TOPICS)}",
            body=f"{' '.join(body)} (note {seed}-{i})",
            layer=Layer.TASK,
            author=f"agent:{PRINCIPAL}",
            created=CREATED,
            # Every entry names where it came from (truss.toml [policy] provenance).
            provenance=Provenance(produced_by=f"api:{PRINCIPAL}"),
        )
        trust = Trust.VERIFIED if rng.random() < verified_share else Trust.UNVERIFIED
        entry = _with_trust(base, trust)
        data = renderer.render(entry)
        if i % 997 == 0 and data != entryfile.serialize(entry).encode():
            raise AssertionError(f"fast rendering drifted from entryfile for {entry.id}")
        entries.append(entry)
        files[entry.path] = data
    return Corpus(entries, files)


def _prose(rng: random.Random, drawn: list[str]) -> list[str]:
    """Sentences of 6-18 words: a capital first, a full stop last."""
    out: list[str] = []
    at = 0
    while at < len(drawn):
        size = rng.randint(6, 18)
        sentence = drawn[at : at + size]
        sentence[0] = sentence[0].capitalize()
        sentence[-1] += "."
        out += sentence
        at += size
    return out


_QUESTIONS = (
    "why does the {w} fail",
    "how to run {w} with the {x}",
    "error in {w} after {x}",
    "{w} test fails",
    "when to use {w} in config",
    "{w} build is slow on the {x}",
    "which {w} should {x} use",
    "retry {w} on timeout",
)


def realistic_queries(n: int, seed: int = 1) -> list[str]:
    """Realistic agent queries: some 28% carry a common
    word (38% are questions, not all of whose words are common), 30% name an identifier
    (some among words), 32% are plain content words.
    Content words skip the English head and follow the same Zipf law as the notes."""
    rng = random.Random(seed)
    vocab = words()
    content = vocab[len(ENGLISH) :]
    cum = _zipf(len(content), offset=len(ENGLISH))
    idents = identifiers()
    ident_cum = _zipf(len(idents))

    def word() -> str:
        return rng.choices(content, cum_weights=cum)[0]

    def ident() -> str:
        return rng.choices(idents, cum_weights=ident_cum)[0]

    out = []
    for _ in range(n):
        draw = rng.random()
        if draw < 0.38:
            filler = ident() if rng.random() < 0.3 else word()
            out.append(rng.choice(_QUESTIONS).format(w=filler, x=word()))
        elif draw < 0.68:
            shape = rng.randrange(3)
            out.append(
                ident() if shape == 0 else f"{ident()} {word()}" if shape == 1 else
                f"{word()} {ident()} {word()}"
            )  # fmt: skip
        else:
            out.append(" ".join(word() for _ in range(rng.randint(2, 4))))
    return out


def document_frequency(docs: Iterable[Iterable[str]]) -> tuple[Counter[str], int]:
    """How many documents hold each token, and how many documents there are."""
    df: Counter[str] = Counter()
    count = 0
    for tokens in docs:
        df.update(set(tokens))
        count += 1
    return df, count


_IDENTIFIER = re.compile(
    r"\w+_\w+|\b[a-z]+[A-Z]\w*|\b[A-Z][a-z]+[A-Z]\w*|\b\w+\.\w+|\b[A-Z]+\d+\b|\bv?\d+\.\d+"
)


def classify(query: str, df: Counter[str], docs: int) -> str:
    """The query's class by measurement over the notes searched (see the module's doc)."""
    from truss_files.recall.tokenize import tokenize

    if any(df[t] * 2 > docs for t in tokenize(query)):
        return "common-word"
    return "identifier" if _IDENTIFIER.search(query) else "plain"


def _zipf(size: int, offset: int = 0) -> list[float]:
    return _accumulate([1 / (rank + 1 + offset) for rank in range(size)])


def _accumulate(values: Sequence[float]) -> list[float]:
    total = 0.0
    out = []
    for value in values:
        total += value
        out.append(total)
    return out
