"""The operator's story, over a real socket against a server started as ``make run`` starts one.

An operator adds server-everything in the admin (the test client), lists its
tools, and a chat block for it waits for approval; approved in the admin, it
runs in the cluster's dispatcher and its ``baa-result`` comes back to the
plugin. Then the operator allows ``echo``, and ``everything::echo
{"message": "hi"}`` comes back at once.
"""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

from automation.models import AutomationTask, TaskStatus
from conductor_site.simulator import SimulatedPlugin
from pipelines.results_text import parse_results
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.mcp_servers.conftest import EVERYTHING
from tests.mcp_servers.test_admin import POLICIES, TASKS, add_server
from tests.server import running_server, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

FAST = {"CONDUCTOR_TICK_SECONDS": "0.5", "CONDUCTOR_OUTBOUND_JITTER_MAX_MS": "0"}


def final_message(text, message_id):
    return {"type": "browser.final_message", "id": f"f-{message_id}", "platform": "claude",
            "conversation_id": "conv-1", "organization_id": "org-1", "message_id": message_id, "text": text,
            "page_url": "https://claude.ai/chat/conv-1"}


def test_a_block_for_server_everything_is_approved_in_the_admin_and_its_result_comes_back(
    admin_client, tmp_path, workspace
):
    PluginClientFactory(client_id="laptop")
    add_server(admin_client, name="everything", command=str(EVERYTHING), args='["stdio"]')
    with running_server(tmp_path, command="serve+cluster", CONDUCTOR_WORKSPACE=str(workspace), **FAST) as server:
        with SimulatedPlugin(url=server.ws_url, client_id="laptop", token=TEST_TOKEN) as browser:
            ack = browser.send_final_message(
                final_message('```baa\neverything::get-sum\n{"a": 2, "b": 3}\n```', "m1")
            )
            assert ack["instructions"] == 1
            held = AutomationTask.objects.get(kind="instruction.execute", message__remote_message_id="m1")
            assert held.status == TaskStatus.BLOCKED

            # The approval page shows the server, the tool, its description and the exact arguments.
            page = admin_client.post(TASKS, {"action": "approve", ACTION_CHECKBOX_NAME: [held.pk], "index": 0})
            shown = page.content.decode()
            assert "MCP server" in shown and "everything::get-sum" in shown
            assert "Returns the sum of two numbers" in shown and "&quot;a&quot;: 2" in shown
            admin_client.post(TASKS, {"action": "approve", ACTION_CHECKBOX_NAME: [held.pk], "post": "yes"})

            delivery = browser.next_delivery(timeout=60)
            [result] = parse_results(delivery["text"])
            assert result["tool"] == "everything::get-sum" and result["ok"] is True
            assert result["result"]["content"][0]["text"] == "The sum of 2 and 3 is 5."
            browser.answer(delivery, status=200)

            admin_client.post(f"{POLICIES}add/", {"tool": "everything::echo", "policy": "allow", "note": ""})
            browser.send_final_message(final_message('```baa\neverything::echo\n{"message": "hi"}\n```', "m2"))
            delivery = browser.next_delivery(timeout=60)
            [result] = parse_results(delivery["text"])
            assert result == {"block": 1, "tool": "everything::echo", "ok": True,
                              "result": {"content": [{"type": "text", "text": "Echo: hi"}]}}
            browser.answer(delivery, status=200)
            wait_for(lambda: not AutomationTask.objects.exclude(status=TaskStatus.SUCCEEDED).exists(),
                     "every task to succeed")
