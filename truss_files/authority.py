"""Who may do what: the one place each trust rule at the edges is decided.

The library's check before a ref moves, the audit and the server gate all call these
functions, so a new face (a tool, a route, a hook) cannot forget a rule by forgetting to
copy it. Each section below is one promise of "Who may do what, at every edge"; the attack
on it lives in ``tests/adversarial/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, UntrustedHistory, UsageError

if TYPE_CHECKING:
    from .gitstore import Snapshot
    from .store import MemoryStore

# --- layers and authors: who may write above the task layer or in another's name ---------


# --- checks: which commands may run as reviewers -----------------------------------------
#
# A command runs as a reviewer only if the signed truss.toml at the tip (which only an operator
# may change) defines it, ``[panel.checks] <name> = "<command>"``. An entry's ``checks:`` holds
# names: a writer picks which of the operator's checks judge the note, never what runs. An
# unknown name is refused at write time; one found later (a name since removed, command text
# from before names, a hand-made file) is never run: its reviewer abstains and says why.

CHECKS_TABLE = "[panel.checks]"
CHECK_NAME_PATTERN = r"[A-Za-z][A-Za-z0-9_-]{0,63}"
_CHECK_NAME = re.compile(CHECK_NAME_PATTERN)
_CHECKS_HOWTO = (
    'an operator defines one in truss.toml, e.g. [panel.checks] tests = "make test", and '
    "commits it signed"
)


def is_check_name(name: object) -> bool:
    """A check name: a letter, then up to 63 letters, digits, ``_`` or ``-``."""
    return isinstance(name, str) and _CHECK_NAME.fullmatch(name) is not None


def defined_checks(store_toml: Mapping[str, Any], source: str = "truss.toml") -> dict[str, str]:
    """The checks the signed truss.toml defines (name -> command), from its parsed text;
    a bad table, name or command is a ``ConfigError`` naming it."""
    panel = store_toml.get("panel", {})
    if not isinstance(panel, Mapping):
        raise ConfigError(f"{source}: panel must be a table ([panel])")
    table = panel.get("checks", {})
    if not isinstance(table, Mapping):
        raise ConfigError(
            f'{source}: panel.checks must be a table of name = "command" ({CHECKS_TABLE})'
        )
    found: dict[str, str] = {}
    for name, command in table.items():
        if not is_check_name(name):
            raise ConfigError(
                f"{source}: panel.checks.{name!r} is not a check name; use a letter, then "
                "letters, digits, _ or - (64 at most)"
            )
        if not isinstance(command, str) or not command.strip():
            raise ConfigError(
                f"{source}: panel.checks.{name} must be a non-empty command string, got {command!r}"
            )
        found[name] = command
    return found


def _defined_list(defined: Mapping[str, str]) -> str:
    if not defined:
        return f"truss.toml defines no checks ({CHECKS_TABLE} is empty)"
    return f"defined checks: {', '.join(sorted(defined))}"


def require_check_names(names: Iterable[object], defined: Mapping[str, str]) -> tuple[str, ...]:
    """``names`` as an entry may hold them: each a name truss.toml's ``[panel.checks]``
    defines. Anything else (command text, an unknown name) is a ``UsageError`` listing the
    defined names and how to define one; nothing a writer supplies is ever run."""
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not is_check_name(name):
            raise UsageError(
                f"check {str(name)[:80]!r} is not a check name: checks name commands the "
                f"operator defined in truss.toml {CHECKS_TABLE}, never command text. "
                f"{_defined_list(defined)}; {_CHECKS_HOWTO}"
            )
        if name not in defined:
            raise UsageError(f"unknown check {name!r}: {_defined_list(defined)}; {_CHECKS_HOWTO}")
        out.append(name)
    return tuple(out)


def operator_checks(store: MemoryStore, snap: Snapshot) -> dict[str, str]:
    """The checks a panel run reading ``snap`` may run: truss.toml's ``[panel.checks]``
    there, once the history up to ``snap`` audits clean, so that truss.toml is the one an
    operator signed (an agent's hand-made commit could edit it). Otherwise
    ``UntrustedHistory``: the run starts no reviewer at all, since its configured reviewers
    come from the same file."""
    from .model import Trust
    from .readgate import gate_snapshot

    try:
        gate_snapshot(store, snap, Trust.VERIFIED)
    except UntrustedHistory as exc:
        raise UntrustedHistory(
            f"{exc.message} The panel runs no reviewer on it: the commands truss.toml "
            "names are the operator's only when the history up to it audits clean"
        ) from None
    return store.defined_checks(snap)


@dataclass(frozen=True)
class ResolvedCheck:
    """What a name in an entry's ``checks:`` runs: the operator's ``command``, or None and
    ``refusal`` saying why nothing runs (the reviewer then abstains, never passes)."""

    name: str
    command: str | None
    refusal: str | None = None


def resolve_check(name: str, defined: Mapping[str, str]) -> ResolvedCheck:
    """The command truss.toml defines for ``name``; anything else resolves to no command."""
    if not is_check_name(name):
        return ResolvedCheck(
            name,
            None,
            "not a check name (command text written before checks were named, or by hand); "
            f"never run. Rewrite the entry with a name from truss.toml {CHECKS_TABLE}",
        )
    command = defined.get(name)
    if command is None:
        return ResolvedCheck(
            name,
            None,
            f"unknown check {name!r}: truss.toml {CHECKS_TABLE} does not define it, so it is "
            f"not run; {_defined_list(defined)}",
        )
    return ResolvedCheck(name, command)


# --- a run's own notes: proven by signature, shared with parent and siblings -------------
