"""Blobs of a bulk write go into one pack as they come, not into a loose file each.

A hundred thousand entries written one loose object each cost a file per entry (10x the disk
of the same objects packed, and a directory walk for every later git command). ``git
fast-import`` is git's own streaming pack writer: each blob goes down its pipe as the input is
read, so memory stays bounded whatever the size of the import, and at the end it writes one
pack and its index. It writes them into a staging folder of this repository
(``.git/truss/bulk/<owner>.<random>``, through ``GIT_OBJECT_DIRECTORY``); only ``finish`` moves
them into ``objects/pack``. An import that fails or is killed before then leaves the object
store exactly as it was: its staging folder is not an object directory git reads, and the next
bulk write removes the folders of owners that are gone.

Blob ids are computed here (``pygit2.hash``, the id git gives the same bytes), so the caller
builds its trees without asking fast-import for anything back.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import IO

import pygit2

from ..errors import StoreError
from .gitlocks import owner_alive, owner_tag

STAGING = Path("truss") / "bulk"


class PackWriter:
    """One ``git fast-import`` fed blob by blob; ``finish`` installs its pack.

    Use as a context manager: leaving it without ``finish`` (an error, a ^C) stops fast-import
    and removes what it wrote.
    """

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir
        sweep(git_dir)
        self.stage = git_dir / STAGING / f"{owner_tag()}.{secrets.token_hex(4)}"
        (self.stage / "pack").mkdir(parents=True)
        self._errors: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in _remove)
        env = dict(os.environ)
        for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
            env.pop(name, None)
        env["GIT_OBJECT_DIRECTORY"] = str(self.stage)
        # Objects already in the repository are found there and not written twice.
        env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(git_dir / "objects")
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                ["git", "--git-dir", str(git_dir), "fast-import", "--quiet"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
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
        self.count = 0

    def add(self, data: bytes) -> pygit2.Oid:
        """Queue one blob for the pack; returns its id. The same bytes twice go into the pack
        once: fast-import keeps a table of what it wrote and skips a blob it holds (a set of
        ids here cost a million-entry import about 100 MB more)."""
        oid = pygit2.hash(data)
        pipe = self._pipe()
        try:
            pipe.write(b"blob\ndata %d\n" % len(data))
            pipe.write(data)
            pipe.write(b"\n")
        except BrokenPipeError as exc:
            raise self._failed() from exc
        self.count += 1
        return oid

    def finish(self) -> list[Path]:
        """End the stream, wait for the pack, and move it into ``objects/pack`` (a small
        import's loose objects into ``objects``): they are the repository's from here on.
        Returns the installed files (none for no blobs)."""
        pipe = self._pipe()
        try:
            pipe.close()
        except BrokenPipeError as exc:
            raise self._failed() from exc
        assert self._proc is not None
        if self._proc.wait() != 0:
            raise self._failed()
        self._proc = None
        objects = self.git_dir / "objects"
        packs = objects / "pack"
        packs.mkdir(parents=True, exist_ok=True)
        installed = []
        # Under fastimport.unpackLimit objects (100 by default) git writes them loose instead.
        for loose in sorted(self.stage.glob("[0-9a-f][0-9a-f]/*")):
            (objects / loose.parent.name).mkdir(exist_ok=True)
            os.replace(loose, objects / loose.parent.name / loose.name)
            installed.append(objects / loose.parent.name / loose.name)
        # The pack before its index: git (and libgit2) only see a pack through its .idx.
        made = sorted(self.stage.glob("pack/pack-*"), key=lambda p: p.suffix == ".idx")
        for path in made:
            target = packs / path.name
            os.replace(path, target)
            installed.append(target)
        self._remove()
        return installed

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
