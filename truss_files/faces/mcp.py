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

from ..errors import ConfigError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from ..tools.dispatch import ToolSession
    from ..tools.registry import Tool

INSTRUCTIONS = (
    "Durable, reviewed memory in a git repository. Reads return verified entries unless you "
    "widen min_trust; whatever you write lands unverified until a review panel verifies it, "
    "and only this session sees it until then. Cite entries by id."
)


def new_run_id() -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    return f"mcp-{now}-{secrets.token_hex(3)}"


def _import_mcp() -> Any:
    try:
        import mcp.server.mcpserver as server
    except ImportError as exc:
        raise ConfigError(
            "the MCP server needs the mcp package: pip install 'truss-files[mcp]'"
        ) from exc
    return server


def build_server(session: ToolSession, name: str = "truss-files") -> MCPServer:
    """An ``MCPServer`` serving the session's tools (in process: ``mcp.Client(server)``)."""
    from .. import __version__

    server_mod = _import_mcp()
    tools = [_mcp_tool(session, tool) for tool in session.served()]
    server: MCPServer = _server_class(session, server_mod.MCPServer)(
        name=name, instructions=INSTRUCTIONS, tools=tools, version=__version__
    )
    return server


def _server_class(session: ToolSession, base: Any) -> Any:
    """``MCPServer`` that answers a call of a tool it does not serve with the registry's
    refusal (unknown, or not enabled: which flag or truss.toml line enables it) instead of
    the SDK's bare "Unknown tool"."""
    from mcp.server.mcpserver.exceptions import ToolError

    from ..tools.registry import lookup

    served = {tool.provider_name for tool in session.served()}

    class TrussServer(base):
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            tool = lookup(name) if isinstance(name, str) else None
            if tool is not None and tool.provider_name in served:
                return await super().call_tool(tool.provider_name, arguments, context)
            refused = session.call(name, arguments)
            raise ToolError(refused.text if not refused.ok else f"Unknown tool: {name}")

    return TrussServer


def _mcp_tool(session: ToolSession, tool: Tool) -> Any:
    from mcp.server.mcpserver.exceptions import ToolError
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
            raise ToolError(outcome.text)
        if tool.text_result:
            return outcome.text
        return CallToolResult(
            content=[TextContent(type="text", text=outcome.text)],
            structured_content=dict(outcome.payload),
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


def serve(session: ToolSession) -> None:
    """Serve over stdio until the client hangs up."""
    build_server(session).run("stdio")


__all__ = ["INSTRUCTIONS", "build_server", "new_run_id", "serve"]
