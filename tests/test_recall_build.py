"""Building the recall index: the bulk (numpy) writer, the plain writer and the fast readers
must all produce what the straightforward code produces, byte for byte."""

from __future__ import annotations

import dataclasses
import marshal
import os
import re
import subprocess
import sys
import zlib
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pygit2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_recall_scan import entries
from test_recall_support import commit_entries

from truss_files import entryfile
from truss_files.errors import EntryError, StoreError
from truss_files.facade import MemoryStore
from truss_files.gitdir import GitDir, Objects, walk_tree
from truss_files.gitstore import Identity, Plan
from truss_files.model import Entry, Kind, Provenance, Trust
from truss_files.recall import build
from truss_files.recall import segment as segment_module
from truss_files.recall.docs import doc_meta, to_doc
from truss_files.recall.index import Index
from truss_files.recall.scan import scan, scan_meta
from truss_files.recall.segment import Doc, Segment, SegmentError, write_segment
from truss_files.recall.tokenize import split_words, tokenize, word_tokens
from truss_files.trailers import trailers

CREATED = "2026-11-29T11:02:33Z"
BODIES = [
    "Flaky CI: retry the network suite once, then fix the BorrowChecker error in store.rs.",
    "The max_retries of HTTPServer is 3 -- see --dry-run and v2.1 (2026-01-15).",
    "Ünïcödé Straße: ＡＢＣ１２ and 借用检查器 with ひらがな and Ωmega-Δelta CamelCase.",
    "the and of to a",  # stopwords only: a document without terms
    "<!-- truss: tombstone --> forgotten",
    "don't won't team's users' 'quoted' \"double\" {braces} [brackets] a_b-c__d--e",
    # The largest term frequency a body within the 64 KB limit can hold (the u16 cap of the
    # segment is met in the segment tests: no readable entry reaches it).
    ("x " * 32_000).strip(),
]


def variety(store: MemoryStore) -> None:
    """Entry files of every shape a build meets, committed as they are (one signed commit)."""
    made: list[Entry] = []
    for i, body in enumerate(BODIES):
        # Entry itself: no check of the store's on the way, as a hand-made file has none.
        made.append(Entry(kind=Kind.LESSON, key=f"shape-{i}", body=body, created=CREATED))
    for i in range(40):
        kind = ("fact", "decision", "playbook")[i % 3]
        made.append(store.new_entry(kind, f"topic-{i % 7}", f"note {i} about topic {i % 7} ci"))
    run = dataclasses.replace(
        store.new_entry("fact", "from-a-run", "produced by a run"),
        provenance=Provenance(produced_by="run:R-1/3", sources=("git:abcd",)),
    )
    verdict = {"outcome": "PASS", "signer": "ops", "verdict_id": "ab" * 16, "note": "it's ok"}
    verified = [
        dataclasses.replace(
            e, trust=Trust.VERIFIED, provenance=Provenance(verified_by=dict(verdict, entry=e.id))
        )
        for e in made[7:20]
    ]
    superseded = dataclasses.replace(made[21], superseded_by="cd" * 16)
    commit_entries(store, [*made, run, *verified, superseded], "truss: variety")
    # Files no reader accepts, and one only the strict parser reads.
    odd = dataclasses.replace(made[22], key="needs quoting: yes")
    files = {
        f"memories/fact/00/{'0' * 32}.md": b"not an entry at all",
        odd.path: entryfile.serialize(odd).encode().replace(b"layer: task", b"layer:   task"),
    }

    def plan(_snap: Any) -> Plan:
        return Plan(files, "truss: odd files\n\n" + trailers(op="write", entries="2"))

    assert store.git.apply(plan, store.signer, Identity("T", "t@example.test")) is not None


def files_of(store: MemoryStore) -> tuple[GitDir, list[tuple[str, str]]]:
    git = GitDir.discover(store.git.workdir)
    index = Index(git)
    tree = index.tip_info().tree
    assert tree is not None
    found = [(p, b) for p, b in walk_tree(Objects(git), tree, "memories") if p.endswith(".md")]
    return git, sorted(found, key=lambda f: f[0].rsplit("/", 1)[-1])


def _file_name(file: tuple[str, str]) -> str:
    return file[0].rsplit("/", 1)[-1]


def segment_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    assert data[:8] == segment_module.MAGIC
    return data


@pytest.mark.parametrize("chunk", [build._CHUNK_BYTES, 64])  # 64: about a text per chunk
def test_bulk_writer_writes_what_the_plain_writer_writes(
    store: MemoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    variety(store)
    git, files = files_of(store)
    monkeypatch.setattr(build, "BULK_AT", 1)
    monkeypatch.setattr(build, "_CHUNK_BYTES", chunk)
    bulk, bulk_bad = build.build_part(git, tmp_path, files, suffix="-bulk")
    monkeypatch.setattr(build, "_numpy", lambda: None)
    plain, plain_bad = build.build_part(git, tmp_path, files, suffix="-plain")
    assert bulk and plain and bulk != plain
    assert bulk_bad == plain_bad and list(bulk_bad) == [f"memories/fact/00/{'0' * 32}.md"]
    assert segment_bytes(tmp_path / bulk) == segment_bytes(tmp_path / plain)
    # And both are what reading every file with scan + to_doc and write_segment gives.
    docs = []
    for path, blob in files:
        try:
            entry = scan(Objects(git).blob(blob), path)
        except EntryError:
            continue
        docs.append(to_doc(entry, path.rsplit("/", 1)[-1][:-3]))
    del entry  # marshal flags a string that something else still holds: the bytes differ
    write_segment(tmp_path / "reference.seg", docs)
    assert segment_bytes(tmp_path / "reference.seg") == segment_bytes(tmp_path / plain)


def test_bulk_writer_with_only_termless_documents(tmp_path: Path) -> None:
    made = [
        Entry(kind=Kind.FACT, key="of", body=" ".join(["the", "an"] * i) or "to", created=CREATED)
        for i in range(3)
    ]
    data = {e.path: entryfile.serialize(e).encode() for e in made}
    files = sorted(((p, p) for p in data), key=lambda f: f[0].rsplit("/", 1)[-1])
    wrote, bad = build.write_bulk_segment(tmp_path / "bulk.seg", files, data.__getitem__, np)
    assert wrote and not bad
    docs = [to_doc(scan(data[p], p), p.rsplit("/", 1)[-1][:-3]) for p, _ in files]
    write_segment(tmp_path / "plain.seg", docs)
    assert segment_bytes(tmp_path / "bulk.seg") == segment_bytes(tmp_path / "plain.seg")
    assert not build.write_bulk_segment(tmp_path / "none.seg", [], data.__getitem__, np)[0]


# --------------------------------------------------------------------------- write_segment


def reference_write(path: Path, docs: Sequence[Doc]) -> None:
    """The segment writer, plainly: every section spelled out."""
    mod = segment_module
    n = len(docs)
    vocab = sorted({t for d in docs for t in d.tf})
    term_id = {t: i for i, t in enumerate(vocab)}
    fterm, ftf, foff = array("I"), array("H"), array("I", [0])
    groups: dict[str, list[int]] = {}
    runs: dict[str, list[int]] = {}
    for docno, doc in enumerate(docs):
        pairs = sorted(doc.tf.items())
        tids = [term_id[t] for t, _ in pairs]
        tfs = [min(f, mod.MAX_TF) for _, f in pairs]
        fterm.extend(tids)
        ftf.extend(tfs)
        foff.append(len(fterm))
        groups.setdefault(doc.group, []).append(docno)
        if doc.run is not None:
            runs.setdefault(doc.run, []).append(docno)
    records = [mod._dump_record(d.record) for d in docs]
    roff = array("Q", [0])
    for chunk in records:
        roff.append(roff[-1] + len(chunk))
    kbuckets, kmap = mod._hash_map({g: tuple(v) for g, v in groups.items()})
    # Checksums: each record's over its id and bytes, each hash-map bucket's over its bytes.
    rcrc = array("I", [zlib.crc32(d.id.encode() + r) for d, r in zip(docs, records, strict=True)])

    def bucket_crcs(offsets: bytes, blob: bytes) -> bytes:
        bounds = array("I", offsets)
        return array(
            "I", [zlib.crc32(blob[bounds[i] : bounds[i + 1]]) for i in range(len(bounds) - 1)]
        ).tobytes()

    sections = {
        "ids": b"".join(d.id.encode("ascii") for d in docs),
        "icrc": array(
            "I",
            [
                zlib.crc32(b"".join(d.id.encode() for d in docs[i : i + 64]))
                for i in range(0, n, 64)
            ],
        ).tobytes(),
        "cls": bytes(d.cls for d in docs),
        "chash": b"".join(d.chash for d in docs),
        "layer": bytes(d.layer for d in docs),
        "len": array("I", [d.length for d in docs]).tobytes(),
        "rcrc": rcrc.tobytes(),
        "roff": roff.tobytes(),
        "rec": b"".join(records),
        "foff": foff.tobytes(),
        "fterm": fterm.tobytes(),
        "ftf": ftf.tobytes(),
        "vocab": marshal.dumps(vocab),
        "kbuckets": kbuckets,
        "kmap": kmap,
        "kcrc": bucket_crcs(kbuckets, kmap),
        "runs": marshal.dumps({r: tuple(v) for r, v in runs.items()}),
    }
    mod._write_sections(path, n, len(vocab), sections)


TERMS = st.sampled_from(["a", "b", "borrow", "checker", "借", "z" * 30, "x1", "ß"])
docs_strategy = st.lists(
    st.builds(
        dict,
        tf=st.dictionaries(TERMS, st.sampled_from([1, 2, 3, 70_000]), max_size=6),
        group=st.sampled_from(["lesson\0a", "fact\0b", "lesson\0c"]),
        run=st.one_of(st.none(), st.sampled_from(["R1", "R2"])),
        cls=st.integers(0, 255),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(docs_strategy)
def test_write_segment_matches_the_reference_writer(tmp_path_factory: Any, raw: Any) -> None:
    folder = tmp_path_factory.mktemp("seg")
    docs = [
        Doc(
            id=f"{i:032x}",
            cls=d["cls"],
            layer=i % 5,
            length=sum(d["tf"].values()),
            tf=d["tf"],
            record=("lesson", f"k{i}", "body", None, (i, 0.5)),
            group=d["group"],
            run=d["run"],
            chash=bytes([i]) * 16,
        )
        for i, d in enumerate(raw)
    ]
    write_segment(folder / "new.seg", docs)
    reference_write(folder / "old.seg", docs)
    assert segment_bytes(folder / "new.seg") == segment_bytes(folder / "old.seg")


# --------------------------------------------------------------------------- readers


@settings(max_examples=200, deadline=None)
@given(entries)
def test_scan_meta_is_doc_meta_of_scan(entry: Entry) -> None:
    entry = dataclasses.replace(entry, body=entry.body.replace("\r", " ").strip() or "x")
    try:
        data = entryfile.serialize(entry).encode()
    except Exception:  # noqa: BLE001 - entries serialize refuses are not files
        return
    try:
        want = scan(data, entry.path)
    except EntryError:
        with pytest.raises(EntryError):
            scan_meta(data, entry.path)
        return
    assert scan_meta(data, entry.path) == (want.key, want.body, doc_meta(want))


def test_blobs_reads_loose_and_packed_objects(store: MemoryStore, git: Callable[..., str]) -> None:
    made = [store.write("fact", f"k{i}", f"note {i}") for i in range(5)]
    gitdir = GitDir.discover(store.git.workdir)
    repo = pygit2.Repository(str(store.git.git_dir))
    tip = Index(gitdir).tip_info()
    assert tip.tree is not None
    blobs = dict(walk_tree(Objects(gitdir), tip.tree, "memories"))
    assert {e.path for e in made} <= set(blobs)
    loose = build.Blobs(gitdir)
    for blob in blobs.values():
        assert gitdir.loose_raw(blob) is not None
        assert loose.read(blob) == repo[pygit2.Oid(hex=blob)].data
    with pytest.raises(StoreError, match="not a blob"):
        loose.read(tip.tree)
    git(store.git.workdir, "gc", "-q")
    packed = build.Blobs(gitdir)
    for blob in blobs.values():
        assert gitdir.loose_raw(blob) is None
        assert packed.read(blob) == repo[pygit2.Oid(hex=blob)].data
    with pytest.raises(StoreError):
        packed.read(tip.tree)
    with pytest.raises(StoreError, match="missing"):
        packed.read("0" * 40)


def test_a_corrupt_loose_object_is_an_error(store: MemoryStore) -> None:
    entry = store.write("fact", "k", "note")
    gitdir = GitDir.discover(store.git.workdir)
    tip = Index(gitdir).tip_info()
    assert tip.tree is not None
    blob = dict(walk_tree(Objects(gitdir), tip.tree, "memories"))[entry.path]
    where = store.git.git_dir / "objects" / blob[:2] / blob[2:]
    where.chmod(0o644)
    where.write_bytes(zlib.compress(b"blob 4\0note")[:-3])
    with pytest.raises(StoreError, match="corrupt"):
        build.Blobs(gitdir).read(blob)


# --------------------------------------------------------------------------- the tokenizer


_ASCII_WORD = re.compile(r"[A-Za-z0-9]+(?:[_-]+[A-Za-z0-9]+)*")


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_ascii_words_are_the_pattern_words(text: str) -> None:
    """Splitting after str.translate gives the pattern's words once joiners are stripped."""
    words = [w.strip("_-") for w in split_words(text)]
    assert [w for w in words if w] == _ASCII_WORD.findall(text.replace("'", ""))


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_tokens_are_the_tokens_of_each_word(text: str) -> None:
    assert tokenize(text) == [t for w in split_words(text) for t in word_tokens(w)]


# --------------------------------------------------------------------------- workers


def test_workers_take_shares_of_the_tree_as_they_go(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    variety(store)
    started: list[subprocess.Popen[bytes]] = []
    real = build._start_worker

    def spy(index: Index, number: int) -> Any:
        proc = real(index, number)
        started.append(proc)
        return proc

    monkeypatch.setattr(build, "_start_worker", spy)
    monkeypatch.setattr(build, "_estimate", lambda _objects, _tree: 10**9)
    monkeypatch.setattr(build.os, "cpu_count", lambda: 3)
    index = Index(GitDir.discover(store.git.workdir))
    view = index.view()
    assert index.stats["op"] == "rebuild"
    assert len(started) == 3 and all(p.poll() == 0 for p in started)
    _, files = files_of(store)
    assert len(view) == len(files) - 1  # the one unreadable file
    assert list(view.invalid) == [f"memories/fact/00/{'0' * 32}.md"]
    # At most one segment a worker (a worker that got no part writes none), none made here.
    assert 1 <= len(view.segments) <= 3
    assert not any(s.path.name.startswith(f"seg-{os.getpid()}-") for s in view.segments)
    check_complete(view, files)


def check_complete(view: Any, files: list[tuple[str, str]]) -> None:
    found = [view.segments[n].doc_id(d) for n, d in view.live()]
    assert sorted(found) == sorted({_file_name(f)[:-3] for f in files} - {"0" * 32})


# A worker that takes one part and dies, and one that dies before asking.
TAKES_ONE_AND_DIES = "import os, sys; print('next', flush=True); sys.stdin.readline(); os._exit(9)"
DIES = "import os; os._exit(9)"


@pytest.mark.parametrize("scripts", [[None, TAKES_ONE_AND_DIES], [TAKES_ONE_AND_DIES, DIES]])
def test_what_failed_workers_took_is_built_here(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch, scripts: list[str | None]
) -> None:
    variety(store)
    real = build._start_worker

    def broken(index: Index, number: int) -> Any:
        script = scripts[number]
        if script is None:
            return real(index, number)
        return subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    monkeypatch.setattr(build, "_start_worker", broken)
    monkeypatch.setattr(build, "_estimate", lambda _objects, _tree: 10**9)
    monkeypatch.setattr(build.os, "cpu_count", lambda: 2)
    index = Index(GitDir.discover(store.git.workdir))
    view = index.view()
    _, files = files_of(store)
    assert len(view) == len(files) - 1
    check_complete(view, files)
    here = [s for s in view.segments if s.path.name.startswith(f"seg-{os.getpid()}-")]
    assert here  # the failed workers' parts


def test_shares_cover_every_file_once(store: MemoryStore) -> None:
    variety(store)
    # Files no valid entry can be: outside a fan-out folder, in a folder that is not one.
    odd = {
        "memories/stray.md": b"not an entry",
        "memories/fact/zz/stray.md": b"not an entry",
        "memories/fact/notes.md": b"not an entry",
    }

    def plan(_snap: Any) -> Plan:
        return Plan(odd, "truss: stray files\n\n" + trailers(op="write", entries="3"))

    assert store.git.apply(plan, store.signer, Identity("T", "t@example.test")) is not None
    git, files = files_of(store)
    objects = Objects(git)
    tree = Index(git).tip_info().tree
    assert tree is not None
    for bounds in ([0, 256], [0, 85, 170, 256], [0, 1, 2, 255, 256]):
        shares = [
            build._share_files(objects, tree, lo, hi)
            for lo, hi in zip(bounds, bounds[1:], strict=False)
        ]
        every = [f for share in shares for f in share]
        assert sorted(every) == sorted(files)
        assert set(odd) <= {p for p, _ in shares[0]}


def test_the_estimate_is_close(store: MemoryStore) -> None:
    commit_entries(
        store, [store.new_entry("fact", f"n{i}", f"estimate note {i}") for i in range(300)], "x"
    )
    gitdir = GitDir.discover(store.git.workdir)
    tree = Index(gitdir).tip_info().tree
    assert tree is not None
    assert 30 <= build._estimate(Objects(gitdir), tree) <= 30_000


@pytest.mark.parametrize("n_terms", [7, 0x10000, 0x10001, 200_003])
def test_the_forward_index_is_every_documents_terms_counted(n_terms: int) -> None:
    rng = np.random.default_rng(n_terms)
    n = 300
    doc = np.sort(rng.integers(0, n, 20_000)).astype(np.int64)
    term = rng.integers(0, n_terms, 20_000).astype(np.int64)
    term[:50] = n_terms - 1  # the last term id, and a term frequency above one
    keys = doc * n_terms + term
    got = build._forward(np, n, n_terms, keys.copy())
    pairs, tf = np.unique(keys, return_counts=True)
    fdoc, fterm = pairs // n_terms, pairs % n_terms
    assert got["fterm"] == fterm.astype(np.uint32).tobytes()
    assert got["ftf"] == np.minimum(tf, 0xFFFF).astype(np.uint16).tobytes()
    assert got["foff"] == np.searchsorted(fdoc, np.arange(n + 1)).astype(np.uint32).tobytes()


def test_a_pickled_record_may_name_datetime_and_nothing_else(tmp_path: Path) -> None:
    """A record marshal cannot write (a YAML datetime in a verdict) comes back; a record
    pickled to call anything else (here ``os.system``) is refused as damage, never run."""
    import datetime

    when = datetime.datetime(2026, 11, 29, 11, 0, tzinfo=datetime.UTC)
    record = ("lesson", "k", "body", 0, 0, (), None, "", 0.5, None, (), {"time": when})
    doc = Doc(
        id="0" * 32, cls=0, layer=0, length=1, tf={"body": 1}, record=record,
        group="lesson\0k", run=None, chash=b"\0" * 16,
    )  # fmt: skip
    write_segment(tmp_path / "ok.seg", [doc])
    seg = Segment(tmp_path / "ok.seg")
    assert seg.record(0) == record
    seg.close()

    class Planted:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {tmp_path / 'ran'}",))

    # Checksums and all, as a writer with write access to .git could plant it.
    planted = Doc(
        id="0" * 32, cls=0, layer=0, length=1, tf={"body": 1}, record=(*record[:-1], Planted()),
        group="lesson\0k", run=None, chash=b"\0" * 16,
    )  # fmt: skip
    write_segment(tmp_path / "planted.seg", [planted])
    seg = Segment(tmp_path / "planted.seg")
    with pytest.raises(SegmentError, match="not a record value"):
        seg.record(0)
    seg.close()
    assert not (tmp_path / "ran").exists()
