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
place);
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
2-3 words per term or weight 0.7 (dev MRR 0.80-0.83); the table built from minilm's sentence
vectors of its vocabulary's words, each embedded alone (12,700 terms; nearest term at cosine
0.5-0.8: tests/relevance 0.843-0.857, dev 0.906 / 0.814-0.828), and that table beside this one
or only where this one has no word (dev 0.906 / 0.829: recall unchanged, MRR lower) -- so
neither was looked at on the held-out questions.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

from .encoders.modelfiles import embedding_layout, wordllama_files, wordllama_package
from .tokenize import STOPWORDS, TOKENIZER_VERSION, word_tokens

__all__ = [
    "MIN_SIMILARITY",
    "RELATED_WEIGHT",
    "RelatedWords",
    "TableText",
    "build_table",
    "load_related",
    "shown_words",
    "surface_words",
    "table_text",
]

_WORD: Final = re.compile(r"[a-z]+")
RELATED_WEIGHT: Final = 0.5
MIN_SIMILARITY: Final = 0.4
MIN_TERM: Final = 4  # letters of a term that has or is a related word
MIN_WORD: Final = 3  # letters of a vocabulary word that is looked at
MAX_TABLE_ENTRIES: Final = 100_000
FIND_LIMIT: Final = 64  # lookups in place before the table is parsed once


class RelatedWords:
    """term -> its related term (see the module docstring)."""

    def __init__(self, table: Mapping[str, str]) -> None:
        self.table = table

    def __len__(self) -> int:
        return len(self.table)

    def word(self, term: str) -> str:
        """The word to show for a related ``term`` (an index term, a stem: ``testim``): the
        most frequent surface form of it in the model's vocabulary (``testimony``), read from
        the table's third column; the term itself when the table has none."""
        words = getattr(self.table, "words", None)
        if isinstance(words, dict):
            if term not in words and isinstance(self.table, TableText):
                with contextlib.suppress(KeyError):
                    self.table._pairs()  # a term not looked up in place: read every line once
            found = words.get(term)
            if isinstance(found, str):
                return found
        return term

    def shown(self, terms: Sequence[str], texts: Sequence[str] = ()) -> list[str]:
        """The words to show for related ``terms``: for each, the surface form seen most
        often in ``texts`` (the notes a query returned: a word a reader knows) whose index
        term it is -- or, for a term no word stems to (``testim``, a piece of the model's
        vocabulary), that starts with it -- ties to the shorter; else ``word``."""
        wanted = set(terms)
        seen: dict[str, dict[str, int]] = {}
        starts: dict[str, dict[str, int]] = {}
        for text in texts:
            for surface in _WORD.findall(text.lower()):
                if len(surface) < MIN_TERM:
                    continue
                found = word_tokens(surface)
                if len(found) == 1 and found[0] in wanted:
                    same = seen.setdefault(found[0], {})
                    same[surface] = same.get(surface, 0) + 1
                for term in wanted:
                    if surface.startswith(term):
                        longer = starts.setdefault(term, {})
                        longer[surface] = longer.get(surface, 0) + 1
        out = []
        for term in terms:
            word = self.word(term)
            counts = seen.get(term) or (starts.get(term) if word == term else None) or {}
            if counts:
                out.append(min(counts, key=lambda w: (-counts[w], len(w))))
            else:
                out.append(word)
        return out

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
    """The table file's text, looked up in place: a query looks up a few terms, and finding
    ``\n<term>\t`` a few times costs far less than parsing every line first. A process
    that goes on asking (a kept ``Searcher``, a server) parses it once after ``FIND_LIMIT``
    lookups. A line of another shape is never a pair (``#`` comments, no tab, an empty side, a
    second tab)."""

    def __init__(self, text: str) -> None:
        self.text = "\n" + text if not text.startswith("\n") else text
        self._finds = 0
        self._parsed: dict[str, str] | None = None
        self.words: dict[str, str] = {}  # related term -> its word, from the lines read

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
        found = _value(self.text[start : end if end >= 0 else len(self.text)])
        if found is None:
            raise KeyError(term)
        other, word = found
        self.words.setdefault(other, word)
        return other

    def _pairs(self) -> dict[str, str]:
        pairs: dict[str, str] = {}
        for line in self.text.splitlines()[:MAX_TABLE_ENTRIES]:
            term, tab, rest = line.partition("\t")
            found = _value(rest) if tab and term and not term.startswith("#") else None
            if found is not None and term not in pairs:  # the first line of a term wins
                pairs[term] = found[0]
                self.words.setdefault(*found)
        return pairs

    def __iter__(self) -> Iterator[str]:
        return iter(self._pairs())

    def __len__(self) -> int:
        return len(self._pairs())


def _value(rest: str) -> tuple[str, str] | None:
    """``(related term, its word)`` of a line's text after the term: ``term`` or
    ``term<TAB>word``; None for an empty side or a fourth column."""
    other, tab, word = rest.partition("\t")
    if not other or (tab and (not word or "\t" in word)):
        return None
    return other, word if tab else other


def load_related(path: Path = TABLE_FILE) -> RelatedWords | None:
    """The shipped table (``related_words.tsv``: ``term<TAB>related term<TAB>its word``
    lines, ``#`` comments); None when it is missing or not UTF-8."""
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


def shown_words(terms: Sequence[str], texts: Sequence[str] = ()) -> list[str]:
    """``RelatedWords.shown`` with the shipped table: what ``--format json`` lists as
    ``related_words`` (words, not the index's stems)."""
    table = load_related()
    return table.shown(terms, texts) if table is not None else list(terms)


def table_text(
    table: Mapping[str, str], source: str, words: Mapping[str, str] | None = None
) -> str:
    """The file ``load_related`` reads, for ``table`` built from ``source``; ``words``: the
    word shown for each related term (``surface_words``), its third column."""
    words = words or {}
    head = (
        f"# Related words (truss_files/recall/related.py), built from {source}\n"
        f"# with MIN_SIMILARITY={MIN_SIMILARITY}, MIN_TERM={MIN_TERM}, MIN_WORD={MIN_WORD}; "
        "rebuild: python -m truss_files.recall.related\n"
    )
    lines = []
    for term in sorted(table):
        other = table[term]
        word = words.get(other, other)
        lines.append(f"{term}\t{other}\t{word}\n" if word != other else f"{term}\t{other}\n")
    return head + "".join(lines)


def _groups(tokenizer: Path, rows: int) -> dict[str, list[tuple[int, str]]]:
    """index term -> ``(token id, word)`` of the whole-word tokens that stem to it, lowest id
    (the earliest merge of the BPE: the most frequent word) first."""
    import json

    vocab = json.loads(tokenizer.read_text(encoding="utf-8"))["model"]["vocab"]
    groups: dict[str, list[tuple[int, str]]] = {}
    for piece, token in sorted(vocab.items(), key=lambda item: item[1]):
        word = piece[1:]
        if not piece.startswith("\u2581") or len(word) < MIN_WORD:
            continue
        if not (word.isascii() and word.isalpha() and word.islower()):
            continue
        terms = word_tokens(word)
        keep = len(terms) == 1 and len(terms[0]) >= MIN_TERM and terms[0] not in STOPWORDS
        if keep and 0 <= token < rows:
            groups.setdefault(terms[0], []).append((token, word))
    return groups


def surface_words(weights: Path, tokenizer: Path) -> dict[str, str]:
    """index term -> the word shown for it: the most frequent vocabulary word that stems to
    it (``testim`` -> ``testimony``, ``failur`` -> ``failure``)."""
    groups = _groups(tokenizer, embedding_layout(weights).rows)
    # A stem that is a vocabulary piece of its own (``elimin``) is not a word when a longer
    # one (``eliminate``) is there.
    return {
        term: next((word for _, word in found if word != term), term)
        for term, found in groups.items()
    }


def build_table(weights: Path, tokenizer: Path) -> dict[str, str]:
    """term -> nearest other term, from the model's whole-word tokens (module docstring)."""
    import numpy as np  # only to build the table: a query never imports numpy

    layout = embedding_layout(weights)
    dtype = {"F16": np.float16, "F32": np.float32}[layout.dtype]
    rows = np.memmap(
        weights, dtype=dtype, mode="r", offset=layout.offset, shape=(layout.rows, layout.dim)
    )
    found_groups = _groups(tokenizer, layout.rows)
    groups = {term: [token for token, _ in found] for term, found in found_groups.items()}
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
    table = build_table(weights, tokenizer)
    words = surface_words(weights, tokenizer)
    TABLE_FILE.write_text(table_text(table, source, words), encoding="utf-8")


if __name__ == "__main__":
    main()
