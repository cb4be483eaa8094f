"""What the plugin tells a person: the options page's one live status, and the note after an HTTP delivery.

In real headless Chromium against a scripted server peer (``extension.py``),
with the mock chat apps of ``chat_apps.py``.
"""

import json
import re
import time

import pytest

from tests.plugin.chat_apps import chat_app
from tests.plugin.extension import WAIT_MS
from tests.server import ROOT

pytestmark = pytest.mark.database_free

TOKEN = "plugin-token-for-the-reply-note-tests-5d2e"
NOTE = "#conductor-reply-note"


def pair(browser, server, *, reload_after_delivery=False):
    """Fill in and save the options page as a person does; return the page, left open."""
    page = browser.context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(browser.extension_url("options/options.html"))
    page.click("#advanced summary")  # the three fields, one by one
    page.fill("#server-url", server.url)
    page.fill("#client-id", "laptop")
    page.fill("#token", TOKEN)
    if reload_after_delivery:
        page.check("#reload-after-delivery")
    page.click("#save")
    browser.wait_for_state("connected")
    return page


def post_reply(server, app, key):
    """A proxy delivery into ``app``'s conversation, as the server sends it; returns the plugin's answer."""
    request = {
        "method": "POST",
        "url": f"https://claude.ai/api/organizations/{app.organization}/chat_conversations/{app.conversation}/completion",
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"prompt": "```baa-result\n{}\n```", "parent_message_uuid": "p-1"}),
    }
    before = len(server.frames("browser.proxy_delivery.result"))
    server.send({"type": "browser.proxy_delivery", "request_id": f"r-{key}", "delivery_key": key,
                 "platform": "claude", "conversation_id": app.conversation, "text": "results",
                 "request": request, "timeout_ms": 10_000})
    return server.wait_for_frames("browser.proxy_delivery.result", before + 1)[-1]


def test_the_options_page_shows_one_live_status_and_the_documented_command(browser, server):
    from playwright.sync_api import expect

    page = pair(browser, server)
    expect(page.locator("#state")).to_have_text("connected")
    assert page.inner_text("#saved") == "Saved."
    assert "Connecting" not in page.inner_text("body")
    # The one status lives on: the server goes away, the page says so, and nothing else contradicts it.
    server.close_current(1011)
    # Read in the same moment as the state: the plugin connects again a second later.
    # Polled from here: wait_for_function compiles its predicate in the page at run time, which
    # the extension page's CSP (no 'unsafe-eval') refuses whenever the first check does not pass.
    deadline = time.monotonic() + 10
    while not (body := page.evaluate(
        "document.getElementById('state').textContent === 'connecting' && document.body.innerText"
    )):
        assert time.monotonic() < deadline, "the options page never said connecting"
        time.sleep(0.02)
    assert "connected" not in body.replace("not connected", "")
    page.fill("#client-id", "laptop-2")
    assert page.inner_text("#saved") == ""  # an edit makes "Saved." untrue

    command = page.inner_text("#create-client")
    guide = (ROOT / "docs" / "getting-started.md").read_text()
    assert command == ".venv/bin/python manage.py create_plugin_client NAME"
    assert re.search(re.escape(command.removesuffix("NAME")) + r'"laptop chrome"', guide)
    assert "uv run python manage.py create_plugin_client" not in guide


def test_a_reply_posted_over_http_marks_the_tab_with_a_note_and_never_reloads_it(browser, server):
    pair(browser, server).close()
    app = chat_app("claude")
    app.install(browser.context)
    page = browser.open_chat(app)
    page.evaluate("window.__notReloaded = true")

    assert post_reply(server, app, "task-1")["ok"] is True
    note = page.locator(NOTE)
    note.wait_for()
    assert note.inner_text().startswith("Conductor posted a reply: reload to see it.")
    assert post_reply(server, app, "task-2")["ok"] is True
    page.wait_for_function(f"document.querySelector('{NOTE} span').textContent.startsWith('Conductor posted 2 replies')")
    browser.pause(2)
    assert page.evaluate("window.__notReloaded") is True
    assert len(app.deliveries()) == 2

    # Reload is the person's click.
    with page.expect_navigation():
        note.get_by_role("button", name="Reload").click()
    page.wait_for_function("typeof window.mockChat === 'object'")
    assert page.evaluate("window.__notReloaded") is None
    assert page.locator(NOTE).count() == 0


def test_a_refused_post_leaves_the_tab_as_it_was(browser, server):
    pair(browser, server, reload_after_delivery=True).close()
    app = chat_app("claude")
    app.install(browser.context)
    page = browser.open_chat(app)
    page.evaluate("window.__notReloaded = true")
    app.answer_next("Just a moment...", status=403)
    assert post_reply(server, app, "task-3")["error_code"] == "blocked"
    browser.pause(2)
    assert page.evaluate("window.__notReloaded") is True
    assert page.locator(NOTE).count() == 0


def test_the_option_reloads_the_tab_after_a_posted_reply(browser, server):
    from playwright.sync_api import expect

    options = pair(browser, server, reload_after_delivery=True)
    assert options.is_checked("#reload-after-delivery")
    options.reload()
    expect(options.locator("#reload-after-delivery")).to_be_checked()
    options.close()
    app = chat_app("claude")
    app.install(browser.context)
    page = browser.open_chat(app)
    page.evaluate("window.__notReloaded = true")

    def reloaded():
        try:
            return page.evaluate("typeof window.mockChat === 'object' && window.__notReloaded === undefined")
        except Exception:  # the page is navigating: its context is gone for a moment
            return False

    assert post_reply(server, app, "task-4")["ok"] is True
    browser.wait_until(reloaded, "the tab to be reloaded")
    assert page.locator(NOTE).count() == 0
