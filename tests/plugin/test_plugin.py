"""The reference plugin in real headless Chromium, against a scripted server peer.

Mock chat pages at the real origins (``chat_apps.py``); the plugin is paired
through its options page. What the plugin does on its own is tested here;
the round trips through a running Conductor are in ``test_round_trip.py``, the
composer deliveries in ``test_dom_delivery.py``; the fixtures in ``conftest.py``.
"""

import json

import pytest

from platforms.wire import form_value
from tests.plugin.chat_apps import chat_app
from tests.plugin.extension import PLUGIN, ScriptedServer

SITES_DIR = PLUGIN / "sites"
SITES = {path.stem for path in SITES_DIR.glob("*.json")} - {"schema"}

# The plugin against a scripted peer: no database, no channel layer.
pytestmark = pytest.mark.database_free

TOKEN = "plugin-token-that-no-page-may-read-7c1f"
BAA = "I'll check.\n\n```baa\necho\n{\"step\": 1}\n```\n"
GEMINI_SEND = "https://gemini.google.com/_/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate"
BAA_HTML = '<p>I\'ll check.</p><pre><code class="language-baa">echo\n{"step": 1}\n</code></pre>'


def paired(browser, server, **options):
    browser.pair(server.url, "laptop", TOKEN, **options)
    browser.wait_for_state("connected")


@pytest.mark.parametrize("platform", ["claude", "chatgpt", "gemini"])
def test_a_finished_answer_is_sent_from_the_stream_with_its_ids(browser, server, platform):
    paired(browser, server)
    app = chat_app(platform)
    app.install(browser.context)
    page = browser.open_chat(app)
    app.answer_next(BAA)
    page.evaluate("mockChat.ask('What next?', {html: %s})" % json.dumps(BAA_HTML))

    [frame] = server.wait_for_frames("browser.final_message")
    assert frame["platform"] == platform
    assert frame["capture"] == "network"
    assert frame["text"] == BAA
    assert frame["conversation_id"] == app.conversation
    assert frame["page_url"] == app.page_url
    assert frame["title"] == app.title
    assert frame["message_id"]
    [hello] = server.hellos
    assert hello["capabilities"] == ["proxy_delivery", "dom_delivery"]
    # The three with network capture, then every site described in plugin/sites/, each with its version (date).
    assert list(hello["adapters"])[:3] == ["claude", "chatgpt", "gemini"]
    assert set(hello["adapters"]) == {"claude", "chatgpt", "gemini", *SITES}
    assert hello["adapters"]["deepseek"] == json.loads((SITES_DIR / "deepseek.json").read_text())["version"]
    # The ack empties the outbox.
    browser.wait_until(lambda: browser.storage()["outbox"]["frames"] == [], "the ack to empty the outbox")


def test_a_stream_cut_before_its_end_leaves_the_answer_to_the_page_and_one_the_page_stopped_sends_nothing(browser, server):
    paired(browser, server)
    app = chat_app("claude")
    app.install(browser.context)
    page = browser.open_chat(app)
    app.answer_next("Half an answer with ```baa\necho\n", is_cut=True)
    page.evaluate("mockChat.ask('first', {html: '<p>Half an answer</p>'})")
    [cut] = server.wait_for_frames("browser.final_message")  # read from the page once it stopped writing
    page.evaluate("mockChat.ask('first', {html: '<p>Stopped</p>', abort: true})")
    app.answer_next("The whole second answer.")
    page.evaluate("mockChat.ask('second', {html: '<p>The whole second answer.</p>'})")

    server.wait_for_frames("browser.final_message", 2)
    browser.pause(2)  # past the page-reading grace period of the stopped answer
    assert [(frame["text"], frame["capture"]) for frame in server.frames("browser.final_message")] == [
        ("Half an answer", "dom"), ("The whole second answer.", "network"),
    ]


def test_a_chatgpt_answer_handed_off_to_resume_is_read_from_the_resumed_stream_with_its_ids_once(browser, server):
    paired(browser, server)
    app = chat_app("chatgpt")
    app.install(browser.context)
    page = browser.open_chat(app)
    app.answer_next(BAA, handoff=True)
    page.evaluate("mockChat.ask('What next?', {html: %s})" % json.dumps(BAA_HTML))

    [frame] = server.wait_for_frames("browser.final_message")
    browser.pause(2)  # past the page-reading grace period: the page is not read as well
    assert server.frames("browser.final_message") == [frame]
    assert (frame["capture"], frame["text"], frame["conversation_id"]) == ("network", BAA, app.conversation)
    [first_leg] = app.posted
    [resumed] = app.continued
    assert json.loads(resumed.body) == {"conversation_id": app.conversation, "offset": 0}
    assert frame["parent_message_id"] == json.loads(first_leg.body)["messages"][0]["id"]
    assert [frame["message_id"]] == app.message_ids


def test_a_block_claude_retracts_is_never_sent(browser, server):
    paired(browser, server)
    app = chat_app("claude")
    app.install(browser.context)
    page = browser.open_chat(app)
    app.answer_next("I'll only read it.", retracted="Let me clean up.\n\n```baa\nfiles.delete\n{\"path\": \"notes\"}\n```\n")
    page.evaluate("mockChat.ask('Tidy up?', {html: '<p>I\\'ll only read it.</p>'})")

    [frame] = server.wait_for_frames("browser.final_message")
    browser.pause(2)
    assert server.frames("browser.final_message") == [frame]
    assert (frame["capture"], frame["text"]) == ("network", "I'll only read it.")


def test_a_gemini_turn_queued_first_is_read_from_its_stream(browser, server):
    paired(browser, server)
    app = chat_app("gemini")
    app.install(browser.context)
    page = browser.open_chat(app)
    app.answer_next(BAA, queued=True)
    page.evaluate("mockChat.ask('What next?', {html: %s})" % json.dumps(BAA_HTML))

    [frame] = server.wait_for_frames("browser.final_message")
    assert (frame["capture"], frame["text"], frame["conversation_id"]) == ("network", BAA, app.conversation)
    assert frame["message_id"].startswith("r_")


@pytest.mark.parametrize("platform", ["claude", "chatgpt", "gemini"])
def test_the_page_is_read_when_stream_reading_is_off(browser, server, platform):
    paired(browser, server, read_streams=False)
    app = chat_app(platform)
    app.install(browser.context)
    page = browser.open_chat(app)
    app.answer_next(BAA)
    page.evaluate("mockChat.ask('What next?', {html: %s})" % json.dumps(BAA_HTML))

    [frame] = server.wait_for_frames("browser.final_message")
    assert frame["capture"] == "dom"
    assert frame["conversation_id"] == app.conversation
    assert '```baa\necho\n{"step": 1}\n```' in frame["text"]


def test_frames_not_acknowledged_are_sent_again_after_a_reconnect(browser, server):
    server.ack_final_messages = False
    paired(browser, server)
    app = chat_app("claude")
    app.install(browser.context)
    page = browser.open_chat(app)
    app.answer_next("Kept until acknowledged.")
    page.evaluate("mockChat.ask('q', {html: '<p>Kept until acknowledged.</p>'})")
    [first] = server.wait_for_frames("browser.final_message")
    assert [frame["id"] for frame in browser.storage()["outbox"]["frames"]] == [first["id"]]

    server.ack_final_messages = True
    server.close_current(1011)  # the server went away without acknowledging
    frames = server.wait_for_frames("browser.final_message", 2)
    assert frames[1]["id"] == first["id"] and frames[1]["text"] == first["text"]
    assert server.connections == 2


@pytest.mark.parametrize("code", ["server_error", "rate_limited"])
def test_a_frame_the_server_could_not_take_yet_is_sent_again_on_the_same_socket(browser, server, code):
    server.refusals = [code, code]
    paired(browser, server)
    app = chat_app("claude")
    app.install(browser.context)
    page = browser.open_chat(app)
    app.answer_next("Kept until the server can store it.")
    page.evaluate("mockChat.ask('q', {html: '<p>Kept until the server can store it.</p>'})")

    frames = server.wait_for_frames("browser.final_message", 3, timeout=30)
    assert len({frame["id"] for frame in frames}) == 1
    browser.wait_until(lambda: browser.storage()["outbox"]["frames"] == [], "the ack to empty the outbox")
    assert server.connections == 1


def test_frames_not_acknowledged_survive_a_service_worker_restart(browser, server):
    server.ack_final_messages = False
    paired(browser, server)
    app = chat_app("claude")
    app.install(browser.context)
    page = browser.open_chat(app)
    app.answer_next("Kept in storage.")
    page.evaluate("mockChat.ask('q', {html: '<p>Kept in storage.</p>'})")
    [first] = server.wait_for_frames("browser.final_message")

    browser.stop_worker(page)
    # The next answer wakes a new worker, which reconnects and sends both.
    server.ack_final_messages = True
    app.answer_next("After the restart.")
    page.evaluate("mockChat.ask('q', {html: '<p>After the restart.</p>'})")
    frames = server.wait_for_frames("browser.final_message", 3)
    assert server.connections == 2
    assert [(frame["id"], frame["text"]) for frame in frames[1:]][0] == (first["id"], "Kept in storage.")
    assert frames[2]["text"] == "After the restart."


def test_a_repeated_delivery_key_is_posted_once(browser, server):
    paired(browser, server)
    app = chat_app("claude")
    app.install(browser.context)
    browser.open_chat(app)
    request = {
        "method": "POST",
        "url": f"https://claude.ai/api/organizations/{app.organization}/chat_conversations/{app.conversation}/completion",
        "headers": {"Content-Type": "application/json", "anthropic-device-id": "{{page:device_id}}"},
        "body": json.dumps({"prompt": "```baa-result\n{}\n```", "parent_message_uuid": "p-1", "timezone": "{{page:timezone}}"}),
    }
    delivery = {"type": "browser.proxy_delivery", "delivery_key": "task-1", "platform": "claude",
                "conversation_id": app.conversation, "text": "results", "request": request, "timeout_ms": 10_000}
    server.send({**delivery, "request_id": "r-1"})
    [first] = server.wait_for_frames("browser.proxy_delivery.result")
    server.send({**delivery, "request_id": "r-2"})
    results = server.wait_for_frames("browser.proxy_delivery.result", 2)

    assert [(result["request_id"], result["ok"], result["status"]) for result in results] == [
        ("r-1", True, 200), ("r-2", True, 200)], [result["error"] for result in results]
    assert len(app.deliveries()) == 1
    posted = json.loads(app.deliveries()[0].body)
    assert posted["timezone"]  # filled from the page
    assert "anthropic-device-id" not in {name.lower() for name in app.deliveries()[0].headers}


def test_a_request_the_app_refuses_as_automated_is_answered_blocked_and_may_be_posted_again(browser, server):
    paired(browser, server)
    app = chat_app("chatgpt")
    app.install(browser.context)
    browser.open_chat(app)
    app.answer_next('{"detail": "Unusual activity has been detected from your device. Try again later."}', status=403)
    body = {"action": "next", "conversation_id": app.conversation,
            "messages": [{"id": "u-1", "content": {"parts": ["```baa-result\n{}\n```"]}}]}
    request = {"method": "POST", "url": "https://chatgpt.com/backend-api/f/conversation",
               "headers": {"Content-Type": "application/json"}, "body": json.dumps(body)}
    delivery = {"type": "browser.proxy_delivery", "delivery_key": "task-4", "platform": "chatgpt",
                "conversation_id": app.conversation, "text": "results", "request": request, "timeout_ms": 10_000}
    server.send({**delivery, "request_id": "r-1"})
    [refused] = server.wait_for_frames("browser.proxy_delivery.result")
    assert (refused["ok"], refused["status"], refused["error_code"]) == (False, 403, "blocked")
    # Nothing was posted, so nothing is remembered: the retry posts.
    server.send({**delivery, "request_id": "r-2"})
    _, retried = server.wait_for_frames("browser.proxy_delivery.result", 2)
    assert (retried["ok"], retried["status"], "error_code" in retried) == (True, 200, False)
    assert len(app.posted) == 2


def test_a_delivery_opens_the_conversation_when_no_tab_shows_it(browser, server):
    # Playwright routes a tab the extension opens only from its second
    # navigation, so this also proves that a tab which loaded an error page
    # is reloaded once.
    paired(browser, server)
    app = chat_app("chatgpt")
    app.install(browser.context)
    request = {
        "method": "POST", "url": "https://chatgpt.com/backend-api/f/conversation",
        "headers": {"Content-Type": "application/json", "Authorization": "Bearer {{page:access_token}}"},
        "body": json.dumps({"action": "next", "conversation_id": app.conversation, "parent_message_id": "p-1",
                            "messages": [{"id": "u-1", "content": {"parts": ["```baa-result\n{}\n```"]}}]}),
    }
    server.send({"type": "browser.proxy_delivery", "request_id": "r-1", "delivery_key": "task-2", "platform": "chatgpt",
                 "conversation_id": app.conversation, "text": "results", "request": request, "timeout_ms": 20_000})
    [result] = server.wait_for_frames("browser.proxy_delivery.result")
    assert result["ok"] is True, result
    [posted] = app.deliveries()
    assert posted.headers["authorization"] == f"Bearer {app.access_token}"
    assert any(page.url == app.page_url for page in browser.context.pages)


def test_a_page_value_the_page_lacks_is_answered_page_value_missing(browser, server):
    paired(browser, server)
    app = chat_app("gemini")
    app.install(browser.context)
    browser.open_chat(app)
    inner = json.dumps([["results"], None, [app.conversation, "", "{{page:chat_metadata.context_token}}"]])
    request = {"method": "POST", "url": GEMINI_SEND + "?rt=c",
               "headers": {"Content-Type": "application/x-www-form-urlencoded"},
               "body": "at={{page:at_token}}&f.req=" + form_value(json.dumps([None, inner]))}
    server.send({"type": "browser.proxy_delivery", "request_id": "r-1", "delivery_key": "task-3", "platform": "gemini",
                 "conversation_id": app.conversation, "text": "results", "request": request, "timeout_ms": 10_000})
    [result] = server.wait_for_frames("browser.proxy_delivery.result")
    assert result["ok"] is False
    assert result["error_code"] == "page_value_missing"
    assert "chat_metadata.context_token" in result["error"]
    assert app.posted == []


def test_forged_deliveries_are_refused_blocked_make_no_request_and_are_reported(browser, server):
    # What a frame forged on the channel layer asked of a connected plugin
    # (issue 34): a DELETE of the conversation, and a post into another one.
    paired(browser, server)
    app = chat_app("claude")
    app.install(browser.context)
    page = browser.open_chat(app)
    made = []
    page.on("request", lambda request: made.append((request.method, request.url)))
    conversations = f"https://claude.ai/api/organizations/{app.organization}/chat_conversations"
    other = "00000000-0000-4000-8000-000000000000"
    forged = [
        {"method": "DELETE", "url": f"{conversations}/{app.conversation}", "headers": {}, "body": ""},
        {"method": "POST", "url": f"{conversations}/{other}/completion", "headers": {"Content-Type": "application/json"},
         "body": json.dumps({"prompt": "posted as you", "parent_message_uuid": "p-1"})},
    ]
    for number, request in enumerate(forged):
        server.send({"type": "browser.proxy_delivery", "request_id": f"r-{number}", "delivery_key": f"forged-{number}",
                     "platform": "claude", "conversation_id": app.conversation, "text": "x", "request": request,
                     "timeout_ms": 10_000})
    results = server.wait_for_frames("browser.proxy_delivery.result", 2)
    [report] = server.wait_for_frames("browser.adapter_report")

    assert [(result["ok"], result["status"], result["error_code"]) for result in results] == [(False, None, "blocked")] * 2
    assert [result["error"].split(": ", 1)[0] for result in results] == ["the plugin refused this delivery"] * 2
    assert (report["kind"], report["detail"]["method"]) == ("delivery_blocked", "http")
    assert report["detail"]["reason"] in {"refused_method", "refused_conversation"}
    assert app.posted == []
    assert [url for method, url in made if method != "GET" or "chat_conversations" in url] == []


@pytest.mark.parametrize("code", [4401, 4403])
def test_a_refused_token_shows_token_refused_and_stops_reconnecting(browser, code):
    with ScriptedServer(on_hello=lambda hello: code, sleep=browser.pause) as server:
        browser.pair(server.url, "laptop", TOKEN)
        status = browser.wait_for_state("refused")
        assert "token refused" in status["detail"]
        browser.pause(5)
        assert server.connections == 1
        assert browser.badge() == "key"
        assert "token refused" in browser.popup_text()


def test_another_window_taking_over_is_not_fought(browser, server):
    paired(browser, server)
    server.close_current(4409)
    status = browser.wait_for_state("paused")
    assert "took over" in status["detail"]
    browser.pause(5)
    assert server.connections == 1
    assert browser.badge() == "off"


def test_new_options_end_the_hold_off(browser):
    refuse_wrong = lambda hello: 4401 if hello["token"] == "wrong" else None  # noqa: E731
    with ScriptedServer(on_hello=refuse_wrong, sleep=browser.pause) as server:
        browser.pair(server.url, "laptop", "wrong")
        browser.wait_for_state("refused")
        browser.pair(server.url, "laptop", TOKEN)
        browser.wait_for_state("connected")
        assert [hello["token"] for hello in server.hellos] == ["wrong", TOKEN]


def test_a_page_cannot_read_the_token(browser, server):
    paired(browser, server)
    app = chat_app("claude")
    app.install(browser.context)
    # A page script that records every message and event the page can see, from its first moment.
    browser.context.add_init_script("""
        window.__seen = [];
        for (const type of ['message', 'conductor', 'storage']) {
          window.addEventListener(type, (event) => window.__seen.push(JSON.stringify(event.data ?? event.detail ?? null)), true);
        }
    """)
    page = browser.open_chat(app)
    app.answer_next(BAA)
    page.evaluate("mockChat.ask('What next?', {html: %s})" % json.dumps(BAA_HTML))
    server.wait_for_frames("browser.final_message")

    seen = page.evaluate("""() => JSON.stringify({
        seen: window.__seen,
        html: document.documentElement.outerHTML,
        cookie: document.cookie,
        local: Object.entries(localStorage),
        session: Object.entries(sessionStorage),
        globals: Object.keys(window).filter((key) => key.toLowerCase().includes('conductor')),
        chromeStorage: typeof globalThis.chrome?.storage,
        chromeRuntime: typeof globalThis.chrome?.runtime?.sendMessage,
    })""")
    assert TOKEN not in seen
    found = json.loads(seen)
    assert found["chromeStorage"] == "undefined"
    assert found["chromeRuntime"] == "undefined"
    assert found["globals"] == []
