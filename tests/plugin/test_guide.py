"""The tool guide in real headless Chromium, against a scripted server peer.

The popup's "Insert tool guide" and the option that inserts the guide into
every new conversation put the text the server answers to ``guide.get``
(SPEC §6) into the mock app's composer and never send it: no user turn, no
request to the app. The guide's own text is the server's (tests/ingest).
"""

import pytest

from tests.plugin.chat_apps import chat_app
from tests.plugin.test_plugin import TOKEN

# The plugin against a scripted peer: no database, no channel layer.
pytestmark = pytest.mark.database_free

NEW_CHAT_URLS = {"claude": "https://claude.ai/new", "chatgpt": "https://chatgpt.com/"}


def connect(browser, server, **options):
    browser.pair(server.url, "laptop", TOKEN, **options)
    browser.wait_for_state("connected")


def open_app(browser, platform: str, *, page_url: str | None = None):
    """The mock app's conversation page, or the page at ``page_url`` (a new chat)."""
    app = chat_app(platform)
    if page_url is not None:
        app.__class__ = type(f"New{app.__class__.__name__}", (app.__class__,), {"page_url": page_url})
    app.install(browser.context)
    return app, browser.open_chat(app)


def assert_not_sent(app, page):
    assert page.evaluate("mockChat.sent()") == []
    assert page.evaluate("mockChat.userTurnCount()") == 0
    assert app.posted == []


def empty_the_composer(page):
    page.evaluate("""() => {
        const editor = document.querySelector('[contenteditable="true"]');
        editor.focus();
        document.getSelection().selectAllChildren(editor);
        document.execCommand('delete', false);
    }""")


# ---- the popup's button ------------------------------------------------------

@pytest.mark.parametrize("platform", ["claude", "chatgpt", "gemini"])
def test_the_button_puts_the_conversations_guide_into_the_composer_without_sending_it(browser, server, platform):
    connect(browser, server)
    app, page = open_app(browser, platform)
    popup = browser.open_popup(active_tab=page)

    said = browser.insert_guide(popup)

    assert said == f"Tool guide {server.guide_version} inserted: read it and send it."
    [asked] = server.frames("guide.get")
    assert asked == {"type": "guide.get", "id": asked["id"], "platform": platform, "conversation_id": app.conversation}
    assert page.evaluate("mockChat.draft()") == server.guide_text
    browser.pause(1)  # past the composer's send-button grace: nothing goes out on its own
    assert_not_sent(app, page)


def test_the_button_on_a_new_chat_asks_for_the_platforms_guide(browser, server):
    connect(browser, server)
    app, page = open_app(browser, "claude", page_url=NEW_CHAT_URLS["claude"])
    popup = browser.open_popup(active_tab=page)

    assert browser.insert_guide(popup).startswith("Tool guide ")
    [asked] = server.frames("guide.get")
    assert asked["conversation_id"] is None
    assert page.evaluate("mockChat.draft()") == server.guide_text


def test_pressed_twice_the_guide_is_in_the_composer_once(browser, server):
    connect(browser, server)
    app, page = open_app(browser, "claude")
    popup = browser.open_popup(active_tab=page)
    browser.insert_guide(popup)

    assert browser.insert_guide(popup) == f"Tool guide {server.guide_version} is in the composer already: read it and send it."
    assert page.evaluate("mockChat.draft()") == server.guide_text
    assert_not_sent(app, page)


def test_a_persons_draft_is_kept_and_the_popup_says_why(browser, server):
    connect(browser, server)
    app, page = open_app(browser, "chatgpt")
    page.evaluate("mockChat.type('my own question')")
    popup = browser.open_popup(active_tab=page)

    assert browser.insert_guide(popup) == "The tool guide was not inserted: the composer holds a draft: empty it first."
    assert page.evaluate("mockChat.draft()") == "my own question"
    assert_not_sent(app, page)


def test_a_server_error_is_shown_with_its_detail(browser, server):
    server.guide_error = "invalid"
    connect(browser, server)
    app, page = open_app(browser, "claude")
    popup = browser.open_popup(active_tab=page)

    assert browser.insert_guide(popup) == (
        "The tool guide was not inserted: the server refused: scripted guide refusal (invalid).")
    assert page.evaluate("mockChat.draft()") == ""


def test_a_server_that_does_not_answer_times_out_with_a_clear_message(browser, server):
    server.answer_guides = False
    connect(browser, server)
    app, page = open_app(browser, "claude")
    popup = browser.open_popup(active_tab=page)

    assert browser.insert_guide(popup) == (
        "The tool guide was not inserted: the server did not answer guide.get within 10 s.")
    assert page.evaluate("mockChat.draft()") == ""


def test_not_connected_fails_at_once_and_says_so(browser, server):
    connect(browser, server)
    browser.worker.evaluate("chrome.storage.local.set({paused: true})")
    browser.wait_for_state("paused")
    app, page = open_app(browser, "claude")
    popup = browser.open_popup(active_tab=page)

    said = browser.insert_guide(popup)

    assert said == "The tool guide was not inserted: not connected to the Conductor server (paused, paused from the popup)."
    assert server.frames("guide.get") == []
    assert page.evaluate("mockChat.draft()") == ""


def test_a_tab_that_is_not_a_chat_is_refused(browser, server):
    connect(browser, server)
    other = browser.context.new_page()
    other.goto(browser.extension_url("options/options.html"))
    popup = browser.open_popup(active_tab=other)

    assert browser.insert_guide(popup) == (
        "The tool guide was not inserted: the active tab is not a chat page of claude, chatgpt, gemini"
        " or of a site switched on in the options.")
    assert server.frames("guide.get") == []


# ---- the option: every new conversation --------------------------------------

@pytest.mark.parametrize("platform", ["claude", "chatgpt"])
def test_the_option_inserts_the_guide_into_a_new_chat_once(browser, server, platform):
    connect(browser, server, insert_guide=True)
    app, page = open_app(browser, platform, page_url=NEW_CHAT_URLS[platform])

    browser.wait_until(lambda: page.evaluate("mockChat.draft()") == server.guide_text, "the guide in the composer")
    [asked] = server.frames("guide.get")
    assert asked["platform"] == platform and asked["conversation_id"] is None

    # The person empties the composer: the guide does not come back on this page.
    empty_the_composer(page)
    page.evaluate("document.body.appendChild(document.createElement('div'))")  # the page changes, as apps do
    browser.pause(1.5)
    assert page.evaluate("mockChat.draft()") == ""
    assert len(server.frames("guide.get")) == 1
    assert_not_sent(app, page)


def test_the_option_leaves_an_existing_conversation_alone(browser, server):
    connect(browser, server, insert_guide=True)
    app, page = open_app(browser, "claude")
    page.reload()
    page.wait_for_function("typeof window.mockChat === 'object'")

    browser.pause(1.5)
    assert server.frames("guide.get") == []
    assert page.evaluate("mockChat.draft()") == ""


def test_the_option_is_off_by_default(browser, server):
    connect(browser, server)
    app, page = open_app(browser, "claude", page_url=NEW_CHAT_URLS["claude"])

    browser.pause(1.5)
    assert server.frames("guide.get") == []
    assert page.evaluate("mockChat.draft()") == ""
    assert browser.storage()["settings"]["insertGuide"] is False


def test_the_first_message_of_the_new_chat_goes_out_without_the_guide_coming_back(browser, server):
    connect(browser, server, insert_guide=True)
    app, page = open_app(browser, "claude", page_url=NEW_CHAT_URLS["claude"])
    browser.wait_until(lambda: page.evaluate("mockChat.draft()") == server.guide_text, "the guide in the composer")

    # The person sends it; the app moves to the new conversation's URL without loading a page.
    page.click('fieldset button[type="submit"]')
    page.evaluate("history.pushState({}, '', '/chat/%s')" % app.conversation)
    page.evaluate("document.body.appendChild(document.createElement('div'))")
    browser.pause(1.5)

    assert page.evaluate("mockChat.sent()") == [server.guide_text]
    assert page.evaluate("mockChat.draft()") == ""
    assert len(server.frames("guide.get")) == 1


def test_new_chat_after_a_conversation_gets_the_guide_again(browser, server):
    connect(browser, server, insert_guide=True)
    app, page = open_app(browser, "claude")

    # "New chat" in an app moves to its new-chat URL without loading a page.
    page.evaluate("history.pushState({}, '', '/new')")
    page.evaluate("document.body.appendChild(document.createElement('div'))")

    browser.wait_until(lambda: page.evaluate("mockChat.draft()") == server.guide_text, "the guide in the composer")
    assert len(server.frames("guide.get")) == 1


def test_a_reload_of_a_new_chat_is_a_new_page_and_gets_the_guide_once_more(browser, server):
    connect(browser, server, insert_guide=True)
    app, page = open_app(browser, "chatgpt", page_url=NEW_CHAT_URLS["chatgpt"])
    browser.wait_until(lambda: page.evaluate("mockChat.draft()") == server.guide_text, "the guide in the composer")

    page.reload()
    page.wait_for_function("typeof window.mockChat === 'object'")

    browser.wait_until(lambda: page.evaluate("mockChat.draft()") == server.guide_text, "the guide after the reload")
    browser.pause(1)
    assert page.evaluate("mockChat.draft()") == server.guide_text  # once, not twice
    assert len(server.frames("guide.get")) == 2
    assert_not_sent(app, page)
