"""The tool guide of an MCP server with many tools: its size and the seconds to make it.

Adds an enabled MCP server (stdio, never started) with --tools tools
(default 1,000), each with a description of --description-chars characters
and a schema of --params params, as a large server lists them; then makes
the guide of a new Claude conversation (``ingest.selectors.guides.tool_guide``: the
facts from the database, then the text) --repeat times and prints the
seconds of the first (the schemas were checked when the server was listed:
``listing_check_seconds``, paid once per listing) and of the best (the
process keeps the specs), the text's size in bytes, the
server's tools it describes and how many tools it names only. The server is removed at the end. Runs on the database
its environment configures (``DATABASE_URL``), or on SQLite in a throw-away
data folder.

    uv run python bench/guide.py [--tools 1000] [--repeat 5]
"""

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import database_engine, option_parser, setup_django  # noqa: E402

SERVER = "bench-guide"


def schema(params: int) -> dict:
    properties = {
        f"param_{n}": {"type": "string", "description": f"what param {n} says"} for n in range(params)
    }
    return {"type": "object", "properties": properties, "required": ["param_0"] if params else []}


def server_add(*, tools: int, description_chars: int, params: int) -> float:
    """Add the server's tools with their schemas checked, as a listing stores them; the check's seconds."""
    from mcp_servers.models import McpServer, McpTool
    from tools.registry import schema_problem

    McpServer.objects.filter(name=SERVER).delete()
    server = McpServer.objects.create(name=SERVER, command="/bin/false", enabled=True)
    description = ("Does one thing of many, and says so at length. " * 40)[:description_chars]
    started = time.perf_counter()
    problems = [schema_problem(schema(params)) for _ in range(tools)]
    checked = time.perf_counter() - started
    McpTool.objects.bulk_create(
        McpTool(server=server, name=f"tool_{n:04d}", description=description, input_schema=schema(params),
                position=n, schema_problem=problems[n])
        for n in range(tools)
    )
    return checked


def main() -> None:
    parser = option_parser(__doc__, tools=1000, description_chars=400, params=12, repeat=5)
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL"):
        os.environ["CONDUCTOR_DATA_DIR"] = tempfile.mkdtemp(prefix="conductor-bench-guide-")
    setup_django(migrate=True)

    from ingest.selectors.guides import tool_guide
    from mcp_servers.models import McpServer

    listing_check = server_add(tools=args.tools, description_chars=args.description_chars, params=args.params)
    try:
        timings = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            guide = tool_guide(platform="claude")
            timings.append(time.perf_counter() - started)
        described = sum(1 for line in guide.text.splitlines() if line.startswith(f"- `{SERVER}::"))
        print(
            f"database={database_engine()} tools={args.tools} first_seconds={timings[0]:.3f} "
            f"seconds={min(timings):.3f} bytes={len(guide.text.encode())} described={described} "
            f"named_only={len(guide.named_only)} is_cut={guide.is_cut} listing_check_seconds={listing_check:.3f}",
            flush=True,
        )
    finally:
        McpServer.objects.filter(name=SERVER).delete()


if __name__ == "__main__":
    main()
