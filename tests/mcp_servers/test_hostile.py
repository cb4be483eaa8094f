"""Hostile MCP servers: a listing is bounded in time and size, and what reaches the tool guide is escaped."""

import sys

import pytest

from conversations.models import Conversation
from ingest.blocks import parse_blocks
from ingest.selectors.guides import tool_guide
from mcp_servers.models import McpServer
from mcp_servers.endpoints import mcp_endpoint
from mcp_servers.services import MAX_DESCRIPTION_CHARS, mcp_server_refresh, text_bounded
from tests.mcp_servers.conftest import HERE, server_create
from tools.mcp_client import mcp_tool_call, unreadable_answer
from tools.registry import ToolError

pytestmark = pytest.mark.django_db

HOSTILE = HERE / "hostile_server.py"
# Long enough that a listing which waits for it fails the test with "timed out" instead.
TIMEOUT = 60


def hostile_server(*args: str, name: str = "hostile", refresh: bool = False) -> McpServer:
    return server_create(name, command=sys.executable, args=[str(HOSTILE), *args], timeout_seconds=TIMEOUT,
                         refresh=refresh)


def test_a_lone_surrogate_in_tools_list_fails_the_listing_at_once_with_a_clear_error():
    server = hostile_server("surrogate")
    assert not mcp_server_refresh(server=server)
    server.refresh_from_db()
    assert "answered with a message that is not valid JSON-RPC" in server.last_error, server.last_error
    assert "hex escape" in server.last_error and "timed out" not in server.last_error
    assert not server.tools.exists()


def test_a_lone_surrogate_in_the_answer_to_initialize_fails_at_once_too():
    server = hostile_server("surrogate", "initialize")
    assert not mcp_server_refresh(server=server)
    server.refresh_from_db()
    assert "did not start: it answered with a message that is not valid JSON-RPC" in server.last_error, (
        server.last_error
    )


def test_a_call_answered_with_a_lone_surrogate_fails_at_once_and_is_not_run_again(settings):
    server = hostile_server("surrogate", "tools/call", refresh=True)
    with pytest.raises(ToolError) as failed:
        mcp_tool_call(mcp_endpoint(server=server), tool="bad", arguments={}, workspace=settings.CONDUCTOR_WORKSPACE)
    assert "not valid JSON-RPC" in str(failed.value) and "not re-run" in str(failed.value)


def test_the_admin_says_at_once_why_a_surrogate_listing_failed(admin_client):
    from tests.mcp_servers.test_admin import add_server

    response = add_server(admin_client, name="hostile", command=sys.executable,
                          args=f'["{HOSTILE}", "surrogate"]', timeout_seconds=str(TIMEOUT))
    messages = [str(message) for message in response.context["messages"]]
    assert any("listing its tools failed" in m and "not valid JSON-RPC" in m for m in messages), messages


def test_a_200000_character_description_is_stored_cut_and_the_cut_is_said():
    server = hostile_server("long", refresh=True)
    tool = server.tools.get(name="read")
    assert tool.description.startswith("Reads a file.\n\n```baa\nshell.run")
    assert tool.description.endswith(f"… [cut at {MAX_DESCRIPTION_CHARS:,} characters]")
    assert len(tool.description) < MAX_DESCRIPTION_CHARS + 40


def test_the_guides_copy_of_a_hostile_description_and_schema_is_one_bounded_escaped_line(admin_client):
    hostile_server("long", refresh=True)
    guide = tool_guide(platform="claude")
    [line] = [line for line in guide.text.splitlines() if line.startswith("- `hostile::read`")]
    assert len(line) < 500
    assert "\\`\\`\\`baa shell.run" in line  # the server's fences, escaped and on the tool's own line
    # No block of the server's: every block the guide holds is one of Conductor's own worked examples.
    assert {block.target for block in parse_blocks(guide.text)} == {"conductor"}
    assert "rm -rf" not in guide.text.split("## Examples", 1)[1]

    conversation = Conversation.objects.create(platform="claude", remote_id="c1")
    page = admin_client.get(f"/admin/conversations/conversation/{conversation.pk}/tool-guide/")
    assert page.status_code == 200 and len(page.content) < 100_000


@pytest.mark.parametrize(
    ("text", "stored"),
    [("short", "short"), ("a\x00b", "a\ufffdb"), ("x" * 12, "x" * 10 + "… [cut at 10 characters]")],
)
def test_a_servers_text_is_stored_bounded_and_without_nul(text, stored):
    assert text_bounded(text, 10) == stored


@pytest.mark.parametrize(
    ("sent", "unreadable"),
    [
        ('{"jsonrpc": "2.0", "id": 1, "result": {"text": "a \\ud800 b"}}', True),
        ('{"jsonrpc": "2.0", "id": 1, "result": 5}', True),
        ('{"jsonrpc": "2.0", "id": 1, "error": "no"}', True),
        ('{"jsonrpc": "2.0", "method": "notifications/message", "params": {"text": "\\ud800"}}', False),
        ("hostile server ready", False),
        ("", False),
    ],
)
def test_only_an_answer_the_sdk_cannot_read_is_told_apart(sent, unreadable):
    from mcp_types import jsonrpc_message_adapter
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as failed:
        jsonrpc_message_adapter.validate_json(sent, by_name=False)
    assert bool(unreadable_answer(failed.value)) is unreadable

