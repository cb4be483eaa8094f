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
from mcp_servers.models import (
    RESERVED_TARGETS, TARGET_NAME, McpServer, McpTool, url_host_refusal, writable_problem,
)
from mcp_servers.secrets import SecretError, secrets_seal
from mcp_servers.endpoints import mcp_endpoint
from tools.mcp_client import McpProtocolError, mcp_tool_call, mcp_tools_list
from tools.mcp_results import mcp_error_text, mcp_result_render, write_refused_hint
from tools.registry import ToolCall, ToolError, schema_problem

logger = logging.getLogger(__name__)

# What a block can write as a tool of an MCP target (SPEC §5).
TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
# Bounds of what a listing stores: a server's text is shown on the admin's
# pages and, cut again and escaped, in the tool guide the assistant reads.
MAX_DESCRIPTION_CHARS = 4000
MAX_SCHEMA_CHARS = 65_536  # the input schema as JSON; a tool with a larger one is skipped
MAX_TITLE_CHARS = 200
MAX_ERROR_CHARS = 2000
# The annotations kept (SPEC §5.4): the hints, as booleans, and a title.
ANNOTATION_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


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


def text_bounded(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and a note that says where it was cut.

    NUL characters, which PostgreSQL's text cannot hold, become U+FFFD.
    """
    text = text.replace("\x00", "\ufffd")
    return text if len(text) <= limit else f"{text[:limit]}… [cut at {limit:,} characters]"


def _annotations_kept(annotations: Any) -> dict[str, Any]:
    if not isinstance(annotations, dict):
        return {}
    kept = {hint: annotations[hint] for hint in ANNOTATION_HINTS if isinstance(annotations.get(hint), bool)}
    if isinstance(annotations.get("title"), str):
        kept["title"] = text_bounded(annotations["title"], MAX_TITLE_CHARS)
    return kept


def _schema_is_storable(tool: dict[str, Any]) -> bool:
    """Whether the tool's input schema is at most ``MAX_SCHEMA_CHARS`` of JSON, without NUL (jsonb refuses it)."""
    text = json.dumps(tool.get("inputSchema") or {}, ensure_ascii=False)
    return len(text) <= MAX_SCHEMA_CHARS and "\\u0000" not in text


def mcp_server_refresh(*, server: McpServer) -> bool:
    """List the server's tools (``tools/list``, every page) and store them; True when it worked.

    A fresh process, not a kept-alive session: this runs in the web server
    and commands, which keep none. On failure the tools stay as they were and
    ``last_error`` says why (the page shows it). What is stored is bounded: a
    description is cut at ``MAX_DESCRIPTION_CHARS`` (the cut said at its
    end), a tool with a bad name or an input schema over
    ``MAX_SCHEMA_CHARS`` (or holding NUL) is skipped (``last_error`` says how many), and only
    the annotations' hints and title are kept.
    """
    try:
        listing = mcp_tools_list(mcp_endpoint(server=server), workspace=settings.CONDUCTOR_WORKSPACE,
                                 keep_alive=False)
    except (ToolError, SecretError) as exc:
        error = text_bounded(str(exc), MAX_ERROR_CHARS)
        McpServer.objects.filter(pk=server.pk).update(last_error=error, updated_at=timezone.now())
        server.last_error = error
        log_event(logger, "mcp_server_refresh", level=logging.WARNING, server=server.name, ok=False, error=error)
        return False
    named = [tool for tool in listing.tools if TOOL_NAME_RE.fullmatch(tool.get("name", ""))]
    kept = [tool for tool in named if _schema_is_storable(tool)]
    notes = [listing.cut] if listing.cut else []
    if len(named) < len(listing.tools):
        notes.append(f"{len(listing.tools) - len(named)} listed tool(s) skipped: their names are not "
                     "[A-Za-z0-9_.-]{1,128}")
    if len(kept) < len(named):
        notes.append(f"{len(named) - len(kept)} listed tool(s) skipped: their input schemas are over "
                     f"{MAX_SCHEMA_CHARS:,} characters of JSON or hold a NUL character")
    note = "; ".join(notes)
    skipped = len(listing.tools) - len(kept)
    with transaction.atomic():
        McpTool.objects.filter(server=server).delete()
        McpTool.objects.bulk_create(
            McpTool(
                server=server, name=tool["name"],
                description=text_bounded(tool.get("description") or "", MAX_DESCRIPTION_CHARS),
                input_schema=tool.get("inputSchema") or {"type": "object"},
                annotations=_annotations_kept(tool.get("annotations")), position=position,
                schema_problem=_listed_schema_problem(tool),
            )
            for position, tool in enumerate(kept)
        )
        now = timezone.now()
        McpServer.objects.filter(pk=server.pk).update(tools_listed_at=now, last_error=note, updated_at=now)
    server.tools_listed_at, server.last_error = now, note
    log_event(logger, "mcp_server_refresh", server=server.name, ok=True, tools=len(kept), skipped=skipped,
              cut=bool(listing.cut))
    return True


def _listed_schema_problem(tool: dict[str, Any]) -> str:
    """The check of a listed tool's schema, stored so that no process repeats it (``McpTool.schema_problem``)."""
    return text_bounded(schema_problem(tool.get("inputSchema") or {"type": "object"}), MAX_ERROR_CHARS)


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
        writable = (str(call.workspace), endpoint.home, *endpoint.writable) if endpoint.is_stdio else ()
        raise ToolError(write_refused_hint(mcp_error_text(wire), writable), result=result)
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
        refused = entry.get("url") and url_host_refusal(str(entry["url"]))
        if refused:
            raise ServersFileError(f"{path}: server {name!r}: {refused}")
        if problem := writable_problem(entry.get("writable", [])):
            raise ServersFileError(f"{path}: server {name!r}: \"writable\": {problem}")
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
        server.writable = entry.get("writable", [])
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
