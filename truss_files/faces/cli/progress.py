"""Progress of long commands on a terminal: phases, counts, an honest ETA, and what Ctrl-C did.

One line on stderr, rewritten in place, only when stderr is a terminal and ``--format json``
was not asked for: a pipe, a log file or a tool reading JSON sees nothing (a person who sends
stdout to a file while watching the terminal still sees progress). A phase without a count (a
listing, a commit) still shows its elapsed time, refreshed by a ticker thread, so a command
is never silent for long. The ETA appears only once an item has finished, from the pace of
the items finished in this phase: a slow set-up is not read as a slow item.

Built on the standard library alone (no click bar, no rich): only ``import``, ``verify``,
``recheck`` and ``audit`` load it, and a plain ``query`` never does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TextIO

Clock = Callable[[], float]
_REFRESH = 0.1  # seconds between redraws of a fast count
_TICK = 0.5  # seconds between redraws of a phase that is not counting


def enabled(json_mode: bool, stream: TextIO | None = None) -> bool:
    stream = stream or sys.stderr
    if json_mode or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """``with Progress(enabled) as p: p.phase("reading", total); p.advance(); p.note(...)``.

    Disabled, every method does nothing. ``counts`` (e.g. promoted/rejected) are shown beside
    the count and are what ``summary`` reports after an interruption.
    """

    def __init__(
        self,
        command: str,
        on: bool,
        *,
        stream: TextIO | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.command = command
        self.on = on
        self.stream = stream or sys.stderr
        self.clock = clock
        self.label = ""
        self.total: int | None = None
        self.done = 0
        self.counts: dict[str, int] = {}
        self._started = clock()
        self._first_done: float | None = None
        self._first_count = 0
        self._drawn = 0.0
        self._width = 0
        # Re-entrant: a ^C handler runs in the main thread, perhaps mid-redraw.
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # -- the phases -------------------------------------------------------------------------

    def phase(self, label: str, total: int | None = None) -> None:
        with self._lock:
            self.label, self.total, self.done = label, total, 0
            self._started = self.clock()
            self._first_done = None
            self._draw(force=True)

    def advance(self, step: int = 1, **counts: int) -> None:
        with self._lock:
            self.done += step
            for name, value in counts.items():
                self.counts[name] = self.counts.get(name, 0) + value
            if self._first_done is None:
                # The pace is measured from here: the first item carries the set-up.
                self._first_done = self.clock()
                self._first_count = self.done
            self._draw(force=self.done == self.total)  # the last count is always seen

    def count(self, name: str, value: int = 1) -> None:
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + value

    # -- drawing ----------------------------------------------------------------------------

    def line(self) -> str:
        now = self.clock()
        elapsed = now - self._started
        text = f"{self.command}: {self.label}"
        if self.total is not None:
            share = f" {self.done}/{self.total}"
            if self.total:
                share += f" ({100 * self.done // self.total}%)"
            text += share
        elif self.done:
            text += f" {self.done}"
        shown = [f"{value} {name}" for name, value in self.counts.items() if value]
        if shown:
            text += " · " + ", ".join(shown)
        text += f" · {_duration(elapsed)}"
        eta = self.eta(now)
        if eta is not None:
            text += f" · about {_duration(eta)} left"
        return text

    def eta(self, now: float | None = None) -> float | None:
        """Seconds left at the pace of the items finished after the first; None until known."""
        if self.total is None or self._first_done is None:
            return None
        now = self.clock() if now is None else now
        paced = self.done - self._first_count
        if paced <= 0 or now <= self._first_done:
            return None
        rate = (now - self._first_done) / paced
        return max(0.0, rate * (self.total - self.done))

    def _draw(self, force: bool = False) -> None:
        if not self.on:
            return
        now = self.clock()
        if not force and now - self._drawn < _REFRESH:
            return
        self._drawn = now
        text = self.line()
        columns = _columns(self.stream)
        if len(text) > columns - 1:
            text = text[: columns - 2] + "…"
        pad = max(0, self._width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._width = len(text)

    def _tick(self) -> None:
        while not self._stop.wait(_TICK):
            with self._lock:
                self._draw(force=True)

    def clear(self) -> None:
        with self._lock:
            if self.on and self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
                self._width = 0

    def say(self, message: str) -> None:
        """A line for the person at the terminal (after an interruption): always printed."""
        self.clear()
        self.stream.write(message + "\n")
        self.stream.flush()

    def say_at_once(self, message: str) -> bool:
        """``say`` from a signal handler, which can run inside a write to this very stream
        (its buffer then refuses a second writer: "reentrant call"): the line goes to the
        stream's file descriptor, past the buffer. False, having written nothing, for a
        stream with no descriptor: the caller says it once the stack has unwound."""
        try:
            fd = self.stream.fileno()
        except (OSError, ValueError, AttributeError):
            return False
        encoding = getattr(self.stream, "encoding", None) or "utf-8"
        wipe = "\r" + " " * self._width + "\r" if self.on and self._width else ""  # as ``clear``
        data = (wipe + message + "\n").encode(encoding, "replace")
        with contextlib.suppress(OSError):
            while data:
                data = data[os.write(fd, data) :]
        self._width = 0
        return True

    # -- context ----------------------------------------------------------------------------

    def __enter__(self) -> Progress:
        if self.on:
            self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=1)
        self.clear()


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (OSError, ValueError, AttributeError):
        return 80


@contextlib.contextmanager
def interruptible(progress: Progress, summary: Callable[[], str]) -> Iterator[Progress]:
    """Ctrl-C says at once what was done and how to go on, then ends with exit 130.

    The line is printed from the signal handler, before the unwinding (killing a running
    check, removing a checkout of every entry: seconds at 20k entries) that follows; the
    handler runs between two steps of the main thread, so what ``summary`` reads from the
    store is what the interrupted command leaves. It goes to stderr whatever the format,
    straight to the descriptor (``Progress.say_at_once``): the handler may have interrupted
    a write to stderr itself.
    """
    said: list[bool] = []

    def on_sigint(_signum: int, _frame: object) -> None:
        if not said and progress.say_at_once(summary()):
            said.append(True)
        raise KeyboardInterrupt

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if main else None
    try:
        with progress:
            try:
                yield progress
            except KeyboardInterrupt:
                if not said:
                    progress.say(summary())
                sys.exit(130)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
