"""MCP servers in the admin: add, refresh, see tools and errors; secrets never shown or logged again."""

import logging

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

from automation.models import AutomationTask
from ingest.frames import parse_final_message
from ingest.models import ToolPolicy
from ingest.services.messages import message_ingest
from mcp_servers.models import McpServer
from tests.factories import PluginClientFactory
from tests.mcp_servers.conftest import EVERYTHING, HTTP_TOKEN, OWN_SERVER

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

SERVERS = "/admin/mcp_servers/mcpserver/"
POLICIES = "/admin/ingest/toolpolicy/"
TASKS = "/admin/automation/automationtask/"
ENV_SECRET = "env-sekrit-81f3a0"


def add_server(admin_client, **fields):
    form = {"transport": "stdio", "args": "[]", "cwd": "", "url": "", "enabled": "on", "timeout_seconds": "30",
            "env_text": "", "headers_text": "", "tools-TOTAL_FORMS": "0", "tools-INITIAL_FORMS": "0",
            **fields}
    return admin_client.post(f"{SERVERS}add/", form, follow=True)


def test_an_operator_adds_server_everything_and_its_tools_are_listed_and_shown(admin_client):
    response = add_server(admin_client, name="everything", command=str(EVERYTHING), args='["stdio"]')
    assert response.status_code == 200
    messages = [str(m) for m in response.context["messages"]]
    assert any("everything: 13 tools listed." in m for m in messages), messages
    server = McpServer.objects.get(name="everything")
    page = admin_client.get(f"{SERVERS}{server.pk}/change/").content.decode()
    assert "Echoes back the input string" in page and "idempotentHint: True" in page
    assert "trigger-long-running-operation" in page

    response = admin_client.post(SERVERS, {"action": "refresh_tools", ACTION_CHECKBOX_NAME: [server.pk]},
                                 follow=True)
    assert any("everything: 13 tools listed." in str(m) for m in response.context["messages"])


def test_a_server_that_fails_to_start_says_why_on_its_page(admin_client):
    response = add_server(admin_client, name="broken", command="/bin/sh",
                          args='["-c", "echo missing API key >&2; exit 1"]')
    assert any("listing its tools failed" in str(m) for m in response.context["messages"])
    server = McpServer.objects.get(name="broken")
    assert "missing API key" in admin_client.get(f"{SERVERS}{server.pk}/change/").content.decode()


def test_the_form_refuses_a_timeout_over_the_maximum_and_conductor_as_a_name(admin_client, settings):
    settings.CONDUCTOR_MCP_MAX_TIMEOUT_SECONDS = 60
    response = add_server(admin_client, name="conductor", command="/bin/true", timeout_seconds="61")
    form = response.context["adminform"].form
    assert "at most 60 s" in str(form.errors["timeout_seconds"])
    assert "is Conductor's own target" in form.errors["name"][0]
    assert not McpServer.objects.exists()


def test_a_policy_for_a_whole_server_or_one_tool_is_chosen_in_the_admin(admin_client):
    add_server(admin_client, name="own", command=__import__("sys").executable, args=f'["{OWN_SERVER}", "stdio"]')
    for choice in ("own::*", "own::add"):
        response = admin_client.post(f"{POLICIES}add/", {"tool": choice, "policy": "allow", "note": ""},
                                     follow=True)
        assert response.status_code == 200
    assert sorted(ToolPolicy.objects.values_list("target", "tool", "policy")) == [
        ("own", "", "allow"), ("own", "add", "allow"),
    ]
    listing = admin_client.get(POLICIES).content.decode()
    assert "own::*: allow (everywhere)" in listing


def test_secrets_never_appear_in_the_admin_logs_payloads_or_metrics(admin_client, caplog, own_http_url):
    caplog.set_level(logging.DEBUG)
    add_server(admin_client, name="own", command=__import__("sys").executable, args=f'["{OWN_SERVER}", "stdio"]',
               env_text=f"API_TOKEN={ENV_SECRET}\nPLAIN=1")
    add_server(admin_client, name="web", transport="http", url=own_http_url, command="",
               headers_text=f"Authorization: Bearer {HTTP_TOKEN}")
    web = McpServer.objects.get(name="web")
    assert web.tools.exists(), web.last_error  # the token worked
    own = McpServer.objects.get(name="own")
    assert own.env_names == ["API_TOKEN", "PLAIN"] and ENV_SECRET not in own.secret_env

    # An edit that leaves the secrets blank keeps them.
    admin_client.post(f"{SERVERS}{own.pk}/change/", {
        "name": "own", "transport": "stdio", "command": own.command, "args": f'["{OWN_SERVER}", "stdio"]',
        "cwd": "", "url": "", "enabled": "on", "timeout_seconds": "30", "env_text": "", "headers_text": "",
        "tools-TOTAL_FORMS": "0", "tools-INITIAL_FORMS": str(own.tools.count()),
    })
    own.refresh_from_db()
    assert own.env_names == ["API_TOKEN", "PLAIN"]

    ToolPolicy.objects.create(target="web", tool="", policy="allow")
    client = PluginClientFactory(client_id="laptop")
    frame = {"type": "browser.final_message", "platform": "claude", "conversation_id": "c1", "message_id": "m1",
             "text": '```baa\nweb::add\n{"a": 1, "b": 2}\n```\n```baa\nown::add\n{"a": 1, "b": 2}\n```'}
    message_ingest(message=parse_final_message(frame), client=client)

    pages = [
        admin_client.get(url).content.decode()
        for url in (SERVERS, f"{SERVERS}{own.pk}/change/", f"{SERVERS}{web.pk}/change/", TASKS,
                    *(f"{TASKS}{task.pk}/change/" for task in AutomationTask.objects.all()),
                    "/admin/admin/logentry/", "/metrics")
    ]
    payloads = list(AutomationTask.objects.values_list("payload_json", flat=True))
    for secret in (ENV_SECRET, HTTP_TOKEN):
        assert not any(secret in page for page in pages)
        assert not any(secret in payload for payload in payloads)
        assert secret not in caplog.text
