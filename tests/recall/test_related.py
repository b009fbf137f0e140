"""Related words (recall/related.py): the shipped table, how a query is widened, and the trust
rule that nothing below the floor changes a query at the floor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmarks.evaluate import MemoryIndex
from tests.support.gated import Searcher
from tests.support.recall_support import commit_toml, promote
from truss_files.facade import MemoryStore
from truss_files.faces.cli.main import cli
from truss_files.model import Trust
from truss_files.recall.bounds import MAX_QUERY_TERMS
from truss_files.recall.encoders.modelfiles import wordllama_files, wordllama_package
from truss_files.recall.pipeline import Filter
from truss_files.recall.related import (
    FIND_LIMIT,
    MIN_TERM,
    RELATED_WEIGHT,
    TABLE_FILE,
    RelatedWords,
    TableText,
    build_table,
    load_related,
)
from truss_files.recall.tokenize import STOPWORDS, tokenize

TARGET = "A forgotten passphrase is reset by the operator on request."
OTHER = "Passphrases rotate every year; the old one stops working at once."


def test_widen_adds_one_word_per_term_and_never_a_query_term() -> None:
    table = RelatedWords({"alpha": "beta", "beta": "alpha", "gamma": "delta", "omega": "delta"})
    assert table.widen(["alpha", "beta", "gamma", "gamma", "omega", "other"]) == ["delta"]
    assert table.widen(["alpha"]) == ["beta"]
    assert table.widen([]) == []


def test_an_added_word_counts_at_its_weight_in_one_query() -> None:
    """An added word's part of a score is ``weight`` times its BM25, summed with the query's
    own words by tantivy over every note (not over two cut lists)."""
    docs = [
        ("a", ["passphras", "reset", "oper"]),
        ("b", ["forgotten", "passphras"]),
        ("c", ["forgotten", "rotat", "year"]),
        ("d", ["rotat", "year", "old"]),
    ]
    index = MemoryIndex(docs)
    alone = dict(index.top(["forgotten"], 10))
    own = dict(index.top(["passphras"], 10))
    both = dict(index.top(["passphras"], 10, ["forgotten"], RELATED_WEIGHT))
    assert set(both) == {"a", "b", "c"}
    assert both["c"] == pytest.approx(RELATED_WEIGHT * alone["c"], rel=1e-6)
    assert both["a"] == pytest.approx(own["a"], rel=1e-6)
    assert both["b"] == pytest.approx(own["b"] + RELATED_WEIGHT * alone["b"], rel=1e-6)
    assert index.top(["passphras"], 1, ["forgotten"], RELATED_WEIGHT)[0][0] == "b"


def test_the_shipped_table_is_words_of_the_index() -> None:
    related = load_related()
    assert related is not None and len(related) > 1000
    for term, other in related.table.items():
        assert term != other
        for word in (term, other):
            assert len(word) >= MIN_TERM and word not in STOPWORDS
            # Index terms: lowercase letters, each its own stem.
            assert word.isascii() and word.isalpha() and word.islower()
    assert related.table["forgot"] == "forgotten"


@pytest.mark.heavy  # runs the model over the vocabulary
def test_the_shipped_table_is_what_the_model_gives() -> None:
    """A tokenizer or stemmer change that moves the index's terms fails here until the table
    is rebuilt (``python -m truss_files.recall.related``)."""
    package = wordllama_package()
    assert package is not None, "wordllama (the semantic extra, in the dev extra) is not installed"
    related = load_related()
    assert related is not None
    assert build_table(*wordllama_files(package)) == dict(related.table)


def test_a_damaged_table_file_is_read_line_by_line_never_trusted(tmp_path: Path) -> None:
    path = tmp_path / "related.tsv"
    path.write_bytes(
        b"# comment\tnot a pair\nforgot\tforgotten\nno tab here\n\tempty\nempty\t\n"
        b"four\tcolumns\tare\ttoo many\nthree\tcolumn\tcolumns\nshort\tword\t\n\n"
    )
    found = load_related(path)
    assert found is not None and dict(found.table) == {"forgot": "forgotten", "three": "column"}
    assert found.word("column") == "columns" and found.word("forgotten") == "forgotten"
    path.write_bytes(b"forgot\tforgotten\n\xff\xfe not text\n")
    assert load_related(path) is None  # not UTF-8: nothing added, the query runs plain
    assert load_related(tmp_path / "missing.tsv") is None
    assert load_related(TABLE_FILE) is load_related()  # read once per process


def test_the_table_answers_the_same_before_and_after_it_is_parsed() -> None:
    """Lookups in place, then (past ``FIND_LIMIT``) in the parsed table: the same answers,
    odd lines included -- the first line of a term wins both ways."""
    text = (
        "# comment\tnot a pair\nforgot\tforgotten\nforgot\tlater\nno tab here\n\tempty\n"
        "empty\t\nfour\tcolumns\tare\tmany\nthree\tcolumn\tcolumns\n"
        + "".join(f"word{n}\tother{n}\n" for n in range(FIND_LIMIT * 2))
    )
    asked = ["forgot", "no tab here", "", "empty", "four", "# comment", "absent", "three"]
    asked += [f"word{n}" for n in range(FIND_LIMIT * 2)]
    fresh = [TableText(text).get(term) for term in asked]
    table = TableText(text)
    first = [table.get(term) for term in asked]
    then = [table.get(term) for term in asked]
    assert first == fresh == then
    assert fresh[:8] == ["forgotten", None, None, None, None, None, None, "column"]
    assert table._parsed is not None  # parsed once it had been asked often enough


def hits(searcher: Searcher, text: str, floor: Trust = Trust.VERIFIED) -> list[tuple[str, float]]:
    return [(h.entry.id, h.score) for h in searcher.query(text, Filter(min_trust=floor), 5).hits]


def test_a_related_word_finds_the_note_that_says_it_another_way(store: MemoryStore) -> None:
    target = promote(store, store.write("fact", "reset", TARGET))
    promote(store, store.write("fact", "rotate", OTHER))
    result = Searcher(store.git.workdir).query("I forgot it", Filter(), 5)
    # "forgot" is in no note: only its related word finds the note that says "forgotten",
    # and the answer names the word it added.
    assert [h.entry.id for h in result.hits] == [target.id]
    assert result.related_words == ("forgotten",)
    assert result.hits[0].score > 0
    # The own word outweighs its related word: a note with "forgot" ranks first.
    said = promote(store, store.write("fact", "said", "I forgot where the runbook lives."))
    found = hits(Searcher(store.git.workdir), "I forgot it")
    assert [doc for doc, _ in found] == [said.id, target.id]


def test_related_words_can_be_turned_off(store: MemoryStore) -> None:
    from truss_files.signing.trustpolicy import CONFIG_PATH

    promote(store, store.write("fact", "reset", TARGET))
    text = (store.snapshot().read(CONFIG_PATH) or b"").decode()
    commit_toml(store, text.replace("[recall]", "[recall]\nrelated_words = false", 1))
    result = Searcher(store.git.workdir).query("I forgot it", Filter(), 5)
    assert result.hits == [] and result.related_words == ()


def test_a_note_below_the_floor_never_changes_a_verified_answer(store: MemoryStore) -> None:
    # The attack: unverified notes stuffed with a query's word and its related word, written
    # to push a verified answer down, pull another up or change what the query looks for.
    target = promote(store, store.write("fact", "reset", TARGET))
    promote(store, store.write("fact", "rotate", OTHER))
    promote(store, store.write("fact", "said", "I forgot where the runbook lives."))
    query = "forgot passphrase"
    before = Searcher(store.git.workdir).query(query, Filter(), 5)
    traps = [
        store.write("fact", f"trap-{i}", "forgotten " * (i + 2) + "forgot passphrase recovered")
        for i in range(3)
    ]
    searcher = Searcher(store.git.workdir)
    after = searcher.query(query, Filter(), 5)
    assert [(h.entry.id, h.score) for h in after.hits] == [
        (h.entry.id, h.score) for h in before.hits
    ]
    assert after.related_words == before.related_words == ("forgotten",)
    assert target.id in {h.entry.id for h in after.hits}
    # At the unverified floor the traps are admitted.
    wide = hits(searcher, query, Trust.UNVERIFIED)
    assert {t.id for t in traps} <= {doc for doc, _ in wide}
    # A rejected note is never a candidate, whatever words it holds.
    store.reject(traps[0].id, store.sign_verdict(traps[0].id, "FAIL", note="planted"))
    assert traps[0].id not in {
        doc for doc, _ in hits(Searcher(store.git.workdir), query, Trust.UNVERIFIED)
    }


def test_a_query_at_the_term_limit_adds_at_most_one_word_per_term(store: MemoryStore) -> None:
    related = load_related()
    assert related is not None
    promote(store, store.write("fact", "reset", TARGET))
    words = [w for w in sorted(related.table) if tokenize(w) == [w]][:MAX_QUERY_TERMS]
    result = Searcher(store.git.workdir).query(" ".join(words), Filter(), 5)
    assert 0 < len(result.related_words) <= MAX_QUERY_TERMS
    assert not set(result.related_words) & set(words)


def test_related_words_are_shown_as_words_not_stems() -> None:
    """``related_words`` in JSON: the surface form the returned notes use most, else the
    model's most frequent word for the stem (the table's third column), else the stem."""
    related = load_related()
    assert related is not None
    assert related.table["fail"] == "failur" and related.word("failur") == "failure"
    assert related.word("elimin") == "eliminate"  # a vocabulary piece is not the word shown
    notes = ["Her testimony was clear.", "Two testimonies differ; the testimony stands."]
    assert related.shown(["testim", "failur"], notes) == ["testimony", "failure"]
    assert related.shown(["testim"]) == ["testim"]  # no word known for it: the stem
    for stem, word in [(t, related.word(t)) for t in list(related.table.values())[:500]]:
        assert tokenize(word) == [stem], (stem, word)  # each word shown stems to its term


def test_query_json_names_the_related_words(store: MemoryStore) -> None:
    promote(store, store.write("fact", "reset", TARGET))
    out = CliRunner().invoke(
        cli, ["--store", str(store.git.workdir), "query", "forgot", "--format", "json"]
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["related_words"] == ["forgotten"]
    assert len(data["entries"]) == 1


def test_hybrid_widens_its_exact_side_and_semantic_mode_does_not(store: MemoryStore) -> None:
    target = promote(store, store.write("fact", "reset", TARGET))
    promote(store, store.write("fact", "rotate", OTHER))
    searcher = Searcher(store.git.workdir)
    hybrid = searcher.query("I forgot it", Filter(), 5, mode="hybrid")
    assert hybrid.related_words == ("forgotten",)
    assert hybrid.hits[0].entry.id == target.id
    assert searcher.query("I forgot it", Filter(), 5, mode="semantic").related_words == ()
