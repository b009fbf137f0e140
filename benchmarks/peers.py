"""The recall benchmark's peers, built from the same notes: tantivy and SQLite FTS5.

Each peer is a plain function pair -- build an index on disk from ``(id, text)`` pairs, open it,
answer a query with the top ids, best first -- so the engine under test and its peers can be
compared (and reused) outside ``bench_recall``:

* ``build_tantivy(docs, directory, variant)`` / ``open_tantivy`` / ``query_tantivy``:
  ``variant`` ``"en_stem"`` indexes the text with tantivy's own English stemming tokenizer;
  ``"ours"`` indexes the text as ``truss_files.recall.tokenize`` cuts it (tokens joined with
  spaces, tantivy's ``whitespace`` tokenizer) and queries term by term: the like-for-like peer.
  Both keep term frequencies but no positions (BM25 needs no more) and the id as a stored field.
  ``notes=True`` (``"ours"`` only) also stores each note's whole text, and a query returns the
  top notes' texts: tantivy doing what a query of ours does, handing the notes out.
* ``build_fts5(docs, path)`` / ``open_fts5`` / ``query_fts5``: an FTS5 table with the
  ``porter unicode61`` tokenizer, ranked by ``bm25()``; query words are ORed, as BM25 does.
* ``add_tantivy`` / ``add_fts5``: one more note, committed and visible to the next query.
* ``COLD_QUERY``: the code a cold process runs (``python -c COLD_QUERY ENGINE INDEX QUERY``):
  open the index, answer one query, print the top 10 ids -- what a CLI query costs each peer.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "COLD_QUERY",
    "ENGINES",
    "TantivyIndex",
    "add_fts5",
    "add_tantivy",
    "build_fts5",
    "build_tantivy",
    "disk_size",
    "open_fts5",
    "open_tantivy",
    "query_fts5",
    "query_tantivy",
]

ENGINES = ("tantivy-en_stem", "tantivy-ours", "fts5")
TANTIVY_VARIANTS = ("en_stem", "ours")
WRITER_HEAP = 256_000_000  # bytes shared by tantivy's writer threads: one segment per thread
_ONE_DOC_HEAP = 15_000_000  # tantivy's floor per writer thread
_WORDS = re.compile(r"[^\W_]+")


def _schema(variant: str, notes: bool = False) -> Any:
    import tantivy

    if variant not in TANTIVY_VARIANTS:
        raise ValueError(f"tantivy variant {variant!r}: choose one of {TANTIVY_VARIANTS}")
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    tokenizer = "whitespace" if variant == "ours" else "en_stem"
    builder.add_text_field("body", tokenizer_name=tokenizer, index_option="freq")
    if notes:
        builder.add_bytes_field("note", stored=True, indexed=False)  # as our records are
    return builder.build()


def _our_text(text: str) -> str:
    from truss_files.recall.tokenize import tokenize

    return " ".join(tokenize(text))


def build_tantivy(
    docs: Iterable[tuple[str, str]],
    directory: Path,
    variant: str,
    notes: Sequence[str] | None = None,
) -> None:
    """Index ``(id, text)`` pairs into a new tantivy index in ``directory`` (made if absent),
    committed and merged: what a full rebuild costs, tokenizing included. ``notes``: a stored
    text for each pair, in order (``open_tantivy(..., notes=True)`` returns them)."""
    import tantivy

    schema = _schema(variant, notes is not None)
    directory.mkdir(parents=True, exist_ok=True)
    index = tantivy.Index(schema, path=str(directory))
    writer = index.writer(heap_size=WRITER_HEAP)
    feed = _our_text if variant == "ours" else str
    for number, (doc_id, text) in enumerate(docs):
        doc = tantivy.Document(id=doc_id, body=feed(text))
        if notes is not None:
            doc.add_bytes("note", notes[number].encode())
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()


@dataclass
class TantivyIndex:
    """An open tantivy index with its searcher kept (as a long-lived engine keeps one)."""

    index: Any
    searcher: Any
    schema: Any
    variant: str
    notes: bool = False


def open_tantivy(directory: Path, variant: str, *, notes: bool = False) -> TantivyIndex:
    import tantivy

    index = tantivy.Index.open(str(directory))
    return TantivyIndex(index, index.searcher(), index.schema, variant, notes)


def query_tantivy(engine: TantivyIndex, query: str, k: int = 10) -> list[str]:
    """Top ``k`` ids, best first (the notes' stored texts when opened with ``notes``); any
    query word may match (BM25's OR)."""
    import tantivy

    if engine.variant == "ours":
        from truss_files.recall.tokenize import tokenize

        clauses = [
            (tantivy.Occur.Should, tantivy.Query.term_query(engine.schema, "body", token))
            for token in tokenize(query)
        ]
        if not clauses:
            return []
        parsed = tantivy.Query.boolean_query(clauses)
    else:
        # Words only, lower-cased: the query language's operators and field syntax stay out.
        words = _WORDS.findall(query.lower())
        if not words:
            return []
        parsed = engine.index.parse_query(" ".join(words), ["body"])
    hits = engine.searcher.search(parsed, k).hits
    if engine.notes:
        return [bytes(engine.searcher.doc(a).get_first("note")).decode() for _, a in hits]
    return [engine.searcher.doc(address)["id"][0] for _, address in hits]


def add_tantivy(engine: TantivyIndex, doc_id: str, text: str) -> None:
    """One write brought to search: a writer, one document, commit, a fresh searcher -- what
    a CLI write followed by a query costs the peer."""
    import tantivy

    writer = engine.index.writer(heap_size=_ONE_DOC_HEAP, num_threads=1)
    body = _our_text(text) if engine.variant == "ours" else text
    writer.add_document(tantivy.Document(id=doc_id, body=body))
    writer.commit()
    writer.wait_merging_threads()
    engine.index.reload()
    engine.searcher = engine.index.searcher()


def build_fts5(docs: Iterable[tuple[str, str]], path: Path) -> None:
    """Index ``(id, text)`` pairs into a new SQLite FTS5 table in the database at ``path``."""
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.execute(
            "CREATE VIRTUAL TABLE notes USING fts5(id UNINDEXED, body, "
            "tokenize = 'porter unicode61')"
        )
        conn.executemany("INSERT INTO notes (id, body) VALUES (?, ?)", docs)
        conn.execute("INSERT INTO notes (notes) VALUES ('optimize')")
        conn.commit()
    finally:
        conn.close()


def open_fts5(path: Path, *, writable: bool = False) -> sqlite3.Connection:
    return sqlite3.connect(path) if writable else sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def add_fts5(conn: sqlite3.Connection, doc_id: str, text: str) -> None:
    """One write, committed (FTS5 folds it into its segments as it goes)."""
    conn.execute("INSERT INTO notes (id, body) VALUES (?, ?)", (doc_id, text))
    conn.commit()


def query_fts5(conn: sqlite3.Connection, query: str, k: int = 10) -> list[str]:
    """Top ``k`` ids, best first (``bm25()`` is lower for better); words ORed, each quoted."""
    words = _WORDS.findall(query)
    if not words:
        return []
    match = " OR ".join(f'"{w}"' for w in words)
    rows = conn.execute(
        "SELECT id FROM notes WHERE notes MATCH ? ORDER BY bm25(notes) LIMIT ?", (match, k)
    )
    return [row[0] for row in rows]


def disk_size(path: Path) -> int:
    """Bytes on disk of a file or of every file under a directory."""
    if path.is_file():
        return path.stat().st_size
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(path)
        for name in names
    )


def rank_fn(engine: str, docs: Sequence[tuple[str, str]], where: Path) -> Any:
    """A ``benchmarks.evaluate`` rank function over a peer built from ``docs``."""
    if engine == "fts5":
        build_fts5(docs, where)
        conn = open_fts5(where)
        return lambda query, depth: query_fts5(conn, query, depth)
    variant = engine.removeprefix("tantivy-")
    build_tantivy(docs, where, variant)
    opened = open_tantivy(where, variant)
    return lambda query, depth: query_tantivy(opened, query, depth)


COLD_QUERY = """\
import sys
engine, where, query = sys.argv[1:4]
from pathlib import Path
from benchmarks.peers import open_fts5, open_tantivy, query_fts5, query_tantivy
if engine == "fts5":
    ids = query_fts5(open_fts5(Path(where)), query)
else:
    ids = query_tantivy(open_tantivy(Path(where), engine.removeprefix("tantivy-")), query)
print("\\n".join(ids))
"""
