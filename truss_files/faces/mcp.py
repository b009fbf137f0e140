"""The MCP face: the registry's served tools over the MCP SDK's ``MCPServer`` (extra [mcp]).

Each tool keeps its own JSON schema and annotations (read tools: readOnlyHint; the write
binding: destructiveHint false — nothing is ever destroyed; openWorldHint false throughout);
a tool that returns structured content declares its ``outputSchema``. The server names
itself with the package's version. Calling a tool this store does not serve is answered with
the registry's message, which says how to enable it (as ``truss-files tool`` does).
A refusal is raised as the SDK's ``ToolError``, so the model reads it as an ``isError``
result. A call's note for people (an eager panel's outcome, why it could not run) goes to
stderr, as ``truss-files tool`` prints it: stdout carries the protocol, and the model reads
only the tool's own result. The SDK is imported only here, so the CLI never pays for it.
"""

from __future__ import annotations

import datetime
import secrets
import sys
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..context.assemble import build_context
from ..errors import ConfigError
from ..facade import run_resource
from ..tools.dispatch import Outcome
from ..tools.registry import lookup

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from ..tools.dispatch import ToolSession
    from ..tools.registry import Tool

INSTRUCTIONS = (
    "Durable, reviewed memory in a git repository. Reads return verified entries unless you "
    "widen min_trust; whatever you write lands unverified until a review panel verifies it, "
    "and only this session sees it until then. A note reaches later conversations once it is "
    "verified: at once when the store verifies on write (a model judge or a check runs on "
    "each write, and the write's result then says trust verified), otherwise when a person "
    "works through the review queue (truss-files review) or runs truss-files verify. A "
    "rejected note is never served. Cite entries by id."
)


def new_run_id() -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    return f"mcp-{now}-{secrets.token_hex(3)}"


def _import_mcp() -> Any:
    try:
        # the [mcp] extra: only once build_server has found it
        import mcp.server.mcpserver as server
    except ImportError as exc:
        raise ConfigError(
            "the MCP server needs the mcp package: pip install 'truss-files[mcp]'"
        ) from exc
    return server


def build_server(session: ToolSession, name: str = "truss-files") -> MCPServer:
    """An ``MCPServer`` serving the session's tools (in process: ``mcp.Client(server)``),
    identity and the goal ledger as resources, and the run's context as a prompt."""
    server_mod = _import_mcp()
    session.origin = "mcp"  # a write outside a run names mcp:<principal>
    tools = [_mcp_tool(session, tool) for tool in session.served()]
    # The run the context belongs to: the session's, else one for this server's lifetime.
    run = session.run_id or new_run_id()
    server: MCPServer = _server_class(session, server_mod.MCPServer)(
        name=name,
        instructions=INSTRUCTIONS,
        tools=tools,
        resources=_resources(session, run),
        version=__version__,
    )
    server.add_prompt(_context_prompt(session, run))
    return server


# -- identity, goals and the context (read-only; context/) ----------------------------------

RESOURCES = {
    "truss://identity/core": ("identity-core", "identity/core.md: mandate, boundaries, safety"),
    "truss://identity/self": ("identity-self", "identity/self.md: voice and working persona"),
    "truss://goals": ("goal-ledger", "The verified goals this run may see, oldest first"),
}


def _read_resource(session: ToolSession, run: str, uri: str) -> str:
    """A resource's text as the run sees it: identity as of the run's start (the tip when the
    run has not started), goals at the tip -- through the read gate, like the context."""
    return run_resource(session.store, run, uri, session.agent)


def _resources(session: ToolSession, run: str) -> list[Any]:
    # the [mcp] extra: only once build_server has found it
    from mcp.server.mcpserver.resources import FunctionResource

    def reader(uri: str) -> Any:
        def read() -> str:
            return _read_resource(session, run, uri)

        return read

    return [
        FunctionResource.from_function(
            reader(uri), uri=uri, name=name, description=about, mime_type="text/markdown"
        )
        for uri, (name, about) in RESOURCES.items()
    ]


def _context_prompt(session: ToolSession, run: str) -> Any:
    # the [mcp] extra: only once build_server has found it
    from mcp.server.mcpserver.prompts import Prompt
    from mcp.server.mcpserver.prompts.base import UserMessage

    def context(principal: str = "") -> list[Any]:
        """The run's system text (L0, L1, the memory note), its pinned goal ledger, what
        changed since its last context, and its L4 (with its children's newest notes)."""
        prefix = build_context(
            session.store,
            run,
            principal=principal or None,
            agent=session.agent,
            gates=tuple(sorted(session.flags)),
            parent=session.parent,
            run_context=session.context,
        )
        system = "\n\n".join(layer.text for layer in prefix.system if layer.text)
        messages = [UserMessage(system)]
        # Goals, then the consult at start, the delta since the last context and L4.
        for block in prefix.render("json")["messages"]:
            messages.append(UserMessage(block["content"][0]["text"]))
        return messages

    return Prompt.from_function(
        context,
        name="context",
        title="Run context",
        description=(
            "The identity, principal and goal ledger this run starts from; on resume, what "
            "changed in verified memory since, and the run's working notes."
        ),
    )


def _server_class(session: ToolSession, base: Any) -> Any:
    """``MCPServer`` that answers a call of a tool it does not serve with the registry's
    refusal (unknown, or not enabled: which flag or truss.toml line enables it) instead of
    the SDK's bare "Unknown tool"."""
    served = {tool.provider_name for tool in session.served()}

    class TrussServer(base):
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            tool = lookup(name) if isinstance(name, str) else None
            if tool is not None and tool.provider_name in served:
                return await super().call_tool(tool.provider_name, arguments, context)
            refused = session.call(name, arguments)
            if refused.ok:
                refused = Outcome(
                    str(name), error={"code": "unknown_tool", "message": f"Unknown tool: {name}"}
                )
            return _failed(refused)

    return TrussServer


def _mcp_tool(session: ToolSession, tool: Tool) -> Any:
    # the [mcp] extra: only once build_server has found it
    from mcp.server.mcpserver.tools import Tool as MCPTool
    from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
    from mcp_types import CallToolResult, TextContent, ToolAnnotations
    from pydantic import ConfigDict

    class Arguments(ArgModelBase):
        # The registry's schema is the contract: take the arguments as given and let the
        # tool check them, so MCP reports the same messages as every other face.
        model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

        def model_dump_one_level(self) -> dict[str, Any]:
            return dict(self.model_extra or {})

    def run(**arguments: Any) -> Any:
        outcome = session.call(tool.name, arguments)
        if outcome.note:
            print(f"note: {outcome.note}", file=sys.stderr, flush=True)
        if not outcome.ok:
            return _failed(outcome)
        # Every tool declares an outputSchema; a text result's is {"content": string}.
        structured = {"content": outcome.text} if tool.text_result else dict(outcome.payload)
        return CallToolResult(
            content=[TextContent(type="text", text=outcome.text)],
            structured_content=structured,
        )

    run.__name__ = tool.provider_name
    hints = tool.annotations
    return MCPTool(
        fn=run,
        name=tool.provider_name,
        title=hints.title,
        description=tool.description,
        parameters=dict(tool.input_schema),
        fn_metadata=FuncMetadata(
            arg_model=Arguments,
            output_schema=None if tool.output_schema is None else dict(tool.output_schema),
        ),
        is_async=False,
        context_kwarg=None,
        annotations=ToolAnnotations(
            title=hints.title,
            read_only_hint=hints.read_only,
            destructive_hint=hints.destructive,
            idempotent_hint=hints.idempotent,
            open_world_hint=hints.open_world,
        ),
    )


def _failed(outcome: Outcome) -> Any:
    """An error as MCP's tool error (``isError``): the message for the model to read, and
    ``{"error": {"code", "message"}}`` as structuredContent, as every other face answers."""
    # the [mcp] extra: only once build_server has found it
    from mcp_types import CallToolResult, TextContent

    return CallToolResult(
        content=[TextContent(type="text", text=outcome.text)],
        structured_content=outcome.payload,
        is_error=True,
    )


def serve(session: ToolSession) -> None:
    """Serve over stdio until the client hangs up."""
    build_server(session).run("stdio")


__all__ = ["INSTRUCTIONS", "build_server", "new_run_id", "serve"]
