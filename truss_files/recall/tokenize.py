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
5. Casefold (``ß`` -> ``ss``), drop stopwords, stem (Snowball English, below).

Compounds: a word with two or more parts *also* emits the parts joined (casefolded, stemmed):
``BorrowChecker`` -> borrow, checker, borrowchecker; ``max_retries`` -> max, retry, maxretry.
The parts alone already make ``borrow checker`` and ``BorrowChecker`` find each other in both
directions. The compound is what lets the very common lowercase spelling of a CamelCase name
match it -- ``pgbouncer`` / ``PgBouncer``, ``opentelemetry`` / ``OpenTelemetry``, ``readonly`` /
``read-only``, ``github`` / ``GitHub`` -- and it makes ``MaxRetries``, ``max_retries``,
``maxRetries`` and ``max-retries`` one rare, high-idf term, so the exact identifier outranks notes
that merely mention "max" and "retries". All-digit words (dates: ``2026-01-15``) get no
compound. Cost: one extra token per identifier, which lengthens code-heavy notes a little.

Stemming: Snowball English (Porter2) through PyStemmer, see ``_stem``. It replaced a
hand-written plural / -ing / -ed / final-e stripper that left inflections apart (``retried`` /
``retry``, ``policies`` / ``policy``). Measured with ``benchmarks.evaluate`` (exact
BM25 over all notes, without acronyms), recall@5 / MRR@10::

    stemmer                  tests/relevance   hard dev        hard test (held out)
    none                     0.800 / 0.757     0.783 / 0.728   0.644 / 0.557
    hand-written stripper    0.850 / 0.816     0.858 / 0.794   0.760 / 0.687
    Snowball English         0.850 / 0.824     0.877 / 0.804   0.779 / 0.676   <- this module

Compounds are neutral on tests/relevance (its lowercase-identifier queries also share other
words with their notes); they are kept for the lowercase-spelling reason above, which
``tests/test_relevance`` checks directly.

Speed: an ASCII text (nearly every note) is cut into words in C -- ``str.translate`` turns
every character but ``[A-Za-z0-9_-]`` into a space, ``str.split`` cuts there, and a word's
leading or trailing ``_``/``-`` is stripped when it is analysed, which gives exactly the words of
the pattern ``[A-Za-z0-9]+(?:[_-]+[A-Za-z0-9]+)*`` (``tests/recall/test_tokenize.py`` checks) in
less time. Words then go through a memo of analysed words, also in C (``map`` +
``chain``); only words not seen before run Python code (words repeat heavily; the memo skips
words over 64 characters and is cleared at 200k entries, so it stays bounded). Together they
cost less than the Python loop they replaced (``docs/measured.md``).
Other text is NFKC-normalized and cut by the pattern's Unicode form. The patterns are compiled
on first use: a query of plain lowercase words never needs one, nor pays to compile it.

Known limits: combining marks that NFKC cannot compose split a word (some Indic scripts); camel
splitting uses ``str.isupper`` so it works for any cased script; the stems are index keys, not
words.
"""

from __future__ import annotations

import re
from itertools import chain
from typing import Any, Final

__all__ = ["STOPWORDS", "TOKENIZER_VERSION", "split_words", "tokenize", "word_tokens"]

# Bump whenever tokenize() can return different tokens for the same text (rules, stopwords,
# stemmer): persisted term frequencies built by an older version must then be rebuilt.
TOKENIZER_VERSION: Final = 2

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

# ASCII text: every character but letters, digits, '_' and '-' becomes a space. The
# apostrophe is removed before (str.translate keeps its fast ASCII path only without deletions).
_ASCII_TABLE: Final = {
    code: chr(code) if chr(code).isalnum() or chr(code) in "_-" else " " for code in range(128)
}
_ASCII_WORD: Final = r"[A-Za-z0-9]+(?:[_-]+[A-Za-z0-9]+)*"  # what the table + split give
# Any script: [^\W_] is "letter or digit" for str patterns (\w minus the underscore).
_UNICODE_WORD: Final = r"[^\W_]+(?:[_-]+[^\W_]+)*"
_JOINERS: Final = r"[_-]+"
# Case-split on an ASCII word or on a case *signature* of a non-ASCII word (see _case_signature).
# Order matters: all-caps plural ("APIs"), then an acronym not followed by lowercase ("HTTP" in
# "HTTPServer"), then a capitalised or lowercase word, then a number with a lowercase tail ("2fa").
_CASE_PARTS: Final = r"[A-Z]{2,}s(?![a-z])|[A-Z]+[0-9]*(?![a-z])|[A-Z]?[a-z]+[0-9]*|[0-9]+[a-z]*"
# Scripts written without spaces between words, one token per character: hiragana, the CJK
# unified ideograph blocks (with extension A, compatibility ideographs and the supplementary
# planes' extensions). Checked with ord() ranges: a regex class this wide is slow to compile
# at import, and only words that are not ASCII are ever checked.
_CJK_RANGES: Final = (
    (0x3040, 0x309F),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x3134F),
)
_APOSTROPHES: Final = "['\u2019\u02bc]"
_COMPILED: dict[str, re.Pattern[str]] = {}


def _pattern(pattern: str) -> re.Pattern[str]:
    found = _COMPILED.get(pattern)
    if found is None:
        found = _COMPILED[pattern] = re.compile(pattern)
    return found


# raw word -> its tokens. Words repeat heavily (Zipf), so most words cost one lookup. Cleared
# when large so a long-running server cannot grow it without bound.
_CACHE: dict[str, tuple[str, ...]] = {}
_CACHE_MAX: Final = 200_000
_CACHE_WORD_MAX: Final = 64


def tokenize(text: str) -> list[str]:
    """Return the BM25 terms of ``text``: lowercase, non-empty, in text order, deterministic."""
    words = split_words(text)
    try:
        return [*chain.from_iterable(map(_CACHE.__getitem__, words))]
    except KeyError:
        return _tokenize_new(words)


def split_words(text: str) -> list[str]:
    """The raw words of ``text``: ``tokenize(text)`` is every ``word_tokens(w)`` of them, in
    order (the index builder memoizes per raw word what it makes of their tokens)."""
    if text.isascii():
        # NFKC is the identity on ASCII and lower() equals casefold() there.
        if "'" in text:
            text = text.replace("'", "")
        return text.translate(_ASCII_TABLE).split()
    import unicodedata

    text = _pattern(_APOSTROPHES).sub("", unicodedata.normalize("NFKC", text))
    words: list[str] = _pattern(_UNICODE_WORD).findall(text)
    return words


def _tokenize_new(words: list[str]) -> list[str]:
    """``tokenize`` when some word is not in the memo yet: analyse those, then look up."""
    cache = _CACHE
    missing = set(words).difference(cache)
    if len(cache) + len(missing) > _CACHE_MAX:
        cache.clear()
    extra: dict[str, tuple[str, ...]] = {}
    for word in missing:
        toks = word_tokens(word)
        # Long words (hashes, base64 blobs) rarely repeat and would pin memory.
        if len(word) <= _CACHE_WORD_MAX and len(cache) < _CACHE_MAX:
            cache[word] = toks
        else:
            extra[word] = toks
    if not extra:
        try:
            return [*chain.from_iterable(map(cache.__getitem__, words))]
        except KeyError:
            pass  # another thread cleared the memo meanwhile
    out: list[str] = []
    for word in words:
        found = cache.get(word)
        if found is None:
            found = extra.get(word)
        out += word_tokens(word) if found is None else found
    return out


def word_tokens(raw: str) -> tuple[str, ...]:
    """Tokens of one raw word of ``split_words`` (which may start or end with '_' or '-')."""
    if raw.isalnum() and raw.islower() and raw.isascii():
        # The common word (no joiner, no capital): _analyze's result without its steps.
        if raw in STOPWORDS:
            return ()
        stem = _stem(raw)
        return () if stem in STOPWORDS else (stem,)
    word = raw.strip("_-")
    return _analyze(word) if word else ()


def _analyze(word: str) -> tuple[str, ...]:
    """Tokens of one word (letters/digits possibly joined by '_'/'-')."""
    if not word.isascii() and any(map(_is_cjk, word)):
        return _analyze_mixed_script(word)
    parts: list[str] = []
    for piece in _pattern(_JOINERS).split(word) if ("_" in word or "-" in word) else (word,):
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
        parts: list[str] = _pattern(_CASE_PARTS).findall(piece)
    else:
        sig = _case_signature(piece)
        parts = [piece[m.start() : m.end()] for m in _pattern(_CASE_PARTS).finditer(sig)]
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


_STEMMER: list[Any] = []


def _stem(tok: str) -> str:
    """Snowball English (Porter2) through PyStemmer, on purely alphabetic ASCII tokens.

    Porter2 is the well-kept, documented stemmer every search engine ships (Lucene's
    ``EnglishStemmer``, SQLite FTS5's porter, tantivy's ``en_stem`` are its relatives), so the
    analysis agrees with them: ``retried``/``retries``/``retrying`` -> ``retri``,
    ``caching``/``cached`` -> ``cach``, ``silenced`` -> ``silenc``. Tokens with digits
    (``v2``, ``http2``, ``base64``) and other scripts are left as they are: they are
    identifiers or words the English rules would only damage. PyStemmer keeps its own memo of
    recent words; ``tokenize`` keeps one of whole raw words in front of it.
    """
    if len(tok) <= 2 or not tok.isalpha() or not tok.isascii():
        return tok
    if not _STEMMER:
        # Loaded on first use: a query of stopwords and identifiers never pays for it.
        import Stemmer

        _STEMMER.append(Stemmer.Stemmer("english", 50_000).stemWord)
    stem: str = _STEMMER[0](tok)
    return stem
