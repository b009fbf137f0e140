"""recall/floors.py and floorwrite.py: the floor indexes' documents, queries and BM25,
checked against tantivy itself and against rank-bm25 (the correctness reference)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import tantivy
from bm25_reference import LuceneOkapi, okapi_top, overlap

from truss_files.recall.evaluate import load_corpus, load_queries
from truss_files.recall.floors import (
    Floor,
    MemoryIndex,
    bm25,
    body_query,
    fieldnorm,
    make_doc,
    read_opstamp,
)
from truss_files.recall.floorwrite import FloorWriter
from truss_files.recall.tokenize import tokenize

RELEVANCE = Path(__file__).parent / "relevance"
# Measured top-10 overlap with rank-bm25 (Lucene's idf, k1 1.2, b 0.75, exact lengths; the
# only difference left is tantivy's quantised lengths and f32): relevance set mean 0.997,
# min 0.9; synthetic corpus (3,000 Zipf notes, 400 queries) mean 0.977, min 0.8, where no
# query word is in half the notes (0.963 where one is). The floors sit just below.
AGREEMENT_FLOOR = 0.95


def _hex(rng: random.Random) -> str:
    return f"{rng.getrandbits(128):032x}"


def _floor_of(tmp_path: Path, docs: dict[str, list[str]]) -> Floor:
    writer = FloorWriter(str(tmp_path / "floor"), create=True)
    for entry_id, tokens in docs.items():
        writer.add(make_doc(entry_id, " ".join(tokens), ["k:fact"]))
    opstamp, sign = writer.commit()
    total = sum(map(len, docs.values()))
    return Floor(str(tmp_path / "floor"), opstamp, len(docs), total, sign)


def test_fieldnorm_is_the_length_tantivy_scores_with(tmp_path: Path) -> None:
    """tantivy's own explanation of a score names the length it used: ours for every length
    up to 400 and for random ones up to 100k."""
    rng = random.Random(3)
    lengths = list(range(1, 400)) + [rng.randint(400, 100_000) for _ in range(60)]
    docs = {_hex(rng): ["x"] + ["y"] * (n - 1) for n in lengths}
    floor = _floor_of(tmp_path, docs)
    query = tantivy.Query.term_query(floor.index.schema, "body", "x")
    hits = floor.searcher.search(query, len(docs)).hits
    assert len(hits) == len(docs)
    seen = set()
    for _score, address in hits:
        explained = json.loads(query.explain(floor.searcher, address).to_json())
        dl = explained["details"][2]["details"][3]["value"]
        assert dl == fieldnorm(int(dl)), dl  # a value the table holds
        seen.add(int(dl))
    assert {fieldnorm(n) for n in lengths} == seen


def test_bm25_is_tantivys_score_to_f32_rounding(tmp_path: Path) -> None:
    rng = random.Random(5)
    vocab = [f"w{i}" for i in range(60)]
    docs = {_hex(rng): rng.choices(vocab, k=rng.randint(1, 300)) for _ in range(400)}
    floor = _floor_of(tmp_path, docs)
    for _ in range(30):
        terms = list(dict.fromkeys(rng.choices(vocab, k=rng.randint(1, 4))))
        hits, _ = floor.search(body_query(terms), 50)
        assert hits
        dfs = [floor.doc_freq(t) for t in terms]
        for score, entry_id in hits:
            tokens = docs[entry_id]
            tfs = [tokens.count(t) for t in terms]
            mine = bm25(tfs, dfs, len(tokens), floor.n_docs, floor.total)
            assert math.isclose(mine, score, rel_tol=1e-6), (mine, score)


def test_every_match_scores_above_zero_even_for_a_word_of_every_note(tmp_path: Path) -> None:
    rng = random.Random(7)
    docs = {_hex(rng): ["everywhere"] + rng.choices(["a", "b"], k=5) for _ in range(30)}
    floor = _floor_of(tmp_path, docs)
    hits, count = floor.search(body_query(["everywhere"]), 100, count=True)
    assert count == 30 and len(hits) == 30
    assert all(score > 0 for score, _ in hits)
    single = MemoryIndex([("only", ["rust", "borrow", "checker"])])
    assert [(key, score > 0) for key, score in single.top(["borrow"], 10)] == [("only", True)]


def test_equal_scores_come_back_by_id_however_many(tmp_path: Path) -> None:
    """Hundreds of equal scores: the first ten are the ten smallest ids, as tantivy's own
    order among them is arbitrary."""
    rng = random.Random(9)
    docs = {_hex(rng): ["same", "words", "here"] for _ in range(300)}
    index = MemoryIndex(docs.items())
    assert [key for key, _ in index.top(["same"], 10)] == sorted(docs)[:10]


def test_a_commit_is_named_by_its_opstamp(tmp_path: Path) -> None:
    path = tmp_path / "floor"
    writer = FloorWriter(str(path), create=True)
    writer.add(make_doc("0" * 32, "a b", []))
    first, _ = writer.commit()
    assert read_opstamp(str(path)) == first
    writer = FloorWriter(str(path))
    writer.delete("0" * 32)
    second, _ = writer.commit()
    assert second > first and read_opstamp(str(path)) == second
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(path)
    assert read_opstamp(str(tmp_path / "link")) is None  # a link is never read through


def test_top_ten_agree_with_rank_bm25_on_the_relevance_set() -> None:
    corpus = load_corpus(RELEVANCE / "corpus.yaml")
    ids = [n.id for n in corpus]
    docs = [tokenize(n.body) for n in corpus]
    okapi = LuceneOkapi(docs, k1=1.2, b=0.75)
    ours = MemoryIndex(zip(ids, docs, strict=True))
    overlaps = []
    for q in load_queries(RELEVANCE / "queries.yaml"):
        tokens = list(dict.fromkeys(tokenize(q.query)))
        got = [key for key, _ in ours.top(tokens, 10)]
        overlaps.append(overlap(got, okapi_top(okapi, ids, docs, tokens, 10)))
    assert sum(overlaps) / len(overlaps) >= AGREEMENT_FLOOR, overlaps
    assert min(overlaps) >= 0.8, overlaps


def test_top_ten_agree_with_rank_bm25_on_a_synthetic_corpus() -> None:
    rng = random.Random(8)
    vocab = [f"w{i}" for i in range(2000)]
    zipf = [1 / (i + 1) for i in range(len(vocab))]
    docs = [rng.choices(vocab, zipf, k=rng.randint(10, 120)) for _ in range(3000)]
    ids = [f"d{i:05d}" for i in range(len(docs))]
    okapi = LuceneOkapi(docs, k1=1.2, b=0.75)
    ours = MemoryIndex(zip(ids, docs, strict=True))
    held = {t: sum(1 for d in docs if t in d) for t in vocab[:50]}
    defined: list[float] = []
    common: list[float] = []
    for _ in range(400):
        query = list(dict.fromkeys(rng.choices(vocab, zipf, k=rng.randint(1, 5))))
        hits = ours.top(query, 10)
        assert all(score > 0 for _, score in hits)
        share = overlap([key for key, _ in hits], okapi_top(okapi, ids, docs, query, 10))
        widespread = any(2 * held.get(t, 0) > len(docs) for t in query)
        (common if widespread else defined).append(share)
    assert len(defined) >= 100 and common
    assert sum(defined) / len(defined) >= AGREEMENT_FLOOR, sum(defined) / len(defined)


@pytest.mark.parametrize("terms", [[], ["nothing-like-it"]])
def test_no_term_or_no_match_is_an_empty_answer(terms: list[str]) -> None:
    index = MemoryIndex([("a", ["x", "y"])])
    assert index.top(terms, 10) == []


def test_a_rebuilds_bodies_are_the_plain_ones(tmp_path: Path) -> None:
    """The floor documents fed in bulk (numpy) hold the same tokens as those fed one by one,
    documents without a token and repeated tokens included."""
    from collections import Counter

    from truss_files.recall import floorwrite
    from truss_files.recall.segment import Doc, Segment, write_segment

    rng = random.Random(4)
    words = ["a", "b", "borrow", "借", "z" * 20]
    docs = []
    for i in range(40):
        tf = {w: rng.choice([1, 1, 2, 5]) for w in rng.sample(words, rng.randint(0, 4))}
        docs.append(
            Doc(
                id=f"{i:032x}", cls=2, layer=0, length=sum(tf.values()), tf=tf,
                record=("fact", f"k{i}", "body"), group=f"fact\0k{i}", run=None,
                chash=bytes(16),
            )
        )  # fmt: skip
    write_segment(tmp_path / "s.seg", docs)
    seg = Segment(tmp_path / "s.seg")
    bulk = floorwrite._bulk_bodies(seg)
    assert bulk is not None
    for docno, doc in enumerate(docs):
        terms, tfs = seg.forward_terms(docno)
        assert Counter(bulk(docno).split()) == Counter(doc.tf) == dict(zip(terms, tfs, strict=True))
