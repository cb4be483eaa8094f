"""End to end: chat sites read from the page (``plugin/sites/``) through the plugin to a running Conductor and back.

For Perplexity, DeepSeek, GitHub Copilot, Mistral, AI Studio, Qwen, T3 Chat, OpenRouter and Z.ai: a mock page at
the site's real origin with the DOM shape of its description (``site_apps.py``,
code blocks in each site's own markup), the
site switched on, an answer with a ``baa`` block read from the page, its
result typed into the site's composer and sent, and the console showing the
site's title. Then a site whose streaming selector never matches: its answer
is read once its text stayed the same (the quiet rule), exactly once, and the
selector reported; an operator changes the selector on the server, and the
plugin fetches the new description and reads the next page load with it.
And, against a scripted server: a grant alone turns no site on
(only the options page's switch does, and the switch outlives the service
worker), and a description the server hands over on another site's origin
is refused and listed, not applied.

How the site's origins are granted: Chrome asks the person in a prompt that
a headless browser cannot answer (``chrome.permissions.request`` never
settles there). The plugin is loaded from a copy whose manifest lists the
site's origins in ``host_permissions``, so Chrome granted them at install,
as the person's "Allow" would have: the product's code is unchanged, its
options page's switch then finds the grant (``request`` answers true at once
for origins already granted) and the worker registers the site's content
script as it does after a real prompt.
"""

import json
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import Client

from automation.models import AutomationTask, TaskStatus
from conversations.models import Message
from ingest.health import capture_warnings
from ingest.kinds import INSTRUCTION_DELIVER
from ingest.models import AdapterReport
from tests.browser import require_chromium
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.plugin.extension import PLUGIN, ScriptedServer, plugin_browser
from tests.plugin.site_apps import site_app
from tests.server import running_server

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

WAIT = 60
ASK = "```baa\necho\n{\"step\": %d}\n```\n"
ASK_HTML = '<p>Checking:</p><pre><code class="language-baa">echo\n{"step": %d}\n</code></pre>'
TITLES = {"perplexity": "Perplexity", "deepseek": "DeepSeek", "copilot": "GitHub Copilot", "aistudio": "Google AI Studio", "qwen": "Qwen Chat",
          "mistral": "Le Chat (Mistral)", "t3chat": "T3 Chat", "openrouter": "OpenRouter Chat", "zai": "Z.ai (GLM)",
          "grok": "Grok", "kimi": "Kimi"}


@pytest.fixture
def chromium(monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    return require_chromium()


@pytest.fixture
def server_env(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return {
        "CONDUCTOR_WORKSPACE": str(workspace), "CONDUCTOR_TICK_SECONDS": "0.5",
        "CONDUCTOR_OUTBOUND_JITTER_MAX_MS": "0", "CONDUCTOR_RETRY_JITTER_MAX_MS": "0",
    }


def plugin_granted(tmp_path, *names):
    """A copy of plugin/ whose manifest grants the sites' origins at install (see the module's docstring)."""
    copy = tmp_path / "plugin"
    shutil.copytree(PLUGIN, copy, ignore=shutil.ignore_patterns("tests", "node_modules"))
    manifest = json.loads((copy / "manifest.json").read_text())
    for name in names:
        description = json.loads((PLUGIN / "sites" / f"{name}.json").read_text())
        manifest["host_permissions"] += [f"{origin}/*" for origin in description["origins"]]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def switch_on(browser, name):
    """The options page's switch for site ``name``, clicked on as a person does; its row's state after."""
    options = browser.open_options()
    browser.wait_in_extension_page(options, f"!!document.querySelector('input[data-site=\"{name}\"]')", "the site's switch")
    if not options.is_checked(f'input[data-site="{name}"]'):
        options.click(f'input[data-site="{name}"]')
        browser.wait_in_extension_page(options, f"document.getElementById('sites-outcome').dataset.site === '{name}'", "the switch's outcome")
    row = options.inner_text(f'li:has(input[data-site="{name}"])')
    is_on = options.is_checked(f'input[data-site="{name}"]')
    options.close()
    return row, is_on


def registered_sites(browser):
    return sorted(script["id"] for script in browser.worker.evaluate("chrome.scripting.getRegisteredContentScripts()"))


def assistant_messages(name):
    return Message.objects.filter(conversation__platform=name, role=Message.Role.ASSISTANT).order_by("pk")


def open_site(browser, app, *, read=True):
    """A tab of ``app``'s page; when ``read``, once the plugin's content script watches it."""
    page = browser.context.new_page()
    page.goto(app.page_url)
    page.wait_for_function("typeof window.mockSite === 'object'")
    if read:
        # The content script asks the worker for the site's description, watches the page, then listens.
        browser.wait_for_content_script(page)
    return page


@pytest.mark.parametrize(
    "name",
    ["perplexity", "grok", "kimi", "deepseek", "copilot", "mistral", "aistudio", "qwen", "t3chat", "openrouter", "zai"],
)
def test_a_sites_answer_with_a_block_round_trips_through_conductor(chromium, tmp_path, server_env, name):
    PluginClientFactory(client_id="laptop")
    app = site_app(name)
    with (
        running_server(tmp_path, command="serve+cluster", **server_env) as server,
        plugin_browser(chromium, tmp_path / "profile", plugin_granted(tmp_path, name)) as browser,
    ):
        app.install(browser.context)
        browser.pair(server.base_url, "laptop", TEST_TOKEN)
        browser.wait_for_state("connected")
        row, is_on = switch_on(browser, name)
        assert is_on, row
        assert TITLES[name] in row and app.origin in row
        assert registered_sites(browser) == [f"site-{name}"]

        page = open_site(browser, app)
        # Each site's code block in its own markup (AI Studio's ms-code-block, Qwen's Monaco lines).
        page.evaluate("([html]) => mockSite.answer(html)", [app.answer_html("baa", ["echo", '{"step": 1}'])])

        message = browser.wait_until(lambda: assistant_messages(name).first(), "the assistant message in Conductor", WAIT)
        assert message.capture == Message.Capture.DOM
        assert message.text == "Checking:\n\n" + (ASK % 1).rstrip("\n")
        assert message.conversation.remote_id == app.conversation

        deliver = browser.wait_until(
            lambda: AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER, status=TaskStatus.SUCCEEDED).first(),
            "the delivery task to succeed", WAIT,
        )
        [sent] = page.evaluate("mockSite.sent()")
        result = json.loads(re.search(r"```baa-result\n(.*?)\n```", sent, re.S).group(1))
        assert result["ok"] is True and result["tool"] == "echo" and result["result"] == {"step": 1}
        assert page.evaluate("mockSite.userTurnCount()") == 1
        steps = [e.detail.get("method") for e in deliver.events.filter(action="deliver")]
        assert steps == ["dom"]
        # The site's answer was read once, and the page's own turn was not taken for one.
        assert assistant_messages(name).count() == 1

        operator = Client()
        operator.force_login(get_user_model().objects.create_superuser("operator", password="x"))
        listed = operator.get("/admin/conversations/conversation/").content.decode()
        assert TITLES[name] in listed
        story = operator.get(f"/admin/conversations/conversation/{message.conversation.pk}/story/").content.decode()
        assert TITLES[name] in story
        connections.close_all()


def stored_sites(browser):
    return browser.storage().get("sites") or {}


def test_a_site_whose_streaming_selector_never_matches_is_read_once_quiet_reported_and_fixed_by_an_operator(
    chromium, tmp_path, server_env,
):
    from ingest.sites import site_description_save

    PluginClientFactory(client_id="laptop")
    # The site moved its "writing" signal: the shipped selector no longer sees it.
    app = site_app("perplexity", streaming='<div id="mock-streaming" data-testid="answer-streaming"></div>')
    with (
        running_server(tmp_path, command="serve+cluster", **server_env) as server,
        plugin_browser(chromium, tmp_path / "profile", plugin_granted(tmp_path, "perplexity")) as browser,
    ):
        app.install(browser.context)
        browser.pair(server.base_url, "laptop", TEST_TOKEN)
        browser.wait_for_state("connected")
        assert switch_on(browser, "perplexity")[1]
        first = browser.wait_until(lambda: stored_sites(browser).get("version"), "the server's sites to be stored", WAIT)

        # With the shipped description the page never looks busy: the answer is read once its text stayed
        # the same for the quiet period (3 s), exactly once, and the streaming selectors are reported.
        page = open_site(browser, app)
        page.evaluate("([html]) => mockSite.answer(html)", [ASK_HTML % 1])
        quiet = browser.wait_until(lambda: assistant_messages("perplexity").first(), "the answer read once quiet", WAIT)
        assert quiet.text == "Checking:\n\n" + (ASK % 1).rstrip("\n")
        report = browser.wait_until(
            lambda: AdapterReport.objects.filter(platform="perplexity", kind=AdapterReport.Kind.SELECTOR_MISSING).first(),
            "the selector_missing report", WAIT,
        )
        assert report.detail == {"selectors": "streaming"}
        assert any("Perplexity's page no longer matches its streaming selectors" in w for w in capture_warnings())
        browser.pause(5)
        assert assistant_messages("perplexity").count() == 1

        description = json.loads((PLUGIN / "sites" / "perplexity.json").read_text())
        description["answer"]["streaming"] = ['[data-testid="answer-streaming"]']
        def save():
            try:
                site_description_save(name="perplexity", description=description, actor="operator")
            finally:
                connections.close_all()

        # Outside Playwright's thread: the save tells the connected plugins through the channel layer (async_to_sync).
        with ThreadPoolExecutor(1) as pool:
            pool.submit(save).result()
        # Told at once when the server's channel layer reaches this socket, else at the next hello.ok: a reconnect.
        options = browser.open_options()
        options.evaluate("chrome.runtime.sendMessage({type: 'popup.reconnect'})")
        options.close()
        browser.wait_until(lambda: stored_sites(browser).get("version") not in (None, first), "the new sites_version", WAIT)
        stored = stored_sites(browser)["descriptions"]["perplexity"]
        assert stored["answer"]["streaming"] == ['[data-testid="answer-streaming"]']

        page.reload()
        page.wait_for_function("typeof window.mockSite === 'object'")
        browser.wait_for_content_script(page)
        page.evaluate("([html]) => mockSite.answer(html)", [ASK_HTML % 2])
        message = browser.wait_until(
            lambda: assistant_messages("perplexity").exclude(pk=quiet.pk).first(), "the answer read with the new selector", WAIT,
        )
        assert message.text == "Checking:\n\n" + (ASK % 2).rstrip("\n")
        browser.pause(4)
        assert assistant_messages("perplexity").count() == 2


def sites_listed(options):
    """The options page's site rows (name → checked) and its "Not used" lines."""
    rows = options.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#site-list input')].map((i) => [i.dataset.site, i.checked]))")
    return rows, options.evaluate("[...document.querySelectorAll('#sites-not-used li')].map((li) => li.textContent)")


def test_a_grant_alone_turns_no_site_on_and_a_description_on_a_taken_origin_is_refused(chromium, tmp_path):
    app = site_app("copilot")
    reader = json.loads((PLUGIN / "sites" / "copilot.json").read_text())
    # Sorted before "copilot", on its origin, every page of it: the old rule gave it github.com.
    reader.update(name="aaa_reader", title="Any GitHub page")
    del reader["pages"]
    with plugin_browser(chromium, tmp_path / "profile", plugin_granted(tmp_path, "copilot")) as browser:
        with ScriptedServer(sleep=browser.pause) as server:
            app.install(browser.context)
            browser.pair(server.url, "laptop", TEST_TOKEN)
            browser.wait_for_state("connected")

            # github.com is granted (as by Chrome's own menu), the switch is off: nothing reads the page.
            options = browser.open_options()
            browser.wait_in_extension_page(options, "!!document.querySelector('input[data-site=\"copilot\"]')", "the rows")
            assert sites_listed(options)[0]["copilot"] is False
            options.close()
            assert registered_sites(browser) == []
            page = open_site(browser, app, read=False)
            page.evaluate("([html]) => mockSite.answer(html)", [ASK_HTML % 1])
            browser.pause(4)
            assert server.frames("browser.final_message") == []
            page.close()

            # The server hands over a site on copilot's origin: refused, listed, not applied.
            server.send({"type": "sites", "id": None, "sites_version": "v-reader", "sites": [reader]})
            browser.wait_until(lambda: stored_sites(browser).get("version") == "v-reader", "the server's sites stored")
            options = browser.open_options()
            browser.wait_in_extension_page(options, "document.querySelectorAll('#sites-not-used li').length > 0", "the refusal")
            rows, not_used = sites_listed(options)
            options.close()
            assert "aaa_reader" not in rows and rows["copilot"] is False
            assert not_used == ['Not used: the description of "aaa_reader" (stored: $.origins: https://github.com '
                                'is claimed by copilot too: an origin belongs to one site).']

            # The switch turns it on; it stays on once the worker was stopped and woke again.
            row, is_on = switch_on(browser, "copilot")
            assert is_on, row
            assert registered_sites(browser) == ["site-copilot"]
            assert browser.storage()["sitesSwitchedOn"] == {"copilot": {"origins": ["https://github.com"]}}
            page = open_site(browser, app)
            browser.stop_worker(page)
            page.reload()
            page.wait_for_function("typeof window.mockSite === 'object'")
            page.wait_for_timeout(500)
            page.evaluate("([html]) => mockSite.answer(html)", [ASK_HTML % 2])
            [sent] = server.wait_for_frames("browser.final_message")
            assert server.connections == 2, "the worker was stopped: a new one connected"
            assert (sent["platform"], sent["conversation_id"]) == ("copilot", app.conversation)
            assert "{\"step\": 2}" in sent["text"]

            # Off again: the grant stays (the manifest's), the site is off.
            options = browser.open_options()
            browser.wait_in_extension_page(options, "!!document.querySelector('input[data-site=\"copilot\"]')", "the rows")
            options.click('input[data-site="copilot"]')
            browser.wait_in_extension_page(
                options, "document.getElementById('sites-outcome').textContent === 'GitHub Copilot is off.'", "the switch off")
            options.close()
            assert registered_sites(browser) == []
            # Off, nothing is typed into it, and no tab of it is opened for a delivery.
            page.close()
            tabs = len(browser.context.pages)
            server.send({"type": "browser.dom_delivery", "request_id": "d-1", "delivery_key": "k-1", "platform": "copilot",
                         "conversation_id": app.conversation, "page_url": app.page_url, "text": "results",
                         "timeout_ms": 5_000})
            [result] = server.wait_for_frames("browser.dom_delivery.result")
            assert result["ok"] is False
            assert result["error"] == ("GitHub Copilot is switched off in the plugin's options: "
                                       "nothing is read or typed there")
            assert len(browser.context.pages) == tabs
