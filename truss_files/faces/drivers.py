"""``truss-files install-drivers``: the local git config that makes git read entries as entries.

``diff.truss.textconv`` runs ``truss-files textconv`` so ``git diff`` and ``git log -p`` show a
promotion as one changed header line; ``merge.truss.driver`` runs ``truss-files merge-driver``
so concurrent trust changes to one entry merge by the state machine. The ``.gitattributes``
line routes entry files to both. The commands name this interpreter by absolute path, like
the hooks, so they work whatever PATH git runs them with.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..review.textconv import ATTRIBUTES_LINE
from .hooks import default_command, open_repo


@dataclass(frozen=True)
class DriversReport:
    config: dict[str, str]
    attributes: str
    attributes_added: bool


def driver_config(command: str | None = None) -> dict[str, str]:
    cmd = command or default_command()
    return {
        "diff.truss.textconv": f"{cmd} textconv",
        "merge.truss.name": "truss-files entry merge (trust state machine)",
        "merge.truss.driver": f"{cmd} merge-driver %O %A %B %P",
    }


def install_drivers(
    path: str | os.PathLike[str] = ".", *, command: str | None = None, attributes: bool = True
) -> DriversReport:
    """Write the drivers into the repository's local config, and the attributes line if
    absent (``.gitattributes`` in a work tree, ``info/attributes`` in a bare repository)."""
    repo = open_repo(path)
    values = driver_config(command)
    for name, value in values.items():
        repo.config[name] = value
    target = Path(repo.workdir) / ".gitattributes" if repo.workdir else Path(repo.path) / "info"
    if not repo.workdir:
        target = target / "attributes"
    added = False
    if attributes:
        text = target.read_text() if target.exists() else ""
        if ATTRIBUTES_LINE not in (line.strip() for line in text.splitlines()):
            target.parent.mkdir(parents=True, exist_ok=True)
            sep = "" if not text or text.endswith("\n") else "\n"
            target.write_text(f"{text}{sep}{ATTRIBUTES_LINE}\n")
            added = True
    return DriversReport(values, str(target), added)
