"""A configuration file read again whenever it changes, so an edit needs no restart.

Each ``get()`` costs one ``stat``: the file is parsed again when its inode, size or
modification time differ from the last parse (an editor's atomic replace changes the inode,
an in-place edit the time). A file that no longer parses raises on every ``get()`` until it is
fixed: a server must not keep answering from a registry its operator has already changed.
"""

from __future__ import annotations

import os
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from ...errors import ConfigError

T = TypeVar("T")


class Watched(Generic[T]):
    def __init__(self, path: str | os.PathLike[str], parse: Callable[[bytes, str], T]) -> None:
        self.path = Path(path)
        self._parse = parse
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._value: T | None = None
        self._error: ConfigError | None = None

    def get(self) -> T:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise ConfigError(f"cannot read {self.path}: {exc.strerror}") from exc
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._value, self._error = self._parse(self._read(), str(self.path)), None
                except ConfigError as exc:
                    self._value, self._error = None, exc
            if self._error is not None:
                raise self._error
            assert self._value is not None
            return self._value

    def _read(self) -> bytes:
        try:
            return self.path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read {self.path}: {exc.strerror}") from exc


def toml_tables(data: bytes, source: str, header: str, fix: str) -> dict[str, Any]:
    """The tables under ``header`` (``tasks.TASK_ID``: the ``[tasks.*]`` tables) of a file
    that holds nothing else; ``fix`` says what to do when it is not valid TOML."""
    section = header.split(".", 1)[0]
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{source}: not valid TOML ({exc}); {fix}") from exc
    table = doc.get(section, {})
    if not isinstance(table, dict) or set(doc) - {section}:
        raise ConfigError(f"{source}: holds only [{header}] tables")
    return table
