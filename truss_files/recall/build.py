"""Building the recall index from scratch: read, parse and tokenize every entry file.

Per file this is a blob read (~5 µs with pygit2), ``scan`` (~20-40 µs for canonical files) and
``tokenize`` (~40 µs for 100 words); at 100k files that is ten seconds and more of one core. Above
``PARALLEL_AT`` files the work is split by entry id across worker processes (fresh
interpreters, ``python -m truss_files.recall.build``: safe beside threads and pygit2, and
unlike ``multiprocessing`` they never re-import the caller's ``__main__``), each writing its
own segment of a disjoint id range, so the result needs no merge and the parent never holds
the whole corpus.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EntryError
from .docs import to_doc
from .scan import scan
from .segment import Doc, write_segment

if TYPE_CHECKING:
    from .index import Index

__all__ = ["build_segments"]

LOOSE_MAX = 2_000  # files; above this pygit2's reads beat zlib by hand despite its import


def build_segments(
    index: Index, files: Sequence[tuple[str, str]]
) -> tuple[list[str], dict[str, str]]:
    """Segments holding every file of ``files`` (``(path, blob id)``), and the unreadable ones."""
    from .index import PARALLEL_AT

    ordered = sorted(files, key=lambda f: f[0].rsplit("/", 1)[-1])
    workers = min(os.cpu_count() or 1, 8)
    if len(ordered) < PARALLEL_AT or workers < 2:
        reader: Any = index.objects.repo if len(ordered) > LOOSE_MAX else index.objects
        docs, invalid = _read_docs(reader, ordered)
        return ([index._write(docs)] if docs else []), invalid
    chunk = -(-len(ordered) // workers)
    parts = [ordered[i : i + chunk] for i in range(0, len(ordered), chunk)]
    index.dir.mkdir(parents=True, exist_ok=True)
    procs = [_start_worker(index, n) for n in range(len(parts))]
    for proc, part in zip(procs, parts, strict=True):
        # Every worker is already starting up (importing) while the others' input is written.
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(json.dumps(list(part)))
            proc.stdin.close()
        proc.stdin = None  # communicate() must not write again
    names = []
    invalid = {}
    for proc, part in zip(procs, parts, strict=True):
        out, err = proc.communicate()
        try:
            result = json.loads(out)
            name, bad = result["segment"], result["invalid"]
        except (ValueError, KeyError, TypeError):
            # A worker that failed (killed, no memory): do its part here instead.
            docs, bad = _read_docs(index.objects.repo, part)
            name = index._write(docs) if docs else None
        if name is not None:
            names.append(name)
        invalid.update(bad)
    return names, invalid


def _start_worker(index: Index, number: int) -> Any:
    """A fresh interpreter running ``main`` below: no fork of a threaded parent, and none of
    multiprocessing's re-import of the caller's ``__main__``."""
    argv = [sys.executable, "-m", "truss_files.recall.build", str(index.git.path)]
    argv += [str(index.dir), str(number)]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    return proc


def _read_docs(reader: Any, files: Sequence[tuple[str, str]]) -> tuple[list[Doc], dict[str, str]]:
    """Docs sorted by id (``files`` come sorted by file name, which is the id)."""
    docs: list[Doc] = []
    invalid: dict[str, str] = {}
    pygit2_repo = not hasattr(reader, "blob")
    if pygit2_repo:
        from pygit2 import Oid
    for path, blob in files:
        # An Oid, not a str: pygit2 treats a str as a prefix to search for (~10x slower).
        data = reader[Oid(hex=blob)].data if pygit2_repo else reader.blob(blob)
        try:
            entry = scan(data, path)
        except EntryError as exc:
            invalid[path] = exc.message
            continue
        docs.append(to_doc(entry, path.rsplit("/", 1)[-1][:-3]))
    return docs, invalid


def main(argv: Sequence[str]) -> int:
    """Worker: ``python -m truss_files.recall.build GIT_DIR OUT_DIR N`` < JSON [[path, blob]]."""
    import time

    import pygit2

    git_dir, out_dir, number = argv
    files = [(str(p), str(b)) for p, b in json.loads(sys.stdin.read())]
    docs, invalid = _read_docs(pygit2.Repository(git_dir), files)
    name = None
    if docs:
        name = f"seg-{os.getpid()}-{time.time_ns():x}-{number}.seg"
        write_segment(Path(out_dir) / name, docs)
    print(json.dumps({"segment": name, "invalid": invalid}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
