"""Who may do what: the one place each trust rule at the edges is decided.

The library's check before a ref moves, the audit and the server gate all call these
functions, so a new face (a tool, a route, a hook) cannot forget a rule by forgetting to
copy it. Each section below is one promise of "Who may do what, at every edge"; the attack
on it lives in ``tests/adversarial/``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final

from .config import GIT_NAMESPACE
from .errors import Forbidden
from .model import Layer

if TYPE_CHECKING:
    from .config import TrustPolicy
    from .model import Entry
    from .signing import PublicKey

# --- layers and authors: who may write above the task layer or in another's name ---------

TRAINER: Final = "trainer"
# The layers shared beyond one task, member or role: written only by trainers.
TRAINED_LAYERS: Final = frozenset({Layer.TEAM, Layer.ENTERPRISE})
GRANT_HINT: Final = "truss-files roles grant trainer {principal}"


def own_authors(principals: Iterable[str]) -> frozenset[str]:
    """The ``author`` values that name the signing key's own principal, for each principal
    the key is listed under in ``allowed_signers``: ``agent:P`` (what every face writes by
    default), ``P`` itself, and for ``name@domain`` the agent name ``agent:name`` (how the
    project's own store names its writer). ``member:…`` and any other name is someone
    else's: writing it needs the trainer role."""
    own: set[str] = set()
    for name in principals:
        if not name:
            continue
        own |= {name, f"agent:{name}"}
        local = name.split("@", 1)[0]
        if local and local != name:
            own.add(f"agent:{local}")
    return frozenset(own)


def write_problems(
    entry: Entry, principals: Sequence[str], roles: Iterable[str]
) -> list[tuple[str, str]]:
    """Why a key of ``principals`` holding ``roles`` may not sign a commit that adds
    ``entry``: ``(rule, message)`` pairs, rule ``layer-role`` or ``author``; empty when it may.

    A ``team`` or ``enterprise`` entry, or one whose ``author`` is not the key's own
    principal (see ``own_authors``), needs the ``trainer`` role; no other role stands in for
    it. The library's check before a ref moves, the audit and the server gate all ask this."""
    if TRAINER in set(roles):
        return []
    who = principals[0] if principals else "this key"
    hint = GRANT_HINT.format(principal=who)
    held = ", ".join(sorted(set(roles))) or "no role"
    found: list[tuple[str, str]] = []
    if entry.layer in TRAINED_LAYERS:
        found.append(
            (
                "layer-role",
                f"entry {entry.id} is in the {entry.layer.value} layer, which only a key "
                f"holding the trainer role may write; {who} holds {held}. Write it in the "
                f"task layer, or ask an operator to run `{hint}`",
            )
        )
    if entry.author not in own_authors(principals):
        found.append(
            (
                "author",
                f"entry {entry.id} names author {entry.author!r}, not the signing key's own "
                f"principal (agent:{who}); writing in another's name needs the trainer role, "
                f"which {who} does not hold. Leave the author out, or ask an operator to run "
                f"`{hint}`",
            )
        )
    return found


def check_writes(entries: Iterable[Entry], principals: Sequence[str], roles: Iterable[str]) -> None:
    """Raise ``Forbidden`` naming the rule when ``write_problems`` finds any for ``entries``."""
    held = set(roles)
    if TRAINER in held:
        return  # before the first entry is read: a trainer's bulk import parses nothing twice
    for entry in entries:
        found = write_problems(entry, principals, held)
        if found:
            said = "; ".join(f"[{rule}] {message}" for rule, message in found)
            raise Forbidden(f"refusing to write: {said}")


def signer_principals(policy: TrustPolicy, key: PublicKey) -> tuple[tuple[str, ...], set[str]]:
    """Every principal ``allowed_signers`` lists ``key`` under (namespace git) and the roles
    they hold; raises ``SignatureError`` for a key it does not list."""
    _, held = policy.roles_of(key, GIT_NAMESPACE)
    return tuple(policy.signers.principals_for(key, GIT_NAMESPACE)), held


# --- checks: which commands may run as reviewers -----------------------------------------


# --- a run's own notes: proven by signature, shared with parent and siblings -------------
