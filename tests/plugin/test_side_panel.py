"""The side panel and the badge's count in real headless Chromium, against a scripted server peer.

The panel's page (``panel/panel.html?tab=<id>``, in a tab of its own) shows
the blocks of the mock chat's conversation from ``status.get`` and follows
the ``instruction.status`` frames the server pushes (SPEC §6, §9); the badge
counts the owner's blocks waiting for approval. The same with a running
Conductor: ``test_side_panel_round_trip.py``. With ``CONDUCTOR_SCREENSHOT_DIR``
set (``make screenshots``), the panel is pictured in each state.
"""

import copy
import json
import os
from pathlib import Path

import pytest

from tests.plugin.chat_apps import chat_app
from tests.plugin.test_plugin import TOKEN
from tests.server import ROOT

# The plugin against a scripted peer: no database, no channel layer.
pytestmark = pytest.mark.database_free

SERVER_STORY = "/admin/conversations/conversation/7/story/"
HOSTILE = ROOT / "plugin" / "tests" / "fixtures" / "panel" / "instruction-status-hostile.json"
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def block(index, tool, status, *, params='{"path": "."}', error=None, result=None, approve_url=None, at=1):
    return {"index": index, "target": "conductor", "tool": tool, "params_preview": params, "status": status,
            "error": error, "result_preview": result, "approve_url": approve_url, "updated_at": at}


def message(conductor_id, blocks, delivery="none", method=None, error=None):
    return {"message_id": f"msg-{conductor_id}", "conductor_message_id": conductor_id, "blocks": blocks,
            "delivery": {"status": delivery, "method": method, "error": error}}


def pushed(app, msg, approvals=0, conversation=None):
    return {"type": "instruction.status", "platform": app.name, "conversation_id": conversation or app.conversation,
            "message": msg, "approvals_waiting": approvals}


def connected_chat(browser, server, platform="claude"):
    """A paired plugin and the mock app's conversation in a tab."""
    browser.pair(server.url, "laptop", TOKEN)
    browser.wait_for_state("connected")
    app = chat_app(platform)
    app.install(browser.context)
    return app, browser.open_chat(app)


def blocks_shown(panel):
    """Each block the panel shows: its message, index, status, chip and tool."""
    return panel.evaluate("""[...document.querySelectorAll('.block')].map((b) => [
        b.closest('.message').dataset.conductorMessageId, Number(b.dataset.index), b.dataset.status,
        b.querySelector('.chip').textContent, b.querySelector('.tool').textContent])""")


def statuses(panel):
    return [(shown[0], shown[1], shown[2]) for shown in blocks_shown(panel)]


def wait_for_statuses(browser, panel, expected, what):
    browser.wait_until(lambda: statuses(panel) == expected, f"{what} (the panel shows {statuses(panel)})")


def text_of(panel, selector):
    return panel.evaluate("(s) => document.querySelector(s)?.textContent ?? null", selector)


def test_the_panel_fills_from_status_get_and_follows_each_push_live(browser, server):
    app, page = connected_chat(browser, server)
    server.conversation_status[app.conversation] = {"messages": [
        message("1", [block(1, "echo", "succeeded", result='{"step": 1}')], delivery="delivered", method="http"),
        message("2", [block(1, "echo", "queued"), block(2, "files.list", "queued")]),
    ]}
    panel = browser.open_panel(browser.tab_id(page))

    wait_for_statuses(browser, panel, [("1", 1, "succeeded"), ("2", 1, "queued"), ("2", 2, "queued")], "the status")
    [asked] = server.frames("status.get")
    assert asked == {"type": "status.get", "id": asked["id"], "platform": "claude", "conversation_id": app.conversation}
    assert text_of(panel, ".message .result") == '{"step": 1}'
    assert text_of(panel, '[data-conductor-message-id="1"] .delivery') == "Results delivered via http"
    assert "Claude conversation " + app.conversation == text_of(panel, "#conversation")

    server.send(pushed(app, message("2", [block(1, "echo", "running", at=2), block(2, "files.list", "queued")])))
    wait_for_statuses(browser, panel, [("1", 1, "succeeded"), ("2", 1, "running"), ("2", 2, "queued")], "running")
    server.send(pushed(app, message("2", [block(1, "echo", "succeeded", result="{}", at=3),
                                          block(2, "files.list", "failed", error="no such folder: x\nTraceback", at=3)],
                                    delivery="running")))
    wait_for_statuses(browser, panel, [("1", 1, "succeeded"), ("2", 1, "succeeded"), ("2", 2, "failed")], "failed")
    assert text_of(panel, '[data-index="2"] .error') == "no such folder: x"
    assert text_of(panel, '[data-index="2"] .chip') == "failed"
    # A new message comes last; another conversation's stays out of this one's panel.
    server.send(pushed(app, message("9", [block(1, "echo", "queued")]), conversation="another-conversation"))
    server.send(pushed(app, message("3", [block(1, "shell.run", "waiting_approval",
                                               approve_url=f"{server.url}{SERVER_STORY}#t")]), approvals=1))
    wait_for_statuses(browser, panel, [("1", 1, "succeeded"), ("2", 1, "succeeded"), ("2", 2, "failed"),
                                       ("3", 1, "waiting_approval")], "the new message")
    assert blocks_shown(panel)[-1][3] == "waiting for approval"
    assert text_of(panel, "#approvals") == "1 block waits for approval across your conversations."


def test_the_badge_counts_the_owners_blocks_waiting_for_approval(browser, server):
    server.approvals_waiting = 2
    app, page = connected_chat(browser, server)
    browser.wait_until(lambda: browser.badge() == "2", f"the badge to read 2 (it reads {browser.badge()!r})")
    title = browser.worker.evaluate("chrome.action.getTitle({})")
    assert title == "Conductor: connected; 2 blocks wait for approval"

    # Any conversation of the owner's counts, the one in the active tab or not.
    server.send(pushed(app, message("5", [block(1, "shell.run", "waiting_approval")]), approvals=3,
                       conversation="another-conversation"))
    browser.wait_until(lambda: browser.badge() == "3", "the badge to read 3")
    server.send(pushed(app, message("5", [block(1, "shell.run", "running", at=2)]), approvals=0,
                       conversation="another-conversation"))
    browser.wait_until(lambda: browser.badge() == "on", "the badge to show the connection again")

    # Read in an extension page too, as a person's popup would.
    popup = browser.open_popup()
    assert popup.evaluate("chrome.action.getBadgeText({})") == "on"


def test_hostile_strings_show_as_text_bounded_and_without_bidi_controls(browser, server):
    app, page = connected_chat(browser, server)
    panel = browser.open_panel(browser.tab_id(page))
    dialogs = []
    panel.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    browser.wait_in_extension_page(panel, "document.getElementById('empty').hidden === false", "the empty conversation")

    frame = json.loads(HOSTILE.read_text())
    frame["conversation_id"] = app.conversation
    frame["message"]["blocks"][1]["error"] = "\u202e" + "E" * 10_000 + "\nsecond line"
    frame["message"]["blocks"][1]["status"] = "failed"
    server.send(frame)

    browser.wait_until(lambda: len(blocks_shown(panel)) == 4, "the hostile message")
    tools = [shown[4] for shown in blocks_shown(panel)]
    assert tools[0] == "<img src=x onerror=alert(1)>"
    assert tools[1] == "evil::שלום"
    assert panel.evaluate("document.querySelectorAll('#messages img, #messages script, #messages b, #messages i').length") == 0
    assert text_of(panel, '[data-index="1"] .error') == "gnp.exe <img src=x onerror=alert(3)>"
    long_error = text_of(panel, '[data-index="2"] .error')
    assert len(long_error) == 300 and long_error.endswith("…")
    everything = panel.evaluate("document.body.textContent")
    assert not set(BIDI) & set(everything)
    # A javascript: approval URL opens nothing; a status the panel does not know is shown as unknown.
    assert panel.evaluate("document.querySelectorAll('a.approve').length") == 0
    assert blocks_shown(panel)[3][2:4] == ["unknown", "unknown"]
    assert text_of(panel, ".delivery") == "Results not delivered: <img src=x onerror=alert(6)>"
    panel.wait_for_timeout(300)
    assert dialogs == []


def test_pause_and_resume_send_their_frames_and_show_the_answer(browser, server):
    app, page = connected_chat(browser, server)
    server.conversation_status[app.conversation] = {"messages": [message("1", [block(1, "echo", "queued")])]}
    panel = browser.open_panel(browser.tab_id(page))
    wait_for_statuses(browser, panel, [("1", 1, "queued")], "the status")
    assert text_of(panel, "#pause") == "Pause"

    panel.click("#pause")
    [pause] = server.wait_for_frames("conversation.pause")
    assert pause == {"type": "conversation.pause", "id": pause["id"], "platform": "claude", "conversation_id": app.conversation}
    browser.wait_in_extension_page(panel, "document.getElementById('pause').textContent === 'Resume'", "Resume")
    assert panel.is_visible("#paused-note")

    panel.click("#pause")
    [resume] = server.wait_for_frames("conversation.resume")
    assert resume["conversation_id"] == app.conversation
    browser.wait_in_extension_page(panel, "document.getElementById('pause').textContent === 'Pause'", "Pause again")
    assert not panel.is_visible("#paused-note")
    # The ack went to the question, not to the outbox.
    assert browser.storage().get("outbox", {}).get("frames", []) == []


def test_a_refused_pause_says_why_and_changes_nothing(browser, server):
    server.pause_error = "invalid"
    app, page = connected_chat(browser, server)
    server.conversation_status[app.conversation] = {"paused": False, "messages": []}
    panel = browser.open_panel(browser.tab_id(page))
    browser.wait_in_extension_page(panel, "!document.getElementById('pause').disabled", "the panel to be ready")

    panel.click("#pause")

    browser.wait_in_extension_page(panel, "document.getElementById('outcome').textContent !== ''", "the outcome")
    assert text_of(panel, "#outcome") == "Not changed: the server refused: scripted pause refusal (invalid)."
    assert text_of(panel, "#pause") == "Pause"


def test_after_a_reconnect_the_panel_asks_again(browser, server):
    app, page = connected_chat(browser, server)
    server.conversation_status[app.conversation] = {"messages": [message("1", [block(1, "echo", "running")])]}
    panel = browser.open_panel(browser.tab_id(page))
    wait_for_statuses(browser, panel, [("1", 1, "running")], "the status")

    # Meanwhile the block finished, and the push was lost with the socket.
    server.conversation_status[app.conversation] = {"messages": [message("1", [block(1, "echo", "succeeded", at=5)])]}
    server.close_current(1012)

    server.wait_for_frames("status.get", count=2)
    wait_for_statuses(browser, panel, [("1", 1, "succeeded")], "the status asked again")


def test_the_panel_follows_its_tab_to_another_conversation_and_the_active_tab(browser, server):
    app, page = connected_chat(browser, server)
    other = "0b7e4a52-9d1f-4c3a-8e2b-5f6a7b8c9d0e"
    server.conversation_status[app.conversation] = {"messages": [message("1", [block(1, "echo", "succeeded")])]}
    server.conversation_status[other] = {"messages": [message("7", [block(1, "files.list", "queued")])]}
    panel = browser.open_panel(browser.tab_id(page))
    wait_for_statuses(browser, panel, [("1", 1, "succeeded")], "the first conversation")

    # The app moves to another chat without loading a page.
    page.evaluate("(id) => history.pushState({}, '', '/chat/' + id)", other)
    wait_for_statuses(browser, panel, [("7", 1, "queued")], "the other conversation")
    assert server.frames("status.get")[-1]["conversation_id"] == other

    # Not pinned: the active tab of its window. The panel's own tab is no chat; the chat's is.
    follower = browser.open_panel()
    browser.wait_in_extension_page(follower, "document.getElementById('notice').textContent.startsWith('This tab is not a chat')",
                                   "the panel to say its tab is no chat")
    page.bring_to_front()
    wait_for_statuses(browser, follower, [("7", 1, "queued")], "the panel to follow the active tab")


def test_the_popups_button_opens_chromes_side_panel_which_follows_the_active_chat(browser, server):
    app, page = connected_chat(browser, server)
    server.conversation_status[app.conversation] = {"messages": [message("1", [block(1, "echo", "queued")])]}
    popup = browser.context.new_page()
    popup.goto(browser.extension_url("popup/popup.html"))

    popup.click("#open-panel")  # a person's click: sidePanel.open needs its user gesture

    # The popup closes; the panel, in Chrome's side panel, reads the chat now active in its window.
    browser.wait_until(popup.is_closed, "the popup to close")
    [asked] = server.wait_for_frames("status.get")
    assert (asked["platform"], asked["conversation_id"]) == ("claude", app.conversation)
    cdp = browser.context.new_cdp_session(page)
    try:
        targets = [target["url"] for target in cdp.send("Target.getTargets")["targetInfos"]]
    finally:
        cdp.detach()
    assert browser.extension_url("panel/panel.html") in targets


def test_approve_in_conductor_opens_the_approval_page_on_the_paired_server(browser, server):
    app, page = connected_chat(browser, server)
    # As a proxy in front of the server may write it: another scheme and host.
    approve = f"https://conductor.proxy.example{SERVER_STORY}?from=panel#task-abc"
    server.conversation_status[app.conversation] = {"messages": [
        message("1", [block(1, "shell.run", "waiting_approval", params='{"command": "make test"}', approve_url=approve)])]}
    panel = browser.open_panel(browser.tab_id(page))
    wait_for_statuses(browser, panel, [("1", 1, "waiting_approval")], "the status")
    expected = f"{server.url}{SERVER_STORY}?from=panel#task-abc"
    assert panel.get_attribute("a.approve", "href") == expected

    with browser.context.expect_page() as opened:
        panel.evaluate("document.querySelector('a.approve').click()")
    assert opened.value.url == expected


def test_the_panel_says_why_a_block_and_a_delivery_wait_and_counts_results_not_delivered(browser, server):
    app, page = connected_chat(browser, server)
    approve = f"https://conductor.proxy.example{SERVER_STORY}?task=41#block-2"
    held = {"code": "earlier_block", "approval": True, "message_id": "msg-1", "conductor_message_id": "1", "index": 2, "approve_url": approve}
    first = message("1", [block(1, "echo", "succeeded", result="{}"),
                          block(2, "shell.run", "waiting_approval", approve_url=approve)])
    first["blocks"][1]["waiting_for"] = {"code": "approval"}
    second = message("2", [block(1, "echo", "queued"), block(2, "echo", "queued")])
    second["blocks"][0]["waiting_for"] = held
    second["blocks"][1]["waiting_for"] = {"code": "paused", "paused": "conversation"}
    retried = message("3", [block(1, "echo", "succeeded", result="{}")], delivery="delivered", method="http")
    retried["delivery"].update(results_not_delivered=2, waiting_for={"code": "no_plugin"})
    server.conversation_status[app.conversation] = {"messages": [first, second, retried]}
    panel = browser.open_panel(browser.tab_id(page))
    wait_for_statuses(browser, panel, [("1", 1, "succeeded"), ("1", 2, "waiting_approval"), ("2", 1, "queued"),
                                       ("2", 2, "queued"), ("3", 1, "succeeded")], "the status")

    assert text_of(panel, '[data-conductor-message-id="1"] .waiting-for') is None
    line = '[data-conductor-message-id="2"] [data-index="1"] .waiting-for'
    assert text_of(panel, line) == "waits for block 2 of an earlier message, which waits for your approval: approve it"
    assert text_of(panel, '[data-conductor-message-id="2"] [data-index="2"] .waiting-for') == "waits: the conversation is paused"
    assert text_of(panel, '[data-conductor-message-id="3"] .delivery') == "2 results not yet delivered"
    assert text_of(panel, '[data-conductor-message-id="3"] .delivery-waiting-for') == (
        "waits: the plugin that delivers it is not connected")
    expected = f"{server.url}{SERVER_STORY}?task=41#block-2"
    with browser.context.expect_page() as opened:
        panel.evaluate("(s) => document.querySelector(s).click()", f"{line} a.approve-ahead")
    assert opened.value.url == expected


def test_no_chat_tab_and_a_new_chat_say_so(browser, server):
    app, page = connected_chat(browser, server)
    page.evaluate("history.pushState({}, '', '/new')")
    panel = browser.open_panel(browser.tab_id(page))
    browser.wait_in_extension_page(panel, "document.getElementById('notice').textContent.startsWith('A new chat')", "a new chat")
    assert panel.is_disabled("#pause") and not panel.is_disabled("#insert-guide")
    assert server.frames("status.get") == []


@pytest.mark.parametrize("platform,reason", [("chatgpt", "moderation_blocked"), ("claude", "refused")])
def test_an_answer_its_app_withdrew_is_never_sent_and_the_panel_says_so(browser, server, platform, reason):
    app, page = connected_chat(browser, server, platform)
    panel = browser.open_panel(browser.tab_id(page))
    browser.wait_in_extension_page(panel, "!document.getElementById('pause').disabled", "the panel to be ready")
    assert panel.is_hidden("#answer-note")
    # ChatGPT's moderation blocks the whole answer after it streamed; Claude ends it with a refusal (PLATFORMS.md 2026-12-07).
    app.answer_next("I'll tidy up.\n\n```baa\nfiles.delete\n{\"path\": \"notes\"}\n```\n", withdrawn=True)
    page.evaluate("mockChat.ask('Tidy up?', {html: '<p>I\\'ll tidy up.</p>'})")

    browser.wait_in_extension_page(panel, "!document.getElementById('answer-note').hidden", "the note on the withdrawn answer")
    note = text_of(panel, "#answer-note")
    assert "was not sent to Conductor" in note and "None of its blocks runs" in note
    [report] = server.wait_for_frames("browser.adapter_report")
    assert (report["kind"], report["detail"]["reason"]) == ("stream_incomplete", reason)
    browser.pause(2)  # past the page-reading grace period: the page, which shows the answer, is not read either
    assert server.frames("browser.final_message") == []


def test_insert_tool_guide_from_the_panel_fills_the_composer(browser, server):
    app, page = connected_chat(browser, server)
    panel = browser.open_panel(browser.tab_id(page))
    browser.wait_in_extension_page(panel, "!document.getElementById('insert-guide').disabled", "the panel to be ready")

    panel.evaluate("document.getElementById('insert-guide').click()")

    browser.wait_in_extension_page(panel, "document.getElementById('outcome').textContent.startsWith('Tool guide')", "the guide")
    assert page.evaluate("mockChat.draft()") == server.guide_text


# ---- the notification option ----------------------------------------------
# Chrome's permission prompt cannot be answered from a test: the prompt's
# answer (chrome.permissions.request, .contains) is stubbed in the page or
# the worker, and everything after it is the plugin's own code.


def test_the_notification_option_stays_off_when_chrome_refuses_it(browser, server):
    options = browser.open_options()
    options.evaluate("chrome.permissions.request = async () => false")

    options.click("#notify-approvals")

    browser.wait_in_extension_page(options, "document.getElementById('notify-outcome').textContent !== ''", "the outcome")
    assert text_of(options, "#notify-outcome") == "Off: Chrome did not allow notifications."
    assert not options.is_checked("#notify-approvals")
    assert browser.storage().get("notifyApprovals") is False


def test_the_notification_option_is_saved_at_once_without_a_reconnect(browser, server):
    app, page = connected_chat(browser, server)
    options = browser.open_options()
    options.evaluate("chrome.permissions.request = async () => true")

    options.click("#notify-approvals")

    browser.wait_until(lambda: browser.storage().get("notifyApprovals") is True, "the option to be saved")
    assert text_of(options, "#notify-outcome") == "On: a notification says when a block starts waiting for approval."
    browser.pause(0.5)
    assert server.connections == 1


def test_a_block_that_starts_waiting_is_notified_once_and_only_with_the_option_on(browser, server):
    app, page = connected_chat(browser, server)
    browser.worker.evaluate("""(() => {
        globalThis.notified = [];
        chrome.permissions.contains = async () => true;
        chrome.notifications = { create: async (id, options) => { notified.push(options); return id; } };
    })()""")
    waiting = pushed(app, message("1", [block(1, "shell.run", "waiting_approval", params='{"command": "<b>ls</b>"}',
                                              approve_url=f"{server.url}{SERVER_STORY}")]), approvals=1)

    server.send(waiting)  # the option is off
    browser.wait_until(lambda: browser.badge() == "1", "the badge to count it")
    browser.pause(0.3)
    assert browser.worker.evaluate("notified") == []

    browser.worker.evaluate("chrome.storage.local.set({notifyApprovals: true})")
    second = copy.deepcopy(waiting)
    second["message"]["conductor_message_id"] = "2"
    for frame in (second, second):
        server.send(frame)
    browser.wait_until(lambda: browser.worker.evaluate("notified.length") >= 1, "the notification")
    browser.pause(0.3)
    [notification] = browser.worker.evaluate("notified")
    assert notification["title"] == "shell.run waits for approval"
    assert notification["message"] == 'In a claude conversation. {"command": "<b>ls</b>"} Approve it in Conductor (the side panel links to it).'
    assert notification["type"] == "basic"


# ---- the pictures in docs/img ----------------------------------------------

STATES = {
    "queued": ([("echo", "queued", None), ("files.list", "queued", None), ("shell.run", "queued", None)], "none"),
    "running": ([("echo", "succeeded", '{"note": "checking the tests"}'), ("files.list", "running", None),
                 ("shell.run", "queued", None)], "none"),
    "waiting": ([("echo", "succeeded", '{"note": "checking the tests"}'),
                 ("files.list", "succeeded", '[{"name": "Makefile", "size": 4211}, {"name": "README.md", "size": 2380}]'),
                 ("shell.run", "waiting_approval", None)], "none"),
    "succeeded": ([("echo", "succeeded", '{"note": "checking the tests"}'),
                   ("files.list", "succeeded", '[{"name": "Makefile", "size": 4211}, {"name": "README.md", "size": 2380}]'),
                   ("shell.run", "succeeded", '{"exit_code": 0, "stdout": "1248 passed in 312.4s"}')], "delivered"),
    "failed": ([("echo", "succeeded", '{"note": "checking the tests"}'),
                ("files.list", "succeeded", '[{"name": "Makefile", "size": 4211}, {"name": "README.md", "size": 2380}]'),
                ("shell.run", "failed", None)], "delivered"),
}
PARAMS = {"echo": '{"note": "checking the tests"}', "files.list": '{"path": "."}', "shell.run": '{"command": "make test"}'}


def screenshot_dir() -> Path:
    """Where the pictures go, as the other browser tests put theirs (``CONDUCTOR_SCREENSHOT_DIR``)."""
    folder = Path(os.environ.get("CONDUCTOR_SCREENSHOT_DIR", ROOT / "data" / "screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_the_panel_in_each_state_is_pictured(browser, server):
    app, page = connected_chat(browser, server)
    earlier = message("40", [block(1, "files.read", "succeeded", params='{"path": "notes.md"}', result='"Plans for the release"')],
                      delivery="delivered", method="http")
    server.conversation_status[app.conversation] = {"messages": [earlier]}
    panel = browser.open_panel(browser.tab_id(page))
    wait_for_statuses(browser, panel, [("40", 1, "succeeded")], "the earlier message")
    folder = screenshot_dir()

    for at, (state, (blocks, delivery)) in enumerate(STATES.items(), start=1):
        shown = [block(index, tool, status, params=PARAMS[tool], result=result, at=at,
                       error="exit status 2: make: *** No rule to make target 'tset'." if status == "failed" else None,
                       approve_url=f"{server.url}{SERVER_STORY}#task-41" if status == "waiting_approval" else None)
                 for index, (tool, status, result) in enumerate(blocks, start=1)]
        waiting = sum(1 for _, status, _ in blocks if status == "waiting_approval")
        server.send(pushed(app, message("41", copy.deepcopy(shown), delivery=delivery,
                                        method="http" if delivery == "delivered" else None), approvals=waiting))
        expected = [("40", 1, "succeeded")] + [("41", index, status) for index, (_, status, _) in enumerate(blocks, start=1)]
        wait_for_statuses(browser, panel, expected, f"the {state} state")
        browser.wait_until(lambda: bool(waiting) == panel.is_visible("#approvals"), "the count of approvals")
        panel.screenshot(path=str(folder / f"side-panel-{state}.png"))
        assert (folder / f"side-panel-{state}.png").stat().st_size > 0
