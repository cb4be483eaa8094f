"""An operator adds an MCP server in the admin, lists its tools, allows one, and a chat calls it: in Chromium.

The server is ``@modelcontextprotocol/server-everything`` (npm, installed by
``make install``); Conductor runs as ``make run`` starts it (daphne and the
django-q2 cluster), a simulated plugin stands for the chat.
"""

import pytest
from django.contrib.auth.models import User
from django.db import connections

from automation.models import TaskStatus
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.models import ToolPolicy
from conductor_site.simulator import SimulatedPlugin
from mcp_servers.models import McpServer
from pipelines.results_text import parse_results
from tests.browser import CHROMIUM_ARGS, require_chromium
from tests.console.test_admin_browser import PASSWORD, collect_static, final_message, log_in, task_of
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.mcp_servers.conftest import EVERYTHING
from tests.server import running_server, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

WAIT = 90


def test_an_operator_adds_server_everything_allows_echo_and_a_chat_block_gets_its_result(tmp_path, workspace, monkeypatch):
    chromium = require_chromium()
    assert EVERYTHING.exists(), "run make install: tests/mcp_servers needs npm ci"
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_superuser("operator", password=PASSWORD)
    PluginClientFactory(client_id="laptop")
    served = tmp_path / "served"
    served.mkdir()
    collect_static(served)
    env = {"CONDUCTOR_WORKSPACE": str(workspace), "CONDUCTOR_TICK_SECONDS": "0.5",
           "CONDUCTOR_OUTBOUND_JITTER_MAX_MS": "0"}
    with (
        running_server(served, command="serve+cluster", **env) as server,
        SimulatedPlugin(url=server.ws_url, client_id="laptop", token=TEST_TOKEN) as plugin,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(60_000)
        log_in(page, server.base_url, "/admin/mcp_servers/mcpserver/add/")

        # 1. The server, as a command over stdio; saving it lists its tools.
        page.fill("#id_name", "everything")
        page.select_option("#id_transport", "stdio")
        page.fill("#id_command", str(EVERYTHING))
        page.fill("#id_args", '["stdio"]')
        page.click("input[name=_save]")
        expect(page.locator("ul.messagelist")).to_contain_text("tools listed")
        server_row = McpServer.objects.get(name="everything")
        assert server_row.tools.filter(name="echo").exists(), server_row.last_error

        # 2. Refresh: the list action lists them again.
        page.check(f"input[name=_selected_action][value='{server_row.pk}']")
        page.select_option("select[name=action]", "refresh_tools")
        page.click("button[name=index]")
        expect(page.locator("ul.messagelist")).to_contain_text("tools listed")

        # 3. Allow everything::echo (an MCP tool waits for approval by default).
        page.goto(f"{server.base_url}/admin/ingest/toolpolicy/add/")
        page.select_option("#id_tool", "everything::echo")
        page.select_option("#id_policy", "allow")
        page.click("input[name=_save]")
        expect(page.locator("ul.messagelist")).to_contain_text("was added successfully")
        policy = ToolPolicy.objects.get()
        assert (policy.target, policy.tool, policy.policy) == ("everything", "echo", "allow")

        # 4. A chat block calls it; its result comes back to the chat.
        ack = plugin.send_final_message(final_message('```baa\neverything::echo\n{"message": "hi"}\n```', "m1"))
        delivery = plugin.next_delivery(timeout=WAIT)
        [result] = parse_results(delivery["text"])
        assert (result["tool"], result["ok"]) == ("everything::echo", True), result
        assert "hi" in str(result["result"])
        plugin.answer(delivery)
        message_pk = int(ack["message_id"])
        wait_for(lambda: task_of(INSTRUCTION_DELIVER, message_pk).status == TaskStatus.SUCCEEDED,
                 "the delivery to succeed")
        executed = task_of(INSTRUCTION_EXECUTE, message_pk)
        page.goto(f"{server.base_url}/admin/automation/automationtask/{executed.pk}/change/")
        expect(page.locator("body")).to_contain_text("everything")
        expect(page.locator("body")).to_contain_text("hi")
        browser.close()
        connections.close_all()
