"""Related words: a query also looks, at half weight, for the nearest word of each of its words.

Exact matching misses a note that says the thing another way: the stemmer leaves
``recovered`` (``recov``) and ``recovery`` (``recoveri``) apart, ``forgot`` and ``forgotten``,
``slow`` and ``slower``. Each term of a query (after acronyms) brings in the one word the
embedding model puts nearest to it, and a note's score becomes its BM25 for the query's own
terms plus ``RELATED_WEIGHT`` (0.5) times its BM25 for the added words -- one query, the
added words boosted clauses of it (``floors.body_query``), over the same admitted entries and
the same floor statistics. Exact mode stays
explainable: the added words are plain index terms, and ``RecallResult.related_words``
(``--format json``: ``related_words``) lists them.

The table (``build_table``) comes from WordLlama's bundled token embeddings alone: the
whole-word tokens of its vocabulary (``▁word``: lowercase ASCII letters, 3 or more), grouped by
their index term (``tokenize.word_tokens``: Snowball stems), a term's vector the mean of its
words' rows; terms of 4 or more letters only (shorter ones are mostly word pieces: ``tri``,
``par``); each term's nearest other term when the cosine is at least ``MIN_SIMILARITY``. About
5,300 terms, ~4,000 with a related word. It ships as ``related_words.tsv`` (reviewable, ~50 KB),
so exact mode needs neither the model nor numpy (a query reads it and finds its terms in
place: ~0.1 ms);
``python -m truss_files.recall.related`` rebuilds it after a tokenizer change, and a test
checks it against a fresh build. ``[recall] related_words = false`` turns it off. Some pairs
are odd (``deploy`` -> ``militari``): half weight, and a word no admitted note holds changes
nothing (the plain query runs then, unchanged).

Trust: the table depends on the model alone, never on a store's notes, so nothing written
below a trust floor changes which words a query at the floor looks for; the added words are
scored, like every term, over the admitted entries only.

Measured with ``evaluate`` (recall@5 / MRR@10; chosen on the hard set's dev questions among
1-3 words per term, cosine 0.4-0.6, weight 0.3-0.7; each finished method looked at once on the
held-out questions)::

                                   tests/relevance   hard dev        hard held out
    exact before                   0.850 / 0.824     0.896 / 0.809   0.779 / 0.679
    exact with related words       0.879 / 0.836     0.906 / 0.840   0.837 / 0.697
    hybrid before                  0.879 / 0.841     0.962 / 0.864   0.798 / 0.690
    hybrid with related words      0.907 / 0.851     0.962 / 0.880   0.846 / 0.701

Tried and dropped: pseudo-relevance feedback (the top terms of the first 2 hits at weight 0.5:
dev 0.906 / 0.795, held out 0.779 / 0.679, no gain); the nearest words among a store's own
words, each embedded at query time (dev 0.906 / 0.827, held out 0.817 / 0.695: noisier --
``retention`` -> ``retried`` -- and it needs the model and a scan of the vocabulary per query);
2-3 words per term or weight 0.7 (dev MRR 0.80-0.83).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

from .modelfiles import embedding_layout, wordllama_files, wordllama_package
from .tokenize import STOPWORDS, TOKENIZER_VERSION, word_tokens

__all__ = [
    "MIN_SIMILARITY",
    "RELATED_WEIGHT",
    "RelatedWords",
    "TableText",
    "build_table",
    "load_related",
    "table_text",
]

RELATED_WEIGHT: Final = 0.5
MIN_SIMILARITY: Final = 0.4
MIN_TERM: Final = 4  # letters of a term that has or is a related word
MIN_WORD: Final = 3  # letters of a vocabulary word that is looked at
MAX_TABLE_ENTRIES: Final = 100_000
FIND_LIMIT: Final = 64  # lookups in place before the table is parsed once (~1.7 ms)


class RelatedWords:
    """term -> its related term (see the module docstring)."""

    def __init__(self, table: Mapping[str, str]) -> None:
        self.table = table

    def __len__(self) -> int:
        return len(self.table)

    def widen(self, terms: Sequence[str]) -> list[str]:
        """The words to add to ``terms``: each distinct term's related word, unless it is a
        term already; in the terms' order, at most one per term."""
        have = set(terms)
        added: list[str] = []
        for term in dict.fromkeys(terms):
            other = self.table.get(term)
            if isinstance(other, str) and other not in have:
                have.add(other)
                added.append(other)
        return added


# -- the table ----------------------------------------------------------------------------

TABLE_FILE: Final = Path(__file__).with_name("related_words.tsv")
_LOADED: list[RelatedWords] = []


class TableText(Mapping[str, str]):
    """The table file's text, looked up in place: a query looks up a few terms, so finding
    ``\n<term>\t`` costs ~20 us each where parsing every line first costs ~1.7 ms. A process
    that goes on asking (a kept ``Searcher``, a server) parses it once after ``FIND_LIMIT``
    lookups. A line of another shape is never a pair (``#`` comments, no tab, an empty side, a
    second tab)."""

    def __init__(self, text: str) -> None:
        self.text = "\n" + text if not text.startswith("\n") else text
        self._finds = 0
        self._parsed: dict[str, str] | None = None

    def __getitem__(self, term: str) -> str:
        if self._parsed is None and self._finds >= FIND_LIMIT:
            self._parsed = self._pairs()
        if self._parsed is not None:
            return self._parsed[term]
        self._finds += 1
        return self._find(term)

    def _find(self, term: str) -> str:
        if not term or "\n" in term or "\t" in term or term.startswith("#"):
            raise KeyError(term)
        at = self.text.find(f"\n{term}\t")
        if at < 0:
            raise KeyError(term)
        start = at + len(term) + 2
        end = self.text.find("\n", start)
        other = self.text[start : end if end >= 0 else len(self.text)]
        if not other or "\t" in other:
            raise KeyError(term)
        return other

    def _pairs(self) -> dict[str, str]:
        pairs: dict[str, str] = {}
        for line in self.text.splitlines()[:MAX_TABLE_ENTRIES]:
            term, tab, other = line.partition("\t")
            if tab and term and other and not term.startswith("#") and "\t" not in other:
                pairs.setdefault(term, other)  # the first line of a term wins, as find does
        return pairs

    def __iter__(self) -> Iterator[str]:
        return iter(self._pairs())

    def __len__(self) -> int:
        return len(self._pairs())


def load_related(path: Path = TABLE_FILE) -> RelatedWords | None:
    """The shipped table (``related_words.tsv``: ``term<TAB>related term`` lines, ``#``
    comments); None when it is missing or not UTF-8."""
    if path == TABLE_FILE and _LOADED:
        return _LOADED[0]
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    found = RelatedWords(TableText(text))
    if path == TABLE_FILE:
        _LOADED.append(found)
    return found


def table_text(table: Mapping[str, str], source: str) -> str:
    """The file ``load_related`` reads, for ``table`` built from ``source``."""
    head = (
        f"# Related words (truss_files/recall/related.py), built from {source}\n"
        f"# with MIN_SIMILARITY={MIN_SIMILARITY}, MIN_TERM={MIN_TERM}, MIN_WORD={MIN_WORD}; "
        "rebuild: python -m truss_files.recall.related\n"
    )
    return head + "".join(f"{term}\t{table[term]}\n" for term in sorted(table))


def build_table(weights: Path, tokenizer: Path) -> dict[str, str]:
    """term -> nearest other term, from the model's whole-word tokens (module docstring)."""
    import json

    import numpy as np  # only to build the table: a query never imports numpy

    vocab = json.loads(tokenizer.read_text(encoding="utf-8"))["model"]["vocab"]
    layout = embedding_layout(weights)
    dtype = {"F16": np.float16, "F32": np.float32}[layout.dtype]
    rows = np.memmap(
        weights, dtype=dtype, mode="r", offset=layout.offset, shape=(layout.rows, layout.dim)
    )
    groups: dict[str, list[int]] = {}
    for piece, token in sorted(vocab.items(), key=lambda item: item[1]):
        word = piece[1:]
        if not piece.startswith("\u2581") or len(word) < MIN_WORD:
            continue
        if not (word.isascii() and word.isalpha() and word.islower()):
            continue
        terms = word_tokens(word)
        keep = len(terms) == 1 and len(terms[0]) >= MIN_TERM and terms[0] not in STOPWORDS
        if keep and 0 <= token < layout.rows:
            groups.setdefault(terms[0], []).append(token)
    names = sorted(groups)
    if len(names) < 2:
        return {}
    matrix = np.stack([rows[groups[n]].astype(np.float32).mean(axis=0) for n in names])
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix /= np.where(norms > 0, norms, 1.0)
    table: dict[str, str] = {}
    # In blocks: the full similarity matrix of ~5k terms would hold ~100 MB at once.
    for start in range(0, len(names), 1024):
        sims = matrix[start : start + 1024] @ matrix.T
        for offset, row in enumerate(sims):
            row[start + offset] = -1.0  # not itself
            best = int(np.argmax(row))
            if float(row[best]) >= MIN_SIMILARITY:
                table[names[start + offset]] = names[best]
    return table


def main() -> None:
    """Rebuild ``related_words.tsv`` from the installed WordLlama model."""
    package = wordllama_package()
    if package is None:
        raise SystemExit("wordllama is not installed: pip install 'truss-files[semantic]'")
    weights, tokenizer = wordllama_files(package)

    source = f"{weights.name} (tokenizer version {TOKENIZER_VERSION})"
    TABLE_FILE.write_text(table_text(build_table(weights, tokenizer), source), encoding="utf-8")


if __name__ == "__main__":
    main()
