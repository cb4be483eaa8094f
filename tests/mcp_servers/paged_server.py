"""An MCP server (the SDK's low-level ``Server``, stdio) that pages its ``tools/list``.

``python paged_server.py TOOLS PER_PAGE`` lists ``t000`` … in pages of
``PER_PAGE``, the cursor being the next index. With ``endless`` as a third
argument every page names a next one, however far the client reads.
"""

import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOTAL, PER_PAGE = int(sys.argv[1]), int(sys.argv[2])
ENDLESS = sys.argv[3:] == ["endless"]


async def list_tools(ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    start = int(params.cursor) if params and params.cursor else 0
    stop = start + PER_PAGE
    tools = [
        types.Tool(name=f"t{index:03d}", description=f"Tool number {index}.", input_schema={"type": "object"})
        for index in range(start, stop if ENDLESS else min(stop, TOTAL))
    ]
    more = ENDLESS or stop < TOTAL
    return types.ListToolsResult(tools=tools, next_cursor=str(stop) if more else None)


server = Server("paged", on_list_tools=list_tools)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


anyio.run(main)
