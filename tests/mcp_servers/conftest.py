"""MCP servers for the tests: two written by others (installed by the project's files), and the tests' own.

- ``@modelcontextprotocol/server-everything`` (npm, stdio), from
  ``tests/mcp_servers/package.json`` (``make install`` runs ``npm ci``);
- ``mcp-server-time`` (PyPI, a dev dependency in ``pyproject.toml``);
- ``own_server.py`` (MCPServer), over stdio or Streamable HTTP on loopback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcp_servers.models import McpServer
from mcp_servers.services import mcp_server_refresh, mcp_server_secrets_set
from tools.mcp_client import mcp_sessions_close

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EVERYTHING = HERE / "node_modules" / ".bin" / "mcp-server-everything"
TIME_SERVER = Path(sys.executable).with_name("mcp-server-time")
OWN_SERVER = HERE / "own_server.py"
HTTP_TOKEN = "tok-3f9c1e-never-shown"


@pytest.fixture(autouse=True)
def workspace(settings, tmp_path):
    settings.CONDUCTOR_WORKSPACE = tmp_path / "workspace"
    settings.CONDUCTOR_WORKSPACE.mkdir()
    yield settings.CONDUCTOR_WORKSPACE
    # Kept-alive sessions belong to one test: their servers stop with it.
    mcp_sessions_close()


def server_create(name: str, *, refresh: bool = True, env: dict | None = None, headers: dict | None = None,
                  **fields) -> McpServer:
    server = McpServer(name=name, **fields)
    mcp_server_secrets_set(server=server, env=env or {}, headers=headers or {})
    server.save()
    if refresh:
        assert mcp_server_refresh(server=server), server.last_error
    return server


def everything_server(name: str = "everything", **fields) -> McpServer:
    assert EVERYTHING.exists(), "run make install: tests/mcp_servers needs npm ci"
    return server_create(name, command=str(EVERYTHING), args=["stdio"], **fields)


def time_server(name: str = "time", **fields) -> McpServer:
    return server_create(name, command=str(TIME_SERVER), args=["--local-timezone", "UTC"], **fields)


def own_stdio_server(name: str = "own", log: Path | None = None, **fields) -> McpServer:
    env = {"OWN_SERVER_LOG": str(log)} if log else {}
    return server_create(name, command=sys.executable, args=[str(OWN_SERVER), "stdio"], env=env, **fields)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def own_http_url(own_http_server_url, settings):
    """``own_http_server_url``, with loopback URLs allowed for the test (CONDUCTOR_MCP_ALLOW_PRIVATE_URLS)."""
    settings.CONDUCTOR_MCP_ALLOW_PRIVATE_URLS = True
    return own_http_server_url


@pytest.fixture(scope="session")
def own_http_server_url(tmp_path_factory):
    """The tests' own server over Streamable HTTP on loopback, asking for ``HTTP_TOKEN``.

    Loopback URLs are refused unless allowed: tests take ``own_http_url``, which allows them.
    """
    port = free_port()
    log = tmp_path_factory.mktemp("own-http") / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(OWN_SERVER), "http", str(port)],
            env={**os.environ, "OWN_SERVER_TOKEN": HTTP_TOKEN}, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, log.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


def own_http_server(url: str, name: str = "web", token: str = HTTP_TOKEN, **fields) -> McpServer:
    return server_create(name, transport=McpServer.Transport.HTTP, url=url,
                         headers={"Authorization": f"Bearer {token}"}, **fields)
