"""Blocks for MCP targets at ingest (SPEC §5.4): rejected precisely, or held for approval, or allowed."""

import json

import pytest

from automation.models import AutomationTask, TaskStatus
from ingest.frames import parse_final_message
from ingest.models import Instruction, ToolPolicy
from ingest.services.messages import message_ingest
from tests.factories import PluginClientFactory
from tests.mcp_servers.conftest import everything_server
from tools.registry import Policy

pytestmark = pytest.mark.django_db


@pytest.fixture
def everything():
    return everything_server()


def ingest(*blocks, message_id="m1"):
    client = PluginClientFactory(client_id=f"laptop-{message_id}")
    text = "\n".join(f"```baa\n{header}\n{json.dumps(params)}\n```" for header, params in blocks)
    frame = {"type": "browser.final_message", "platform": "claude", "conversation_id": "c1",
             "message_id": message_id, "text": text}
    message_ingest(message=parse_final_message(frame), client=client)
    return list(Instruction.objects.filter(message__remote_message_id=message_id).order_by("block_index"))


def test_blocks_naming_what_is_not_there_are_rejected_with_the_reason(everything):
    everything_server("sleepy", enabled=False, refresh=False)
    rows = ingest(
        ("github::create_issue", {}),
        ("sleepy::echo", {"message": "hi"}),
        ("everything::Echo", {"message": "hi"}),
        ("everything::echo", {"message": 5}),
        ("everything::echo", {}),
        ("everything::get-sum", {"a": 1, "b": "2"}),
    )
    assert all(row.status == Instruction.Status.REJECTED for row in rows)
    errors = [row.error for row in rows]
    assert errors[0].startswith("unknown target 'github'; known: conductor, everything")
    assert errors[1] == "MCP server 'sleepy' is disabled"
    assert errors[2].startswith("unknown tool 'Echo' for MCP server 'everything'; known: echo, ")
    assert errors[3] == "invalid params for echo: params.message: 5 is not of type 'string'"
    assert errors[4] == "invalid params for echo: params: 'message' is a required property"
    assert errors[5] == "invalid params for get-sum: params.b: '2' is not of type 'number'"
    assert not AutomationTask.objects.filter(kind="instruction.execute").exists()


def test_a_bad_header_for_conductor_is_still_rejected():
    [row] = ingest(("Echo", {}))
    assert row.status == Instruction.Status.REJECTED and "bad header" in row.error


def test_mcp_tools_wait_for_approval_by_default_even_read_only_ones(everything):
    assert everything.tools.get(name="echo").annotations["readOnlyHint"] is True
    [row] = ingest(("everything::echo", {"message": "hi"}))
    task = AutomationTask.objects.get(instruction=row)
    assert task.status == TaskStatus.BLOCKED
    assert {key: task.payload[key] for key in ("target", "tool", "params")} == {
        "target": "everything", "tool": "echo", "params": {"message": "hi"},
    }


@pytest.mark.parametrize(("policies", "expected"), [
    ([("", Policy.ALLOW)], [TaskStatus.PENDING, TaskStatus.PENDING]),
    ([("echo", Policy.ALLOW)], [TaskStatus.PENDING, TaskStatus.BLOCKED]),
    ([("", Policy.ALLOW), ("get-sum", Policy.APPROVE)], [TaskStatus.PENDING, TaskStatus.BLOCKED]),
    ([("", Policy.DENY), ("echo", Policy.ALLOW)], [TaskStatus.PENDING, None]),
    ([("get-sum", Policy.DENY)], [TaskStatus.BLOCKED, None]),
])
def test_an_operator_allows_or_denies_a_whole_server_or_one_tool(everything, policies, expected):
    for tool, policy in policies:
        ToolPolicy.objects.create(target="everything", tool=tool, policy=policy)
    rows = ingest(("everything::echo", {"message": "hi"}), ("everything::get-sum", {"a": 1, "b": 2}))
    statuses = [
        AutomationTask.objects.get(instruction=row).status if row.status != Instruction.Status.REJECTED else None
        for row in rows
    ]
    assert statuses == expected
    if expected[1] is None:
        assert rows[1].error == "everything::get-sum is denied by policy"


def test_a_policy_for_a_conductor_tool_does_not_reach_a_server_tool_of_the_same_name(everything):
    ToolPolicy.objects.create(tool="echo", policy=Policy.DENY)
    [row] = ingest(("everything::echo", {"message": "hi"}))
    assert AutomationTask.objects.get(instruction=row).status == TaskStatus.BLOCKED
