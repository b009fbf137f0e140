"""A run's prefix, in cache order: tools, then system, then messages, with a cursor.

    tools      the served tool definitions, in the registry's stable order
    system     L0 core, L0 self, L1 principal, then a short note on where memory lives
    messages   L3: the verified goal entries the run may see, pinned; L4: the run's own
               unverified writes and scratch notes, a bounded tail

Cache breakpoints (``cache_control: {"type": "ephemeral"}``, the Messages API's) go on the
last tool and the last system block, so a provider caches everything above the goal ledger.
Tools and system are built from the commit the run started at (``runstart``): their bytes do
not change within a run, whatever memory does. L2 is never pushed here: the model pulls it
through the tools. A goal reaches the messages only verified, through the read gate; the
run's own unverified goal is not a goal (nor part of the tail).

Formats: ``json`` (everything, with layer names and token estimates), ``anthropic`` (the
Messages API's ``tools``/``system``/``messages`` params) and ``openai`` (Chat Completions:
tools as functions, the system text as the first message). Each also carries ``cursor`` and
``tokens``; pass the other keys to the API.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..errors import NotFound, StoreError, UsageError
from ..format.scope import Reader
from ..format.secrets import shown
from ..identity.layers import SystemBlock, check_principal, identity_layers
from ..model import Entry, Kind, Trust
from ..runs.ledger import check_run_id
from ..runs.links import children, key_principal, link_run
from ..runs.start import RunStart, load_start, start_run
from ..tools.registry import Serving, Tool
from ..tools.schema import export
from .consult import consult, consult_text, enabled
from .cursor import encode, resolve
from .instruction import BUILT_IN, instruction_table, pick, provider_of
from .resume import Changed, delta_text, resume_delta, save_cursor
from .tail import NOTE_CHARS, scratch_tail

if TYPE_CHECKING:
    from ..config.settings import Settings
    from ..git.gitstore import Snapshot
    from ..runs.runcontext import RunContext
    from ..store.store import Store

__all__ = ["FORMATS", "Prefix", "build_context", "default_instruction", "repin"]

FORMATS: Final = ("json", "anthropic", "openai")
EPHEMERAL: Final = {"type": "ephemeral"}

CHILD_NOTES: Final = 3  # newest notes shown per child run in the parent's L4
CHILDREN_HEAD = (
    "Child runs of this run (their newest notes, unverified unless marked; newest last):"
)
GOALS_HEAD = "Goal ledger (pinned; verified goals, oldest first):"
TAIL_HEAD = "Working notes of this run (unverified unless marked verified; newest last):"


def _note_line(note: Entry) -> str:
    note = shown(note)
    body = note.body if len(note.body) <= NOTE_CHARS else note.body[:NOTE_CHARS] + " [...]"
    return f"- [{note.trust.value}] {note.kind.value}/{note.key} ({note.id[:12]}): " + body.replace(
        "\n", "\n  "
    )


def default_instruction(tool_names: Sequence[str]) -> str:
    """What the system says about memory when ``[context] instruction`` does not."""
    reads = [n for n in tool_names if n in ("memory_query", "memory_view", "read_memory")]
    writes = [n for n in tool_names if n in ("memory", "write_memory")]
    how = f" through the tools {', '.join(reads)}" if reads else ""
    text = (
        "Durable memory lives outside this prompt, in a reviewed store you reach"
        f"{how}. It is not loaded here: consult it before you settle something earlier "
        "work may already have settled, and cite entries by id. Entries are verified unless "
        "marked otherwise."
    )
    if writes:
        text += (
            f" To remember something, use {' or '.join(writes)}: one lesson per entry, a "
            "one-line summary first, then the detail. What you write stays unverified until a "
            "review panel verifies it."
        )
    return text


def estimate_tokens(text: str) -> int:
    """About four characters a token: a budget, not a tokenizer."""
    return (len(text) + 3) // 4


@dataclass(frozen=True)
class Prefix:
    run: str
    start: RunStart
    new_run: bool
    tools: tuple[Tool, ...]
    system: tuple[SystemBlock, ...]
    goals: tuple[Entry, ...]
    tail: tuple[Entry, ...]
    commit: str  # the tip the messages were read at
    cursor: str
    delta: tuple[Changed, ...] = ()  # what changed in verified L2 since the run's last cursor
    children: tuple[tuple[str, tuple[Entry, ...]], ...] = ()  # each child run, newest notes
    instruction: str = BUILT_IN  # which configured instruction the system carries
    consulted: Mapping[str, Any] | None = None  # memory.ask's reply at the run's start

    # -- the pieces ----------------------------------------------------------------------

    def tool_defs(self, fmt: str) -> list[dict[str, Any]]:
        return export(self.tools, "openai" if fmt == "openai" else "anthropic")

    def goal_text(self) -> str:
        if not self.goals:
            return ""
        lines = [GOALS_HEAD]
        for goal in map(shown, self.goals):
            lines.append(f"- {goal.key} ({goal.id[:12]}): " + goal.body.replace("\n", "\n  "))
        return "\n".join(lines)

    def tail_text(self) -> str:
        lines = [TAIL_HEAD] if self.tail else []
        lines.extend(_note_line(note) for note in self.tail)
        if self.children:
            lines.append(CHILDREN_HEAD)
            for child, notes in self.children:
                lines.append(f"- run {child}:" + ("" if notes else " no notes yet"))
                lines.extend("  " + _note_line(n).replace("\n", "\n  ") for n in notes)
        return "\n".join(lines)

    def tail_ids(self) -> list[str]:
        return [e.id for e in self.tail] + [n.id for _, notes in self.children for n in notes]

    def tokens(self) -> dict[str, int]:
        by_name = {layer.name: estimate_tokens(layer.text) for layer in self.system}
        tools = estimate_tokens(json.dumps(self.tool_defs("anthropic"), sort_keys=True))
        counts = {
            "tools": tools,
            "L0": by_name.get("L0 core", 0) + by_name.get("L0 self", 0),
            "L1": by_name.get("L1 principal", 0),
            "instruction": by_name.get("memory", 0),
            "L3": estimate_tokens(self.goal_text()),
            "delta": estimate_tokens(delta_text(self.delta)),
            "consult": estimate_tokens(consult_text(self.consulted)),
            "L4": estimate_tokens(self.tail_text()),
        }
        counts["total"] = sum(counts.values())
        return counts

    # -- rendered ------------------------------------------------------------------------

    def render(self, fmt: str = "json") -> dict[str, Any]:
        if fmt not in FORMATS:
            raise UsageError(f"unknown context format '{fmt}'; use one of: {', '.join(FORMATS)}")
        present = [layer for layer in self.system if layer.text]
        texts = [
            (text, label)
            for text, label in (
                (self.goal_text(), "L3"),
                (consult_text(self.consulted), "consult"),
                (delta_text(self.delta), "delta"),
                (self.tail_text(), "L4"),
            )
            if text
        ]
        tools = self.tool_defs(fmt)
        out: dict[str, Any]
        if fmt == "json":
            out = {
                "run": self.run,
                "started_at": self.start.commit,
                "new_run": self.new_run,
                "instruction": self.instruction,
                "tools": tools,
                "system": [
                    {"layer": x.name, "path": x.path, "text": x.text, "missing": x.missing}
                    for x in self.system
                ],
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": text}],
                        "layer": label,
                        "pinned": label == "L3",
                        "ids": self._ids(label),
                    }
                    for text, label in texts
                ],
                "breakpoints": ["tools", "system"],
            }
        elif fmt == "anthropic":
            if tools:
                tools[-1] = {**tools[-1], "cache_control": dict(EPHEMERAL)}
            system: list[dict[str, Any]] = [{"type": "text", "text": x.text} for x in present]
            if system:
                system[-1]["cache_control"] = dict(EPHEMERAL)
            out = {
                "tools": tools,
                "system": system,
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": text}]}
                    for text, _ in texts
                ],
            }
        else:
            messages: list[dict[str, Any]] = []
            if present:
                joined = "\n\n".join(x.text for x in present)
                messages.append({"role": "system", "content": joined})
            messages.extend({"role": "user", "content": text} for text, _ in texts)
            out = {"tools": tools, "messages": messages}
        out["cursor"] = self.cursor
        out["delta"] = [c.to_dict() for c in self.delta]
        out["consult"] = dict(self.consulted) if self.consulted is not None else None
        out["tokens"] = self.tokens()
        return out

    def _ids(self, label: str) -> list[str]:
        if label == "delta":
            return [c.id for c in self.delta]
        if label == "consult":
            return [str(e.get("id")) for e in (self.consulted or {}).get("evidence", [])]
        return [e.id for e in self.goals] if label == "L3" else self.tail_ids()

    def stable_bytes(self, fmt: str = "anthropic") -> bytes:
        """The bytes above the goal ledger, as sent: what must not change within a run."""
        data = self.render(fmt)
        head = {k: data[k] for k in ("tools", "system") if k in data}
        if fmt == "openai":
            head["system"] = [m for m in data["messages"] if m["role"] == "system"]
        return json.dumps(head, sort_keys=True, ensure_ascii=False).encode()


# -- building ----------------------------------------------------------------------------


def _start_pieces(
    store: Store, start: RunStart, fmt: str | None, model: str | None
) -> tuple[tuple[Tool, ...], tuple[SystemBlock, ...], str]:
    """Tools and system as of the run's start commit, and the name of the instruction the
    system carries for ``fmt`` and ``model`` (``instruction.pick``)."""
    snap = store.snapshot(start.commit)
    tools = tuple(Serving.resolve(store.config(snap), start.gates).served())
    layers = identity_layers(snap, start.principal)
    name, text = pick(dict(start.instructions), provider_of(fmt), model) or (
        BUILT_IN,
        start.instruction,
    )
    layers.append(SystemBlock("memory", None, text))
    return tools, tuple(layers), name


def run_settings(store: Store, snap: Snapshot, agent: str | None) -> Settings:
    """The layered settings at ``snap``; the agent's own layer only where truss.toml has an
    ``[agents.NAME]`` table (a run's agent need not have one)."""
    # settings (tomllib, the panel's rules) stays off the facade's cold read path
    from ..config.settings import load_settings

    raw = store.config(snap).raw
    agents = raw.get("agents")
    layered = agent if isinstance(agents, dict) and agent in agents else None
    env = {k: v for k, v in store.environ.items() if k != "TRUSS_AGENT"}
    return load_settings(raw, agent=layered, environ=env)


def _instruction(store: Store, snap: Snapshot, gates: Sequence[str]) -> str:
    """The built-in note for the tools served; configured ones are ``instruction_table``."""
    names = [t.provider_name for t in Serving.resolve(store.config(snap), gates).served()]
    return default_instruction(names)


def _reader(store: Store, snap: Snapshot, start: RunStart) -> Reader:
    settings = run_settings(store, snap, start.agent)
    return Reader(settings.memory_scope, start.agent, start.project)


def goal_ledger(store: Store, snap: Snapshot, reader: Reader) -> list[Entry]:
    """Verified, live goals the reader may see, oldest first; through the read gate."""
    store.open_read(Trust.VERIFIED, snap)  # a history that fails the audit: refused
    goals = [
        e
        for e in store.iter_entries(snap, Kind.GOAL)
        if e.trust is Trust.VERIFIED and e.superseded_by is None and reader.sees(e.scope)
    ]
    return sorted(goals, key=lambda e: (e.created, e.id))


def build_context(
    store: Store,
    run: str,
    *,
    principal: str | None = None,
    agent: str | None = None,
    project: str | None = None,
    gates: Iterable[str] = (),
    parent: str | None = None,
    fmt: str | None = None,
    model: str | None = None,
    run_context: RunContext | None = None,
    purpose: str | None = None,
) -> Prefix:
    """The prefix of run ``run`` (tools, system, messages, cursor); the first call for a
    run starts it at the branch tip (``runstart``), and later calls keep its tools and system
    bytes. ``parent``: the run is a child of that run (``runlinks``: they share their own
    notes). ``fmt`` (anthropic, openai) and ``model`` pick the memory instruction of
    ``[context.instruction]`` (``context.instruction.pick``). ``run_context`` and
    ``purpose``: what a first context asks memory.ask under ``[enterprise]
    consult_at_start`` (``context.consult``). ``MemoryStore.context`` is this function."""
    gates = tuple(gates)
    check_run_id(run)
    if principal is not None:
        check_principal(principal)
    snap = store.snapshot()
    if snap.oid is None:
        raise StoreError("the store's branch has no commits; run `truss-files init` first")
    store.open_read(Trust.VERIFIED, snap)  # before a run starts on an unaudited commit
    if load_start(store, run) is None:
        identity_layers(snap, principal)  # a layer that cannot be read fails before the start
    signer = key_principal(store)
    if parent is not None:
        link_run(store, run, parent, signer)  # before the start: a parent is set at the first call
    start, new_run = start_run(
        store,
        run,
        snap.oid,
        principal=principal,
        agent=agent,
        project=project,
        gates=gates,
        instruction=lambda: _instruction(store, snap, gates),
        owner=signer,
        instructions=lambda: instruction_table(run_settings(store, snap, agent)),
    )
    resolve(store.git, encode(start.commit))  # the start commit is still in the history
    tools, system, instruction = _start_pieces(store, start, fmt, model)
    reader = _reader(store, snap, start)
    settings = run_settings(store, snap, start.agent)
    goals = goal_ledger(store, snap, reader)
    limit = int(settings.get("context.scratch_tail"))
    tail = scratch_tail(store, snap, run, limit, signer)
    kids = tuple(
        (c.run, tuple(scratch_tail(store, snap, c.run, CHILD_NOTES, signer)))
        for c in children(store, run)
        if signer is not None and c.principal == signer
    )
    changes: tuple[Changed, ...] = ()
    cursor = encode(snap.oid)
    if not new_run:
        changes, cursor = resume_delta(store, run, start.commit, reader)
    save_cursor(store, run, cursor)
    consulted = None
    if new_run and enabled(store, snap):
        consulted = consult(store, run, run_context, purpose)
    return Prefix(
        run,
        start,
        new_run,
        tools,
        system,
        tuple(goals),
        tuple(tail),
        snap.oid,
        cursor,
        changes,
        kids,
        instruction,
        consulted,
    )


def repin(store: Store, run: str, turn: int) -> dict[str, Any]:
    """``{"repin", "turn", "messages", "delta"}``: re-inject the goal ledger when ``turn`` is
    a positive multiple of ``[context] repin_every`` (the goal block rides along only then),
    and, whenever verified memory moved since the run's last cursor, the delta block after it."""
    if turn < 0:
        raise UsageError(f"turn must be 0 or more, got {turn}")
    start = load_start(store, run)
    if start is None:
        raise NotFound(f"run {run} has not started; run `truss-files context --run {run}` first")
    snap = store.snapshot()
    settings = run_settings(store, snap, start.agent)
    every = int(settings.get("context.repin_every"))
    due = turn > 0 and turn % every == 0
    reader = _reader(store, snap, start)
    goals = goal_ledger(store, snap, reader) if due else []
    changes, cursor = resume_delta(store, run, start.commit, reader)
    save_cursor(store, run, cursor)
    texts = [
        Prefix(run, start, False, (), (), tuple(goals), (), "", "").goal_text(),
        delta_text(changes),
    ]
    messages = [{"role": "user", "content": [{"type": "text", "text": t}]} for t in texts if t]
    return {
        "repin": due,
        "turn": turn,
        "every": every,
        "messages": messages,
        "delta": [c.to_dict() for c in changes],
        "cursor": cursor,
    }
