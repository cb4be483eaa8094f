"""The plugin's Firefox package in headless Firefox ESR (``firefox.py``): install, pair, a round trip.

Real processes as in ``test_round_trip.py``: ``manage.py serve`` with its
cluster on the test databases, Debian's ``firefox-esr`` with the package
``make plugin`` builds installed as a temporary add-on, the mock chat apps
of ``chat_apps.py`` served at their real origins through WebDriver BiDi.
"""

import json
import re
import time

import pytest

from automation.models import AutomationTask, TaskStatus
from conversations.models import Message
from ingest.services.instructions import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.plugin.chat_apps import chat_app
from tests.plugin.firefox import build_firefox_package, firefox_plugin, require_firefox
from tests.server import running_server, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

WAIT = 60
ASK = "```baa\necho\n{\"step\": %d}\n```\n"
ASK_HTML = '<pre><code class="language-baa">echo\n{"step": %d}\n</code></pre>'


@pytest.fixture
def firefox():
    return require_firefox()


@pytest.fixture
def package(tmp_path):
    return build_firefox_package(tmp_path / "dist")


@pytest.fixture
def server_env(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return {
        "CONDUCTOR_WORKSPACE": str(workspace), "CONDUCTOR_TICK_SECONDS": "0.5",
        "CONDUCTOR_OUTBOUND_JITTER_MAX_MS": "0", "CONDUCTOR_RETRY_JITTER_MAX_MS": "0",
        "CONDUCTOR_DELIVERY_METHODS": "http,dom",
    }


def assistant_messages(app):
    return Message.objects.filter(conversation__platform=app.name, role=Message.Role.ASSISTANT).order_by("pk")


def test_a_claude_answer_with_a_block_round_trips_through_conductor_in_firefox(firefox, package, tmp_path, server_env):
    PluginClientFactory(client_id="laptop")
    app = chat_app("claude")
    started = time.monotonic()
    with (
        running_server(tmp_path, command="serve+cluster", **server_env) as server,
        firefox_plugin(firefox, tmp_path / "profile", package) as browser,
    ):
        app.install(browser.context)
        browser.pair(server.base_url, "laptop", TEST_TOKEN)
        browser.wait_for_state("connected")
        page = browser.open_chat(app)
        app.answer_next(ASK % 1)
        page.evaluate("([html]) => mockChat.ask('Go on', {html})", [ASK_HTML % 1])

        message = wait_for(lambda: assistant_messages(app).first(), "the assistant message in Conductor", WAIT)
        assert message.capture == Message.Capture.NETWORK
        assert message.text == ASK % 1
        assert message.conversation.remote_id == app.conversation

        # Delivered through the page's own request (proxy delivery), not the composer.
        [posted] = wait_for(app.deliveries, "the delivery POST at the mock app", WAIT)
        assert app.conversation_of(posted) == app.conversation
        assert app.parent_of(posted) == message.remote_message_id
        result = json.loads(re.search(r"```baa-result\n(.*?)\n```", app.delivered_text(posted), re.S).group(1))
        assert result["ok"] is True and result["tool"] == "echo" and result["result"] == {"step": 1}
        deliver = wait_for(
            lambda: AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER, status=TaskStatus.SUCCEEDED).first(),
            "the delivery task to succeed", WAIT,
        )
        assert deliver.attempt_count == 1
        assert [event.detail.get("method") for event in deliver.events.filter(action="deliver")] == ["http"]
        # The app's reply to the delivery is itself a final message, read from its stream.
        wait_for(lambda: assistant_messages(app).count() == 2, "the reply to the results", WAIT)
        assert AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE).count() == 1
        assert page.evaluate("mockChat.sent()") == []  # nothing went through the composer
        assert browser.badge() == "on"
        assert "connected" in browser.popup_text()
    print(f"Firefox round trip: {time.monotonic() - started:.1f} s, the server's and Firefox's starts included")
