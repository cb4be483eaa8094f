"""An operator runs Conductor from the admin, in real headless Chromium, against a running server.

Debian's ``chromium`` driven by Playwright (``tests/browser.py``). Screenshots go
to ``CONDUCTOR_SCREENSHOT_DIR`` (default ``data/screenshots``).
"""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connections

from automation.kinds import kinds
from automation.models import AutomationTask, TaskStatus
from automation.services import transitions as tr
from automation.wake import wakes_go_to
from conversations.models import Conversation, Message
from core.clock import now_ms
from ingest.frames import parse_final_message
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.services.messages import message_ingest
from conductor_site.simulator import SimulatedPlugin
from pipelines.results_text import parse_results
from tests import factories
from tests.browser import CHROMIUM_ARGS, require_chromium
from tests.factories import PluginClientFactory, TEST_TOKEN, lease_of, task_lease
from tests.server import ROOT, running_server, server_env, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

PASSWORD = "operator-password-1"
TASKS = "/admin/automation/automationtask/"
WAIT = 60


@pytest.fixture
def chromium():
    return require_chromium()


@pytest.fixture
def screenshots():
    folder = Path(os.environ.get("CONDUCTOR_SCREENSHOT_DIR", ROOT / "data" / "screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def served_dir(tmp_path_factory, django_db_setup):
    """The data folder of this module's servers, with the admin's static files collected once for all of them."""
    folder = tmp_path_factory.mktemp("served")
    collect_static(folder)
    return folder


def task_of(kind, message_pk):
    return AutomationTask.objects.filter(kind=kind, message_id=message_pk).order_by("sequence").last()


def final_message(text, message_id):
    return {
        "type": "browser.final_message", "id": message_id, "platform": "claude", "conversation_id": "conv-1",
        "organization_id": "org-1", "message_id": message_id, "title": "Plan the release", "text": text,
    }


def choose_action(page, list_url, pks, action):
    """Tick the rows, choose the action, press Go."""
    page.goto(list_url)
    for pk in pks:
        page.check(f"input[name=_selected_action][value='{pk}']")
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")


def run_action(page, list_url, pks, action):
    """Tick the rows, choose the action, press Go; return the admin's message."""
    choose_action(page, list_url, pks, action)
    return page.locator("ul.messagelist").inner_text()


def collect_static(data_dir):
    """As `make run` does before it serves: the admin's CSS and scripts."""
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
        cwd=ROOT, env=server_env(data_dir), check=True,
    )


def log_in(page, base_url, path="/admin/overview/"):
    page.goto(f"{base_url}{path}")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")


def test_an_operator_approves_pauses_resumes_and_retries_from_the_admin(
    chromium, screenshots, served_dir, tmp_path, monkeypatch,
):
    # Playwright's sync API keeps an event loop in this thread; the ORM calls
    # between its steps are plain synchronous ones.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_superuser("operator", password=PASSWORD)
    PluginClientFactory(client_id="laptop")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    env = {
        "CONDUCTOR_WORKSPACE": str(workspace), "CONDUCTOR_TICK_SECONDS": "0.5",
        "CONDUCTOR_OUTBOUND_JITTER_MAX_MS": "0", "CONDUCTOR_MAX_ATTEMPTS": "1",
    }
    with (
        running_server(served_dir, command="serve+cluster", **env) as server,
        SimulatedPlugin(url=server.ws_url, client_id="laptop", token=TEST_TOKEN) as plugin,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(20_000)

        log_in(page, server.base_url)
        expect(page.locator("h1")).to_contain_text("Overview")

        # 1. A held instruction: the operator approves it and its result reaches the chat.
        ack = plugin.send_final_message(final_message(
            '```baa\nfiles.write\n{"path": "plan.md", "content": "step 1"}\n```', "m1"))
        held = wait_for(lambda: task_of(INSTRUCTION_EXECUTE, int(ack["message_id"])), "the held task")
        assert held.status == TaskStatus.BLOCKED
        page.goto(f"{server.base_url}/admin/overview/")
        expect(page.locator("#blocked-count")).to_have_text("1")
        expect(page.locator("#overview-approval")).to_contain_text("files.write")
        page.screenshot(path=str(screenshots / "overview-held.png"), full_page=True)

        # The approve action shows the exact call, resolved, before anything runs.
        choose_action(page, f"{server.base_url}{TASKS}?status__exact=blocked", [held.pk], "approve")
        expect(page.locator("h1")).to_contain_text("Approve these calls?")
        expect(page.locator(".held-call")).to_contain_text(str((workspace / "plan.md").resolve()))
        page.click(".approval-confirmation input[type=submit]")
        message = page.locator("ul.messagelist").inner_text()
        assert "1" in message and "approve" in message.lower(), message
        delivery = plugin.next_delivery(timeout=WAIT)
        [result] = parse_results(delivery["text"])
        assert (result["tool"], result["ok"], result["result"]["bytes_written"]) == ("files.write", True, 6)
        plugin.answer(delivery)
        wait_for(lambda: task_of(INSTRUCTION_DELIVER, int(ack["message_id"])).status == TaskStatus.SUCCEEDED,
                 "the delivery to succeed")
        assert (workspace / "plan.md").read_text() == "step 1"
        conversation = Conversation.objects.get()
        page.goto(f"{server.base_url}/admin/conversations/conversation/{conversation.pk}/change/")
        expect(page.locator("body")).to_contain_text("Conductor results for 1 block")
        page.screenshot(path=str(screenshots / "conversation.png"), full_page=True)
        delivered = Message.objects.get(source=Message.Source.CONDUCTOR)
        page.goto(f"{server.base_url}/admin/conversations/message/{delivered.pk}/change/")
        expect(page.locator("body")).to_contain_text("baa-result")
        expect(page.locator("body")).to_contain_text('"bytes_written": 6')

        # 2. A paused conversation holds its work; resuming lets it go.
        conversations = f"{server.base_url}/admin/conversations/conversation/"
        assert "paus" in run_action(page, conversations, [conversation.pk], "pause").lower()
        ack = plugin.send_final_message(final_message('```baa\necho\n{"step": 2}\n```', "m2"))
        with pytest.raises(TimeoutError):
            plugin.next_delivery(timeout=3)
        assert task_of(INSTRUCTION_EXECUTE, int(ack["message_id"])).status == TaskStatus.PENDING
        page.goto(f"{server.base_url}{TASKS}?status__exact=pending")
        # The row says what runs: the block's tool and its params.
        expect(page.locator("#result_list")).to_contain_text("echo")
        expect(page.locator("#result_list")).to_contain_text('{"step":2}')
        assert "resum" in run_action(page, conversations, [conversation.pk], "resume").lower()
        delivery = plugin.next_delivery(timeout=WAIT)
        assert parse_results(delivery["text"])[0]["result"] == {"step": 2}
        plugin.answer(delivery)
        wait_for(lambda: task_of(INSTRUCTION_DELIVER, int(ack["message_id"])).status == TaskStatus.SUCCEEDED,
                 "the resumed delivery to succeed")

        # 3. A failed delivery: the operator retries it and it goes out again, same delivery key.
        ack = plugin.send_final_message(final_message('```baa\necho\n{"step": 3}\n```', "m3"))
        first = plugin.next_delivery(timeout=WAIT)
        plugin.answer(first, ok=True, status=500, body="Internal Server Error")
        failed = wait_for(
            lambda: (task := task_of(INSTRUCTION_DELIVER, int(ack["message_id"]))).status == TaskStatus.FAILED
            and task, "the delivery to fail")
        choose_action(page, f"{server.base_url}{TASKS}?status__exact=failed", [failed.pk], "retry")
        expect(page.locator("#bulk-summary")).to_contain_text("1 will be retried (1 failed)")
        page.click("input[type=submit][value='Yes, retry 1 task']")  # the counts first, then the retry
        message = page.locator("ul.messagelist").inner_text()
        assert "Retried 1" in message, message
        second = plugin.next_delivery(timeout=WAIT)
        assert second["delivery_key"] == first["delivery_key"] == failed.pk
        plugin.answer(second)
        wait_for(lambda: AutomationTask.objects.get(pk=failed.pk).status == TaskStatus.SUCCEEDED,
                 "the retried delivery to succeed")
        page.goto(f"{server.base_url}{TASKS}{failed.pk}/change/")
        timeline = page.locator("body")
        expect(timeline).to_contain_text("claude answered HTTP 500")
        expect(timeline).to_contain_text("operator")
        page.screenshot(path=str(screenshots / "task-timeline.png"), full_page=True)
        page.goto(f"{server.base_url}/admin/overview/")
        expect(page.locator(".overview-chart")).to_be_visible()
        page.screenshot(path=str(screenshots / "overview.png"), full_page=True)
        browser.close()
        # Opened while Playwright's loop ran in this thread, so in its context,
        # where the test database's teardown would not close them.
        connections.close_all()

    retry = AutomationTask.objects.get(pk=failed.pk).events.get(action="retry")
    assert retry.actor == "operator"
    assert Message.objects.filter(source=Message.Source.CONDUCTOR).count() == 3
    assert json.loads(AutomationTask.objects.get(pk=failed.pk).result_json)["status"] == 200


def test_the_task_list_and_the_overview_refresh_by_themselves_until_told_not_to(chromium, served_dir, monkeypatch):
    """console/static/console/live.js in real Chromium, its timers driven by Playwright's clock."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_superuser("operator", password=PASSWORD)

    def make_task(status):
        # No dispatcher runs here to wake, and Playwright's loop owns this thread.
        with wakes_go_to(threading.Event()):
            return factories.make_task(status)

    first = make_task(TaskStatus.FAILED)
    with running_server(served_dir) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_default_timeout(20_000)
        page.clock.install()
        fetches = []
        page.on("request", lambda request: request.headers.get("x-conductor-live") and fetches.append(request.url))

        def tick(seconds):
            """Let the page's clock run; then give a fetch it started a moment to show."""
            page.clock.run_for(seconds * 1000)
            page.wait_for_timeout(300)

        def held(seconds=20):
            """No fetch however long the page waits."""
            before = len(fetches)
            tick(seconds)
            assert len(fetches) == before

        def set_visibility(state):
            page.evaluate("""state => {
                Object.defineProperty(document, "visibilityState", {value: state, configurable: true});
                document.dispatchEvent(new Event("visibilitychange"));
            }""", state)

        log_in(page, server.base_url, TASKS)
        expect(page.locator("#result_list")).to_contain_text(first.task_id[:8])
        expect(page.locator("#live-toggle")).to_be_checked()
        page.evaluate("window.notReloaded = true")

        # A new task's row appears without a reload, and the admin's select-all knows it.
        second = make_task(TaskStatus.FAILED)
        tick(5)
        expect(page.locator("#result_list")).to_contain_text(second.task_id[:8])
        assert fetches[-1] == page.url
        assert page.evaluate("window.notReloaded") is True
        page.check("#action-toggle")
        expect(page.locator(f"input.action-select[value='{second.pk}']")).to_be_checked()
        expect(page.locator("span.action-counter")).to_have_text("2 of 2 selected")

        # Checked rows hold the list still: what the operator sees is what gets submitted.
        third = make_task(TaskStatus.FAILED)
        held()
        expect(page.locator("#live-status")).to_have_text("waiting: rows are selected")
        expect(page.locator("#result_list")).not_to_contain_text(third.task_id[:8])
        page.uncheck("#action-toggle")
        tick(5)
        expect(page.locator("#result_list")).to_contain_text(third.task_id[:8])

        # A hidden tab fetches nothing; shown again, it refreshes at once.
        set_visibility("hidden")
        held()
        before = len(fetches)
        set_visibility("visible")
        page.wait_for_timeout(300)
        assert len(fetches) == before + 1

        # Switched off, it stays off, after a reload too; switched on, it refreshes at once.
        page.uncheck("#live-toggle")
        held()
        page.reload()
        expect(page.locator("#live-toggle")).not_to_be_checked()
        held()
        before = len(fetches)
        page.check("#live-toggle")
        page.wait_for_timeout(300)
        assert len(fetches) == before + 1

        # The overview: the blocked count moves by itself.
        page.goto(f"{server.base_url}/admin/overview/")
        expect(page.locator("#blocked-count")).to_have_text("0")
        make_task(TaskStatus.BLOCKED)
        tick(5)
        expect(page.locator("#blocked-count")).to_have_text("1")

        # A session that ended stops it, and the page says so.
        page.context.clear_cookies()
        tick(5)
        expect(page.locator("#live-status")).to_contain_text("stopped: your session has ended")
        held()
        browser.close()
        connections.close_all()


STORY_TEXT = """Checking the release. <script>window.__pwned = 1</script>

```baa
echo
{"step": 1}
```

```baa
files.read
{"path": "missing.md"}
```

```baa
bad header!
```

```baa
shell.run
{"argv": ["ls", "-la"], "cwd": "src"}
```
"""


def test_an_operator_reads_a_conversations_story_and_approves_from_it(
    chromium, screenshots, served_dir, tmp_path, monkeypatch,
):
    """The story of a message whose blocks succeeded, failed, were rejected and wait; approving from it."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_superuser("operator", password=PASSWORD)
    workspace = tmp_path / "workspace"
    (workspace / "src").mkdir(parents=True)
    frame = {"type": "browser.final_message", "platform": "claude", "conversation_id": "conv-story",
             "message_id": "s1", "title": "Release checks", "text": STORY_TEXT}
    ingested = message_ingest(message=parse_final_message(frame), client=PluginClientFactory(client_id="laptop"))
    tasks = {task.payload["tool"]: task for task in AutomationTask.objects.filter(
        kind=INSTRUCTION_EXECUTE, message_id=ingested.message_id)}
    for tool, outcome in (("echo", {"result": {"step": 1}}), ("files.read", {"error": "missing.md: no such file"})):
        task = task_lease(tasks[tool].pk, lease_owner="d1", lease_until=now_ms() + 60_000)
        task = tr.task_start(task.pk, lease=lease_of(task.pk), lease_until=now_ms() + 60_000)
        if "error" in outcome:
            task = tr.task_fail(task.pk, lease=lease_of(task.pk), error=outcome["error"])
        else:
            task = tr.task_succeed(task.pk, lease=lease_of(task.pk), result=outcome["result"])
        kinds.follow_up(task, actor="d1")
    conversation = Conversation.objects.get(remote_id="conv-story")
    with (
        running_server(served_dir, CONDUCTOR_WORKSPACE=str(workspace)) as server,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(20_000)
        story = f"/admin/conversations/conversation/{conversation.pk}/story/"
        log_in(page, server.base_url, story)
        expect(page.locator("h1")).to_contain_text("Story of Release checks")
        expect(page.locator("#story-now")).to_contain_text("1 instruction awaiting approval")
        marks = page.locator(".story-mark-label")
        expect(marks).to_have_count(4)
        for n, (state, words) in enumerate([("ok", "succeeded"), ("failed", "failed"),
                                            ("rejected", "rejected at ingest"), ("held", "held for approval")]):
            expect(page.locator(f".story-mark.{state} .story-mark-label")).to_contain_text(words)
            expect(marks.nth(n)).to_be_visible()
        held = page.locator(".story-block.held")
        expect(held).to_contain_text('["ls", "-la"]')
        expect(held).to_contain_text(str((workspace / "src").resolve()))
        expect(held.get_by_role("button", name="Approve and run")).to_be_visible()
        expect(page.locator(".story-block.failed")).to_contain_text("missing.md: no such file")
        expect(page.locator(".story-block.rejected")).to_contain_text("bad header")
        # The assistant's <script> is text on the page, never run.
        expect(page.locator(".story-message pre.story-text").first).to_contain_text("<script>window.__pwned = 1")
        assert page.evaluate("window.__pwned") is None
        before = screenshots / "story.png"
        page.screenshot(path=str(before), full_page=True)

        held.get_by_role("button", name="Approve and run").click()
        expect(page.locator("ul.messagelist")).to_contain_text("Approved block 4 (shell.run)")
        expect(page.locator("#story-now")).to_contain_text("1 instruction queued")
        expect(page.locator(".story-operator")).to_contain_text("operator approved block 4 (shell.run)")
        after = screenshots / "story-approved.png"
        page.screenshot(path=str(after), full_page=True)
        print(f"screenshots: {before} {after}")

        # What the conversation waits on refreshes by itself, without a reload.
        page.evaluate("window.__notReloaded = true")
        Conversation.objects.filter(pk=conversation.pk).update(paused=True)
        expect(page.locator("#story-now")).to_contain_text("paused", timeout=30_000)
        assert page.evaluate("window.__notReloaded") is True
        browser.close()
        connections.close_all()

    assert AutomationTask.objects.get(pk=tasks["shell.run"].pk).status == TaskStatus.PENDING


def test_an_operator_resumes_from_the_story_and_sees_only_the_actions_a_task_allows(
    chromium, screenshots, served_dir, monkeypatch,
):
    """The story's Resume asks, then resumes; a task's page offers what its status allows; an error retried away."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_superuser("operator", password=PASSWORD)
    conversation = factories.ConversationFactory(title="Night build", paused=True)
    waiting = factories.make_task(TaskStatus.PENDING, conversation_id=conversation.pk)
    failed = factories.make_task(TaskStatus.FAILED, conversation_id=conversation.pk)
    blocked = factories.make_task(TaskStatus.BLOCKED, conversation_id=conversation.pk)
    recovered = factories.make_task(TaskStatus.RETRY_WAIT)  # attempt 1 failed: "flaky"
    later = now_ms()
    task_lease(recovered.pk, lease_owner="d1", lease_until=later + 60_000, now=later)
    tr.task_start(recovered.pk, lease=lease_of(recovered.pk), lease_until=later + 60_000, now=later)
    tr.task_succeed(recovered.pk, lease=lease_of(recovered.pk), result={"ok": 1}, now=later)
    with running_server(served_dir) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(20_000)
        story = f"/admin/conversations/conversation/{conversation.pk}/story/"
        log_in(page, server.base_url, story)
        expect(page.locator("#story-now")).to_contain_text("paused: its tasks are not claimed")

        # Resume asks first; "No" changes nothing.
        page.get_by_role("button", name="Resume…").click()
        expect(page.locator("h1")).to_contain_text("Resume Night build?")
        expect(page.locator("#content-main")).to_contain_text("its 2 open tasks")
        page.get_by_role("link", name="No, take me back").click()
        expect(page.locator("h1")).to_contain_text("Story of Night build")
        assert Conversation.objects.get(pk=conversation.pk).paused
        page.get_by_role("button", name="Resume…").click()
        page.get_by_role("button", name="Yes, resume it").click()
        expect(page.locator("ul.messagelist")).to_contain_text("Resumed: 1 conversation(s).")
        expect(page.locator("#story-now")).not_to_contain_text("paused")
        expect(page.locator("#story-pause")).to_contain_text("Pause…")
        expect(page.locator(".story-log")).to_contain_text("Resumed")
        page.screenshot(path=str(screenshots / "story-resumed.png"), full_page=True)
        assert not Conversation.objects.get(pk=conversation.pk).paused

        # A task's page offers the actions its status allows, and nothing else.
        def offered(task):
            page.goto(f"{server.base_url}{TASKS}{task.pk}/change/")
            menu = page.locator("select[name='CHANGE_FORM-action'] option")
            return [value for value in menu.evaluate_all("options => options.map(o => o.value)") if value]

        assert offered(failed) == ["retry"]
        assert sorted(offered(blocked)) == ["approve", "cancel", "reject"]
        assert offered(waiting) == ["cancel"]
        assert offered(recovered) == []
        expect(page.locator("body")).to_contain_text("Previous error:")
        expect(page.locator("body")).to_contain_text("(attempt 1) flaky")
        expect(page.locator("body")).not_to_contain_text("Last error")
        offered(failed)
        page.screenshot(path=str(screenshots / "task-actions.png"), full_page=True)
        browser.close()
        connections.close_all()

    log = LogEntry.objects.get(object_id=str(conversation.pk))
    assert (log.user.username, log.change_message) == ("operator", "Resumed")
