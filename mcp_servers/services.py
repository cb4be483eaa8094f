"""Writes of the MCP servers app: secrets, listing tools, the servers file, and calls (SPEC §5.4)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.logfmt import log_event
from mcp_servers.models import RESERVED_TARGETS, TARGET_NAME, McpServer, McpTool
from mcp_servers.secrets import SecretError, secrets_seal
from mcp_servers.selectors import mcp_endpoint
from tools.mcp_client import McpProtocolError, mcp_tool_call, mcp_tools_list
from tools.mcp_results import mcp_error_text, mcp_result_render
from tools.registry import ToolCall, ToolError

logger = logging.getLogger(__name__)

# What a block can write as a tool of an MCP target (SPEC §5).
TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")


class ServersFileError(ValueError):
    pass


def mcp_server_secrets_set(
    *, server: McpServer, env: dict[str, str] | None = None, headers: dict[str, str] | None = None
) -> None:
    """Replace the server's environment variables and/or headers (None: leave as they are). Not saved."""
    if env is not None:
        server.secret_env, server.env_names = secrets_seal(env), sorted(env)
    if headers is not None:
        server.secret_headers, server.header_names = secrets_seal(headers), sorted(headers)


def mcp_server_refresh(*, server: McpServer) -> bool:
    """List the server's tools (``tools/list``, every page) and store them; True when it worked.

    A fresh process, not a kept-alive session: this runs in the web server
    and commands, which keep none. On failure the tools stay as they were and
    ``last_error`` says why (the page shows it).
    """
    try:
        listing = mcp_tools_list(mcp_endpoint(server=server), workspace=settings.CONDUCTOR_WORKSPACE,
                                 keep_alive=False)
    except (ToolError, SecretError) as exc:
        McpServer.objects.filter(pk=server.pk).update(last_error=str(exc), updated_at=timezone.now())
        server.last_error = str(exc)
        log_event(logger, "mcp_server_refresh", level=logging.WARNING, server=server.name, ok=False, error=str(exc))
        return False
    kept = [tool for tool in listing.tools if TOOL_NAME_RE.fullmatch(tool.get("name", ""))]
    skipped = len(listing.tools) - len(kept)
    notes = [listing.cut] if listing.cut else []
    if skipped:
        notes.append(f"{skipped} listed tool(s) skipped: their names are not [A-Za-z0-9_.-]{{1,128}}")
    note = "; ".join(notes)
    with transaction.atomic():
        McpTool.objects.filter(server=server).delete()
        McpTool.objects.bulk_create(
            McpTool(
                server=server, name=tool["name"], description=tool.get("description") or "",
                input_schema=tool.get("inputSchema") or {"type": "object"},
                annotations=tool.get("annotations") or {}, position=position,
            )
            for position, tool in enumerate(kept)
        )
        now = timezone.now()
        McpServer.objects.filter(pk=server.pk).update(tools_listed_at=now, last_error=note, updated_at=now)
    server.tools_listed_at, server.last_error = now, note
    log_event(logger, "mcp_server_refresh", server=server.name, ok=True, tools=len(kept), skipped=skipped,
              cut=bool(listing.cut))
    return True


def mcp_tool_run(call: ToolCall, *, server_name: str, tool_name: str) -> dict[str, Any]:
    """Call a listed tool; its rendered result, or ``ToolError`` (``isError`` carries the result too).

    A server that refuses the call as a protocol error (a tool it no longer
    has, arguments it reads differently) may have changed since it was
    listed: its list is refreshed before the error is reported.
    """
    server = McpServer.objects.filter(name=server_name).first()
    if server is None or not server.enabled:
        raise ToolError(f"MCP server {server_name!r} is {'disabled' if server else 'gone'}")
    tool = McpTool.objects.filter(server=server, name=tool_name).first()
    try:
        endpoint = mcp_endpoint(server=server)
    except SecretError as exc:
        raise ToolError(f"MCP server {server_name!r}: {exc}") from None
    try:
        wire = mcp_tool_call(
            endpoint, tool=tool_name, arguments=call.params, workspace=call.workspace, cancelled=call.cancelled,
            keep_alive=settings.CONDUCTOR_MCP_KEEP_ALIVE, is_idempotent=bool(tool and tool.is_idempotent),
        )
    except McpProtocolError as exc:
        refreshed = mcp_server_refresh(server=server)
        raise ToolError(f"{exc}{'; its tool list was refreshed' if refreshed else ''}") from None
    result = mcp_result_render(wire)
    if wire.get("isError"):
        raise ToolError(mcp_error_text(wire), result=result)
    return result


def mcp_servers_file_read(path: Path) -> dict[str, dict[str, Any]]:
    """The servers of a ``CONDUCTOR_MCP_SERVERS`` file: ``{"mcpServers": {name: {...}}}``, checked."""
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ServersFileError(f"{path}: {exc}") from None
    servers = document.get("mcpServers") if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        raise ServersFileError(f"{path}: expected an object with an \"mcpServers\" object")
    for name, entry in servers.items():
        if not re.match(TARGET_NAME, name) or name in RESERVED_TARGETS:
            raise ServersFileError(f"{path}: server name {name!r} is not a target name ([a-z][a-z0-9_-]*)")
        if not isinstance(entry, dict) or bool(entry.get("command")) == bool(entry.get("url")):
            raise ServersFileError(f"{path}: server {name!r} needs either \"command\" or \"url\"")
    return servers


def mcp_servers_file_sync(*, path: Path, refresh: bool = True) -> list[str]:
    """Create or update a server for each entry of the file (``source`` file); return their names.

    Servers the file no longer names, that came from it, are disabled, not
    deleted (their tasks' history keeps its target). Values of ``env`` and
    ``headers`` are stored encrypted, or as ``${NAME}`` references as written.
    """
    servers = mcp_servers_file_read(path)
    for name, entry in servers.items():
        server = McpServer.objects.filter(name=name).first() or McpServer(name=name)
        server.source = McpServer.Source.FILE
        server.transport = McpServer.Transport.HTTP if entry.get("url") else McpServer.Transport.STDIO
        server.command, server.url = entry.get("command", ""), entry.get("url", "")
        server.args = [str(arg) for arg in entry.get("args", [])]
        server.cwd = entry.get("cwd", "")
        server.enabled = not entry.get("disabled", False)
        server.timeout_seconds = min(int(entry.get("timeout", server.timeout_seconds or 60)),
                                     settings.CONDUCTOR_MCP_MAX_TIMEOUT_SECONDS)
        mcp_server_secrets_set(server=server, env=dict(entry.get("env", {})), headers=dict(entry.get("headers", {})))
        server.full_clean()
        server.save()
        if refresh and server.enabled:
            mcp_server_refresh(server=server)
    McpServer.objects.filter(source=McpServer.Source.FILE).exclude(name__in=list(servers)).update(enabled=False)
    log_event(logger, "mcp_servers_file_sync", servers=len(servers))
    return list(servers)
