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
are those of the SDK's own ``BetaLocalFilesystemMemoryTool`` (``tests/test_binding_conformance.py``
compares them at test time), plus the three trust marks of CONTRACTS.md.

The tool is one run: its own unverified writes are visible to it. Pass ``run_id`` (and
``durable=True``) to record every call on ``refs/truss/runs/<run_id>``. ``agent`` and
``contract`` pick the settings layers (else ``TRUSS_AGENT`` / ``TRUSS_CONTRACT``), so an
``eager`` verification policy runs the panel on each write, as the CLI's ``write`` does;
the texts the model reads stay the SDK's either way.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from anthropic.lib.tools import BetaAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaCacheControlEphemeralParam,
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from .facade import MemoryStore
from .tools.dispatch import Outcome, ToolSession
from .tools.runcontext import RunContext

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
        # "~/agent-memory" as the README writes it: nothing between here and the user expands it.
        memory = (
            store
            if isinstance(store, MemoryStore)
            else MemoryStore(os.path.expanduser(os.fspath(store)))
        )
        # Handing the tool to a runner is the explicit opt-in that --memory-write is on the
        # command line; [policy] allow_tools still applies.
        self.session = ToolSession(
            memory,
            flags=["memory_write"],
            run_id=run_id or f"sdk-{secrets.token_hex(4)}",
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
        outcome: Outcome = self.session.call("memory", _as_input(command))
        if not outcome.ok:
            raise ToolError(outcome.text)
        return outcome.text

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return self.run(command)

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return self.run(command)

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return self.run(command)

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return self.run(command)

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return self.run(command)

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return self.run(command)


def _as_input(command: Any) -> dict[str, Any]:
    """The command model back to the tool's JSON input (only the fields the model sent)."""
    data = command.to_dict() if hasattr(command, "to_dict") else dict(command)
    return {k: v for k, v in data.items() if v is not None}


__all__ = ["TrussMemoryTool"]
