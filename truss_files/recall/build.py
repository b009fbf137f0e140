"""Building the recall index from scratch: read, parse and tokenize every entry file.

Where the time goes, per file, measured inside a build on the development machine (2 busy
cores, ~75 µs a file in all): reading the blob ~17 µs (a loose object opened, read and
inflated by hand; pygit2 only for objects in packs), ``scan_meta`` ~23 µs (the fast parser
of canonical files, content address checked), the words ~15 µs (a third of it analysing
words seen for the first time), the record and the rest ~4 µs, the forward index and writing
the segment a few µs. Words are the part pure Python does worst: ``split_words`` and a memo
lookup cost ~0.3 µs a word. So a build of ``BULK_AT`` files or more hands them to numpy (a
core dependency; where it cannot be imported, the plain writer runs):
``bulkwords.ascii_word_ids`` finds the words of a batch of texts and their word ids in array
operations, numpy turns them into ``document * V + term`` keys, and one stable sort gives the
forward index and its term frequencies. Both writers write the same bytes
(``tests/test_recall_build.py``). The floor indexes (``floors``) are then fed from the
segments' forward indexes by the index (``index.py``).

Above ``index.PARALLEL_AT`` files the work is split by entry id across worker processes (fresh
interpreters, ``python -m truss_files.recall.build``: safe beside threads and pygit2, and
unlike ``multiprocessing`` they never re-import the caller's ``__main__``). The files come in
parts, in id order, each handed to the first worker that asks; a worker writes one segment of
all it took, so segments hold disjoint ids, the result needs no merge, the parent never holds
the whole corpus, and a worker on a core that other work slows down takes fewer parts instead
of holding up the build. A full rebuild's parts are shares of the fan-out folders (the id's
first byte) that the workers list themselves, so the parent lists nothing (~0.3 s less than
listing 100k files first). What a failed worker took is built in this process. Nothing built
here makes reference cycles, so the cyclic garbage collector is paused while it runs (its
passes over 50k documents' live objects cost about a second, for nothing).
"""

from __future__ import annotations

import contextlib
import gc
import json
import marshal
import os
import selectors
import subprocess
import sys
import time
from array import array
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import count, groupby, islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..errors import EntryError, StoreError
from ..gitdir import GitDir, Objects, walk_tree
from .bulkwords import WordIds, ascii_word_ids
from .docs import Meta, to_doc
from .scan import scan, scan_meta
from .segment import MAX_TF, Doc, dump_records, finish_segment, write_segment
from .tokenize import split_words, word_tokens

if TYPE_CHECKING:
    from .index import Index

__all__ = [
    "BULK_AT",
    "Blobs",
    "build_part",
    "build_segments",
    "build_tree",
    "write_bulk_segment",
]

BULK_AT: Final = 2_000  # files; below this importing numpy (~0.1 s) costs more than it saves
_BLOB: Final = 3  # pygit2's object type of a blob
_BATCH: Final = 1024  # files read and parsed before their words are found (numpy per call)
_PARTS_PER_WORKER: Final = 8  # parts of a parallel build per worker, handed out on demand
_CHUNK_BYTES: Final = 4 << 20  # text handed to numpy at once (a batch is ~1.2 MB typically)
_HEX_DIGITS: Final = frozenset("0123456789abcdef")


def build_tree(index: Index, tree: str) -> tuple[list[str], dict[str, str]]:
    """``build_segments`` of every entry file under ``tree`` (``memories/``). When the tree
    looks large, the workers list it too, a share of the fan-out folders at a time: this
    process lists nothing, and the workers' start-up (an interpreter, our modules, numpy:
    ~0.2 s) is all they wait for."""
    from .index import PARALLEL_AT

    workers = min(os.cpu_count() or 1, 8)
    if workers >= 2 and _estimate(index.objects, tree) >= PARALLEL_AT:
        count = workers * _PARTS_PER_WORKER
        shares = [[256 * n // count, 256 * (n + 1) // count] for n in range(count)]
        return _run_workers(index, workers, [{"tree": tree, "share": s} for s in shares])
    files = [(p, b) for p, b in walk_tree(index.objects, tree, "memories") if p.endswith(".md")]
    return build_segments(index, files)


def _estimate(objects: Objects, tree: str) -> int:
    """Roughly how many files are under ``tree``: per kind, its fan-out folders times the
    files in the first one (ids are uniform; a few tree reads)."""
    total = 0
    for kind in objects.tree(tree):
        if kind.is_tree:
            folders = [e for e in objects.tree(kind.sha) if e.is_tree]
            if folders:
                total += len(folders) * len(objects.tree(folders[0].sha))
    return total


def build_segments(
    index: Index, files: Sequence[tuple[str, str]]
) -> tuple[list[str], dict[str, str]]:
    """Segments holding every file of ``files`` (``(path, blob id)``), and the unreadable
    ones: in this process, or split by id across worker processes when they are many."""
    from .index import PARALLEL_AT

    ordered = sorted(files, key=_file_name)
    workers = min(os.cpu_count() or 1, 8)
    if len(ordered) < PARALLEL_AT or workers < 2:
        name, invalid = build_part(index.git, index.dir, ordered, repo=index.objects._repo)
        return ([name] if name else []), invalid
    chunk = -(-len(ordered) // (workers * _PARTS_PER_WORKER))
    parts = [ordered[i : i + chunk] for i in range(0, len(ordered), chunk)]
    return _run_workers(index, workers, parts)


def _file_name(file: tuple[str, str]) -> str:
    return file[0].rsplit("/", 1)[-1]


Part = list[tuple[str, str]] | dict[str, Any]  # files sorted by id, or a share of a tree


def _run_workers(
    index: Index, workers: int, parts: Sequence[Part]
) -> tuple[list[str], dict[str, str]]:
    """Worker processes that take ``parts`` (in id order) one at a time, each when done with
    the last, and write one segment of all they took: their segments hold disjoint ids, and a
    worker on a core that other work slows down takes fewer parts instead of holding up the
    build. What a worker that fails took is built here."""
    index.dir.mkdir(parents=True, exist_ok=True)
    procs = [_start_worker(index, number) for number in range(workers)]
    queue = deque(parts)
    taken: list[list[Part]] = [[] for _ in procs]
    answers: list[bytes] = [b"" for _ in procs]  # what each worker wrote, up to its result
    try:
        with selectors.DefaultSelector() as selector:
            for number, proc in enumerate(procs):
                selector.register(proc.stdout, selectors.EVENT_READ, number)
            while selector.get_map():
                for key, _ in selector.select():
                    number = key.data
                    data = os.read(key.fd, 1 << 16)
                    if not data:  # the worker has exited
                        selector.unregister(key.fileobj)
                        continue
                    answers[number] += data
                    while answers[number].startswith(b"next\n"):  # it asks for a part
                        answers[number] = answers[number][5:]
                        part = queue.popleft() if queue else None
                        if part is not None:
                            taken[number].append(part)
                        _send(procs[number], part)
        names = []
        invalid = {}
        for number, proc in enumerate(procs):
            proc.wait()
            try:
                result = json.loads(answers[number])
                name, bad = result["segment"], result["invalid"]
            except (ValueError, KeyError, TypeError):
                # A worker that failed (killed, out of memory): what it took is built here.
                name, bad = _build_here(index, taken[number], f"-{number}")
            if name is not None:
                names.append(name)
            invalid.update(bad)
        if queue:  # every worker failed before the parts ran out
            name, bad = _build_here(index, list(queue), "-rest")
            names += [name] if name is not None else []
            invalid.update(bad)
        return names, invalid
    finally:
        for proc in procs:
            if proc.poll() is None:  # interrupted: no worker outlives the build
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()


def _send(proc: Any, part: Part | None) -> None:
    """A part for the worker, or None: there are no more."""
    with contextlib.suppress(OSError):  # a worker that has exited: its parts are redone
        proc.stdin.write(json.dumps(part).encode() + b"\n")
        proc.stdin.flush()


def _build_here(index: Index, parts: Sequence[Part], suffix: str) -> tuple[str | None, Any]:
    files = [f for part in parts for f in _part_files(index.objects, part)]
    return build_part(index.git, index.dir, files, repo=index.objects._repo, suffix=suffix)


def _part_files(objects: Objects, part: Part) -> list[tuple[str, str]]:
    if isinstance(part, dict):
        lo, hi = part["share"]
        return sorted(_share_files(objects, str(part["tree"]), lo, hi), key=_file_name)
    return [(str(p), str(b)) for p, b in part]


def _share_files(objects: Objects, tree: str, lo: int, hi: int) -> list[tuple[str, str]]:
    """The entry files under ``tree`` (``memories/``) whose fan-out folder -- the first byte of
    the id, two hex digits -- is in ``[lo, hi)``. A file anywhere else is never a valid entry
    (it is reported as unreadable); it goes to the share that starts at 0."""
    files: list[tuple[str, str]] = []
    for kind in objects.tree(tree):
        path = f"memories/{kind.name}"
        if not kind.is_tree:
            if lo == 0 and kind.is_file and path.endswith(".md"):
                files.append((path, kind.sha))
            continue
        for folder in objects.tree(kind.sha):
            at = f"{path}/{folder.name}"
            name = folder.name
            byte = int(name, 16) if len(name) == 2 and _HEX_DIGITS.issuperset(name) else 0
            if not lo <= byte < hi:
                continue
            if folder.is_tree:
                found = walk_tree(objects, folder.sha, at)
                files += [(p, b) for p, b in found if p.endswith(".md")]
            elif folder.is_file and at.endswith(".md"):
                files.append((at, folder.sha))
    return files


def _start_worker(index: Index, number: int) -> Any:
    """A fresh interpreter running ``main`` below: no fork of a threaded parent, and none of
    multiprocessing's re-import of the caller's ``__main__``."""
    argv = [sys.executable, "-m", "truss_files.recall.build", str(index.git.path)]
    argv += [str(index.dir), str(number)]
    # numpy's BLAS would start threads that only spin (~3% of a build): nothing here
    # multiplies matrices.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    # glibc's malloc: serve blocks up to 32 MiB from the heap and keep freed memory, instead of
    # returning it to the kernel and taking it back zeroed for the next batch's arrays (a build
    # of 100k notes ~8% faster here). Other C libraries ignore these.
    env.setdefault("MALLOC_MMAP_THRESHOLD_", str(32 << 20))
    env.setdefault("MALLOC_TRIM_THRESHOLD_", str(1 << 31))
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    return proc


def build_part(
    git: GitDir,
    out_dir: Path,
    files: Iterable[tuple[str, str]],
    *,
    repo: Any = None,
    suffix: str = "",
    bulk: bool | None = None,
) -> tuple[str | None, dict[str, str]]:
    """One segment of ``files`` (sorted by entry id) in ``out_dir``: its name (None when no
    file was readable) and the unreadable files. ``bulk``: write it with numpy (by default
    when the files are ``BULK_AT`` or more)."""
    name = f"seg-{os.getpid()}-{time.time_ns():x}{suffix}.seg"
    path = Path(out_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    blobs = Blobs(git, repo)
    with _collector_paused():
        if bulk is None:
            files = files if isinstance(files, Sequence) else list(files)
            bulk = len(files) >= BULK_AT
        np = _numpy() if bulk else None
        if np is not None:
            wrote, invalid = write_bulk_segment(path, files, blobs.read, np)
        else:
            docs, invalid = read_docs(blobs.read, files)
            wrote = bool(docs)
            if wrote:
                write_segment(path, docs)
    return (name if wrote else None), invalid


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Blobs:
    """Reads blobs for a build: loose objects by hand, objects in packs through pygit2."""

    def __init__(self, git: GitDir, repo: Any = None) -> None:
        self.git = git
        self._repo = repo
        self._odb: Any = None

    def read(self, sha: str) -> bytes:
        raw = self.git.loose_raw(sha)
        if raw is None:
            return self._packed(sha)
        if not raw.startswith(b"blob "):
            raise StoreError(f"object {sha} is a {raw[: raw.find(b' ')].decode()}, not a blob")
        return raw[raw.index(b"\0") + 1 :]

    def _packed(self, sha: str) -> bytes:
        import pygit2

        if self._odb is None:
            repo = self._repo or pygit2.Repository(str(self.git.path))
            self._odb = repo.odb
        try:
            # An Oid, not a str: pygit2 treats a str as a prefix to search for (~10x slower).
            kind, data = self._odb.read(pygit2.Oid(hex=sha))
        except KeyError:
            raise StoreError(f"object {sha} is missing; run `git fsck`") from None
        if kind != _BLOB:
            raise StoreError(f"object {sha} is not a blob")
        found: bytes = data
        return found


def read_docs(
    read: Callable[[str], bytes], files: Iterable[tuple[str, str]]
) -> tuple[list[Doc], dict[str, str]]:
    """Docs sorted by id (``files`` come sorted by file name, which is the id)."""
    docs: list[Doc] = []
    invalid: dict[str, str] = {}
    for path, blob in files:
        try:
            entry = scan(read(blob), path)
        except EntryError as exc:
            invalid[path] = exc.message
            continue
        docs.append(to_doc(entry, path.rsplit("/", 1)[-1][:-3]))
    return docs, invalid


def write_bulk_segment(
    path: Path, files: Iterable[tuple[str, str]], read: Callable[[str], bytes], np: Any
) -> tuple[bool, dict[str, str]]:
    """``write_segment(path, read_docs(read, files)[0])`` with the words found by numpy:
    the same file. Returns whether a segment was written (some file was readable) and the
    unreadable files."""
    term_pid: defaultdict[str, int] = defaultdict(count().__next__)  # in order of first sight
    word_ids = _Words(term_pid.__getitem__)  # raw word -> word id, and each word's term ids
    table = WordIds(np, word_ids.__getitem__)
    wids: list[Any] = []  # every document's words (ids), one after the other, in pieces
    n_words: list[Any] = []  # per document, in pieces
    ids: list[str] = []
    classes = bytearray()
    layers = bytearray()
    hashes: list[bytes] = []
    records: list[bytes] = []
    groups: dict[str, list[int]] = {}
    runs: dict[str, list[int]] = {}
    invalid: dict[str, str] = {}
    remaining = iter(files)
    while batch := list(islice(remaining, _BATCH)):
        texts: list[Any] = []  # per readable file: its text's bytes (ASCII), or (key, body)
        metas: list[Meta] = []
        for file_path, blob in batch:
            try:
                key, body, meta = scan_meta(read(blob), file_path)
            except EntryError as exc:
                invalid[file_path] = exc.message
                continue
            ids.append(file_path.rsplit("/", 1)[-1][:-3])
            # document_tokens' words: split_words(key) + split_words(body); for ASCII text,
            # those of one text (a newline separates words), apostrophes dropped first.
            if key.isascii() and body.isascii():
                text = f"{key}\n{body}"
                texts.append((text.replace("'", "") if "'" in text else text).encode())
            else:
                texts.append((key, body))
            metas.append(meta)
        _word_ids(np, texts, table, wids, n_words)
        # Dumped once nothing else holds the records' strings, as write_segment finds them:
        # marshal marks a string with other references, and the bytes would differ.
        texts = key = body = text = None  # type: ignore[assignment]
        for cls, layer, record, group, run, chash in metas:
            try:
                records.append(b"m" + marshal.dumps(record))
            except ValueError:
                records += dump_records([record])
            docno = len(classes)
            classes.append(cls)
            layers.append(layer)
            hashes.append(chash)
            found = groups.get(group)
            if found is None:
                groups[group] = [docno]
            else:
                found.append(docno)
            if run is not None:
                runs.setdefault(run, []).append(docno)
        del metas
    n = len(ids)
    if not n:
        return False, invalid
    joined = "".join(ids).encode("ascii")
    if len(joined) != 32 * n:
        raise ValueError("every document id must be 32 hex characters")
    terms = list(term_pid)
    vocab = sorted(terms)
    n_terms = len(vocab)
    term_id = dict(zip(vocab, range(n_terms), strict=True))
    all_wids = np.concatenate(wids) if wids else np.zeros(0, dtype=np.intp)
    counts = np.concatenate(n_words) if n_words else np.zeros(0, dtype=np.int64)
    del wids, n_words
    keys, lengths = word_ids.token_keys(np, all_wids, counts, n_terms, terms, term_id)
    del word_ids, table, all_wids
    columns = _forward(np, n, n_terms, keys)
    columns.update(
        ids=joined,
        cls=bytes(classes),
        chash=b"".join(hashes),
        layer=bytes(layers),
        len=lengths.tobytes(),
    )
    finish_segment(path, n, vocab, records, groups, runs, columns)
    return True, invalid


def _word_ids(
    np: Any, texts: Sequence[Any], table: WordIds, wids: list[Any], n_words: list[Any]
) -> None:
    """Append the word ids and word counts of ``texts`` (ASCII bytes: ``ascii_word_ids``; a
    ``(key, body)`` of other text: ``split_words`` here) to ``wids`` and ``n_words``."""
    for ascii_run, run in groupby(texts, key=lambda text: isinstance(text, bytes)):
        if ascii_run:
            for chunk in _chunks(list(run)):
                found, counts = ascii_word_ids(np, chunk, table)
                wids.append(found)
                n_words.append(counts)
            continue
        found = array("I")
        counts = array("q")
        for key, body in run:
            before = len(found)
            found.extend(map(table.word_id, split_words(key) + split_words(body)))
            counts.append(len(found) - before)
        wids.append(np.asarray(found, dtype=np.intp))
        n_words.append(np.asarray(counts, dtype=np.int64))


def _chunks(texts: list[bytes]) -> Iterator[list[bytes]]:
    """``texts`` in runs of up to ``_CHUNK_BYTES`` (or one text): a run's arrays take up to a
    few tens of bytes per byte of text, so a batch of large files is taken a part at a time."""
    start = size = 0
    for end, text in enumerate(texts):
        if size and size + len(text) > _CHUNK_BYTES:
            yield texts[start:end]
            start, size = end, 0
        size += len(text)
    if start < len(texts):
        yield texts[start:]


class _Words(dict[str, int]):
    """Raw word -> word id, each word analysed on first sight (``__missing__``; a word seen
    before costs one lookup in C), with every word's term ids in ``term_ids`` from
    ``starts[word id]`` (CSR): the documents' words become their terms in numpy."""

    def __init__(self, term_id: Callable[[str], int]) -> None:
        super().__init__()
        self._term_id = term_id
        self.term_ids = array("I")
        self.starts = array("I", [0])

    def __missing__(self, word: str) -> int:
        self.term_ids.extend(map(self._term_id, word_tokens(word)))
        self.starts.append(len(self.term_ids))
        found = self[word] = len(self.starts) - 2
        return found

    def token_keys(
        self,
        np: Any,
        wids: Any,
        n_words: Any,
        n_terms: int,
        terms: list[str],
        term_id: dict[str, int],
    ) -> tuple[Any, Any]:
        """``(document * V + term id for every token, tokens per document)`` of documents
        whose words are ``wids``, ``n_words[d]`` of them for document ``d``; term ids are
        ranks in the sorted vocabulary (``term_id`` of ``terms``, which are in first-seen
        order). The keys come in document order (not term order within a document)."""
        n = len(n_words)
        dtype = np.int64 if n * n_terms >= 2**32 else np.uint32
        rank = np.fromiter(map(term_id.__getitem__, terms), dtype=dtype, count=n_terms)
        starts = np.frombuffer(self.starts, dtype=np.uint32)
        flat = rank[np.frombuffer(self.term_ids, dtype=np.uint32)]  # ranked, word by word
        del rank
        # Per word id (small tables): how many terms it gives (0: a stopword; 1: most), its first.
        word_size = np.diff(starts)
        if len(flat):  # clamped: a stopword's start may be the end
            word_first = flat[np.minimum(starts[:-1], len(flat) - 1)]
        else:
            word_first = np.zeros(len(word_size), dtype=dtype)
        # Small integer types where they suffice: each new array of a few million elements costs
        # page faults, which on this kind of machine cost more than the arithmetic.
        size = word_size[wids]  # tokens of each word
        total = int(size.sum(dtype=np.uint64))
        cumulative = np.zeros(len(size) + 1, dtype=np.uint32 if total < 2**32 else np.uint64)
        np.cumsum(size, out=cumulative[1:])
        bounds = np.zeros(n + 1, dtype=np.intp)
        np.cumsum(n_words, out=bounds[1:])
        lengths = (cumulative[bounds[1:]] - cumulative[bounds[:-1]]).astype(np.uint32)
        del cumulative, bounds
        doc = np.repeat(np.arange(n, dtype=dtype), n_words)
        # A word of one term (nearly all): its key directly, no expansion.
        one = size == 1
        keys = doc[one]
        keys *= n_terms
        keys += word_first[wids[one]]
        many = size > 1
        if many.any():
            # Identifiers ("max_retries": max, retry, maxretry): each of their terms.
            counts = size[many].astype(np.intp)
            first = np.repeat(starts[:-1][wids[many]].astype(np.int64), counts)
            within = np.arange(len(first), dtype=np.int64)
            within -= np.repeat(np.cumsum(counts) - counts, counts)
            extra = np.repeat(doc[many], counts)
            extra *= n_terms
            extra += flat[first + within]
            keys = np.concatenate((keys, extra))
        return keys, lengths


def _forward(np: Any, n: int, n_terms: int, keys: Any) -> dict[str, bytes]:
    """The forward index of ``n`` documents whose tokens are ``keys`` (``document * n_terms +
    term id``, in document order; modified here): per document its term ids, ascending, and
    their frequencies."""
    if not len(keys):
        return {"foff": bytes(4 * (n + 1)), "fterm": b"", "ftf": b""}
    # Small integer types and in-place operations: each new array of a few million elements
    # costs page faults, which on this kind of machine cost more than the arithmetic.
    # Keys come mostly in document order: a stable sort (timsort) keeps to sorting within
    # documents (and merging in the few identifiers' terms).
    keys.sort(kind="stable")
    first = np.empty(len(keys), dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    del first
    tf = np.diff(starts, append=len(keys))
    np.minimum(tf, MAX_TF, out=tf)
    ftf = tf.astype(np.uint16)
    del tf
    unique = keys[starts]
    del keys, starts
    fdoc = unique // n_terms
    unique -= fdoc * n_terms
    fterm = unique.astype(np.uint32, copy=False)
    foff = np.searchsorted(fdoc, np.arange(n + 1)).astype(np.uint32)  # fdoc is sorted
    return {"foff": foff.tobytes(), "fterm": fterm.tobytes(), "ftf": ftf.tobytes()}


def main(argv: Sequence[str]) -> int:
    """Worker: ``python -m truss_files.recall.build GIT_DIR OUT_DIR N``. It writes ``next`` and
    reads a part (a JSON line: files ``[[path, blob], ...]`` sorted by id, or a share of a tree
    ``{"tree", "share"}``) until the part is ``null``, then writes its result."""
    git_dir, out_dir, number = argv
    _numpy()  # while the parent is starting the other workers
    git = GitDir.discover(git_dir)
    objects = Objects(git)

    def files() -> Iterator[tuple[str, str]]:
        while True:
            sys.stdout.write("next\n")
            sys.stdout.flush()
            line = sys.stdin.readline()
            part = json.loads(line) if line.strip() else None
            if part is None:
                return
            yield from _part_files(objects, part)

    name, invalid = build_part(git, Path(out_dir), files(), suffix=f"-{number}", bulk=True)
    sys.stdout.write(json.dumps({"segment": name, "invalid": invalid}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
