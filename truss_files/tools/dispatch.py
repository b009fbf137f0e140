"""Calling a tool: one session per agent run, shared by every face (CLI, MCP, SDK adapter).

``ToolSession.call(name, input)`` refuses tools the store does not serve, checks the input
against the tool's schema, runs the handler, and — in a durable run — records the call as
one signed commit on the run's ledger (``runs.py``), or answers it from a signed memo.
Library errors become the ``{"error": {"code", "message"}}`` object a model reads; bugs
propagate so each face can report them as bugs.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config.tipconfig import (
    ConfigLike,
    has_layers_above_store,
    require_store,
    tip_config,
    user_config_file,
)
from ..errors import SecretFound, TrussError, UnknownTool, UsageError
from ..format import entryfile
from ..format.scope import Reader
from ..git.gitdir import GitDir
from ..model import Entry, Trust
from ..runs.ledger import CALL_ID, RunLedger, check_run_id, memo_key
from ..runs.links import link_run, mark_seen, run_view
from ..runs.runcontext import RunContext, has_context
from ..trust.authority import is_own, viewer
from .registry import Serving, Tool
from .schema import check_input, check_json

if TYPE_CHECKING:
    from ..config.settings import Settings
    from ..git.gitstore import Snapshot
    from ..store.store import Store
    from ..trust.authority import RunView
    from ..trust.writers import Writers


@dataclass(frozen=True)
class Outcome:
    """What one call produced: a result object, or an error object for the model to read."""

    tool: str
    result: Mapping[str, Any] | None = None
    error: Mapping[str, str] | None = None
    replayed: bool = False
    ledger_ref: str | None = None
    text_result: bool = False
    # For people (stderr), never for the model: why a replay was refused, what an eager
    # panel did with a write, why it could not run.
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def payload(self) -> dict[str, Any]:
        """The one JSON object a tool call prints: the result, or ``{"error": {...}}``."""
        if self.error is not None:
            return {"error": dict(self.error)}
        return dict(self.result or {})

    @property
    def text(self) -> str:
        """The text a model reads: the memory tool's content, a JSON result, or the message."""
        if self.error is not None:
            return str(self.error.get("message", ""))
        result = self.result or {}
        if self.text_result:
            return str(result.get("content", ""))
        return json.dumps(result, ensure_ascii=False, indent=2)

    @classmethod
    def failed(cls, tool: str, exc: TrussError, *, text_result: bool = False) -> Outcome:
        return cls(
            tool,
            error={"code": exc.code, "message": exc.message},
            text_result=text_result,
            note=getattr(exc, "detail", None),
        )


@dataclass
class Call:
    """What a handler sees: the store, its configuration, the run and its context.

    The store opens on first use: a read that the recall index answers never needs pygit2.
    """

    session: ToolSession
    config: ConfigLike
    run_id: str | None = None
    seq: int | None = None
    context: RunContext | None = None
    call_id: str | None = None  # the provider's id of this call (a tool_use id), if any
    produced: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # -> Outcome.note
    _snap: Snapshot | None = None
    _run_view: RunView | None = None
    _writers: Writers | None = None

    @property
    def store(self) -> Store:
        return self.session.store

    @property
    def path(self) -> str:
        return self.session.path

    @property
    def store_open(self) -> bool:
        return self.session.store_open

    def settings(self) -> Settings:
        """The layered settings this call runs under: truss.toml → user config
        → ``[agents.NAME]`` → contract. With the store open, truss.toml is read at this call's
        snapshot through ``settings_for``, as the CLI's commands read it; before, at the branch
        tip through the cheap reader, so a cold read stays off pygit2."""
        # settings (and the panel policy it reads) load only when a call asks for them.
        from ..config.settings import load_settings, settings_for

        session = self.session
        if self.store_open:
            return settings_for(
                self.store, agent=session.agent, contract=session.contract, snap=self.snapshot()
            )
        env = session.environ
        return load_settings(
            self.config.raw,
            agent=session.agent,
            contract=session.contract,
            environ=env,
            global_path=user_config_file(env),
        )

    def agent(self) -> str | None:
        """Who this run writes and reads as: the run context's agent, else ``--agent`` /
        ``TRUSS_AGENT`` (never a tool's input)."""
        if self.context is not None and self.context.agent:
            return self.context.agent
        return self.session.agent or self.session.environ.get("TRUSS_AGENT") or None

    def project(self) -> str | None:
        return self.context.project if self.context is not None else None

    def reader(self) -> Reader:
        """``memory.scope`` as this call reads (``scope.Reader``): from the layered settings
        when a layer above truss.toml is in play, else truss.toml alone."""
        if self.session.has_settings_layers():
            mode = self.settings().memory_scope
        else:
            mode = str(self.config.get("memory", "scope", "per-agent"))
        return Reader(mode, self.agent(), self.project())

    def salience(self) -> str:
        """``[policy] salience`` from the layered settings, else truss.toml alone."""
        if self.session.has_settings_layers():
            return self.settings().salience
        return str(self.config.get("policy", "salience", "off"))

    def snapshot(self) -> Snapshot:
        if self._snap is None:
            self._snap = self.store.snapshot()
        return self._snap

    def refresh(self) -> Snapshot:
        """A snapshot of the new tip, after this call wrote something."""
        self._snap = None
        self._writers = None
        return self.snapshot()

    def run_view(self) -> RunView | None:
        """Whose notes this run takes as its own (``authority.RunView``); None outside a run."""
        if self.run_id is None:
            return None
        if self._run_view is None:
            self._run_view = run_view(self.store, self.run_id, self.session.own_principal())
        return self._run_view

    def writer_of(self, entry: Entry) -> str | None:
        """The principal whose verified signature added ``entry`` (``writers``)."""
        # writers checks signatures (config, gitstore, signing): only a run's own notes ask.
        from ..trust.writers import writers

        snap = self.snapshot()
        if self._writers is None:
            git = GitDir.discover(self.store.git.git_dir)
            self._writers = writers(git, snap.oid, self.store.git.repo)
        return self._writers.of(entry.id)

    def own_unverified(self, entry: Entry) -> bool:
        """This run's own unverified note, proven by signature (``authority.is_own``)."""
        if self.run_id is None or entry.trust is not Trust.UNVERIFIED:
            return False
        view = self.run_view()
        if view is None or view.principal is None:
            return False
        return is_own(view, entry, self.writer_of(entry))

    def origin_ref(self) -> str:
        """What a write of this call names as its LedgerRef: ``run:<id>/<seq>`` in a run,
        else ``<face>:<principal>`` (never none: every entry says where it came from)."""
        return self.ledger_ref() or f"{self.session.origin}:{self.store.principal()}"

    def ledger_ref(self) -> str | None:
        """``run:<id>/<seq>`` for what this call writes; None outside a run.

        A durable run numbers calls by its ledger. A run without a ledger numbers its writes:
        one past the highest sequence number among the entries it has written.
        """
        if self.run_id is None:
            return None
        if self.seq is None:
            self.seq = 1 + max(
                (seq_of(e, self.run_id) for e in own_entries(self.snapshot(), self.run_id)),
                default=0,
            )
        return f"run:{self.run_id}/{self.seq}"


def seq_of(entry: Entry, run_id: str) -> int:
    produced = entry.provenance.produced_by or ""
    prefix = f"run:{run_id}/"
    if produced.startswith(prefix) and produced[len(prefix) :].isdigit():
        return int(produced[len(prefix) :])
    return 0


def own_entries(snap: Snapshot, run_id: str) -> list[Entry]:
    """Entries this run produced: a byte scan for its ledger prefix, then a full parse."""

    needle = f"run:{run_id}/".encode()
    out = []
    for path, blob in snap.walk("memories"):
        data = blob.data
        if needle in data and path.endswith(".md"):
            entry = entryfile.parse(data, path)
            if (entry.provenance.produced_by or "").startswith(f"run:{run_id}/"):
                out.append(entry)
    return out


class ToolSession:
    """The tools one agent run may call, against one store, optionally as a durable run.

    ``flags`` names the gates opened on the command line (``memory`` for --memory-tools,
    ``memory_write`` for --memory-write). ``durable`` records every call on
    ``refs/truss/runs/<run_id>``; ``replay`` answers every call from that ledger. ``agent``
    and ``contract`` pick the settings layers (as ``--agent`` / ``--contract`` do for
    ``verify``; unset, ``TRUSS_AGENT`` / ``TRUSS_CONTRACT``): they decide the recall mode of
    the read tools and the verification policy of the writes.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | Callable[[], Store] = ".",
        *,
        path: str | os.PathLike[str] | None = None,
        flags: Iterable[str] = (),
        run_id: str | None = None,
        durable: bool = False,
        replay: bool = False,
        context: RunContext | None = None,
        agent: str | None = None,
        contract: str | os.PathLike[str] | None = None,
        parent: str | None = None,
    ) -> None:
        # An empty id is refused, not taken for no run: a harness whose $RUN_ID is unset
        # would otherwise lose its run's scoping without a word.
        self.run_id = check_run_id(run_id) if run_id is not None else None
        self.parent = check_run_id(parent) if parent is not None else None
        if (durable or replay) and not run_id:
            raise UsageError("a durable run needs a run id: pass --run RUN_ID with --durable")
        # ``store``: an open Store, a path, or a function that opens one (the CLI's,
        # which knows the signer). ``path`` is where cheap reads look when it is a function.
        self._store: Store | None = None
        self._store_checked = False
        self._open: Callable[[], Store] | None = None
        if isinstance(store, str | os.PathLike):
            where = os.path.expanduser(os.fspath(store))
            self._open = lambda: _open_store(where)
            self.path = where
        elif callable(store) and not hasattr(store, "git"):
            self._open = store
            self.path = os.path.expanduser(os.fspath(path or "."))
        else:
            opened: Store = store  # type: ignore[assignment]
            self._store = opened
            self.path = str(opened.git.workdir or opened.git.git_dir)
        self.flags = frozenset(flags)
        self.durable = durable or replay
        self.replay = replay
        self.context = context
        self.agent = agent
        self.contract = contract
        if self.parent is not None and not self.run_id:
            raise UsageError("--parent names the parent of a run: pass --run RUN_ID with it")
        self._serving: Serving | None = None
        self._lock = threading.Lock()
        self._principal: tuple[str | None] | None = None
        self._linked = False
        # The face a write outside a run names in its LedgerRef (``tool:<principal>``;
        # the MCP server sets ``mcp``, the HTTP server ``http``).
        self.origin = "tool"

    @property
    def store(self) -> Store:
        if self._store is None:
            assert self._open is not None
            self._store = self._open()
        return self._store

    @property
    def store_open(self) -> bool:
        return self._store is not None

    @property
    def environ(self) -> Mapping[str, str]:
        """The store's environment once it is open (what ``settings_for`` reads), else ours."""
        return self._store.environ if self._store is not None else os.environ

    def _require_store(self) -> None:
        """A git repository without a store is an error for every tool, reads included (an
        empty answer there would read as "nothing matches"); checked once per session."""
        if self._store is None and not self._store_checked:
            require_store(self.path)
            self._store_checked = True

    def own_principal(self) -> str | None:
        """The principal whose signatures make a note this run's own: the calling key's,
        which in a durable run must be the one its ledger names (``authority.viewer``);
        None without a usable key. Asked once per session."""
        if self._principal is None:
            key: str | None = None
            ledger: str | None = None
            try:
                key = self.store.principal()
                if self.durable and self.run_id:
                    chain = RunLedger(self.store, self.run_id).verified()
                    ledger = chain.principal if chain.links else None
            except TrussError:
                key = None
            self._principal = (viewer(key, ledger),)
        return self._principal[0]

    def link_parent(self) -> None:
        """Record this run as a child of ``parent`` (``runlinks``), once per session."""
        if self.run_id is None or self._linked:
            return
        if self.parent is None:
            mark_seen(
                GitDir.discover(self.path), self.run_id
            )  # its first call made on its own: no parent later
        else:
            link_run(self.store, self.run_id, self.parent, self.own_principal())
        self._linked = True

    def has_settings_layers(self) -> bool:
        """Whether a layer above truss.toml (user config, agent, contract) may set anything."""
        return has_layers_above_store(self.environ, agent=self.agent, contract=self.contract)

    def config(self) -> ConfigLike:
        """truss.toml at the branch tip, without opening the store when it is not open yet."""
        if self._store is None:
            found = tip_config(self.path)
            if found is not None:
                return found
        return self.store.config()

    @property
    def serving(self) -> Serving:
        if self._serving is None:
            self._serving = Serving.resolve(
                self.config(), self.flags, context=has_context(self.context)
            )
        return self._serving

    def served(self) -> list[Tool]:
        return self.serving.served()

    def call(self, name: str, tool_input: Any, *, call_id: str | None = None) -> Outcome:
        """Run one tool call. ``call_id`` is the provider's id for it (a tool_use id): a
        durable run records it, and a replay answers that very call from the ledger."""
        # One call at a time: a run's calls are ordered, and a pygit2 repository is not
        # meant to be driven from several threads at once (MCP runs tools on worker threads).
        with self._lock:
            try:
                # Before anything reads, hashes or echoes the input: an unpaired surrogate, a
                # number no JSON client reads, or nesting that exhausts the stack is refused
                # here as invalid input, never met later as a crash.
                check_name(name)
                self._require_store()
                tool = self.serving.require(name)
            except TrussError as exc:
                safe = name if isinstance(name, str) and name.isascii() else ascii(name)
                return Outcome.failed(safe, exc)
            try:
                check_json(tool_input)
                self.link_parent()
                return self._call(tool, tool_input, call_id)
            except TrussError as exc:
                return Outcome.failed(tool.name, exc, text_result=tool.text_result)

    def _call(self, tool: Tool, tool_input: Any, call_id: str | None) -> Outcome:
        ledger = RunLedger(self.store, self.run_id) if self.durable and self.run_id else None
        if ledger is None:
            return self._live(tool, tool_input, call_id)
        if not isinstance(tool_input, Mapping):
            raise UsageError("the tool input must be a JSON object")
        if call_id is not None and not CALL_ID.match(call_id):
            call_id = None  # not an id we can put in a trailer: replay by memo key alone
        key = memo_key(tool.name, tool_input)
        revalidate = tool_input.get("revalidate") is True
        found = None
        if self.replay and call_id is not None:
            found = ledger.replay(key, tool.name, required=False, call_id=call_id)
        if found is None and not revalidate and (self.replay or tool.memoized):
            found = ledger.replay(key, tool.name, required=self.replay)
        if found is not None:
            ledger_ref = found.entry.ledger_ref
            if not self.replay:
                # A live run records every call, a memo hit too, so the ledger is the journal.
                ledger_ref = ledger.record(
                    seq=ledger.next_seq(),
                    tool=tool.name,
                    key=key,
                    tool_input=tool_input,
                    payload=found.payload,
                    error=found.entry.error,
                    call_id=call_id,
                    replay_of=found.entry.replay_of or found.entry.seq,
                ).ledger_ref
            error = found.payload.get("error") if found.entry.error else None
            return Outcome(
                tool.name,
                result=None if error else found.payload,
                error=error,
                replayed=True,
                ledger_ref=ledger_ref,
                text_result=tool.text_result,
            )
        seq = ledger.next_seq()
        outcome, call = self._run(tool, tool_input, seq, call_id)
        if outcome.error is not None and outcome.error.get("code") == SecretFound.code:
            # Refused before anything was stored: the ledger keeps no memo of it either (a
            # replay of the same input is refused again, by the same check).
            return outcome
        # If recording fails the error says so, rather than hand back an observation a
        # replay could never reproduce.
        entry = ledger.record(
            seq=seq,
            tool=tool.name,
            key=key,
            tool_input=tool_input,
            payload=outcome.payload,
            error=not outcome.ok,
            produced=call.produced,
            context=self.context,
            call_id=call_id,
            parent=self.parent,
        )
        return Outcome(
            tool.name,
            result=outcome.result,
            error=outcome.error,
            ledger_ref=entry.ledger_ref,
            text_result=tool.text_result,
            note=outcome.note,
        )

    def _live(self, tool: Tool, tool_input: Any, call_id: str | None) -> Outcome:
        return self._run(tool, tool_input, None, call_id)[0]

    def _run(
        self, tool: Tool, tool_input: Any, seq: int | None, call_id: str | None = None
    ) -> tuple[Outcome, Call]:
        call = Call(self, self.config(), self.run_id, seq, self.context, call_id)
        try:
            check_input(tool.input_schema, tool_input)
            result = tool.handler(call, tool_input)
        except TrussError as exc:
            return Outcome.failed(tool.name, exc, text_result=tool.text_result), call
        note = "\n".join(call.notes) or None
        return Outcome(tool.name, result=result, text_result=tool.text_result, note=note), call


def check_name(name: Any) -> None:
    """A tool name a message may quote: text, short, printable (argv may carry any bytes)."""
    if not isinstance(name, str):
        raise UsageError(f"a tool name is a string, got {type(name).__name__}")
    if len(name) > 64 or not name.isprintable() or not name.isascii():
        raise UnknownTool(
            f"there is no tool named {ascii(name[:64])}; name one of this store's tools"
        )


def _open_store(path: str | os.PathLike[str]) -> Store:
    # The store (pygit2, cryptography, yaml) opens only when a call needs more than the index.
    from ..store.store import Store

    return Store(path)
