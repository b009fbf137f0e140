"""The trailers every truss commit carries (``Truss-Op: write`` ...) and the clock they stamp.

Values only: the store writes them, the audit, the review and the ledgers of runs read them,
so they live below all of those.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable, Iterable

__all__ = ["Clock", "parse_trailers", "stamp", "trailers", "utc_now"]

Clock = Callable[[], datetime.datetime]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def stamp(when: datetime.datetime) -> str:
    return _stamp(when.astimezone(datetime.UTC).replace(microsecond=0))


@functools.lru_cache(maxsize=8)
def _stamp(when: datetime.datetime) -> str:
    # An import stamps a hundred thousand entries within a few seconds: strftime once each.
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def trailers(**fields: str | Iterable[str]) -> str:
    """Git trailers ``Truss-Op: write`` etc.; an iterable value repeats the trailer."""
    lines: list[str] = []
    for name, value in fields.items():
        label = "Truss-" + name.replace("_", "-").title()
        values = [value] if isinstance(value, str) else list(value)
        lines.extend(f"{label}: {v}" for v in values)
    return "\n".join(lines)


def parse_trailers(message: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in message.splitlines():
        name, sep, value = line.partition(": ")
        if sep and name.startswith("Truss-") and " " not in name:
            found.setdefault(name, []).append(value.strip())
    return found
