"""The store as the Anthropic SDK's memory tool (extra [anthropic]), in one line::

    from truss_files.anthropic_adapter import TrussMemoryTool

    runner = client.beta.messages.tool_runner(
        model=..., max_tokens=..., messages=[...], tools=[TrussMemoryTool("/path/to/store")]
    )

``TrussMemoryTool`` subclasses the SDK's ``BetaAbstractMemoryTool``: the SDK's own dispatch
(``call`` → ``execute`` → ``view``/``create``/...) reaches each command, which runs the
registry's ``memory`` tool — so the model gets the same texts, the same governed writes
(unverified, delete and rename as tombstones) and the same strict paths as every other face.
A refusal is raised as the SDK's ``ToolError``; the runner turns it into ``is_error``. The texts
are those of the SDK's own ``BetaLocalFilesystemMemoryTool``
(``tests/tools/test_binding_conformance.py`` compares them at test time), plus the three trust
marks agents are promised (the README's memory tool section).

The tool is one run: its own unverified writes are visible to it. Pass ``run_id`` (and
``durable=True``) to record every call on ``refs/truss/runs/<run_id>``. ``agent`` and
``contract`` pick the settings layers (else ``TRUSS_AGENT`` / ``TRUSS_CONTRACT``), so an
``eager`` verification policy runs the panel on each write, as the CLI's ``write`` does;
the texts the model reads stay the SDK's either way.

``TrussAsyncMemoryTool`` is the same tool for an ``AsyncAnthropic`` client's tool runner
(a subclass of the SDK's ``BetaAsyncAbstractMemoryTool``; each call runs on a worker thread,
so the event loop never waits on git). ``read_tools(path, **run)`` gives the registry's
``memory_query`` and ``memory_view`` as SDK tools (their own names, descriptions and input
schemas) that a tool runner calls like any ``@beta_tool`` function; ``asynchronous=True``
gives them for an async runner, and passing a memory tool instead of a path shares its run,
so the reads see that run's own unverified writes::

    memory = TrussAsyncMemoryTool("/path/to/store")
    tools = [memory, *read_tools(memory, asynchronous=True)]
    runner = client.beta.messages.tool_runner(model=..., max_tokens=..., messages=..., tools=tools)
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from typing import Any

from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
from anthropic.lib.tools._beta_functions import (
    BetaAsyncBuiltinFunctionTool,
    BetaBuiltinFunctionTool,
)
from anthropic.types.beta import (
    BetaCacheControlEphemeralParam,
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
    BetaToolParam,
)

from ..facade import MemoryStore
from ..runs.runcontext import RunContext
from ..tools.dispatch import Outcome, ToolSession
from ..tools.registry import lookup

Command = (
    BetaMemoryTool20250818ViewCommand
    | BetaMemoryTool20250818CreateCommand
    | BetaMemoryTool20250818StrReplaceCommand
    | BetaMemoryTool20250818InsertCommand
    | BetaMemoryTool20250818DeleteCommand
    | BetaMemoryTool20250818RenameCommand
)


class TrussMemoryTool(BetaAbstractMemoryTool):
    """Anthropic's memory tool, backed by a truss-files store."""

    def __init__(
        self,
        store: str | os.PathLike[str] | MemoryStore = ".",
        *,
        run_id: str | None = None,
        durable: bool = False,
        context: RunContext | None = None,
        agent: str | None = None,
        contract: str | os.PathLike[str] | None = None,
        cache_control: BetaCacheControlEphemeralParam | None = None,
        parent: str | None = None,
    ) -> None:
        super().__init__(cache_control=cache_control)
        # Handing the tool to a runner is the explicit opt-in that --memory-write is on the
        # command line; [policy] allow_tools still applies.
        self.session = _session(
            store,
            ["memory", "memory_write"],
            run_id=run_id,
            durable=durable,
            context=context,
            agent=agent,
            contract=contract,
            parent=parent,
        )

    @property
    def run_id(self) -> str:
        assert self.session.run_id is not None
        return self.session.run_id

    def run(self, command: Command) -> str:
        return _text(self.session.call("memory", _as_input(command)))

    # Every command goes through the one registry tool: the SDK's abstract methods are it.
    view = create = str_replace = insert = delete = rename = run


class TrussAsyncMemoryTool(BetaAsyncAbstractMemoryTool):
    """Anthropic's memory tool for an ``AsyncAnthropic`` tool runner, backed by a store.

    The same run, texts and governed writes as ``TrussMemoryTool`` (same arguments); each
    command runs on a worker thread so the event loop keeps serving while git works."""

    def __init__(
        self,
        store: str | os.PathLike[str] | MemoryStore = ".",
        *,
        run_id: str | None = None,
        durable: bool = False,
        context: RunContext | None = None,
        agent: str | None = None,
        contract: str | os.PathLike[str] | None = None,
        cache_control: BetaCacheControlEphemeralParam | None = None,
        parent: str | None = None,
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.session = _session(
            store,
            ["memory", "memory_write"],
            run_id=run_id,
            durable=durable,
            context=context,
            agent=agent,
            contract=contract,
            parent=parent,
        )

    @property
    def run_id(self) -> str:
        assert self.session.run_id is not None
        return self.session.run_id

    async def run(self, command: Command) -> str:
        outcome = await asyncio.to_thread(self.session.call, "memory", _as_input(command))
        return _text(outcome)

    view = create = str_replace = insert = delete = rename = run


READ_TOOLS = ("memory_query", "memory_view")


class TrussReadTool(BetaBuiltinFunctionTool):
    """One registry read tool (``memory_query`` or ``memory_view``) as an SDK tool."""

    def __init__(self, session: ToolSession, name: str) -> None:
        self.session = session
        self._definition = _definition(name)

    def to_dict(self) -> BetaToolParam:
        return self._definition

    def call(self, input: object) -> str:
        return _text(self.session.call(self._definition["name"], input))


class TrussAsyncReadTool(BetaAsyncBuiltinFunctionTool):
    """``TrussReadTool`` for an ``AsyncAnthropic`` tool runner (calls run on a thread)."""

    def __init__(self, session: ToolSession, name: str) -> None:
        self.session = session
        self._definition = _definition(name)

    def to_dict(self) -> BetaToolParam:
        return self._definition

    async def call(self, input: object) -> str:
        name = self._definition["name"]
        return _text(await asyncio.to_thread(self.session.call, name, input))


def read_tools(
    store: str | os.PathLike[str] | MemoryStore | TrussMemoryTool | TrussAsyncMemoryTool = ".",
    *,
    asynchronous: bool = False,
    **run: Any,
) -> list[TrussReadTool] | list[TrussAsyncReadTool]:
    """``memory_query`` and ``memory_view`` as SDK tools a tool runner calls.

    ``store`` is a path, a ``MemoryStore``, or a memory tool whose run they then share (so
    they see its own unverified writes); ``run`` takes ``TrussMemoryTool``'s run arguments
    (``run_id``, ``durable``, ``context``, ``agent``, ``contract``, ``parent``) for a new
    run. A result is the tool's JSON text; a refusal is raised as ``ToolError``, which the
    runner sends back with ``is_error``. ``asynchronous=True`` for an ``AsyncAnthropic``
    runner."""
    if isinstance(store, TrussMemoryTool | TrussAsyncMemoryTool):
        if run:
            raise TypeError(f"read_tools: {sorted(run)} given with a tool whose run is fixed")
        session = store.session
    else:
        session = _session(store, ["memory"], **run)
    if asynchronous:
        return [TrussAsyncReadTool(session, name) for name in READ_TOOLS]
    return [TrussReadTool(session, name) for name in READ_TOOLS]


def _session(
    store: str | os.PathLike[str] | MemoryStore,
    flags: list[str],
    *,
    run_id: str | None = None,
    durable: bool = False,
    context: RunContext | None = None,
    agent: str | None = None,
    contract: str | os.PathLike[str] | None = None,
    parent: str | None = None,
) -> ToolSession:
    # "~/agent-memory" as the README writes it: nothing between here and the user expands it.
    memory = (
        store
        if isinstance(store, MemoryStore)
        else MemoryStore(os.path.expanduser(os.fspath(store)))
    )
    return ToolSession(
        memory,
        flags=flags,
        run_id=f"sdk-{secrets.token_hex(4)}" if run_id is None else run_id,
        durable=durable,
        context=context,
        agent=agent,
        contract=contract,
        parent=parent,
    )


def _definition(name: str) -> BetaToolParam:
    tool = lookup(name)
    assert tool is not None, name
    schema: dict[str, object] = json.loads(json.dumps(tool.input_schema))  # a plain copy
    return {"name": tool.provider_name, "description": tool.description, "input_schema": schema}


def _text(outcome: Outcome) -> str:
    if not outcome.ok:
        raise ToolError(outcome.text)
    return outcome.text


def _as_input(command: Any) -> dict[str, Any]:
    """The command model back to the tool's JSON input (only the fields the model sent)."""
    data = command.to_dict() if hasattr(command, "to_dict") else dict(command)
    return {k: v for k, v in data.items() if v is not None}


__all__ = [
    "TrussAsyncMemoryTool",
    "TrussAsyncReadTool",
    "TrussMemoryTool",
    "TrussReadTool",
    "read_tools",
]
