"""Approving a tool that runs code needs ``automation.approve_code``, on every path an approve takes in the admin.

Staff with only the task admin's change permission may approve other tools
(``files.write``) but not ``shell.run`` or an MCP tool not marked read-only:
not from the list's action on checked rows, nor on "Select all N", nor from
the story. Each refusal leaves the task blocked and says why.
"""

import re

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission

from automation.permissions import APPROVE_CODE_PERMISSION
from automation.models import AutomationTask, TaskStatus
from automation.services.tasks import task_create
from ingest.frames import parse_final_message
from ingest.kinds import INSTRUCTION_EXECUTE
from ingest.services.messages import message_ingest
from mcp_servers.models import McpServer
from tests.factories import PluginClientFactory, make_staff

pytestmark = pytest.mark.django_db

S = TaskStatus
TASKS = "/admin/automation/automationtask/"
CONVERSATIONS = "/admin/conversations/conversation/"
REFUSED = "runs code: approving it needs the permission to approve tools that run code (automation.approve_code)"
BASE = ("automation.view_automationtask", "automation.change_automationtask", "conversations.view_conversation")


def held(tool, params, *, target="conductor"):
    task, _ = task_create(
        kind=INSTRUCTION_EXECUTE, payload={"tool": tool, "target": target, "params": params}, actor="test",
        status=S.BLOCKED,
    )
    return task


@pytest.fixture
def shell():
    return held("shell.run", {"argv": ["cat", "/etc/hostname"]})


@pytest.fixture
def write():
    return held("files.write", {"path": "notes.md", "content": "x"})


@pytest.fixture
def operator_client(client):
    client.force_login(make_staff("operator", *BASE, password=None))
    return client


@pytest.fixture
def code_client(client):
    client.force_login(make_staff("coder", *BASE, APPROVE_CODE_PERMISSION, password=None))
    return client


def status(task):
    return AutomationTask.objects.get(pk=task.pk).status


def notes(response):
    return [str(m) for m in response.context["messages"]]


def approve_checked(client, *tasks):
    return client.post(
        TASKS, {"action": "approve", ACTION_CHECKBOX_NAME: [t.pk for t in tasks], "post": "yes"}, follow=True
    )


def approve_across(client, query=""):
    data = {"action": "approve", "select_across": "1", ACTION_CHECKBOX_NAME: ["any"]}
    page = client.post(f"{TASKS}?{query}", data).content.decode()
    through = re.search(r'name="through" value="(\d+)"', page).group(1)
    return client.post(f"{TASKS}?{query}", {**data, "post": "yes", "through": through}, follow=True)


def test_the_permission_exists_and_superusers_have_it(django_user_model):
    assert Permission.objects.filter(content_type__app_label="automation", codename="approve_code").exists()
    assert django_user_model.objects.create_superuser("root", password=None).has_perm(APPROVE_CODE_PERMISSION)


def test_the_action_on_checked_rows_refuses_shell_run_without_the_permission(operator_client, shell, write):
    response = approve_checked(operator_client, shell, write)
    assert (status(shell), status(write)) == (S.BLOCKED, S.PENDING)
    assert f"Approved 1 task(s): {write.pk}" in notes(response)
    assert f"Refused 1 task(s), left as they were (shell.run {REFUSED}: {shell.pk})" in notes(response)


def test_the_action_on_every_matching_task_refuses_shell_run_without_the_permission(operator_client, shell, write):
    response = approve_across(operator_client)
    assert (status(shell), status(write)) == (S.BLOCKED, S.PENDING)
    assert f"Refused 1 task(s), left as they were (shell.run {REFUSED}: {shell.pk})" in notes(response)
    assert "Approved 1 of the tasks matching the list." in notes(response)


def test_the_story_refuses_shell_run_without_the_permission(operator_client, client):
    frame = {"type": "browser.final_message", "platform": "claude", "conversation_id": "c1", "message_id": "m1",
             "text": '```baa\nshell.run\n{"argv": ["env"]}\n```'}
    result = message_ingest(message=parse_final_message(frame), client=PluginClientFactory(client_id="laptop"))
    shell = AutomationTask.objects.get(kind=INSTRUCTION_EXECUTE, message_id=result.message_id)
    assert shell.status == S.BLOCKED
    url = f"{CONVERSATIONS}{shell.conversation_id}/story/decide/"
    response = operator_client.post(url, {"task_id": shell.pk, "decision": "approve"}, follow=True)
    assert status(shell) == S.BLOCKED
    assert f"Not approved: shell.run {REFUSED}." in notes(response)

    client.force_login(make_staff("coder", *BASE, APPROVE_CODE_PERMISSION, password=None))
    client.post(url, {"task_id": shell.pk, "decision": "approve"})
    assert status(shell) == S.PENDING


def test_the_story_offers_approve_for_code_only_to_who_may(operator_client, client):
    frame = {"type": "browser.final_message", "platform": "claude", "conversation_id": "c1", "message_id": "m1",
             "text": '```baa\nshell.run\n{"argv": ["env"]}\n```'}
    result = message_ingest(message=parse_final_message(frame), client=PluginClientFactory(client_id="laptop"))
    shell = AutomationTask.objects.get(kind=INSTRUCTION_EXECUTE, message_id=result.message_id)
    url = f"{CONVERSATIONS}{shell.conversation_id}/story/"
    page = operator_client.get(url).content.decode()
    assert 'value="approve"' not in page and 'value="reject"' in page
    assert "Approving it needs the permission to approve tools that run code; you may reject it." in page
    assert "held-runs-code" in page
    client.force_login(make_staff("coder", *BASE, APPROVE_CODE_PERMISSION, password=None))
    page = client.get(url).content.decode()
    assert 'value="approve"' in page and "you may reject it" not in page


def test_the_approval_page_says_which_calls_run_code(code_client, shell, write):
    page = code_client.post(
        TASKS, {"action": "approve", ACTION_CHECKBOX_NAME: [shell.pk, write.pk], "index": 0}
    ).content.decode()
    assert page.count('class="held-runs-code"') == 1


@pytest.mark.parametrize("approve", [approve_checked, approve_across])
def test_with_the_permission_shell_run_is_approved(code_client, shell, approve):
    approve(code_client, shell) if approve is approve_checked else approve(code_client)
    assert status(shell) == S.PENDING


@pytest.mark.parametrize("annotations,needs_permission", [
    ({}, True),
    ({"readOnlyHint": False}, True),
    ({"destructiveHint": False, "idempotentHint": True}, True),
    ({"readOnlyHint": True}, False),
])
def test_an_mcp_tool_needs_the_permission_unless_marked_read_only(operator_client, annotations, needs_permission):
    server = McpServer.objects.create(name="github", command="github-mcp")
    server.tools.create(name="create_issue", input_schema={"type": "object"}, annotations=annotations)
    task = held("create_issue", {}, target="github")
    response = approve_checked(operator_client, task)
    assert status(task) == (S.BLOCKED if needs_permission else S.PENDING)
    if needs_permission:
        assert f"Refused 1 task(s), left as they were (github::create_issue {REFUSED}: {task.pk})" in notes(response)


def test_a_tool_of_a_disabled_server_needs_the_permission(operator_client):
    McpServer.objects.create(name="github", command="github-mcp", enabled=False)
    task = held("create_issue", {}, target="github")
    approve_checked(operator_client, task)
    assert status(task) == S.BLOCKED
