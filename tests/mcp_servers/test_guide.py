"""The tool guide lists each MCP tool callable in the conversation (SPEC §5.5)."""

import time

import pytest

from ingest.guide import MAX_GUIDE_BYTES
from ingest.models import ToolPolicy
from ingest.blocks import parse_blocks
from ingest.selectors.guides import tool_guide, tool_guide_facts
from tests.factories import ConversationLinkFactory
from tests.mcp_servers.conftest import everything_server, time_server
from tools.registry import Policy, tools

pytestmark = pytest.mark.django_db


def mcp_lines(text):
    return [line for line in text.splitlines() if line.startswith("- `") and "::" in line]


def test_every_tool_of_every_enabled_server_is_listed_as_waiting_for_approval():
    everything_server()
    time_server()
    everything_server("off", enabled=False, refresh=False)
    guide = tool_guide(platform="claude")
    waits = guide.text.split("These wait for my approval", 1)[1].split("##", 1)[0]
    assert "- `everything::echo` {message: string}: Echoes back the input string" in waits
    assert "- `time::convert_time` {" in waits
    assert len(mcp_lines(guide.text)) == 13 + 2
    assert "off::" not in guide.text
    # No worked example for a tool Conductor did not write: every example is still one of its own.
    assert {block.target for block in parse_blocks(guide.text)} == {"conductor"}


def test_the_conversations_policies_decide_what_is_listed_and_how():
    link = ConversationLinkFactory()
    everything_server()
    time_server()
    ToolPolicy.objects.create(target="everything", tool="echo", policy=Policy.ALLOW)
    ToolPolicy.objects.create(target="everything", tool="get-env", policy=Policy.DENY)
    ToolPolicy.objects.create(target="time", tool="", policy=Policy.DENY, conversation=link.conversation)
    facts = tool_guide_facts(platform="claude", conversation=link.conversation, client_pk=link.client_id)
    listed = {tool.header: tool.policy for tool in facts.tools if tool.spec.target != "conductor"}
    assert listed["everything::echo"] == Policy.ALLOW and listed["everything::get-sum"] == Policy.APPROVE
    assert "everything::get-env" not in listed and not any(header.startswith("time::") for header in listed)
    # Another conversation still sees the time server.
    assert any(tool.header.startswith("time::") for tool in tool_guide_facts(platform="claude").tools)
    assert len([tool for tool in facts.tools if tool.spec.target == "conductor"]) == len(list(tools))


def large_server(count):
    """An enabled server whose ``count`` listed tools have long names, descriptions and schemas; never started."""
    from mcp_servers.models import McpServer, McpTool

    server = McpServer.objects.create(name="large", command="/bin/false", enabled=True)
    schema = {"type": "object", "properties": {f"p{n}": {"type": "string"} for n in range(40)}}
    McpTool.objects.bulk_create(
        McpTool(server=server, name=f"tool_{n:03d}_" + "x" * 100, description="does a thing " * 40,
                input_schema=schema, position=n)
        for n in range(count)
    )
    return server


def test_a_server_with_many_tools_gets_a_bounded_guide_said_cut_on_its_page_and_the_guides(admin_client):
    server = large_server(300)
    guide = tool_guide(platform="claude")
    assert len(guide.text.encode()) <= MAX_GUIDE_BYTES and guide.is_cut
    described = len(mcp_lines(guide.text))
    assert described + len(guide.named_only) == 300 and f"… and {len(guide.named_only)} more tools" in guide.text
    # The process keeps the specs it checked: the next guide does not check 300 schemas again.
    started = time.perf_counter()
    assert tool_guide(platform="claude").text == guide.text
    assert time.perf_counter() - started < 1

    page = admin_client.get(f"/admin/mcp_servers/mcpserver/{server.pk}/change/").content.decode()
    assert (f"the guide is cut: {described} of its 300 callable tools are described, "
            f"{len(guide.named_only)} named only") in page
    page = admin_client.get("/admin/conversations/conversation/tool-guide/?platform=claude").content.decode()
    assert "The guide is cut:" in page and f"{len(guide.named_only)} of its tools are named only" in page


def test_a_server_whose_tools_fit_says_so_on_its_page(admin_client):
    server = large_server(3)
    assert not tool_guide(platform="claude").is_cut
    page = admin_client.get(f"/admin/mcp_servers/mcpserver/{server.pk}/change/").content.decode()
    assert "every callable tool described (3)" in page


def test_a_listing_checks_each_schema_once_and_no_process_checks_it_again(monkeypatch):
    """The first guide after a start checked a thousand schemas (seconds); the listing stores the verdicts."""
    from jsonschema import Draft202012Validator

    from mcp_servers import selectors, services
    from mcp_servers.models import McpServer
    from tools.mcp_client import McpToolListing
    from tools.registry import UnknownTool

    listed = [
        {"name": "good", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}},
        {"name": "broken", "inputSchema": {"type": "object", "properties": {"q": {"type": "no-such-type"}}}},
    ]
    monkeypatch.setattr(services, "mcp_tools_list", lambda *args, **kwargs: McpToolListing(tools=listed))
    server = McpServer.objects.create(name="checked", command="/bin/false", enabled=True)
    assert services.mcp_server_refresh(server=server)
    problems = dict(server.tools.values_list("name", "schema_problem"))
    assert problems["good"] == "" and "is not valid under any of the given schemas" in problems["broken"]

    checks = []
    original = Draft202012Validator.check_schema
    monkeypatch.setattr(Draft202012Validator, "check_schema",
                        classmethod(lambda cls, schema, **kw: checks.append(schema) or original.__func__(cls, schema)))
    selectors._spec_built.cache_clear()  # a process just started
    assert [spec.name for spec in selectors.mcp_tool_specs()] == ["good"]
    with pytest.raises(UnknownTool, match="'broken' of MCP server 'checked' has an input schema that is not valid"):
        selectors.mcp_tool_spec("checked", "broken")
    assert checks == []
    assert selectors.mcp_tool_spec("checked", "good").params_error({"q": 1}) == "params.q: 1 is not of type 'string'"

    # A tool listed before the verdicts were stored is checked when it is used, as before.
    server.tools.filter(name="good").update(schema_problem=None)
    selectors._spec_built.cache_clear()
    assert selectors.mcp_tool_spec("checked", "good").name == "good"
    assert len(checks) == 1
