"""The files of a bulk write go into one pack as they come, with their trees, built by git.

A hundred thousand entries written one loose object each cost a file per entry (10x the disk
of the same objects packed, and a directory walk for every later git command). ``git
fast-import`` is git's own streaming pack writer: each file goes down its pipe with its path
as the input is read, so memory stays bounded whatever the size of the import, and at the end
it writes the trees of the new commit's tree (on the base commit's) and one pack holding them
and the files. Nothing of the import is kept in this process, not even each file's path or
blob id: the tree git built is their index (``Added``).

fast-import runs in a staging repository of its own (``.git/truss/bulk/<owner>.<random>``,
which borrows the store's objects as alternates): the throwaway commit it must make to hold
the tree updates that repository's ref, never the store's. Only ``finish`` moves the new
objects into ``objects``. An import that fails or is killed before then leaves the object
store exactly as it was: its staging folder is not an object directory git reads, and the next
bulk write removes the folders of owners that are gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

import pygit2

from ..errors import StoreError
from .gitlocks import owner_alive, owner_tag

_BLOB = int(pygit2.enums.FileMode.BLOB)
_TREE = int(pygit2.enums.FileMode.TREE)

STAGING = Path("truss") / "bulk"
_PLAIN_PATH = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")


class PackWriter:
    """One ``git fast-import`` fed file by file onto ``base`` (a commit id, None for an empty
    tree); ``finish`` installs its pack and returns the new root tree.

    Use as a context manager: leaving it without ``finish`` (an error, a ^C) stops fast-import
    and removes what it wrote.
    """

    # The throwaway commit that holds the tree, in the staging repository only.
    _REF = b"refs/heads/bulk"

    def __init__(self, git_dir: Path, base: str | None = None) -> None:
        self.git_dir = git_dir
        sweep(git_dir)
        self.stage = git_dir / STAGING / f"{owner_tag()}.{secrets.token_hex(4)}"
        # A bare repository of its own, made by hand (a `git init` is a process more): the
        # ref fast-import updates at the end is this one's, and its objects stay here.
        (self.stage / "objects" / "pack").mkdir(parents=True)
        (self.stage / "refs" / "heads").mkdir(parents=True)
        (self.stage / "HEAD").write_text("ref: refs/heads/bulk\n")
        self._errors: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in _remove)
        self._answers: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in _remove)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        # Objects already in the repository are found there and not written twice.
        env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(git_dir / "objects")
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [
                    "git",
                    "--git-dir",
                    str(self.stage),
                    "fast-import",
                    "--quiet",
                    f"--cat-blob-fd={self._answers.fileno()}",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                pass_fds=(self._answers.fileno(),),
                bufsize=1 << 16,
                # Not in the terminal's process group: a ^C reaches this process, which
                # abandons the pack itself, rather than killing fast-import mid-write.
                start_new_session=True,
                stderr=self._errors,
                env=env,
            )
        except OSError as exc:
            self._remove()
            raise StoreError(
                f"cannot run git fast-import ({exc}); bulk writes need git on the PATH"
            ) from exc
        head = b"commit " + self._REF + b"\ncommitter truss-files <bulk> 0 +0000\ndata 0\n"
        self._send(head + (b"from %s\n" % base.encode() if base is not None else b""))
        self.count = 0

    def add(self, path: str, data: bytes) -> None:
        """Put ``data`` at ``path`` in the tree to come (and the file into the pack). The same
        bytes twice go into the pack once: fast-import keeps a table of what it wrote."""
        if not _PLAIN_PATH.fullmatch(path):
            # fast-import reads a path up to the end of its line and unquotes one that
            # starts with a quote: the store's own paths need neither.
            raise StoreError(f"bulk writes take plain store paths, not {path!r}")
        self._send(b"M 100644 inline %s\ndata %d\n%s\n" % (path.encode(), len(data), data))
        self.count += 1

    def finish(self) -> pygit2.Oid | None:
        """End the stream, wait for the pack, and move the new objects into ``objects``:
        they are the repository's from here on. Returns the new root tree (None when
        nothing was added)."""
        if self.count == 0:
            self.abandon()
            return None
        self._send(b'ls ""\n\n')
        pipe = self._pipe()
        try:
            pipe.close()
        except BrokenPipeError as exc:
            raise self._failed() from exc
        assert self._proc is not None
        if self._proc.wait() != 0:
            raise self._failed()
        self._proc = None
        self._answers.seek(0)
        said = self._answers.read().split()  # 040000 tree <id>
        if len(said) < 3 or said[1] != b"tree":
            raise self._failed()
        tree = pygit2.Oid(hex=said[2].decode())
        # The throwaway commit stays behind: only the files and trees are the store's.
        made = (self.stage / self._REF.decode()).read_text().strip()
        objects = self.git_dir / "objects"
        stage = self.stage / "objects"
        # Under fastimport.unpackLimit objects (100 by default) git writes them loose instead.
        for loose in sorted(stage.glob("[0-9a-f][0-9a-f]/*")):
            if loose.parent.name + loose.name == made:
                continue
            (objects / loose.parent.name).mkdir(exist_ok=True)
            os.replace(loose, objects / loose.parent.name / loose.name)
        packs = objects / "pack"
        packs.mkdir(parents=True, exist_ok=True)
        # The pack before its index: git (and libgit2) only see a pack through its .idx.
        for path in sorted(stage.glob("pack/pack-*"), key=lambda p: p.suffix == ".idx"):
            os.replace(path, packs / path.name)
        self._remove()
        return tree

    def _send(self, data: bytes) -> None:
        try:
            self._pipe().write(data)
        except BrokenPipeError as exc:
            raise self._failed() from exc

    def _pipe(self) -> IO[bytes]:
        if self._proc is None or self._proc.stdin is None:
            raise StoreError("the bulk pack was already finished or abandoned")
        return self._proc.stdin

    def _failed(self) -> StoreError:
        self._errors.seek(0)
        said = self._errors.read().decode(errors="replace").strip()[-2000:]
        code = self._proc.poll() if self._proc is not None else None
        return StoreError(
            f"git fast-import stopped (exit {code}) while packing a bulk write: "
            f"{said or 'no message'}; nothing was written, run the same command again"
        )

    def abandon(self) -> None:
        """Stop fast-import and remove what it wrote (the object store stays as it was)."""
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._proc.kill()
            self._proc.wait()
            if self._proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self._proc.stdin.close()
            self._proc = None
        self._remove()

    def _remove(self) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)
        self._errors.close()
        self._answers.close()

    def __enter__(self) -> PackWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._proc is not None:
            self.abandon()


class Added(Mapping[str, pygit2.Oid]):
    """The files ``tree`` adds to ``base`` (a bulk write's tree on the tree it was built on),
    as a mapping of path to blob id read from the trees themselves: a million-entry import
    keeps no path or id of its own. Iteration walks only the folders whose trees differ;
    ``len`` counts them from the trees' sizes (an import only adds files)."""

    def __init__(self, repo: pygit2.Repository, base: pygit2.Tree | None, tree: pygit2.Oid) -> None:
        self.repo = repo
        self.base = base
        found = repo[tree]
        assert isinstance(found, pygit2.Tree)
        self.tree = found
        self._len: int | None = None

    def __getitem__(self, path: str) -> pygit2.Oid:
        found = _entry(self.tree, path)
        if found is None or found.filemode != _BLOB:
            raise KeyError(path)
        before = _entry(self.base, path)
        if before is not None and before.id == found.id:
            raise KeyError(path)  # there before: not added
        return found.id

    def __iter__(self) -> Iterator[str]:
        for _, path, _ in self._walk(count_only=False):
            yield path

    def items(self) -> Iterator[tuple[str, pygit2.Oid]]:  # type: ignore[override]
        for _, path, oid in self._walk(count_only=False):
            yield path, oid

    def __len__(self) -> int:
        if self._len is None:
            self._len = sum(n for n, _, _ in self._walk(count_only=True))
        return self._len

    def _walk(self, count_only: bool) -> Iterator[tuple[int, str, pygit2.Oid]]:
        """(1, path, blob) for each added file; with ``count_only``, (n, "", ...) for each
        changed folder of files, from the trees' entry counts."""
        stack: list[tuple[str, pygit2.Tree, pygit2.Tree | None]] = [("", self.tree, self.base)]
        while stack:
            prefix, new, old = stack.pop()
            if old is not None and old.id == new.id:
                continue
            files = 0
            for entry in new:
                name = str(entry.name)
                if entry.filemode == _TREE:
                    before = old[name] if old is not None and name in old else None
                    below = before if isinstance(before, pygit2.Tree) else None
                    here = self.repo[entry.id]
                    assert isinstance(here, pygit2.Tree)
                    stack.append((f"{prefix}{name}/", here, below))
                elif entry.filemode == _BLOB:
                    files += 1
                    if count_only:
                        continue
                    if old is not None and name in old and old[name].id == entry.id:
                        continue
                    yield 1, prefix + name, entry.id
            if count_only and files:
                had = 0
                if old is not None:
                    had = sum(1 for e in old if e.filemode == _BLOB)
                yield files - had, "", self.tree.id


def _entry(tree: pygit2.Tree | None, path: str) -> pygit2.Object | None:
    if tree is None:
        return None
    try:
        return tree[path]
    except KeyError:
        return None


def sweep(git_dir: Path) -> list[Path]:
    """Remove the staging folders of bulk writes whose process is gone (killed mid-import)."""
    folder = git_dir / STAGING
    removed = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for path in folder.iterdir():
            if not owner_alive(path.name.split(".", 1)[0]):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed
