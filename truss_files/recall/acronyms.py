"""Acronyms a store defines for itself, used to widen a query both ways.

A note that writes ``dead letter queue (DLQ)`` or ``DLQ (dead letter queue)`` teaches the
store that the two spellings mean the same thing. A query that says one of them then also
searches for the other: ``replay the DLQ`` looks for ``dead``, ``letter``, ``queue`` too, and
``practice disaster recovery`` also looks for ``dr``. Nothing is built in: the table is learned
from the notes a query may see, so it follows each team's own vocabulary and never carries a
meaning from elsewhere.

A definition is accepted only when the acronym's letters are the initials of the words next to
the parentheses, in order; small words may either supply a letter (``infrastructure as code
(IaC)``, ``mean time to recovery (MTTR)``) or be skipped (``bill of materials``). Hyphens split
words (``write-ahead log (WAL)``, ``single sign-on (SSO)``). An acronym is 2-8 letters or digits,
starts with a letter and has at least two capitals, so ``(see below)`` or ``(v2)`` never count.

Trust: the caller passes only the notes its filter admits, so a note below the trust floor
cannot change what a query at the floor searches for (``definitions`` per note, merged by
``Glossary``).

Measured on ``tests/relevance/hard`` (see ``evaluate``): see the README's Relevance section.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

from .tokenize import STOPWORDS, tokenize

__all__ = ["Glossary", "definitions", "store_glossary"]

# Compiled on first use: a query whose glossary is cached never parses a definition.
_PAREN: Final = r"\(([^()\n]{1,80})\)"
_ACRONYM: Final = r"[A-Za-z][A-Za-z0-9]{1,7}"
_WORD: Final = r"[A-Za-z0-9]+"
# Words a definition may use for one of its letters or skip (lowercase, ASCII).
_SMALL: Final = frozenset(
    {"a", "an", "and", "as", "at", "by", "for", "in", "of", "on", "the", "to"}
)
MAX_EXPANSIONS: Final = 8  # long forms added per query: a query stays bounded


def definitions(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """``(acronym token, long-form tokens)`` for each acronym ``text`` defines."""
    if "(" not in text:
        return []
    found: list[tuple[str, tuple[str, ...]]] = []
    word = re.compile(_WORD)
    for match in re.compile(_PAREN).finditer(text):
        inside = match.group(1).strip()
        before = text[max(0, match.start() - 120) : match.start()]
        if _is_acronym(inside):
            # long form (ABBR): the long form is the words just before the parenthesis.
            words = word.findall(before)
            long_form = _initials_match(_singular(inside), words[::-1], reverse=True)
            if long_form:
                found.append(_pair(_singular(inside), long_form))
            continue
        # ABBR (long form): the acronym is the word just before the parenthesis.
        head = word.findall(before[-12:])
        if head and _is_acronym(head[-1]):
            words = word.findall(inside)
            abbr = _singular(head[-1])
            long_form = _initials_match(abbr, words, reverse=False)
            if long_form and len(long_form) == len(words):
                found.append(_pair(abbr, long_form))
    return [(abbr, long) for abbr, long in found if abbr and long]


def _is_acronym(word: str) -> bool:
    return bool(re.fullmatch(_ACRONYM, word)) and sum(c.isupper() for c in word) >= 2


def _singular(acronym: str) -> str:
    # "PRs (pull requests)": the plural's "s" is no initial.
    return acronym[:-1] if acronym.endswith("s") and acronym[:-1].isupper() else acronym


def _pair(acronym: str, long_form: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    tokens = tokenize(acronym.lower())
    return (tokens[0] if len(tokens) == 1 else ""), tuple(tokenize(" ".join(long_form)))


def _initials_match(acronym: str, words: Sequence[str], *, reverse: bool) -> list[str]:
    """The words (in text order) whose initials spell ``acronym``; ``words`` are given in the
    order to walk them (nearest the parenthesis first). Empty when they do not."""
    letters = [c for c in acronym.lower() if c.isalpha()]
    if reverse:
        letters.reverse()
    used: list[str] = []
    at = 0
    for letter in letters:
        while at < len(words) and words[at][0].lower() != letter and words[at].lower() in _SMALL:
            at += 1  # a small word that gives no letter ("bill of materials")
        if at >= len(words) or words[at][0].lower() != letter:
            return []
        used.append(words[at])
        at += 1
    if len(used) < 2:
        return []
    return used[::-1] if reverse else used


class Glossary:
    """Acronym <-> long form, from the definitions of the notes a query may see."""

    def __init__(self, pairs: Iterable[tuple[str, tuple[str, ...]]] = ()) -> None:
        self.long: dict[str, set[tuple[str, ...]]] = {}
        self.short: dict[tuple[str, ...], set[str]] = {}
        for abbr, long_form in pairs:
            self.add(abbr, long_form)

    def add(self, abbr: str, long_form: tuple[str, ...]) -> None:
        if not abbr or len(long_form) < 2 or abbr in long_form:
            return
        self.long.setdefault(abbr, set()).add(long_form)
        self.short.setdefault(long_form, set()).add(abbr)

    def __len__(self) -> int:
        return len(self.long)

    def expand(self, terms: Sequence[str]) -> list[str]:
        """``terms`` followed by the other spelling of every acronym or long form in them
        (distinct, in a deterministic order, at most ``MAX_EXPANSIONS`` spellings)."""
        if not self.long:
            return list(terms)
        out = list(dict.fromkeys(terms))
        have = set(out)
        added = 0
        for term in list(out):
            for long_form in sorted(self.long.get(term, ())):
                if added < MAX_EXPANSIONS:
                    added += 1
                    out += [t for t in long_form if t not in have and t not in STOPWORDS]
                    have.update(long_form)
        seq = tuple(terms)
        for long_form, abbrs in sorted(self.short.items()):
            if added < MAX_EXPANSIONS and _contains(seq, long_form):
                for abbr in sorted(abbrs):
                    if abbr not in have:
                        added += 1
                        out.append(abbr)
                        have.add(abbr)
        return out


def _contains(seq: tuple[str, ...], part: tuple[str, ...]) -> bool:
    """``part`` in order within ``seq``, at most two other terms between its words (the
    compound of a hyphenated word, a dropped stopword's neighbour)."""
    for start, term in enumerate(seq):
        if term != part[0]:
            continue
        at = start
        for want in part[1:]:
            window = seq[at + 1 : at + 4]
            if want not in window:
                break
            at = at + 1 + window.index(want)
        else:
            return True
    return False


# -- a store's glossary: the definitions the admitted entries store in the index ------------


def store_glossary(found: Iterable[Sequence[Any]]) -> Glossary:
    """The glossary of ``found``: per admitted entry that defines acronyms, its definitions
    as the index stores them (``[[acronym, long form...], ...]``, found once when the entry
    was indexed) -- only the entries the filter admits, so a definition in an entry below
    the trust floor never changes a query at the floor. A damaged row is ignored."""
    glossary = Glossary()
    for rows in found:
        for row in rows if isinstance(rows, list) else ():
            if isinstance(row, list | tuple) and len(row) == 2 and isinstance(row[1], tuple):
                glossary.add(str(row[0]), tuple(str(t) for t in row[1]))
    return glossary
