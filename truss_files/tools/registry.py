"""The one tool registry: each tool defined once, every face serves it from here.

A ``Tool`` carries its name, the description a model reads, its JSON schema, its handler and
its annotations. Which tools a store *serves* is decided by ``Serving``: a tool belongs to a
gate (``memory`` for the read tools, ``memory_write`` for the write binding), a gate opens by
``[tools] <gate> = true`` in truss.toml or by its command-line flag, and ``[policy]
allow_tools`` then filters by exact name. Enabling the read gate never opens a write path.
A tool that works only in a run with a context (``needs_context``: the task and enterprise it
works for) is served only where the serving process has one: a host session started without
``--run-context`` is not offered a tool that could only answer ``no_run_context``, and a call
of it anyway is refused with that same error.

Tool modules register themselves at import; ``all_tools()`` imports the built-in ones on first
use so that merely importing the registry stays cheap (the CLI's cold start is measured).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, ToolNotServed, UnknownTool, UsageError

if TYPE_CHECKING:
    from ..config.tipconfig import ConfigLike

# A handler takes a ``dispatch.Call`` and the tool's input; the registry does not name the
# call's type, so that it imports nothing of the dispatcher that imports it.
Handler = Callable[..., dict[str, Any]]

# Modules whose import registers tools.
BUILTIN_MODULES = ("query", "binding", "write", "identity", "ask", "train")
# The order tools are offered in (schema export, MCP listing); later tools follow in the
# order they registered.
ORDER = (
    "memory_query",
    "memory_view",
    "read_memory",
    "memory",
    "write_memory",
    "identity_propose",
    "memory.ask",
    "memory.train",
)

# gate -> (command-line flag, truss.toml line) that opens it. The identity tool has no flag:
# only the store's signed truss.toml can offer an agent a way to amend its own identity.
GATES: dict[str, tuple[str | None, str]] = {
    "memory": ("--memory-tools", "[tools] memory = true"),
    "memory_write": ("--memory-write", "[tools] memory_write = true"),
    "identity": (None, "[tools] identity = true"),
}


@dataclass(frozen=True)
class Annotations:
    """What a client may assume about a tool (MCP's ToolAnnotations)."""

    title: str
    read_only: bool
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = False

    def to_mcp(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        }


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: Handler
    annotations: Annotations
    gate: str
    # A durable run answers a repeated call of a memoized tool from its signed memo (the
    # model sees the observation it saw before) unless the input says revalidate.
    memoized: bool = False
    # The result is {"content": text}: the text is what the model reads (the memory tool).
    text_result: bool = False
    # A provider-defined tool (memory_20250818) is offered to Anthropic by type, not schema.
    anthropic_definition: Mapping[str, Any] | None = None
    # The JSON schema of a structured result (MCP's outputSchema); a text result's is
    # {"content": string}.
    output_schema: Mapping[str, Any] | None = None
    # Works only with a run context (taskId and enterpriseId): not offered without one.
    needs_context: bool = False

    @property
    def provider_name(self) -> str:
        """Provider tool names allow no dot: memory.ask is offered as memory_ask."""
        return self.name.replace(".", "_")


_REGISTRY: dict[str, Tool] = {}
_loaded = False


def register(tool: Tool) -> Tool:
    if tool.gate not in GATES:
        raise ValueError(f"tool {tool.name}: unknown gate {tool.gate!r}; add it to GATES")
    for other in _REGISTRY.values():
        if other.name != tool.name and other.provider_name == tool.provider_name:
            raise ValueError(f"tool {tool.name} clashes with {other.name} once dots become '_'")
    _REGISTRY[tool.name] = tool
    return tool


def all_tools() -> list[Tool]:
    global _loaded
    if not _loaded:
        for module in BUILTIN_MODULES:
            importlib.import_module(f"{__package__}.{module}")
        _loaded = True
    known = {name: n for n, name in enumerate(ORDER)}
    tools = list(_REGISTRY.values())
    return sorted(tools, key=lambda t: known.get(t.name, len(ORDER) + tools.index(t)))


def lookup(name: str) -> Tool | None:
    """A tool by its name or its provider spelling (memory_ask for memory.ask)."""
    for tool in all_tools():
        if name in (tool.name, tool.provider_name):
            return tool
    return None


@dataclass(frozen=True)
class Serving:
    """Which tools this store serves: the open gates, then the allow_tools filter, then
    whether the serving process has a run context (``context``; an export for a harness to
    configure, which passes the context with each call, leaves it true)."""

    gates: frozenset[str]
    allow: frozenset[str] | None = None
    context: bool = True

    @classmethod
    def resolve(
        cls, config: ConfigLike | None, flags: Iterable[str] = (), *, context: bool = True
    ) -> Serving:
        """Gates open from truss.toml [tools] and from flags (gate names, e.g. "memory")."""
        gates = set(flags)
        flagless = sorted(g for g in gates if g in GATES and GATES[g][0] is None)
        if flagless:
            raise UsageError(
                f"the {flagless[0]} tools are served only by `{GATES[flagless[0]][1]}` in "
                "truss.toml, never by a flag"
            )
        allow = None
        if config is not None:
            tools = config.section("tools")
            for gate in GATES:
                value = tools.get(gate, False)
                if not isinstance(value, bool):
                    raise ConfigError(f"truss.toml: tools.{gate} must be true or false")
                if value:
                    gates.add(gate)
            raw = config.get("policy", "allow_tools", None)
            if raw is not None:
                if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
                    raise ConfigError(
                        "truss.toml: policy.allow_tools must be a list of exact tool names"
                    )
                allow = frozenset(raw)
        unknown = gates - set(GATES)
        if unknown:
            raise UsageError(f"unknown tool gate(s): {', '.join(sorted(unknown))}")
        return cls(frozenset(gates), allow, context)

    def allowed(self, tool: Tool) -> bool:
        return self.allow is None or bool({tool.name, tool.provider_name} & self.allow)

    def serves(self, tool: Tool) -> bool:
        return (
            tool.gate in self.gates
            and self.allowed(tool)
            and (self.context or not tool.needs_context)
        )

    def served(self) -> list[Tool]:
        return [t for t in all_tools() if self.serves(t)]

    def require(self, name: str) -> Tool:
        """The tool to run, or an error that says how to enable it."""
        tool = lookup(name)
        if tool is None:
            offered = ", ".join(t.provider_name for t in self.served()) or "none"
            raise UnknownTool(f"there is no tool named '{name}'; this store serves: {offered}")
        if tool.gate not in self.gates:
            flag, line = GATES[tool.gate]
            raise ToolNotServed(
                f"tool {tool.name} is not enabled for this store; set `{line}` in truss.toml"
                + (f" or pass {flag}" if flag else " (an operator's signed change)")
            )
        if not self.allowed(tool):
            raise ToolNotServed(
                f'tool {tool.name} is not in [policy] allow_tools; add "{tool.name}" to '
                "allow_tools in truss.toml to serve it"
            )
        if tool.needs_context and not self.context:
            # the refusal the tool itself gives without a context, word for word
            from .tenancy import require_context

            require_context(None, tool.name)
        return tool
