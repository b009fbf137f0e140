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
   encode; ``HTTP2Server`` -> http2, server), and an all-caps plural is the acronym (``APIs`` ->
   api, ``CPUs`` -> cpu; not ap + is).
4. Han ideographs and hiragana become one token per character (scripts written without spaces:
   unigrams are the dependency-free way to make them searchable, as Lucene's StandardTokenizer
   does); katakana runs, hangul words and everything else behave like latin words.
5. Casefold (``ß`` -> ``ss``), drop stopwords, strip suffixes (below).

Compounds: a word with two or more parts *also* emits the parts joined (casefolded, stemmed):
``BorrowChecker`` -> borrow, checker, borrowchecker; ``max_retries`` -> max, retry, maxretry.
The parts alone already make ``borrow checker`` and ``BorrowChecker`` find each other in both
directions. The compound is what lets the very common lowercase spelling of a CamelCase name
match it -- ``pgbouncer`` / ``PgBouncer``, ``opentelemetry`` / ``OpenTelemetry``, ``readonly`` /
``read-only``, ``github`` / ``GitHub`` -- and it makes ``MaxRetries``, ``max_retries``,
``maxRetries`` and ``max-retries`` one rare, high-idf term, so the exact identifier outranks notes
that merely mention "max" and "retries". All-digit words (dates: ``2026-01-15``) get no
compound. Cost: one extra token per identifier, which lengthens code-heavy notes a little.

Stemming: no library; ``_stem`` is a small plural / -ing / -ed / final-e stripper, see its
docstring. Measured on ``tests/relevance`` (152 notes, 70 paraphrased queries, exact BM25 over
all notes, ``truss_files.recall.evaluate``)::

    stemmer                  compounds  recall@5  MRR@10
    none                     no         0.800     0.750
    none                     yes        0.800     0.750
    plural                   no         0.829     0.797
    plural                   yes        0.829     0.798
    plural+ing/ed            no         0.850     0.807
    plural+ing/ed            yes        0.850     0.807
    plural+ing/ed+final-e    no         0.850     0.815
    plural+ing/ed+final-e    yes        0.850     0.816   <- this module

Compounds are neutral on that set (its lowercase-identifier queries also share other words with
their notes); they are kept for the lowercase-spelling reason above, which ``tests/test_relevance``
checks directly.

Speed: 10k synthetic notes of ~100 words (1.1M tokens) tokenize in ~0.3 s, 3-4M tokens/s, on
one core of the development machine. Most of that is one ``findall`` per text plus one dict
lookup per word: analysed words are memoized (words repeat heavily; the memo skips words over 64
characters and is cleared at 200k entries, so it stays bounded).

Known limits: combining marks that NFKC cannot compose split a word (some Indic scripts); camel
splitting uses ``str.isupper`` so it works for any cased script; the stems are index keys, not
words.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

__all__ = ["STOPWORDS", "TOKENIZER_VERSION", "tokenize"]

# Bump whenever tokenize() can return different tokens for the same text (rules, stopwords,
# stemmer): persisted term frequencies built by an older version must then be rebuilt.
TOKENIZER_VERSION: Final = 1

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
_CACHE_WORD_MAX: Final = 64


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
            toks = _analyze(word)
            # Long words (hashes, base64 blobs) rarely repeat and would pin memory.
            if len(word) <= _CACHE_WORD_MAX:
                if len(cache) >= _CACHE_MAX:
                    cache.clear()
                cache[word] = toks
        out += toks
    return out


def _analyze(word: str) -> tuple[str, ...]:
    """Tokens of one word (letters/digits possibly joined by '_'/'-')."""
    if not word.isascii() and any(map(_is_cjk, word)):
        return _analyze_mixed_script(word)
    parts: list[str] = []
    for piece in _JOINERS.split(word) if ("_" in word or "-" in word) else (word,):
        parts += _case_split(piece)
    folded_parts = [p.casefold() for p in parts]
    if len(folded_parts) > 1:
        compound = "".join(folded_parts)
        if not compound.isdigit():
            folded_parts.append(compound)
    out: list[str] = []
    for folded in folded_parts:
        if folded not in STOPWORDS:
            stem = _stem(folded)
            # A stem or a compound can itself be a stopword ("oN" -> "on").
            if stem not in STOPWORDS:
                out.append(stem)
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
    """Map each character to A (upper), 0 (digit), s (itself) or a (other lower/uncased letter).

    Running the ASCII case-split pattern over this signature and slicing the original by the
    match spans gives the same splitting for any script with case (Greek, Cyrillic, accented
    Latin) without needing Unicode categories in the regex engine. "s" is kept because the
    pattern needs it to recognise all-caps plurals ("ÉCUs").
    """
    return "".join(
        "A" if c.isupper() else "0" if c.isdigit() else "s" if c == "s" else "a" for c in piece
    )


# Singular ends in -ss / -us (status, bus, corpus) or -sis/-xis (analysis, axis): not plurals.
_KEEP_ENDINGS: Final = ("ss", "us", "sis", "xis")
# Plurals that take -es after a sibilant (classes, indexes, branches, pushes, quizzes).
_ES_AFTER: Final = ("sses", "xes", "shes", "ches", "zzes")
# Common words the plural rules get wrong, mapped to their singular by hand.
_PLURAL_EXCEPTIONS: Final[dict[str, str]] = {
    "caches": "cache",
    "cookies": "cookie",
    "movies": "movie",
    "newbies": "newbie",
    "rookies": "rookie",
    "zombies": "zombie",
    "always": "always",
    "iris": "iris",
    "lens": "lens",
    "news": "news",
    "redis": "redis",
    "series": "series",
    "species": "species",
    "tennis": "tennis",
}
_VOWELS: Final = frozenset("aeiouy")


def _stem(tok: str) -> str:
    """Conservative suffix stripper: plural, then -ing/-ed/-ied, then a final -e.

    Steps, each only on purely alphabetic tokens longer than three letters:

    1. plural: ``_PLURAL_EXCEPTIONS``; ``-ies`` -> ``-y``; ``-sses/-xes/-shes/-ches/-zzes`` lose
       ``es``; any other ``-s`` is dropped unless the word ends in ``-ss/-us/-sis/-xis``.
    2. verb endings, on words of six letters or more whose remaining stem has a vowel (so
       ``string`` and ``spring`` survive): ``-ied`` -> ``-y``, ``-ing`` and ``-ed`` dropped, and a
       doubled final consonant other than l/s/z undoubled when the stem is still 4+ letters
       (``stopped`` -> stop, ``logging`` -> log, but ``adding`` -> add).
    3. a final ``-e`` is dropped on words of five letters or more, which is what lets
       ``cache``/``caches``/``cached``/``caching`` and ``release``/``released`` meet (``cach``,
       ``releas``); stems are index keys, never shown to anyone.
    """
    if len(tok) <= 3 or not tok.isalpha():
        return tok
    if tok[-1] == "s":
        singular = _PLURAL_EXCEPTIONS.get(tok)
        if singular is not None:
            tok = singular
        elif tok.endswith("ies") and len(tok) > 4:
            tok = tok[:-3] + "y"
        elif tok.endswith(_ES_AFTER):
            tok = tok[:-2]
        elif not tok.endswith(_KEEP_ENDINGS):
            tok = tok[:-1]
    if len(tok) > 5:
        if tok.endswith("ied"):
            tok = tok[:-3] + "y"
        else:
            cut = 3 if tok.endswith("ing") else 2 if tok.endswith("ed") else 0
            if cut and not _VOWELS.isdisjoint(tok[:-cut]):
                tok = tok[:-cut]
                if len(tok) >= 4 and tok[-1] == tok[-2] and tok[-1] not in "lsz":
                    tok = tok[:-1]
    if len(tok) > 4 and tok[-1] == "e":
        tok = tok[:-1]
    return tok
