"""``browser.dom_delivery`` in real headless Chromium: the plugin types the text into the
mock app's composer (an editor that, like ProseMirror, keeps its own state and takes text
only from input events), sends it, and answers once the new user turn shows the text.
"""

import pytest

from tests.plugin.chat_apps import chat_app
from tests.plugin.test_plugin import TOKEN

# The plugin against a scripted peer: no database, no channel layer.
pytestmark = pytest.mark.database_free

PLATFORMS = ["claude", "chatgpt", "gemini"]
RESULT = "browser.dom_delivery.result"


def long_text(chars: int = 20_000) -> str:
    """Conductor's results as a chat receives them: fences, unicode of every direction, newlines."""
    block = (
        "```baa-result\n"
        '{"ok": true, "tool": "echo", "result": {"text": "émoji 🎉🧪, 中文字符, עברית ושלום, العربية"}}\n'
        "```\n"
        "\n"
        "  indented line with `code` and **bold**\n"
        "- a list item 🚀\n"
        "\n"
    )
    text = "Results:\n\n"
    while len(text) + len(block) < chars:
        text += block
    return text + "x" * (chars - len(text) - 4) + "\nEnd"


def delivery(app, key: str, text: str, *, request_id: str = "r-1", timeout_ms: int = 20_000) -> dict:
    return {"type": "browser.dom_delivery", "request_id": request_id, "delivery_key": key, "platform": app.name,
            "conversation_id": app.conversation, "page_url": app.page_url, "text": text, "timeout_ms": timeout_ms}


@pytest.fixture
def connected(browser, server):
    browser.pair(server.url, "laptop", TOKEN)
    browser.wait_for_state("connected")
    return browser, server


def open_app(browser, platform: str, **fields):
    app = chat_app(platform)
    for name, value in fields.items():
        setattr(app, name, value)
    app.install(browser.context)
    return app, browser.open_chat(app)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_long_text_is_typed_and_sent_as_one_user_turn(connected, platform):
    browser, server = connected
    app, page = open_app(browser, platform)
    text = long_text()
    assert len(text) == 20_000

    server.send(delivery(app, "task-1", text))
    [result] = server.wait_for_frames(RESULT)

    assert result == {"type": RESULT, "request_id": "r-1", "ok": True, "error": None, "error_code": None,
                      "evidence": {"user_turn_seen": True}}
    assert page.evaluate("mockChat.sent()") == [text]
    assert page.evaluate("mockChat.userTurnCount()") == 1
    assert page.evaluate("mockChat.draft()") == ""


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_repeated_delivery_key_is_sent_once(connected, platform):
    browser, server = connected
    app, page = open_app(browser, platform)
    frame = delivery(app, "task-2", "```baa-result\n{\"ok\": true}\n```")
    server.send(frame)
    [first] = server.wait_for_frames(RESULT)
    server.send({**frame, "request_id": "r-2"})
    _, repeated = server.wait_for_frames(RESULT, 2)

    assert first["ok"] is True
    assert {**repeated, "request_id": "r-1"} == first
    assert page.evaluate("mockChat.sent().length") == 1
    assert page.evaluate("mockChat.userTurnCount()") == 1


def test_a_repeat_while_the_first_is_typing_waits_for_it(connected):
    browser, server = connected
    app, page = open_app(browser, "chatgpt")
    frame = delivery(app, "task-3", long_text())
    server.send(frame)
    server.send({**frame, "request_id": "r-2"})
    results = server.wait_for_frames(RESULT, 2)

    assert sorted(result["request_id"] for result in results) == ["r-1", "r-2"]
    assert all(result["ok"] and result["evidence"] == {"user_turn_seen": True} for result in results)
    assert page.evaluate("mockChat.sent().length") == 1


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_text_already_in_the_last_user_turn_is_not_sent_again(connected, platform):
    # The plugin sent it, but its answer was lost (a reconnect, a restarted
    # worker that forgot nothing yet remembered nothing): the page shows it.
    browser, server = connected
    app, page = open_app(browser, platform)
    text = "Results:\n\n```baa-result\n{\"ok\": true}\n```\n"
    page.evaluate("(text) => mockChat.addUserTurn(text)", text)

    server.send(delivery(app, "task-4", text))
    [result] = server.wait_for_frames(RESULT)

    assert (result["ok"], result["evidence"]) == (True, {"user_turn_seen": True, "already_sent": True})
    assert page.evaluate("mockChat.sent()") == []
    assert page.evaluate("mockChat.userTurnCount()") == 1


def test_a_persons_draft_is_neither_sent_nor_destroyed(connected):
    browser, server = connected
    app, page = open_app(browser, "claude")
    page.evaluate("mockChat.type('half a thought of my own')")

    server.send(delivery(app, "task-5", "```baa-result\n{}\n```"))
    [result] = server.wait_for_frames(RESULT)

    assert (result["ok"], result["error"], result["error_code"]) == (False, "the composer holds a draft", None)
    assert page.evaluate("mockChat.draft()") == "half a thought of my own"
    assert page.evaluate("mockChat.sent()") == []


@pytest.mark.parametrize("takes", [["beforeinput"], ["paste"]])
def test_an_editor_that_ignores_exec_command_gets_the_text_another_way(connected, takes):
    browser, server = connected
    app, page = open_app(browser, "chatgpt")
    page.evaluate("(takes) => { mockChat.takes = takes; }", takes)
    text = "Line one 🎉\n\n```baa-result\n{}\n```"

    server.send(delivery(app, "task-6", text))
    [result] = server.wait_for_frames(RESULT)

    assert result["ok"] is True, result
    assert page.evaluate("mockChat.sent()") == [text]


def test_a_delivery_types_into_a_tab_it_opens_in_the_background(connected):
    # No tab shows the conversation: the plugin opens one, not focused, and
    # types there (see test_plugin's proxy test for the reload on its first load).
    browser, server = connected
    app = chat_app("chatgpt")
    app.install(browser.context)
    text = "Results:\n\n```baa-result\n{}\n```"

    server.send(delivery(app, "task-8", text))
    [result] = server.wait_for_frames(RESULT, timeout=60)

    assert result["ok"] is True, result
    [page] = [page for page in browser.context.pages if page.url == app.page_url]
    assert page.evaluate("mockChat.sent()") == [text]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_page_without_a_composer_answers_an_error_in_time(connected, platform):
    browser, server = connected
    app, page = open_app(browser, platform, has_composer=False)

    server.send(delivery(app, "task-7", "results", timeout_ms=3_000))
    [result] = server.wait_for_frames(RESULT, timeout=3 + 5)

    assert result["ok"] is False
    assert result["error"].startswith("no composer on the page")
    assert result["error_code"] == "selector_missing"
    assert result["evidence"] == {"user_turn_seen": False}
    # Nothing was remembered: once the page shows its composer, the retry sends.
    app.has_composer = True
    page.reload()
    page.wait_for_function("typeof window.mockChat === 'object'")
    browser.wait_for_content_script(page)
    server.send(delivery(app, "task-7", "results", request_id="r-2"))
    _, retried = server.wait_for_frames(RESULT, 2)
    assert retried["ok"] is True, retried
    assert page.evaluate("mockChat.sent()") == ["results"]


def test_a_challenge_page_instead_of_the_chat_is_answered_blocked(connected):
    browser, server = connected
    challenge = '<form id="challenge-form"><iframe src="https://challenges.cloudflare.com/x"></iframe></form>'
    app, _ = open_app(browser, "chatgpt", has_composer=False, instead_of_composer=challenge)

    server.send(delivery(app, "task-9", "results", timeout_ms=10_000))
    [result] = server.wait_for_frames(RESULT, timeout=5)

    assert (result["ok"], result["error_code"]) == (False, "blocked")


def test_a_proxy_delivery_of_a_key_sent_through_the_composer_is_not_posted(connected):
    # The task fell back to the DOM method, whose answer was lost; its retry
    # starts again with the proxy delivery (SPEC 6.1), which must not post.
    browser, server = connected
    app, page = open_app(browser, "claude")
    text = "```baa-result\n{}\n```"
    server.send(delivery(app, "task-10", text))
    [sent] = server.wait_for_frames(RESULT)
    request = {"method": "POST", "headers": {"Content-Type": "application/json"}, "body": "{}",
               "url": f"https://claude.ai/api/organizations/{app.organization}/chat_conversations/{app.conversation}/completion"}
    server.send({"type": "browser.proxy_delivery", "request_id": "r-2", "delivery_key": "task-10", "platform": "claude",
                 "conversation_id": app.conversation, "text": text, "request": request, "timeout_ms": 10_000})
    [proxied] = server.wait_for_frames("browser.proxy_delivery.result")
    server.send(delivery(app, "task-10", text, request_id="r-3"))
    _, repeated = server.wait_for_frames(RESULT, 2)

    assert sent["ok"] is True
    assert (proxied["ok"], proxied["error_code"]) == (False, "blocked")
    assert "already sent through the composer" in proxied["error"]
    assert app.posted == []
    assert {**repeated, "request_id": "r-1"} == sent
    assert page.evaluate("mockChat.sent()") == [text]


def test_hello_announces_dom_delivery(connected):
    _, server = connected
    [hello] = server.hellos
    assert hello["capabilities"] == ["proxy_delivery", "dom_delivery"]
