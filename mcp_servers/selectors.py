"""Reads of the MCP servers app: the tools of MCP targets as the tool registry gives them."""

from __future__ import annotations

import functools
import json
from functools import partial
from typing import Any

from jsonschema.exceptions import SchemaError

from mcp_servers.models import McpServer, McpTool
from mcp_servers.services import mcp_tool_run
from tools.registry import Policy, ToolCall, ToolSpec, UnknownTool

# What a tool without an input schema accepts.
ANY_OBJECT = {"type": "object"}
# The specs a process keeps (``_spec_built``): more than the tools of a few large servers.
KEPT_SPECS = 4096


def _run(server_name: str, tool_name: str, call: ToolCall) -> Any:
    return mcp_tool_run(call, server_name=server_name, tool_name=tool_name)


def mcp_tool_as_spec(*, server: McpServer, tool: McpTool) -> ToolSpec:
    """A listed tool as a ``ToolSpec`` of target ``server.name``: default ``approve``, no example.

    No example: nothing says which arguments are safe to suggest for a tool
    Conductor did not write. Raises ``UnknownTool`` when its input schema is
    not a valid JSON Schema.
    """
    if tool.schema_problem:
        raise UnknownTool(_schema_refused(server.name, tool.name, tool.schema_problem))
    built = _spec_built(
        server.name, tool.name, " ".join((tool.description or "").split()),
        json.dumps(tool.input_schema or ANY_OBJECT), tool.is_idempotent, tool.is_read_only,
        tool.schema_problem == "",
    )
    if isinstance(built, str):
        raise UnknownTool(built)
    return built


@functools.lru_cache(maxsize=KEPT_SPECS)
def _spec_built(
    server_name: str, tool_name: str, description: str, schema_json: str, is_idempotent: bool, is_read_only: bool,
    schema_checked: bool,
) -> ToolSpec | str:
    """The spec of a tool with these fields, or why its schema is refused; kept by the process.

    Checking a schema against its draft's meta-schema takes jsonschema
    milliseconds per tool (5 ms for a dozen params under draft 2020-12): the
    first guide of a server with a thousand tools took seconds in each
    process. The check's verdict is stored when the server is listed
    (``McpTool.schema_problem``), so a spec of a checked schema skips it; a
    spec depends only on these fields, so the next guide, block or approval
    page of an unchanged tool finds it here.
    """
    try:
        return ToolSpec(
            name=tool_name, target=server_name, description=description,
            params_schema=json.loads(schema_json),
            is_idempotent=is_idempotent,
            default_policy=Policy.APPROVE,
            runs_code=not is_read_only,
            run=partial(_run, server_name, tool_name),
            schema_checked=schema_checked,
        )
    except SchemaError as exc:
        return _schema_refused(server_name, tool_name, exc.message)


def _schema_refused(server_name: str, tool_name: str, problem: str) -> str:
    return f"tool {tool_name!r} of MCP server {server_name!r} has an input schema that is not valid JSON Schema: {problem}"


def mcp_tool_spec(target: str, name: str) -> ToolSpec:
    """The tool registry's source for targets other than ``conductor``. Two queries.

    Raises ``UnknownTool`` saying what is wrong: no such server, a disabled
    one, or a tool it did not list.
    """
    server = McpServer.objects.filter(name=target).first()
    if server is None:
        return _unknown_target(target)
    if not server.enabled:
        raise UnknownTool(f"MCP server {target!r} is disabled")
    tool = McpTool.objects.filter(server=server, name=name).first()
    if tool is None:
        known = list(server.tools.values_list("name", flat=True)[:40])
        listed = ", ".join(known) if known else "none (its tools have not been listed)"
        raise UnknownTool(f"unknown tool {name!r} for MCP server {target!r}; known: {listed}")
    return mcp_tool_as_spec(server=server, tool=tool)


def _unknown_target(target: str) -> ToolSpec:
    names = list(McpServer.objects.filter(enabled=True).values_list("name", flat=True)[:40])
    known = ", ".join(["conductor", *names])
    raise UnknownTool(f"unknown target {target!r}; known: {known}")


def mcp_tool_specs() -> list[ToolSpec]:
    """Every tool of every enabled server, as ``ToolSpec``, by server and listing order. One query.

    Tools whose schema is not valid are left out (a block naming one is
    rejected with the reason).
    """
    specs = []
    for tool in McpTool.objects.filter(server__enabled=True).select_related("server").order_by(
        "server__name", "position"
    ):
        try:
            specs.append(mcp_tool_as_spec(server=tool.server, tool=tool))
        except UnknownTool:
            continue
    return specs
