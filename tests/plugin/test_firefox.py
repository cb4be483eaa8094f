"""The plugin's Firefox package in headless Firefox ESR (``firefox.py``) against a scripted server peer.

It stays connected while idle (Firefox stops an idle background page after
30 s, whatever its socket does, unless an extension API is called), its
popup inserts the tool guide, and its panel, Firefox's sidebar, shows a
held block with its approval link. The
round trips through a running Conductor: ``test_firefox_round_trip.py``.
"""

import time

import pytest

from tests.plugin.chat_apps import chat_app
from tests.plugin.extension import ScriptedServer
from tests.plugin.firefox import build_firefox_package, firefox_plugin, require_firefox
from tests.plugin.test_plugin import TOKEN
from tests.plugin.test_side_panel import SERVER_STORY, block, message, pushed, statuses

pytestmark = pytest.mark.database_free

IDLE_SECONDS = 90


@pytest.fixture
def browser(tmp_path):
    firefox = require_firefox()
    package = build_firefox_package(tmp_path / "dist")
    with firefox_plugin(firefox, tmp_path / "profile", package) as browser:
        yield browser


@pytest.fixture
def server():
    with ScriptedServer() as server:
        yield server


def test_the_plugin_pairs_and_stays_connected_over_90_s_idle_in_firefox(browser, server):
    browser.pair(server.url, "laptop", TOKEN)
    browser.wait_for_state("connected")
    connected_at = browser.status()["since"]
    time.sleep(IDLE_SECONDS)
    # One connection all along: the background page was not stopped (a close 1001 every 30 s without the keep-alive).
    assert server.connections == 1
    assert browser.status()["state"] == "connected" and browser.status()["since"] == connected_at
    assert len(server.frames("ping")) >= IDLE_SECONDS // 20 - 1
    assert "connected" in browser.popup_text()
    assert browser.badge() == "on"


def test_the_sidebar_shows_a_held_shell_run_and_its_approval_link_in_firefox(browser, server):
    browser.pair(server.url, "laptop", TOKEN)
    browser.wait_for_state("connected")
    app = chat_app("claude")
    app.install(browser.context)
    page = browser.open_chat(app)
    # Firefox's sidebar shows the panel's page (the manifest's sidebar_action); the popup's button opens it.
    assert browser.extension_tab.evaluate("browser.sidebarAction.getPanel({})") == browser.extension_url("panel/panel.html")
    popup = browser.new_tab(browser.extension_url("popup/popup.html"))
    popup.click("#open-panel")  # a person's click: sidebarAction.open needs its user gesture
    browser.wait_until(lambda: browser.extension_tab.evaluate("browser.sidebarAction.isOpen({})"), "the sidebar to open")
    # Opened, the popup closes itself (window.close); it stays to say why when the panel did not open.
    browser.wait_until(lambda: popup.context not in browser.contexts(), "the popup to close")
    approve_url = f"{server.url}{SERVER_STORY}#t"
    server.conversation_status[app.conversation] = {"messages": [
        message("4", [block(1, "shell.run", "waiting_approval", params='{"command": "make test"}', approve_url=approve_url)]),
    ]}
    panel = browser.new_tab(browser.extension_url(f"panel/panel.html?tab={browser.tab_id(page)}"))

    browser.wait_until(lambda: statuses(panel) == [("4", 1, "waiting_approval")], f"the held block (shown: {statuses(panel)})")
    assert panel.evaluate("document.querySelector('.block .tool').textContent") == "shell.run"
    assert panel.evaluate("document.querySelector('.block .chip').textContent") == "waiting for approval"
    assert panel.evaluate("document.querySelector('a.approve').href") == approve_url
    server.send(pushed(app, message("4", [block(1, "shell.run", "running", at=2)]), approvals=0))
    browser.wait_until(lambda: statuses(panel) == [("4", 1, "running")], "the block to run once approved")


def test_the_popups_button_puts_the_tool_guide_into_the_chats_composer_in_firefox(browser, server):
    browser.pair(server.url, "laptop", TOKEN)
    browser.wait_for_state("connected")
    app = chat_app("chatgpt")
    app.install(browser.context)
    page = browser.open_chat(app)
    popup = browser.new_tab(browser.extension_url("popup/popup.html"))
    browser.wait_until(lambda: popup.evaluate("document.getElementById('state').textContent !== '…'"), "the popup's state")
    # The chat's tab in front, as the tab under a real popup is: the one the popup acts on.
    browser.bidi.send("browsingContext.activate", context=page.context)
    popup.evaluate("document.getElementById('insert-guide').click()")
    browser.wait_until(lambda: popup.evaluate("document.getElementById('guide-outcome').dataset.ok !== undefined"),
                       "the popup to say how the tool guide went")
    assert popup.evaluate("document.getElementById('guide-outcome').textContent") == (
        f"Tool guide {server.guide_version} inserted: read it and send it.")
    [asked] = server.frames("guide.get")
    assert (asked["platform"], asked["conversation_id"]) == ("chatgpt", app.conversation)
    assert page.evaluate("mockChat.draft()") == server.guide_text
    assert page.evaluate("mockChat.sent()") == []
