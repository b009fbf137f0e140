"""The words of many ASCII texts at once, as word ids, with numpy (an index build's tokenizer).

``split_words`` followed by a memo lookup costs ~0.3 µs a word inside a build (a ``str`` made
for every word, its hash computed, a dict probed): about a third of rebuilding 100k notes. Here
the same words come out of array operations over the texts' bytes, ~0.05 µs a word:

1. The texts are joined (a newline between them) and ``bytes.translate`` classes every byte:
   letter, digit, ``_`` or ``-`` -- exactly what ``split_words``' own table keeps -- or a
   separator. A word is a maximal run of kept bytes, as ``str.split`` cuts it.
2. A word of up to 16 bytes *is* its key: its bytes as two little-endian u64, zero-padded (no
   word byte is zero, so no two words share a key). Keys are looked up in ``WordIds``, an
   open-addressing hash table kept in numpy arrays, probed for all words in one pass.
3. Only what the table does not know yet runs Python: each new word is decoded once and handed
   to the caller's ``word_id`` (which analyses it into terms), and so is every word longer than
   16 bytes (rare: hashes, long identifiers).

The result is the same word ids ``map(word_id, split_words(text))`` gives, text by text;
``tests/test_recall_bulkwords.py`` checks that property on generated text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

__all__ = ["WordIds", "ascii_word_ids"]

_KEY_BYTES: Final = 16  # words up to this long are their own key
_MULT1: Final = 0x9E3779B97F4A7C15  # Fibonacci hashing: odd multipliers near 2**64 / phi
_MULT2: Final = 0xC2B2AE3D27D4EB4F
_MAX_LOAD: Final = 0.25  # entries per slot before the table doubles: probes stay ~1 a key


def _kept_table() -> bytes:
    return bytes(1 if chr(b).isalnum() or chr(b) in "_-" else 0 for b in range(128)) + bytes(128)


# bytes.translate table: byte -> 1 if it is part of a word, else 0 (done in C, no index arrays).
_KEPT: Final = _kept_table()


class WordIds:
    """Word key (two u64) -> word id, for words of up to 16 bytes. A zero first key marks an
    empty slot: every word has a first byte, and no word byte is zero."""

    def __init__(self, np: Any, word_id: Callable[[str], int], bits: int = 16) -> None:
        self._np = np
        self.word_id = word_id  # a new word's id (it analyses the word)
        self._count = 0
        self._allocate(bits)
        self.masks = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)

    def _allocate(self, bits: int) -> None:
        np = self._np
        self._bits = bits
        self._mask = (1 << bits) - 1
        self._k1 = np.zeros(1 << bits, dtype=np.uint64)
        self._k2 = np.zeros(1 << bits, dtype=np.uint64)
        self._val = np.zeros(1 << bits, dtype=np.int64)

    def _grow(self) -> None:
        k1, k2, val = self._k1, self._k2, self._val
        used = self._np.flatnonzero(k1)
        self._allocate(self._bits + 1)
        self._place(k1[used], k2[used], val[used])

    def _slots(self, k1: Any, k2: Any) -> Any:
        np = self._np
        h = k1 * np.uint64(_MULT1)
        h ^= k2 * np.uint64(_MULT2)
        h >>= np.uint64(64 - self._bits)
        return h.astype(np.intp)

    def lookup(self, k1: Any, k2: Any) -> Any:
        """Word ids of the keys (int64), -1 where the table has no such word."""
        np = self._np
        slot = self._slots(k1, k2)
        found = self._k1[slot]
        hit = (found == k1) & (self._k2[slot] == k2)
        out = np.where(hit, self._val[slot], -1)
        # Neither the word nor an empty slot: the word may sit further along (linear probe).
        pending = np.flatnonzero(~hit & (found != 0))
        slot = slot[pending]
        while len(pending):
            slot = (slot + 1) & self._mask
            found = self._k1[slot]
            hit = (found == k1[pending]) & (self._k2[slot] == k2[pending])
            out[pending[hit]] = self._val[slot[hit]]
            again = ~hit & (found != 0)
            pending, slot = pending[again], slot[again]
        return out

    def add(self, k1: Any, k2: Any) -> Any:
        """Word ids of the keys, adding the words not in the table (``word_id`` of each new
        word, in order of first occurrence)."""
        np = self._np
        ids = self.lookup(k1, k2)
        missing = np.flatnonzero(ids < 0)
        if not len(missing):
            return ids
        m1, m2 = k1[missing], k2[missing]
        # The distinct new words, in order of first occurrence (word ids are given in that order).
        order = np.lexsort((missing, m2, m1))
        first = np.ones(len(order), dtype=bool)
        first[1:] = (m1[order[1:]] != m1[order[:-1]]) | (m2[order[1:]] != m2[order[:-1]])
        new = np.sort(order[first])
        words = np.empty((len(new), 2), dtype="<u8")
        words[:, 0] = m1[new]
        words[:, 1] = m2[new]
        raw = words.tobytes()
        word_id = self.word_id
        values = np.fromiter(
            (
                word_id(raw[at : at + _KEY_BYTES].rstrip(b"\0").decode("ascii"))
                for at in range(0, len(raw), _KEY_BYTES)
            ),
            dtype=np.uint32,
            count=len(new),
        )
        self._count += len(new)
        while self._count > _MAX_LOAD * (self._mask + 1):
            self._grow()
        self._place(m1[new], m2[new], values)
        ids[missing] = self.lookup(m1, m2)
        return ids

    def _place(self, k1: Any, k2: Any, values: Any) -> None:
        """Insert distinct keys the table does not hold."""
        np = self._np
        slot = self._slots(k1, k2)
        pending = np.arange(len(k1))
        while len(pending):
            # Of the keys wanting one free slot, the first takes it; the rest probe on.
            free = self._k1[slot] == 0
            _, first = np.unique(slot, return_index=True)
            take = np.zeros(len(pending), dtype=bool)
            take[first] = True
            take &= free
            where, who = slot[take], pending[take]
            self._k1[where] = k1[who]
            self._k2[where] = k2[who]
            self._val[where] = values[who]
            pending = pending[~take]
            slot = slot[~take]
            stuck = self._k1[slot] != 0
            slot[stuck] = (slot[stuck] + 1) & self._mask


def ascii_word_ids(np: Any, texts: Sequence[bytes], table: WordIds) -> tuple[Any, Any]:
    """``(word ids of every text's words, one text after the other; words per text)``: for
    each text, ``[table.word_id(w) for w in split_words(text)]``. Texts are ASCII without
    apostrophes (``split_words`` drops those first)."""
    # A separator before the first text and after the last: every word starts and ends
    # inside, so the places where "kept" flips alternate between a start and an end.
    joined = b"\n" + b"\n".join(texts) + b"\n" + bytes(_KEY_BYTES)
    kept = np.frombuffer(joined.translate(_KEPT), dtype=np.bool_)
    flips = np.flatnonzero(kept[1:] != kept[:-1])
    flips += 1
    starts, ends = flips[0::2], flips[1::2]
    del kept, flips
    # Text i ends at the separator after it; its words start before that.
    text_ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + 1)
    counts = np.diff(np.searchsorted(starts, text_ends), prepend=0)
    length = ends - starts
    # Eight bytes read at any offset: the word's first eight and next eight, masked to its length.
    window = np.ndarray((len(joined) - 7,), dtype="<u8", buffer=joined, strides=(1,))
    masks = table.masks
    k1 = window[starts] & masks[np.minimum(length, 8)]
    k2 = window[starts + 8] & masks[np.clip(length - 8, 0, 8)]
    short = length <= _KEY_BYTES
    if short.all():
        ids = table.add(k1, k2)
    else:
        ids = np.empty(len(starts), dtype=np.int64)
        ids[short] = table.add(k1[short], k2[short])
        long_words = np.flatnonzero(~short)
        ids[long_words] = [
            table.word_id(joined[a:b].decode("ascii"))
            for a, b in zip(starts[long_words].tolist(), ends[long_words].tolist(), strict=True)
        ]
    return ids, counts
