"""L0 and L1 as a run reads them: ``identity/core.md``, ``identity/self.md`` and
``principals/<principal>.md`` at one commit. A missing file is an empty layer (and said so),
never an error: a store made before identity templates existed still starts runs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ..errors import UsageError

if TYPE_CHECKING:
    from ..git.gitstore import Snapshot

__all__ = ["CORE_PATH", "SELF_PATH", "SystemBlock", "check_principal", "identity_layers"]

CORE_PATH: Final = "identity/core.md"
SELF_PATH: Final = "identity/self.md"
MAX_LAYER_BYTES: Final = 256 * 1024  # a bound on what one file may put in front of a model
_PRINCIPAL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")


@dataclass(frozen=True)
class SystemBlock:
    """One system block: which layer, which file, its text ("" when the file is missing)."""

    name: str  # "L0 core", "L0 self", "L1 principal", "memory"
    path: str | None
    text: str
    missing: bool = False


def check_principal(principal: str) -> str:
    """A principal names one file under principals/: no path tricks, no look-alikes."""
    if not _PRINCIPAL.match(principal) or ".." in principal or principal.endswith(".md"):
        raise UsageError(
            f"principal {principal!r} is not a principal name; use letters, digits and "
            "._@+- (it names principals/<principal>.md)"
        )
    return principal


def read_block(snap: Snapshot, name: str, path: str) -> SystemBlock:
    data = snap.read(path)
    if data is None:
        return SystemBlock(name, path, "", missing=True)
    if len(data) > MAX_LAYER_BYTES:
        raise UsageError(
            f"{path} is {len(data)} bytes; a context layer may hold at most {MAX_LAYER_BYTES}. "
            "Shorten it in a signed commit"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not UTF-8 text; fix its encoding ({exc})") from exc
    return SystemBlock(name, path, text)


def identity_layers(snap: Snapshot, principal: str | None) -> list[SystemBlock]:
    """L0 core, L0 self and (when a principal is named) L1, in that order."""
    layers = [read_block(snap, "L0 core", CORE_PATH), read_block(snap, "L0 self", SELF_PATH)]
    if principal is not None:
        path = f"principals/{check_principal(principal)}.md"
        layers.append(read_block(snap, "L1 principal", path))
    return layers
