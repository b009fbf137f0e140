"""Acronyms a store defines for itself (recall/acronyms.py): parsing, expansion, and the trust
rule that a definition below the floor never changes a query at the floor."""

from __future__ import annotations

import pytest

from tests.support.gated import Searcher
from tests.support.recall_support import promote
from truss_files.facade import MemoryStore
from truss_files.model import Trust
from truss_files.recall.acronyms import MAX_EXPANSIONS, Glossary, definitions
from truss_files.recall.pipeline import Filter
from truss_files.recall.tokenize import tokenize


def spelled(pairs: list[tuple[str, tuple[str, ...]]]) -> dict[str, str]:
    return {abbr: " ".join(long_form) for abbr, long_form in pairs}


@pytest.mark.parametrize(
    ("text", "abbr", "words"),
    [
        ("the dead letter queue (DLQ) holds them", "dlq", "dead letter queue"),
        ("GC (garbage collection) pauses", "gc", "garbage collection"),
        ("a write-ahead log (WAL) segment", "wal", "write ahead log"),
        ("single sign-on (SSO) with Okta", "sso", "single sign"),
        ("managed as infrastructure as code (IaC) only", "iac", "infrastructure code"),
        ("mean time to recovery (MTTR) was 42 minutes", "mttr", "mean time recovery"),
        ("a software bill of materials (SBOM) per image", "sbom", "software bill materials"),
        ("every pull request (PRs) needs review", "pr", "pull request"),
    ],
)
def test_definitions_both_orders_and_small_words(text: str, abbr: str, words: str) -> None:
    assert spelled(definitions(text)) == {abbr: " ".join(tokenize(words))}


@pytest.mark.parametrize(
    "text",
    [
        "see the notes (see below) for details",  # not an acronym
        "the v2 API (v2) is deprecated",  # one capital at most
        "restart the worker (SIGTERM) first",  # letters are not the initials before it
        "Kafka (a message broker) is used",  # not an acronym before the parenthesis
        "half open (HOPE",  # never closed
        "",
    ],
)
def test_non_definitions_are_ignored(text: str) -> None:
    assert definitions(text) == []


def test_expand_both_ways_and_bounded() -> None:
    glossary = Glossary(definitions("the dead letter queue (DLQ) and disaster recovery (DR)"))
    assert glossary.expand(tokenize("replay the DLQ")) == tokenize("replay dlq dead letter queue")
    assert glossary.expand(tokenize("practice disaster recovery")) == [
        *tokenize("practice disaster recovery"),
        "dr",
    ]
    assert glossary.expand(tokenize("unrelated words")) == tokenize("unrelated words")
    many = Glossary((f"a{i}", (f"w{i}", f"x{i}")) for i in range(3 * MAX_EXPANSIONS))
    query = [f"a{i}" for i in range(3 * MAX_EXPANSIONS)]
    assert len(many.expand(query)) == len(query) + 2 * MAX_EXPANSIONS


def test_a_query_finds_the_note_that_spells_the_acronym_out(store: MemoryStore) -> None:
    target = promote(
        store, store.write("playbook", "replay", "Replay the dead letter queue in batches.")
    )
    promote(
        store, store.write("fact", "dlq-def", "Failed events go to the dead letter queue (DLQ).")
    )
    noise = promote(
        store, store.write("fact", "noise", "Replay protection uses nonces in every request.")
    )
    found = [
        h.entry.id for h in Searcher(store.git.workdir).query("replay the DLQ", Filter(), 3).hits
    ]
    # The playbook never says "DLQ": only the learned long form finds it, above the note that
    # shares just "replay".
    assert target.id in found
    assert found.index(target.id) < found.index(noise.id)


def test_a_definition_below_the_floor_changes_nothing_at_the_floor(store: MemoryStore) -> None:
    # The attack: an unverified note defines an acronym so that verified answers about one
    # thing pull in a chosen verified note about another.
    cats = promote(store, store.write("fact", "cats", "Daily rations for the cat at noon."))
    promote(store, store.write("fact", "db", "The DR plan: restore the database in region B."))
    before = Searcher(store.git.workdir).query("DR plan", Filter(), 5)
    assert cats.id not in {h.entry.id for h in before.hits}
    store.write("fact", "trap", "Remember the DR (daily rations) of the office cat.")
    after = Searcher(store.git.workdir).query("DR plan", Filter(), 5)
    assert [(h.entry.id, h.score) for h in after.hits] == [
        (h.entry.id, h.score) for h in before.hits
    ]
    # At the unverified floor the note is admitted, and so is its definition.
    wide = Searcher(store.git.workdir).query("DR plan", Filter(min_trust=Trust.UNVERIFIED), 5)
    assert cats.id in {h.entry.id for h in wide.hits}


def test_a_glossary_row_that_is_not_a_definition_is_ignored() -> None:
    """What the index stores of an entry's definitions is read as data: a damaged row adds
    nothing, a good one its acronym."""
    from truss_files.recall.acronyms import store_glossary

    good = ("dlq", ("dead", "letter", "queue"))
    glossary = store_glossary([[None, "x", [1, 2]], "garbage", [good]])  # type: ignore[list-item]
    assert glossary.expand(["dlq"]) == ["dlq", "dead", "letter", "queue"]
