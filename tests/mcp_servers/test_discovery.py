"""Listing MCP servers' tools (``tools/list``) and storing them, against real servers."""

import json
import sys

import pytest
from django.core.management import call_command

from mcp_servers.models import McpServer
from mcp_servers.services import mcp_server_refresh
from tools import mcp_client
from tests.mcp_servers.conftest import (
    HERE,
    everything_server,
    own_http_server,
    own_stdio_server,
    server_create,
    time_server,
)

pytestmark = pytest.mark.django_db


def test_server_everything_lists_its_camel_and_kebab_tools_with_schemas_and_annotations():
    server = everything_server()
    tools = {tool.name: tool for tool in server.tools.all()}
    assert {"echo", "get-sum", "get-tiny-image", "trigger-long-running-operation"} <= set(tools)
    echo = tools["echo"]
    assert echo.input_schema["properties"]["message"]["type"] == "string"
    assert echo.annotations["idempotentHint"] is True and echo.is_idempotent
    assert echo.description
    assert server.tools_listed_at is not None and server.last_error == ""


def test_mcp_server_time_lists_its_tools():
    server = time_server()
    assert set(server.tools.values_list("name", flat=True)) == {"get_current_time", "convert_time"}


def test_the_tests_own_server_lists_over_streamable_http_with_its_token(own_http_url):
    server = own_http_server(own_http_url)
    assert "add" in set(server.tools.values_list("name", flat=True))


def test_a_wrong_token_is_a_listing_error_on_the_servers_page(own_http_url):
    server = own_http_server(own_http_url, token="wrong", refresh=False)
    assert not mcp_server_refresh(server=server)
    server.refresh_from_db()
    assert "did not answer initialize" in server.last_error and "error response" in server.last_error
    assert not server.tools.exists()


def test_a_server_that_fails_to_start_says_why():
    server = server_create("broken", command="/bin/sh", args=["-c", "echo 'no config at /etc/x.toml' >&2; exit 2"],
                           refresh=False)
    assert not mcp_server_refresh(server=server)
    server.refresh_from_db()
    assert "no config at /etc/x.toml" in server.last_error


def test_a_missing_command_says_so():
    server = server_create("missing", command="/nonexistent/mcp-server", refresh=False)
    assert not mcp_server_refresh(server=server)
    assert "nonexistent" in McpServer.objects.get(name="missing").last_error


def test_a_refresh_replaces_the_stored_list(tmp_path):
    server = own_stdio_server()
    server.tools.filter(name="add").update(description="stale")
    server.tools.create(name="gone", input_schema={"type": "object"}, position=99)
    assert mcp_server_refresh(server=server)
    names = set(server.tools.values_list("name", flat=True))
    assert "gone" not in names and server.tools.get(name="add").description == "Adds two integers."


def test_the_servers_file_in_the_shared_shape_is_loaded(tmp_path, settings, monkeypatch):
    monkeypatch.setenv("TIME_TZ_FOR_TEST", "UTC")
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {
        "time": {"command": str(time_server.__globals__["TIME_SERVER"]), "args": ["--local-timezone", "UTC"],
                 "env": {"TZ": "${TIME_TZ_FOR_TEST}"}},
        "off": {"command": "/bin/false", "disabled": True},
    }}))
    settings.CONDUCTOR_MCP_SERVERS = str(path)
    call_command("mcp_servers")
    time = McpServer.objects.get(name="time")
    assert time.source == "file" and time.env_names == ["TZ"] and "${TIME_TZ_FOR_TEST}" not in time.secret_env
    assert time.tools.count() == 2
    assert not McpServer.objects.get(name="off").enabled

    path.write_text(json.dumps({"mcpServers": {}}))
    call_command("mcp_servers")
    assert not McpServer.objects.get(name="time").enabled


def paged_server(*args: str, name: str = "paged") -> McpServer:
    return server_create(name, command=sys.executable, args=[str(HERE / "paged_server.py"), *args])


def test_every_page_of_tools_list_is_read_in_order():
    server = paged_server("25", "10")
    assert list(server.tools.order_by("position").values_list("name", flat=True)) == [f"t{i:03d}" for i in range(25)]
    assert server.last_error == ""


def test_a_server_that_never_stops_paging_is_cut_and_says_so(monkeypatch):
    monkeypatch.setattr(mcp_client, "MAX_PAGES", 4)
    server = paged_server("0", "3", "endless")
    assert server.tools.count() == 12
    server.refresh_from_db()
    assert "still had pages after 4" in server.last_error


def test_a_server_listing_too_many_tools_keeps_the_first_ones_and_says_so(monkeypatch):
    monkeypatch.setattr(mcp_client, "MAX_TOOLS", 7)
    server = paged_server("30", "5")
    assert list(server.tools.order_by("position").values_list("name", flat=True)) == [f"t{i:03d}" for i in range(7)]
    assert "more than 7 tools" in McpServer.objects.get(pk=server.pk).last_error
