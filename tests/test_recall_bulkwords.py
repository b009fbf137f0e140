"""The numpy word finder of an index build must give the words ``split_words`` gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from truss_files.recall.bulkwords import WordIds, ascii_word_ids
from truss_files.recall.tokenize import _analyze, split_words, word_tokens

# Word bytes, the joiners and separators, weighted towards words of 7-9 and 15-17 bytes (where
# a word's key goes from one u64 to two, and from two to none).
PIECES = st.one_of(
    st.text("abcXYZ019_-", min_size=1, max_size=20),
    st.sampled_from(["abcdefgh", "abcdefghi", "a" * 16, "b" * 17, "_a", "a-", "--", "x_y-z"]),
    st.text(' \n\t.,;:!?/()[]{}<>=+*&%$#@~`|^"\\\x00\x7f', min_size=1, max_size=3),
)
TEXTS = st.lists(st.lists(PIECES, max_size=12).map("".join), max_size=8)


class Memo(dict[str, int]):
    """The builder's memo of raw words: ids in order of first sight."""

    def __missing__(self, word: str) -> int:
        found = self[word] = len(self)
        return found


def words_of(texts: list[bytes], memo: Memo, table: WordIds) -> list[list[str]]:
    ids, counts = ascii_word_ids(np, texts, table)
    assert ids.dtype == np.intp
    assert counts.tolist() == [len(split_words(t.decode())) for t in texts]
    names = {v: k for k, v in memo.items()}
    flat = [names[i] for i in ids.tolist()]
    out, at = [], 0
    for count in counts.tolist():
        out.append(flat[at : at + count])
        at += count
    assert at == len(flat)
    return out


@settings(max_examples=300, deadline=None)
@given(first=TEXTS, second=TEXTS)
def test_the_words_and_their_ids_are_split_words_text_by_text(
    first: list[str], second: list[str]
) -> None:
    memo = Memo()
    table = WordIds(np, memo.__getitem__, bits=2)  # tiny: collisions, probing and growth
    for texts in (first, second):  # the second call finds some words already in the table
        encoded = [t.encode() for t in texts]
        assert words_of(encoded, memo, table) == [split_words(t) for t in texts]
    # One id per distinct word, however it was found (the table or the long-word path).
    assert len(set(memo.values())) == len(memo)


def test_a_word_found_again_keeps_its_id_and_is_analysed_once() -> None:
    memo = Memo()
    table = WordIds(np, memo.__getitem__, bits=2)
    words = [f"w{i}" for i in range(100)] + ["a" * 20, "abcdefghijklmnop"]
    first, _ = ascii_word_ids(np, [" ".join(words).encode()], table)
    again, _ = ascii_word_ids(np, [" ".join(reversed(words)).encode()], table)
    assert again.tolist() == first.tolist()[::-1]
    assert len(memo) == len(words)


def test_no_texts_and_empty_texts() -> None:
    memo = Memo()
    table = WordIds(np, memo.__getitem__)
    ids, counts = ascii_word_ids(np, [], table)
    assert (len(ids), len(counts)) == (0, 0)
    ids, counts = ascii_word_ids(np, [b"", b"  ", b""], table)
    assert len(ids) == 0 and counts.tolist() == [0, 0, 0]


@settings(max_examples=500, deadline=None)
@given(st.text("abcdefghijklmnopqrstuvwxyzABC0123456789_-", min_size=1, max_size=14))
def test_the_common_word_shortcut_analyses_as_the_full_path(raw: str) -> None:
    word = raw.strip("_-")
    assert word_tokens(raw) == (_analyze(word) if word else ())


def test_common_words_through_the_shortcut() -> None:
    assert word_tokens("caching") == ("cach",)
    assert word_tokens("the") == ()
    assert word_tokens("v2") == ("v2",)
