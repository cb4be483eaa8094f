"""The plugin's Firefox package in headless Firefox ESR (``firefox.py``): round trips through Conductor.

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
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.plugin.chat_apps import chat_app
from tests.plugin.firefox import build_firefox_package, firefox_plugin, package_granting, require_firefox
from tests.plugin.site_apps import site_app
from tests.server import ROOT, running_server, wait_for

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
    }


def assistant_messages(app):
    return Message.objects.filter(conversation__platform=app.name, role=Message.Role.ASSISTANT).order_by("pk")


def results_of(text):
    return json.loads(re.search(r"```baa-result\n(.*?)\n```", text, re.S).group(1))


def asked_and_captured(browser, app, server):
    """Pairs, opens the app's conversation and has it answer with an echo block; the message Conductor stored."""
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
    return page, message


def delivery_succeeded():
    deliver = wait_for(
        lambda: AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER, status=TaskStatus.SUCCEEDED).first(),
        "the delivery task to succeed", WAIT,
    )
    assert deliver.attempt_count == 1
    return [event.detail.get("method") for event in deliver.events.filter(action="deliver")]


# Claude's page asks with fetch, Gemini's with XMLHttpRequest: the page hook reads both in Firefox.
@pytest.mark.parametrize("platform", ["claude", "gemini"])
def test_an_answer_with_a_block_round_trips_through_proxy_delivery_in_firefox(firefox, package, tmp_path, server_env, platform):
    PluginClientFactory(client_id="laptop")
    app = chat_app(platform)
    started = time.monotonic()
    with (
        running_server(tmp_path, command="serve+cluster", CONDUCTOR_DELIVERY_METHODS="http,dom", **server_env) as server,
        firefox_plugin(firefox, tmp_path / "profile", package) as browser,
    ):
        page, message = asked_and_captured(browser, app, server)
        # Delivered through the page's own request (proxy delivery), not the composer.
        [posted] = wait_for(app.deliveries, "the delivery POST at the mock app", WAIT)
        assert app.conversation_of(posted) == app.conversation
        assert app.parent_of(posted) == message.remote_message_id
        result = results_of(app.delivered_text(posted))
        assert result["ok"] is True and result["tool"] == "echo" and result["result"] == {"step": 1}
        assert delivery_succeeded() == ["http"]
        # The app's reply to the delivery is itself a final message, read from its stream.
        wait_for(lambda: assistant_messages(app).count() == 2, "the reply to the results", WAIT)
        assert AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE).count() == 1
        assert page.evaluate("mockChat.sent()") == []  # nothing went through the composer
        assert browser.badge() == "on"
        assert "connected" in browser.popup_text()
    print(f"Firefox, {platform} by proxy delivery: {time.monotonic() - started:.1f} s, the server's and Firefox's starts included")


def test_a_chatgpt_answer_with_a_block_round_trips_through_the_composer_in_firefox(firefox, package, tmp_path, server_env):
    PluginClientFactory(client_id="laptop")
    app = chat_app("chatgpt")
    started = time.monotonic()
    with (
        running_server(tmp_path, command="serve+cluster", **server_env) as server,
        firefox_plugin(firefox, tmp_path / "profile", package) as browser,
    ):
        page, _message = asked_and_captured(browser, app, server)
        # ChatGPT's own order is the composer only: typed into it and sent, as a person does.
        [sent] = wait_for(lambda: page.evaluate("mockChat.sent()"), "the results sent from the composer", WAIT)
        result = results_of(sent)
        assert result["ok"] is True and result["tool"] == "echo" and result["result"] == {"step": 1}
        assert delivery_succeeded() == ["dom"]
        assert page.evaluate("mockChat.userTurnCount()") == 1  # the results, once (the mock's composer asks nothing)
        [stored] = Message.objects.filter(source=Message.Source.CONDUCTOR)
        assert stored.text == sent
    print(f"Firefox, ChatGPT through the composer: {time.monotonic() - started:.1f} s, the server's and Firefox's starts included")


def test_a_described_sites_answer_round_trips_through_its_composer_in_firefox(firefox, package, tmp_path, server_env):
    PluginClientFactory(client_id="laptop")
    app = site_app("perplexity")
    description = json.loads((ROOT / "plugin" / "sites" / "perplexity.json").read_text())
    granted = package_granting(package, description["origins"], tmp_path / "granted-firefox.zip")
    with (
        running_server(tmp_path, command="serve+cluster", **server_env) as server,
        firefox_plugin(firefox, tmp_path / "profile", granted) as browser,
    ):
        app.install(browser.context)
        browser.pair(server.base_url, "laptop", TEST_TOKEN)
        browser.wait_for_state("connected")
        # The options page's switch, clicked as a person does (permissions.request wants a user gesture).
        options = browser.new_tab(browser.extension_url("options/options.html"))
        switch = 'input[data-site="perplexity"]'
        browser.wait_until(lambda: options.evaluate(f"!!document.querySelector('{switch}')"), "the site's switch")
        options.click(switch)
        browser.wait_until(lambda: options.evaluate("document.getElementById('sites-outcome').dataset.site === 'perplexity'"),
                           "the switch's outcome")
        assert options.evaluate(f"document.querySelector('{switch}').checked")
        browser.wait_until(lambda: browser.extension_tab.evaluate(
            "chrome.scripting.getRegisteredContentScripts().then((scripts) => scripts.map((script) => script.id))",
        ) == ["site-perplexity"], "the site's content script")

        page = browser.new_tab(app.page_url)
        browser.wait_until(lambda: page.evaluate("typeof window.mockSite === 'object'"), "the mock site")
        time.sleep(0.5)  # the content script asks the worker for the site's description, then watches the page
        page.evaluate("([html]) => mockSite.answer(html)", [app.answer_html("baa", ["echo", '{"step": 1}'])])
        message = wait_for(lambda: Message.objects.filter(conversation__platform="perplexity").first(), "the answer in Conductor", WAIT)
        assert message.capture == Message.Capture.DOM
        assert delivery_succeeded() == ["dom"]
        [sent] = page.evaluate("mockSite.sent()")
        assert results_of(sent)["result"] == {"step": 1}
        assert page.evaluate("mockSite.userTurnCount()") == 1
