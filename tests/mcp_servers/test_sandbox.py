"""A stdio MCP server runs in shell.run's sandbox: nothing it starts can read the Conductor process's secrets."""

import json
import os
import secrets
import subprocess
import sys

import pytest

from tests.mcp_servers.conftest import OWN_SERVER, ROOT
from tools import landlock, launcher

pytestmark = pytest.mark.skipif(landlock.sandbox_problem() is not None, reason="this machine has no Landlock")

# Run as the Conductor process: its environment (as it started) holds the
# canary; it calls the own server's ``peek``, which lists the pids whose
# environment it can read and that hold the canary.
CALLER = """
import json, sys
from pathlib import Path
from tools import mcp_client
from tools.mcp_client import mcp_sessions_close, mcp_tool_call
from tools.mcp_endpoint import McpEndpoint
if sys.argv[4] == "plain":  # the server started as the command itself, outside the sandbox
    mcp_client.sandboxed_argv = lambda endpoint, *_: [endpoint.command, *endpoint.args][1:]
workspace = Path(sys.argv[1])
endpoint = McpEndpoint(name="own", command=sys.executable, args=(sys.argv[2], "stdio"))
result = mcp_tool_call(endpoint, tool="peek", arguments={"text": sys.argv[3]}, workspace=workspace, keep_alive=False)
mcp_sessions_close()
print(json.dumps({"pid": __import__("os").getpid(), "result": result}))
"""


def peek_from_a_caller(tmp_path, canary: str, mode: str) -> tuple[int, list[int]]:
    env = {**os.environ, "CONDUCTOR_TEST_CANARY": canary, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CALLER, str(tmp_path), str(OWN_SERVER), canary, mode],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.splitlines()[-1])
    return answer["pid"], answer["result"]["structuredContent"]["result"]


def test_a_stdio_server_cannot_read_the_environment_of_the_process_that_started_it(tmp_path):
    canary = f"canary-{secrets.token_hex(8)}"
    # Started plainly (the interpreter running the server), the probe finds its caller.
    caller_pid, readable = peek_from_a_caller(tmp_path, canary, "plain")
    assert caller_pid in readable
    # Through the launcher, the caller is out of reach.
    caller_pid, readable = peek_from_a_caller(tmp_path, canary, "sandboxed")
    assert caller_pid not in readable
    assert readable == []


def test_the_launcher_refuses_a_missing_command_with_its_name():
    done = subprocess.run([sys.executable, "-I", "-S", str(launcher.__file__), "exec", "--", "/nonexistent/server"],
                          capture_output=True, text=True)
    assert done.returncode == 127 and "/nonexistent/server: command not found" in done.stderr
