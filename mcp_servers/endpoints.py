"""How to reach an MCP server: its row as the client's ``McpEndpoint``, its secrets opened."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from mcp_servers.models import McpServer
from mcp_servers.secrets import secrets_open, secrets_resolve
from tools.mcp_endpoint import McpEndpoint


def mcp_endpoint(*, server: McpServer) -> McpEndpoint:
    """How to reach ``server``, its secrets opened and ``${NAME}`` references resolved.

    Raises ``SecretError`` when they cannot be.
    """
    timeout = min(server.timeout_seconds, settings.CONDUCTOR_MCP_MAX_TIMEOUT_SECONDS)
    if server.transport == McpServer.Transport.HTTP:
        headers = secrets_resolve(secrets_open(server.secret_headers))
        return McpEndpoint(name=server.name, url=server.url, headers=tuple(sorted(headers.items())),
                           timeout_seconds=timeout, allow_private_urls=settings.CONDUCTOR_MCP_ALLOW_PRIVATE_URLS)
    env = secrets_resolve(secrets_open(server.secret_env))
    return McpEndpoint(
        name=server.name, command=server.command, args=tuple(str(arg) for arg in server.args),
        cwd=server.cwd, env=tuple(sorted(env.items())), timeout_seconds=timeout,
        hidden_files=tuple(str(path) for path in settings.CONDUCTOR_SECRET_FILES),
        home=str(mcp_server_home(name=server.name)), writable=tuple(str(path) for path in server.writable),
        private_folders=(str(settings.DATA_DIR),), unconfined=settings.CONDUCTOR_SHELL_UNCONFINED,
    )


def mcp_server_home(*, name: str) -> Path:
    """A stdio server's home, kept between its sessions: its own folder in the data folder, outside the workspace."""
    return Path(settings.DATA_DIR) / "mcp" / name / "home"
