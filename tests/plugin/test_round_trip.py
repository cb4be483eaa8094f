"""End to end: a mock chat page's answer goes through the reference plugin to a running Conductor and back.

Real processes: ``manage.py serve`` (daphne and the django-q2 cluster) on
the test databases, Debian's Chromium with ``plugin/`` loaded, mock pages at
the real origins (``chat_apps.py``). The plugin is paired through its
options page with a client made as ``create_plugin_client`` makes one.
"""

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import Client

from automation.models import AutomationTask, TaskStatus
from conversations.models import Message
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.models import PluginClient
from ingest.services.clients import plugin_client_revoke
from tests.browser import require_chromium
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.plugin.chat_apps import chat_app
from tests.plugin.extension import plugin_browser
from tests.server import running_server, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

WAIT = 60
ASK = "```baa\necho\n{\"step\": %d}\n```\n"
ASK_HTML = '<pre><code class="language-baa">echo\n{"step": %d}\n</code></pre>'


@pytest.fixture
def chromium(monkeypatch):
    # Playwright's sync API keeps an event loop in this thread; the ORM calls
    # between its steps are plain synchronous ones.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    return require_chromium()


@pytest.fixture
def server_env(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return {
        "CONDUCTOR_WORKSPACE": str(workspace), "CONDUCTOR_TICK_SECONDS": "0.5",
        "CONDUCTOR_OUTBOUND_JITTER_MAX_MS": "0", "CONDUCTOR_RETRY_JITTER_MAX_MS": "0",
        # ChatGPT's own order is the composer only; the mock accepts the page-made request.
        "CONDUCTOR_DELIVERY_METHODS": "http,dom",
    }


def revoke(client):
    try:
        plugin_client_revoke(client=client, actor="operator")
    finally:
        # This thread's connection would keep PostgreSQL from dropping the test database.
        connections.close_all()


def assistant_messages(app):
    return Message.objects.filter(conversation__platform=app.name, role=Message.Role.ASSISTANT).order_by("pk")


def ask(browser, page, app, step, **shape):
    app.answer_next(ASK % step, **shape)
    page.evaluate("([html]) => mockChat.ask('Go on', {html})", [ASK_HTML % step])


@pytest.mark.parametrize("platform,shape,every_answer", [
    pytest.param("claude", {}, {}, id="claude"), pytest.param("chatgpt", {}, {}, id="chatgpt"), pytest.param("gemini", {}, {}, id="gemini"),
    # The answer handed off by the first response and streamed from /resume (PLATFORMS.md "Found since").
    pytest.param("chatgpt", {"handoff": True}, {}, id="chatgpt-handoff"),
    # Every stream, the reply's too, ends as Gemini's do in 2026: a title frame and a 1096 error part after
    # the finished candidate, the context token as sparse key "26" (PLATFORMS.md "what a finished answer is, in 2026").
    pytest.param("gemini", {}, {"trailer_1096": True}, id="gemini-1096"),
])
def test_an_answer_with_a_block_round_trips_through_conductor(chromium, tmp_path, server_env, platform, shape, every_answer):
    PluginClientFactory(client_id="laptop")
    app = chat_app(platform, every_answer=every_answer)
    with (
        running_server(tmp_path, command="serve+cluster", **server_env) as server,
        plugin_browser(chromium, tmp_path / "profile") as browser,
    ):
        app.install(browser.context)
        browser.pair(server.base_url, "laptop", TEST_TOKEN)
        browser.wait_for_state("connected")
        page = browser.open_chat(app)
        ask(browser, page, app, 1, **shape)

        message = browser.wait_until(lambda: assistant_messages(app).first(), "the assistant message in Conductor", WAIT)
        assert message.capture == Message.Capture.NETWORK
        assert message.text == ASK % 1
        assert message.conversation.remote_id == app.conversation
        assert message.remote_message_id

        [posted] = browser.wait_until(app.deliveries, "the delivery POST at the mock app", WAIT)
        assert app.conversation_of(posted) == app.conversation
        assert app.parent_of(posted) == message.remote_message_id
        text = app.delivered_text(posted)
        result = json.loads(re.search(r"```baa-result\n(.*?)\n```", text, re.S).group(1))
        assert result["ok"] is True and result["tool"] == "echo" and result["result"] == {"step": 1}

        deliver = wait_for(
            lambda: AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER, status=TaskStatus.SUCCEEDED).first(),
            "the delivery task to succeed", WAIT,
        )
        assert deliver.attempt_count == 1
        # The app's reply to the delivery is itself a final message, read from its stream.
        browser.wait_until(lambda: assistant_messages(app).count() == 2, "the reply to the results", WAIT)
        # The block ran once: the page was not read as well.
        assert AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE).count() == 1
        assert assistant_messages(app).filter(capture=Message.Capture.DOM).count() == 0
        client = PluginClient.objects.get(client_id="laptop")
        assert client.capabilities == ["proxy_delivery", "dom_delivery"]
        # The sites described in plugin/sites/ are named too, each a platform the server knows.
        assert {"claude", "chatgpt", "gemini", "perplexity", "deepseek", "copilot"} <= set(client.adapters)
        assert browser.badge() == "on"
        assert "connected" in browser.popup_text()


@pytest.mark.parametrize("platform", ["claude", "chatgpt", "gemini"])
def test_a_delivery_the_app_refuses_over_http_arrives_through_the_composer_in_the_same_attempt(
    chromium, tmp_path, server_env, platform,
):
    PluginClientFactory(client_id="laptop")
    app = chat_app(platform)
    with (
        running_server(tmp_path, command="serve+cluster", **server_env) as server,
        plugin_browser(chromium, tmp_path / "profile") as browser,
    ):
        app.install(browser.context)
        browser.pair(server.base_url, "laptop", TEST_TOKEN)
        browser.wait_for_state("connected")
        page = browser.open_chat(app)
        app.answer_next(ASK % 1)
        # The delivery's POST is refused as automated, as ChatGPT refuses one without its sentinel tokens.
        app.answer_next("<html><body>Unusual activity has been detected from your device.</body></html>", status=403)
        page.evaluate("([html]) => mockChat.ask('Go on', {html})", [ASK_HTML % 1])

        # Waiting in the browser: the refused POST and the composer are served by Playwright's routes meanwhile.
        deliver = browser.wait_until(
            lambda: AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER, status=TaskStatus.SUCCEEDED).first(),
            "the delivery task to succeed", WAIT,
        )
        [sent] = page.evaluate("mockChat.sent()")
        result = json.loads(re.search(r"```baa-result\n(.*?)\n```", sent, re.S).group(1))
        assert result["ok"] is True and result["result"] == {"step": 1}
        assert page.evaluate("mockChat.userTurnCount()") == 1  # the results, once (the mock shows no turn for an ask)
        # The one refused POST; the composer sent the same text, and nothing was posted again.
        [refused] = app.deliveries()
        assert app.delivered_text(refused) == sent

        assert deliver.attempt_count == 1
        steps = [(e.action, e.detail.get("method"), e.detail.get("error_code"))
                 for e in deliver.events.filter(action__in=["deliver", "fallback"])]
        assert steps == [("deliver", "http", None), ("fallback", "http", "blocked"), ("deliver", "dom", None)]
        [stored] = Message.objects.filter(source=Message.Source.CONDUCTOR)
        assert stored.text == sent
        client = PluginClient.objects.get(client_id="laptop")
        assert client.capabilities == ["proxy_delivery", "dom_delivery"]

        operator = Client()
        operator.force_login(get_user_model().objects.create_superuser("operator", password="x"))
        listed = operator.get("/admin/automation/automationtask/?delivered_by=dom").content.decode()
        assert deliver.pk in listed
        assert deliver.pk not in operator.get("/admin/automation/automationtask/?delivered_by=http").content.decode()


def test_a_message_sent_while_the_server_is_down_arrives_once_after_it_restarts(chromium, tmp_path, server_env):
    PluginClientFactory(client_id="laptop")
    app = chat_app("claude")
    with plugin_browser(chromium, tmp_path / "profile") as browser:
        app.install(browser.context)
        with running_server(tmp_path, **server_env) as server:
            port = server.port
            browser.pair(server.base_url, "laptop", TEST_TOKEN)
            browser.wait_for_state("connected")
            page = browser.open_chat(app)
            server.kill()
            browser.wait_for_state("connecting")
            ask(browser, page, app, 7)
            browser.wait_until(lambda: browser.storage().get("outbox", {}).get("frames"), "the message in the outbox")
        assert not Message.objects.exists()

        with running_server(tmp_path, port=port, **server_env):
            browser.wait_for_state("connected", timeout=WAIT)
            browser.wait_until(lambda: not browser.storage()["outbox"]["frames"], "the ack", WAIT)
            assert [message.text for message in assistant_messages(app)] == [ASK % 7]


def test_a_revoked_token_shows_token_refused_and_no_reconnect_storm(chromium, tmp_path, server_env):
    client = PluginClientFactory(client_id="laptop")
    with (
        running_server(tmp_path, **server_env) as server,
        plugin_browser(chromium, tmp_path / "profile") as browser,
    ):
        browser.pair(server.base_url, "laptop", TEST_TOKEN)
        browser.wait_for_state("connected")
        # Outside Playwright's thread: the revoke tells the socket through the channel layer (async_to_sync).
        with ThreadPoolExecutor(1) as pool:
            pool.submit(revoke, client).result()
        status = browser.wait_for_state("refused")
        assert "token refused" in status["detail"]
        attempts = status.get("attempts")
        browser.pause(6)
        assert browser.status().get("attempts") == attempts
        # The revoke closed the socket (4403); the plugin did not come back to be refused.
        assert server.log().count("action=hello_refused") == 0
        assert "token refused" in browser.popup_text()
