"""The tool guide lists each MCP tool callable in the conversation (SPEC §5.5)."""

import pytest

from ingest.models import ToolPolicy
from ingest.blocks import parse_blocks
from ingest.selectors import tool_guide, tool_guide_facts
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
