"""Who may do what: the one place each trust rule at the edges is decided.

The library's check before a ref moves, the audit and the server gate all call these
functions, so a new face (a tool, a route, a hook) cannot forget a rule by forgetting to
copy it. Each section below is one promise of "Who may do what, at every edge"; the attack
on it lives in ``tests/adversarial/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..errors import ConfigError, Forbidden, UsageError
from ..model import Entry, Layer, Trust

if TYPE_CHECKING:
    from ..signing import PublicKey
    from ..signing.trustpolicy import TrustPolicy

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
    # config brings tomllib and the signers; a plain query reaches this module for the run
    # rule alone (tests/faces/cli/test_cli_startup.py keeps that path light).
    from ..signing.trustpolicy import GIT_NAMESPACE

    _, held = policy.roles_of(key, GIT_NAMESPACE)
    return tuple(policy.signers.principals_for(key, GIT_NAMESPACE)), held


def may_retire(note: Entry, target: Entry) -> bool:
    """Whether promoting ``note`` may retire ``target`` by naming it (a correction's
    ``supersedes``, a merged note's ``entry:<id>`` sources): only a note of the target's own
    layer, so retiring a team or enterprise note takes a note of that layer, which only a
    trainer may write (``write_problems``). Rivals of one kind and key settle by the
    conflict policy instead. ``Store.promote`` and the review queue's preview ask this;
    ``memory.train`` refuses such a correction before it is written, saying which layer."""
    return note.layer is target.layer


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
#
# An unverified entry is run R's own (seen by R below the trust floor, listed by R's memory
# tool as its own write, in R's L4) only when its ``produced_by`` names R -- or a run R shares
# notes with -- *and* the commit that added its file carries a verified signature of R's
# principal (``writers``). R's principal: the principal of the key making the call, which for
# a durable run must be the principal its ledger names (``viewer``). A child run shares its
# notes with its parent and the parent's other children, through links made by that same
# principal (``tools/runlinks``); a tombstone hides entries from its own run only, on the
# same proof. memory.ask's "a task's own" is a note a trainer's key added (``trainer_note``).

_RUN_PREFIX = "run:"


@dataclass(frozen=True)
class RunView:
    """Whose unverified notes a run may take as its own: ``run`` and the runs it shares
    notes with (``shared``), each proven by a signature of ``principal`` (None: nobody's)."""

    run: str
    principal: str | None
    shared: frozenset[str] = frozenset()

    @property
    def runs(self) -> frozenset[str]:
        return self.shared | {self.run}


def run_of(produced_by: str | None) -> str | None:
    """The run a ``run:<id>/<seq>`` LedgerRef names, else None."""
    if not produced_by or not produced_by.startswith(_RUN_PREFIX):
        return None
    run, sep, _ = produced_by[len(_RUN_PREFIX) :].partition("/")
    return run if sep and run else None


def owns(view: RunView | None, run: str | None, trust: Trust, writer: str | None) -> bool:
    """Whether a note of ``run`` (its ``produced_by``), at ``trust``, added by a commit that
    ``writer`` signed (None: no verified signature), is ``view``'s own."""
    return (
        view is not None
        and view.principal is not None
        and trust is Trust.UNVERIFIED
        and run is not None
        and run in view.runs
        and writer == view.principal
    )


def is_own(view: RunView | None, entry: Entry, writer: str | None) -> bool:
    """``owns`` for an entry in hand."""
    return owns(view, run_of(entry.provenance.produced_by), entry.trust, writer)


def own_delete(view: RunView | None, run: str | None, writer: str | None) -> bool:
    """Whether an unverified tombstone of ``run`` hides what it deletes from ``view``'s run:
    only the run's own, on the same proof (never a shared run's, never anyone else's)."""
    return (
        view is not None
        and view.principal is not None
        and run == view.run
        and writer == view.principal
    )


def viewer(key_principal: str | None, ledger_principal: str | None) -> str | None:
    """A run's principal for own notes: the calling key's, which must be the one its durable
    ledger names when it has one (another principal's key sees no note as the run's own)."""
    if key_principal is None:
        return None
    if ledger_principal is not None and ledger_principal != key_principal:
        return None
    return key_principal


def trainers(roles: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """Whose notes memory.ask takes as a task's own: the principals holding ``trainer``."""
    return frozenset(roles.get("trainer", frozenset()))


def trainer_note(trust: Trust, writer: str | None, trained_by: frozenset[str]) -> bool:
    """Whether an unverified note in a task's own area counts as that task's own: a commit
    signed by a trainer's key added it."""
    return trust is Trust.UNVERIFIED and writer is not None and writer in trained_by


# --- a belief's life: arbitration, verdicts bound to a state, provenance on every entry ----

ARBITRATED: Final = "panel-arbitrated"
# truss.toml [policy] provenance: "required" is the cut-over (init writes it in every new
# store; an operator's signed commit turns it on in an older one). From the commit whose
# parent's truss.toml says so, the audit refuses a new entry with no LedgerRef; the history
# before it was judged without. (A verdict replayed across a demotion is refused always.)
PROVENANCE_MODES: Final = ("optional", "required")


def conflict_policy(store_toml: Mapping[str, Any]) -> str:
    """truss.toml's ``[policy] conflict`` (default verified-wins)."""
    policy = store_toml.get("policy")
    found = policy.get("conflict") if isinstance(policy, Mapping) else None
    return found if isinstance(found, str) else "verified-wins"


def provenance_required(store_toml: Mapping[str, Any]) -> bool:
    policy = store_toml.get("policy")
    return isinstance(policy, Mapping) and policy.get("provenance") == "required"


def arbitration_problem(
    entry: Entry,
    arbitration: Mapping[str, Any] | None,
    rivals: Iterable[Entry],
    fix: str | None = None,
) -> str | None:
    """Why a PASS for ``entry`` may not supersede its verified ``rivals`` under conflict
    policy panel-arbitrated (None: it may, or there is no rival). Only an arbiters' decision
    naming one of the rivals (``verify`` with ``[panel] arbiters``) lets it. ``promote`` and
    ``supersede`` both ask: a rival is a live verified entry of the same kind and key. ``fix``:
    what to do instead (default: verify ``entry`` with arbiters)."""
    rivals = [
        r
        for r in rivals
        if (r.kind, r.key) == (entry.kind, entry.key)
        and r.trust is Trust.VERIFIED
        and r.superseded_by is None
        and r.id != entry.id
    ]
    if not rivals:
        return None
    ids = {r.id for r in rivals}
    named = arbitration.get("rival") if arbitration is not None else None
    if named in ids:
        return None
    newest = max(rivals, key=lambda e: (e.created, e.id))
    said = "carries no arbiters' decision" if named is None else f"arbitrated {named}, not it"
    fix = fix or f"Run `truss-files verify {entry.id[:12]}` with [panel] arbiters configured"
    return (
        f"verified {newest.id} holds {entry.kind.value} {entry.key!r} and conflict policy "
        f"{ARBITRATED} lets a PASS supersede it only with an arbiters' decision; the verdict "
        f"{said}. {fix}"
    )


def replay_problem(
    verdict_id: str,
    basis: str | None,
    signed: str,
    old: Entry,
    old_blob: str | None,
    spent_in: str | None = None,
) -> str | None:
    """Why a verdict (signed at time ``signed``) may not move ``old`` (the entry file as it
    is, blob ``old_blob``) out of its state: a verdict authorises the one transition out of
    the state it judged (its ``basis``, that file's blob id), so a PASS cannot be replayed
    to re-promote an entry a demotion turned stale. A verdict without a basis (signed by a
    client that does not read the store's blobs, or before verdicts named one) may
    re-promote a stale entry only if it is not the verdict that verified it before, nor
    signed before that one. And a verdict is spent once: ``spent_in``, the commit of the
    history that already moved an entry with it, refuses it even where a signed revert of
    that commit put the very state it judged back."""
    if basis is not None and basis != old_blob:
        return (
            f"verdict {verdict_id} judged the entry as blob {basis[:12]}, but it is now "
            f"{(old_blob or 'absent')[:12]} ({old.trust.value}): it changed since (a demotion?)"
            "; a verdict authorises only the transition out of the state it judged. Sign a "
            "new verdict (`truss-files recheck ID`)"
        )
    if old.trust is Trust.STALE:
        before = old.provenance.verified_by or {}
        if before.get("verdict_id") == verdict_id:
            return (
                f"verdict {verdict_id} already verified this entry before it turned stale; a "
                "verdict cannot be replayed across a demotion. Sign a new verdict "
                "(`truss-files recheck ID`)"
            )
        earlier = before.get("time")
        if basis is None and isinstance(earlier, str) and signed < earlier:
            return (
                f"verdict {verdict_id} was signed at {signed}, before the verdict that last "
                f"verified this entry ({earlier}); a verdict cannot be replayed across a "
                "demotion. Sign a new verdict (`truss-files recheck ID`)"
            )
    if spent_in is not None:
        again = "recheck" if old.trust is Trust.STALE else "verify"
        return (
            f"verdict {verdict_id} was spent already, by commit {spent_in[:12]} (whose effect "
            "a revert may have undone since); a verdict moves an entry once and cannot be "
            f"replayed. Run the panel again for a new verdict (`truss-files {again} "
            f"{old.id[:12]}`)"
        )
    return None
