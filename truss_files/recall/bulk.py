"""A rebuild's Python work, spread over worker processes: read, parse and prepare every entry.

Per entry file a rebuild reads the blob, parses it (``entryfile.parse``: the content address
checked), tokenizes key and body, finds the acronyms it defines and packs its record
(``prepare``). That is pure Python, one core's worth; tantivy's own indexing runs on its
threads meanwhile. Above ``PARALLEL_AT`` files the list is cut into one share per worker
(``python -m truss_files.recall.bulk GIT_DIR``: a fresh interpreter, so no fork of a parent
that holds threads or pygit2, and no re-import of the caller's ``__main__``); each worker
reads its share (``marshal``, on stdin) and writes back batches of prepared entries (on
stdout), which the parent feeds to the floor writers as they come. A worker that fails (it
cannot start, is killed, runs out of memory) costs time, not entries: what it did not send
is prepared in the parent. The result is the same whichever path ran.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Final

from ..errors import EntryError
from ..format.entryfile import parse
from ..git.gitdir import GitDir, Objects
from ..model import Entry
from .acronyms import definitions
from .docs import document_tokens, record_of
from .floors import DocParts, doc_parts

__all__ = ["PARALLEL_AT", "Prepared", "prepare", "prepared"]

PARALLEL_AT: Final = 5_000  # files; below this a worker's start-up costs more than it saves
MAX_WORKERS: Final = 4
BATCH: Final = 256  # prepared entries a worker sends at once

# (trust value, the document's parts, the record as marshal bytes)
Prepared = tuple[str, DocParts, bytes]
# What each file gives: ("ok", path, Prepared) or ("bad", path, why it is not an entry)
Item = tuple[str, str, Any]


def prepare(entry: Entry) -> Prepared:
    """What the floor writers need of ``entry`` (``index._Writers.add``)."""
    body = " ".join(document_tokens(entry))
    found = definitions(entry.body) if "(" in entry.body else []
    record = marshal.dumps(record_of(entry))
    return entry.trust.value, doc_parts(entry, body, found), record


def _item(objects: Objects, path: str, blob: str) -> Item:
    try:
        entry = parse(objects.blob(blob), path)
    except EntryError as exc:
        return "bad", path, exc.message
    return "ok", path, prepare(entry)


def prepared(git: GitDir, objects: Objects, files: Sequence[tuple[str, str]]) -> Iterator[Item]:
    """An item for each of ``files`` (``(path, blob id)``), in no set order."""
    workers = min(os.cpu_count() or 1, MAX_WORKERS)
    if len(files) < PARALLEL_AT or workers < 2:
        for path, blob in files:
            yield _item(objects, path, blob)
        return
    shares = [list(files[i::workers]) for i in range(workers)]
    done: set[str] = set()
    inbox: queue.Queue[list[Item] | None] = queue.Queue(maxsize=64)
    procs = [_start(git) for _ in shares]
    readers = [
        threading.Thread(target=_pump, args=(proc, share, inbox), daemon=True)
        for proc, share in zip(procs, shares, strict=True)
    ]
    try:
        for reader in readers:
            reader.start()
        finished = 0
        while finished < len(readers):
            batch = inbox.get()
            if batch is None:
                finished += 1
                continue
            for item in batch:
                done.add(item[1])
                yield item
        for proc in procs:  # each has sent its last batch: let it exit on its own
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                if proc is not None:
                    proc.wait(timeout=5)
        # What a failed worker did not send is prepared here.
        for path, blob in files:
            if path not in done:
                yield _item(objects, path, blob)
    finally:
        for proc in procs:
            if proc is None:
                continue
            if proc.poll() is None:  # interrupted: no worker outlives the build
                proc.kill()
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for reader in readers:  # let a reader blocked on a full inbox finish
            while reader.is_alive():
                with contextlib.suppress(queue.Empty):
                    inbox.get(timeout=0.05)
        for proc in procs:
            for stream in (proc.stdin, proc.stdout) if proc is not None else ():
                with contextlib.suppress(OSError):
                    if stream is not None:
                        stream.close()


def _start(git: GitDir) -> subprocess.Popen[bytes] | None:
    argv = [sys.executable, "-m", "truss_files.recall.bulk", git.path_str]
    try:
        return subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
    except OSError:
        return None


def _pump(
    proc: subprocess.Popen[bytes] | None,
    share: list[tuple[str, str]],
    inbox: queue.Queue[list[Item] | None],
) -> None:
    """Hand ``share`` to the worker and pass on what it sends, then a None."""
    try:
        if proc is None or proc.stdin is None or proc.stdout is None:
            return
        with contextlib.suppress(OSError):
            proc.stdin.write(marshal.dumps(share))
        with contextlib.suppress(OSError):
            proc.stdin.close()
        while True:
            try:
                batch = marshal.load(proc.stdout)
            except (EOFError, ValueError, TypeError, OSError):
                return  # the end, or a worker cut short: the parent does the rest
            if batch is None:
                return
            inbox.put(batch)
    finally:
        inbox.put(None)


def main(argv: Sequence[str]) -> int:
    """Worker: ``python -m truss_files.recall.bulk GIT_DIR``; its share of the files on stdin,
    batches of items on stdout, then None."""
    objects = Objects(GitDir.discover(argv[0]))
    share = marshal.load(sys.stdin.buffer)
    out = sys.stdout.buffer
    batch: list[Item] = []
    for path, blob in share:
        batch.append(_item(objects, path, blob))
        if len(batch) >= BATCH:
            out.write(marshal.dumps(batch))
            batch = []
    if batch:
        out.write(marshal.dumps(batch))
    out.write(marshal.dumps(None))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
