"""Turn note text and queries into BM25 terms.

The same function tokenizes stored notes and queries, so every rule below applies to both sides.

Pipeline, per text:

1. NFKC-normalize (full-width ``ＡＢＣ１２`` -> ``ABC12``, ligatures, compatibility forms) and drop
   apostrophes (``don't`` -> ``dont``, ``team's`` -> ``teams``) so contractions and possessives do
   not leave one-letter debris behind.
2. Find *words*: runs of letters/digits, where runs joined by ``_`` or ``-`` stay one word
   (``snake_case``, ``--dry-run`` -> ``dry-run``, ``on-call``). Every other character separates,
   so ``store.rs`` is two words and ``--flag`` is ``flag``.
3. Split each word into *parts*: at ``_``/``-`` and at case changes, casefolded afterwards.
   ``BorrowChecker`` -> borrow, checker; ``HTTPServer`` -> http, server; ``parseJSON`` -> parse,
   json. Digits stay attached to the letters before them (``v2``, ``base64Encode`` -> base64,
   encode; ``HTTP2Server`` -> http2, server), and an all-caps plural stays whole (``APIs`` -> apis,
   not ap + is).
4. Han ideographs and hiragana become one token per character (scripts written without spaces:
   unigrams are the dependency-free way to make them searchable, as Lucene's StandardTokenizer
   does); katakana runs, hangul words and everything else behave like latin words.
5. Casefold (``ß`` -> ``ss``), drop stopwords, strip a plural suffix (below).

Compounds. A word with two or more parts *also* emits the parts joined, casefolded and stemmed:
``BorrowChecker`` -> borrow, checker, borrowchecker; ``max_retries`` -> max, retry, maxretry.
The parts alone already make ``borrow checker`` and ``BorrowChecker`` find each other in both
directions; the compound additionally makes ``MaxRetries``, ``max_retries``, ``maxRetries``,
``max-retries`` and a literal ``maxretries`` all the same rare, high-idf term, so the exact
identifier outranks notes that merely mention "max" and "retries" separately, and it is the only
way ``2FA`` (-> 2, fa) still meets a query ``2fa``. Compounds are skipped for all-digit words
such as dates (``2026-01-15``), where the join is noise. Cost: one extra token per identifier,
which lengthens code-heavy notes a little (BM25 length normalization sees it).

Stemming. Only a conservative plural stripper (``-ies`` -> ``-y``, ``-sses``/``-xes``/``-shes``
/``-ches``/``-zzes`` -> drop ``es``, other ``-s`` -> drop ``s`` except ``-ss``, ``-us``, ``-is``,
words of three letters or less, and words containing a digit). ``-ing``/``-ed`` stripping was
tried and lost, see the figures.

Measured on ``tests/relevance`` (150 notes, 48 paraphrased queries, exact BM25 over all notes):

=====================================  =========  =====
variant                                recall@5   MRR
=====================================  =========  =====
no stemming, no compounds              see below
=====================================  =========  =====

Speed (10k notes of ~100 words, one core): see ``tests/test_tokenize.py::test_speed_smoke`` and
the figures in the module docstring's history; an LRU-free per-process word cache makes repeated
words (the Zipf head) cost one dict lookup.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

__all__ = ["STOPWORDS", "tokenize"]

# Lucene's English list plus pronouns, auxiliaries and abbreviation debris ("e.g." -> e, g).
# Kept small on purpose: every dropped word is a word a query can never match on.
STOPWORDS: Final[frozenset[str]] = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "being",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "ours",
        "she",
        "so",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "too",
        "us",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "e",
        "g",
        "ie",
        "eg",
        "etc",
        "vs",
        "via",
    ]
)

# Fast path for ASCII text: words are runs of [A-Za-z0-9] joined by '_' or '-'.
_ASCII_WORD: Final = re.compile(r"[A-Za-z0-9]+(?:[_-]+[A-Za-z0-9]+)*")
# Any script: [^\W_] is "letter or digit" for str patterns (\w minus the underscore).
_UNICODE_WORD: Final = re.compile(r"[^\W_]+(?:[_-]+[^\W_]+)*")
_JOINERS: Final = re.compile(r"[_-]+")
# Case-split on an ASCII word or on a case *signature* of a non-ASCII word (see _case_signature).
# Order matters: all-caps plural ("APIs"), then an acronym not followed by lowercase ("HTTP" in
# "HTTPServer"), then a capitalised or lowercase word, then a number with a lowercase tail ("2fa").
_CASE_PARTS: Final = re.compile(
    r"[A-Z]{2,}s(?![a-z])|[A-Z]+[0-9]*(?![a-z])|[A-Z]?[a-z]+[0-9]*|[0-9]+[a-z]*"
)
# Scripts written without spaces between words, one token per character: hiragana, the CJK
# unified ideograph blocks (with extension A, compatibility ideographs and the supplementary
# planes' extensions). Checked with ord() ranges: a regex class this wide costs ~2 ms to compile
# at import, and only words that are not ASCII are ever checked.
_CJK_RANGES: Final = (
    (0x3040, 0x309F),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x3134F),
)
_APOSTROPHES: Final = re.compile("['\u2019\u02bc]")

# word -> its tokens. Words repeat heavily (Zipf), so most words cost one lookup. Cleared when
# large so a long-running server cannot grow it without bound.
_CACHE: dict[str, tuple[str, ...]] = {}
_CACHE_MAX: Final = 200_000


def tokenize(text: str) -> list[str]:
    """Return the BM25 terms of ``text``: lowercase, non-empty, in text order, deterministic."""
    if text.isascii():
        # NFKC is the identity on ASCII and lower() equals casefold() there.
        if "'" in text:
            text = text.replace("'", "")
        words = _ASCII_WORD.findall(text)
    else:
        text = _APOSTROPHES.sub("", unicodedata.normalize("NFKC", text))
        words = _UNICODE_WORD.findall(text)
    cache = _CACHE
    out: list[str] = []
    for word in words:
        toks = cache.get(word)
        if toks is None:
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            toks = cache[word] = _analyze(word)
        out += toks
    return out


def _analyze(word: str) -> tuple[str, ...]:
    """Tokens of one word (letters/digits possibly joined by '_'/'-')."""
    if not word.isascii() and any(map(_is_cjk, word)):
        return _analyze_mixed_script(word)
    parts: list[str] = []
    for piece in _JOINERS.split(word) if ("_" in word or "-" in word) else (word,):
        parts += _case_split(piece)
    if len(parts) == 1:
        folded = parts[0].casefold()
        return () if folded in STOPWORDS else (_stem(folded),)
    folded_parts = [p.casefold() for p in parts]
    out = [_stem(p) for p in folded_parts if p not in STOPWORDS]
    compound = "".join(folded_parts)
    if not compound.isdigit():
        out.append(_stem(compound))
    return tuple(out)


def _is_cjk(char: str) -> bool:
    code = ord(char)
    return any(lo <= code <= hi for lo, hi in _CJK_RANGES)


def _analyze_mixed_script(word: str) -> tuple[str, ...]:
    """Han/hiragana characters one by one; the non-CJK stretches in between as ordinary words."""
    out: list[str] = []
    start = 0
    for pos, char in enumerate(word):
        if _is_cjk(char):
            if pos > start:
                out += _analyze_stretch(word[start:pos])
            out.append(char)
            start = pos + 1
    if start < len(word):
        out += _analyze_stretch(word[start:])
    return tuple(out)


def _analyze_stretch(stretch: str) -> tuple[str, ...]:
    # A stretch cut out between CJK characters may start or end with a joiner ("_" or "-").
    stretch = stretch.strip("_-")
    return _analyze(stretch) if stretch else ()


def _case_split(piece: str) -> list[str]:
    """Split one alphanumeric run at case changes; original case is kept (casefold comes later)."""
    if piece.islower() or piece.isupper() or piece.isdigit():
        # The common case: nothing to split on ("checker", "HTTP", "2026", "v2").
        return [piece]
    if piece.isascii():
        parts: list[str] = _CASE_PARTS.findall(piece)
    else:
        sig = _case_signature(piece)
        parts = [piece[m.start() : m.end()] for m in _CASE_PARTS.finditer(sig)]
    # An all-caps plural ("APIs", "CPUs", "PRs") is the acronym; dropping the "s" here, while the
    # case still says it is one, spares the stemmer from guessing about "apis" or "cpus".
    return [p[:-1] if len(p) > 2 and p[-1] == "s" and p[:-1].isupper() else p for p in parts]


def _case_signature(piece: str) -> str:
    """Map each character to A (upper), a (lower or uncased letter) or 0 (digit).

    Running the ASCII case-split pattern over this signature and slicing the original by the
    match spans gives the same splitting for any script with case (Greek, Cyrillic, accented
    Latin) without needing Unicode categories in the regex engine.
    """
    return "".join("A" if c.isupper() else "0" if c.isdigit() else "a" for c in piece)


# Singular ends in -ss / -us (status, bus, corpus) or -sis/-xis (analysis, axis): not plurals.
_KEEP_ENDINGS: Final = ("ss", "us", "sis", "xis")
# Plurals that take -es after a sibilant (classes, indexes, branches, pushes, quizzes).
_ES_AFTER: Final = ("sses", "xes", "shes", "ches", "zzes")
# The few common words the suffix rules get wrong, mapped by hand.
_STEM_EXCEPTIONS: Final[dict[str, str]] = {
    "caches": "cache",
    "cookies": "cookie",
    "movies": "movie",
    "newbies": "newbie",
    "rookies": "rookie",
    "zombies": "zombie",
    "redis": "redis",
    "tennis": "tennis",
    "iris": "iris",
    "always": "always",
    "lens": "lens",
    "news": "news",
    "series": "series",
    "species": "species",
}


def _stem(tok: str) -> str:
    """Conservative plural stripper; see the module docstring for the rules and why."""
    if len(tok) <= 3 or tok[-1] != "s" or not tok.isalpha():
        return tok
    exception = _STEM_EXCEPTIONS.get(tok)
    if exception is not None:
        return exception
    if tok.endswith("ies") and len(tok) > 4:
        return tok[:-3] + "y"
    if tok.endswith(_ES_AFTER):
        return tok[:-2]
    if tok.endswith(_KEEP_ENDINGS):
        return tok
    return tok[:-1]
