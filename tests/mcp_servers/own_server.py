"""The tests' own MCP server (MCPServer, the SDK's FastMCP): a few well-behaved tools and a few faults.

``python own_server.py stdio`` serves on stdin/stdout; ``python own_server.py
http PORT`` serves Streamable HTTP on 127.0.0.1:PORT at ``/mcp``, and checks
the ``Authorization`` header against ``OWN_SERVER_TOKEN`` when that is set.
Every call is appended to ``OWN_SERVER_LOG`` (when set), so tests can count
how often a tool really ran.
"""

import os
import subprocess
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server = MCPServer("own")


def _ran(tool: str, detail: str = "") -> None:
    if path := os.environ.get("OWN_SERVER_LOG"):
        with open(path, "a") as log:
            log.write(f"{tool} {os.getpid()} {detail}\n")


@server.tool(description="Adds two integers.", annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True))
def add(a: int, b: int) -> int:
    _ran("add", f"{a}+{b}")
    return a + b


@server.tool(description="Counts a call under a key; slow when asked.")
def count(key: str, sleep_ms: int = 0) -> str:
    time.sleep(sleep_ms / 1000)
    _ran("count", key)
    return f"counted {key}"


@server.tool(description="Fails: the call's result says isError.")
def fail(city: str) -> str:
    # The SDK's ToolError: its message reaches the client (any other exception reads "Error executing tool").
    raise ToolError(f"no weather for {city}")


@server.tool(description="Exits the server in the middle of the call.")
def crash() -> str:
    _ran("crash")
    sys.stdout.flush()
    os._exit(3)


@server.tool(description="Never answers; leaves a child process in its group that sleeps too.")
def hang() -> str:
    child = subprocess.Popen(["sleep", "600"])
    _ran("hang", str(child.pid))
    time.sleep(3600)
    return "woke"


@server.tool(description="Writes lots of output on stderr, then returns a long text.")
def flood(megabytes: int = 20) -> str:
    _ran("flood")
    line = "x" * 1023 + "\n"
    for _ in range(megabytes * 1024):
        sys.stderr.write(line)
    sys.stderr.flush()
    return "y" * 200_000


@server.tool(description="The value of the environment variable named.")
def env(name: str) -> str:
    return os.environ.get(name, "")


@server.tool(description="The pids of processes whose environment (/proc/PID/environ) this server can read and that hold the text.")
def peek(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if text.encode() in environ.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return sorted(found)


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        import uvicorn
        from starlette.middleware.base import BaseHTTPMiddleware
        from starlette.responses import PlainTextResponse

        app = server.streamable_http_app()
        token = os.environ.get("OWN_SERVER_TOKEN")

        async def check_token(request, call_next):
            if token and request.headers.get("authorization") != f"Bearer {token}":
                return PlainTextResponse("unauthorized", status_code=401)
            return await call_next(request)

        app.add_middleware(BaseHTTPMiddleware, dispatch=check_token)
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        server.run("stdio")
