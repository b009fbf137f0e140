"""The join of two clones' adds of one entry: one file by a fixed rule, in any order.

Real entries and a real signed verdict; the merge driver and the audit's ``is_join`` agree on
the one file two unreviewed adds settle to, and on nothing else.
"""

from __future__ import annotations

import dataclasses
import itertools

from truss_files.facade import MemoryStore
from truss_files.format.entryfile import serialize
from truss_files.format.join import can_join, is_join, join
from truss_files.model import Entry, Trust
from truss_files.review.merge import merge_entry


def _b(entry: Entry) -> bytes:
    return serialize(entry).encode()


def _version(entry: Entry, created: str, salience: float = 0.5, *sources: str) -> Entry:
    prov = dataclasses.replace(entry.provenance, sources=sources or entry.provenance.sources)
    return dataclasses.replace(entry, created=created, salience=salience, provenance=prov)


def test_two_adds_join_to_the_earlier_created_and_the_union_of_sources(
    store: MemoryStore,
) -> None:
    entry = store.write("fact", "event:wh-1", "The deploy needs the migration flag.")
    a = _version(entry, "2026-11-29T11:00:05Z", 0.5, "event:wh-1#1", "run:R-2/4")
    b = _version(entry, "2026-11-29T10:00:09Z", 0.7, "event:wh-1#1")
    one = merge_entry(None, _b(a), _b(b), entry.path)
    other = merge_entry(None, _b(b), _b(a), entry.path)
    assert one.clean and other.clean and one.text == other.text
    assert any("joined two adds" in note for note in one.notes)
    joined = join([a, b])
    assert one.text == _b(joined)
    assert joined.created == b.created and joined.salience == b.salience
    assert joined.provenance.sources == ("event:wh-1#1", "run:R-2/4")
    assert joined.trust is Trust.UNVERIFIED and joined.id == entry.id
    assert is_join(one.text, [_b(a), _b(b)], entry.path)
    # Neither side as it is, nor the join with any field changed, is the join.
    assert not is_join(_b(a), [_b(a), _b(b)])
    assert not is_join(_b(dataclasses.replace(joined, salience=1.0)), [_b(a), _b(b)])


def test_the_join_is_the_same_in_every_order_and_grouping(store: MemoryStore) -> None:
    entry = store.write("fact", "event:wh-2", "Service two deploys after service one.")
    versions = [
        _version(entry, "2026-11-29T10:00:01Z", 0.4, "event:wh-2#1", "run:R-1/1"),
        _version(entry, "2026-11-29T10:00:01Z", 0.9, "event:wh-2#1"),
        _version(entry, "2026-11-29T09:59:59Z", 0.5, "run:R-3/2", "event:wh-2#1"),
        _version(entry, "2026-11-29T12:00:00Z", 0.1, "event:wh-2#1"),
    ]
    expected = _b(join(versions))
    for order in itertools.permutations(versions):
        assert _b(join(list(order))) == expected
        left = join([join([order[0], order[1]]), order[2], order[3]])
        right = join([order[0], join([order[1], join([order[2], order[3]])])])
        assert _b(left) == _b(right) == expected


def test_what_is_not_two_unreviewed_adds_does_not_join(store: MemoryStore) -> None:
    entry = store.write("fact", "event:wh-3", "The cache is warmed at boot.")
    later = _version(entry, "2026-11-29T12:00:00Z")
    checked = dataclasses.replace(later, checks=("tests",))
    linked = dataclasses.replace(later, superseded_by="ab" * 16)
    verdict = store.sign_verdict(entry.id, "PASS", note="checked").to_dict()
    promoted = dataclasses.replace(
        later,
        trust=Trust.VERIFIED,
        provenance=dataclasses.replace(later.provenance, verified_by=verdict),
    )
    for other in (checked, linked, promoted):
        assert not can_join([entry, other])
    # With a base the file is a three-way merge of changes, never a join.
    three_way = merge_entry(_b(entry), _b(entry), _b(later), entry.path)
    assert three_way.clean and not any("joined" in n for n in three_way.notes)
    # One side's panel reviewed it, the other side's is an unreviewed add: the reviewed
    # version as it is settles them; the unreviewed one, or the join, does not.
    assert is_join(_b(promoted), [_b(entry), _b(promoted)])
    assert merge_entry(None, _b(entry), _b(promoted), entry.path).text == _b(promoted)
    assert not is_join(_b(entry), [_b(entry), _b(promoted)])
    assert not is_join(_b(later), [_b(entry), _b(promoted)])
    rejected = dataclasses.replace(promoted, trust=Trust.REJECTED)
    assert not is_join(_b(promoted), [_b(rejected), _b(promoted)])
