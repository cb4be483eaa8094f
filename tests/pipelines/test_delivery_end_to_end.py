"""The whole loop over real sockets, against two servers started as ``make run`` starts one.

Each server is daphne plus a django-q2 cluster. On the embedded default they
share the SQLite database and the channels-lite layer; with DATABASE_URL and
REDIS_URL set, PostgreSQL and Redis. A simulated plugin says hello to one
server or the other, and deliveries find it wherever it is.
"""

import contextlib
import datetime as dt
import io
import time

import pytest
from django.core.management import call_command
from django.db import connections
from django.utils import timezone

from automation.models import AutomationTask, TaskStatus
from automation.services.dispatcher_state import dispatcher_pause_set
from conversations.models import Conversation, Message
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.models import DeliveryRequest
from conductor_site.simulator import SimulatedPlugin
from ingest.selectors.clients import plugin_client_is_connected
from pipelines.results_text import parse_results
from pipelines.renewal import RENEWAL_DELIVER
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.server import running_server, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

FAST = {
    "CONDUCTOR_TICK_SECONDS": "0.5",
    "CONDUCTOR_OUTBOUND_JITTER_MAX_MS": "0",
    "CONDUCTOR_RETRY_BACKOFF_SECONDS": "1",
    "CONDUCTOR_RETRY_JITTER_MAX_MS": "0",
    "CONDUCTOR_DELIVERY_TIMEOUT_SECONDS": "10",
}
WAIT = 60


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("workspace")
    (root / "notes.md").write_text("- ship it\n")
    return root


@pytest.fixture(scope="module")
def servers(django_db_setup, django_db_blocker, tmp_path_factory, workspace):
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(running_server(
                tmp_path_factory.mktemp(f"server{n}"), command="serve+cluster",
                CONDUCTOR_WORKSPACE=str(workspace), **FAST,
            ))
            for n in (1, 2)
        ]
    # The clusters kept ticking after the last test's flush (the run lease,
    # tick records): leave the databases as the next module expects them.
    with django_db_blocker.unblock():
        for alias in connections:
            call_command("flush", interactive=False, database=alias, verbosity=0)


@pytest.fixture(autouse=True)
def client(db):
    return PluginClientFactory(client_id="laptop")


def plugin(server) -> SimulatedPlugin:
    return SimulatedPlugin(url=server.ws_url, client_id="laptop", token=TEST_TOKEN)


def final_message(text, message_id="m1", frame_id="f1"):
    return {
        "type": "browser.final_message", "id": frame_id, "platform": "claude", "conversation_id": "conv-1",
        "organization_id": "org-1", "message_id": message_id, "text": text,
        "page_url": "https://claude.ai/chat/conv-1",
    }


def block(tool, params="{}"):
    return f"```baa\n{tool}\n{params}\n```"


def delivery_task():
    return AutomationTask.objects.get(kind=INSTRUCTION_DELIVER)


def test_a_message_comes_back_as_one_delivery_with_every_result_in_order(servers):
    text = "\n".join([
        block("echo", '{"n": 1}'),
        block("files.read", '{"path": "missing.md"}'),
        block("files.delete", '{"path": "notes.md"}'),
        block("files.read", '{"path": "../../etc/passwd"}'),
        block("files.read", '{"path": "notes.md"}'),
    ])
    with plugin(servers[1]) as browser:
        assert browser.send_final_message(final_message(text))["instructions"] == 5
        delivery = browser.next_delivery(timeout=WAIT)

        task = delivery_task()
        assert delivery["delivery_key"] == task.pk
        assert (delivery["platform"], delivery["conversation_id"]) == ("claude", "conv-1")
        # The page the conversation was seen on, for the plugin to find or open.
        assert delivery["page_url"] == "https://claude.ai/chat/conv-1"
        assert delivery["request"]["url"].endswith("/organizations/org-1/chat_conversations/conv-1/completion")
        results = parse_results(delivery["text"])
        assert [(r["block"], r["tool"], r["ok"]) for r in results] == [
            (1, "echo", True), (2, "files.read", False), (3, "files.delete", False),
            (4, "files.read", False), (5, "files.read", True),
        ]
        assert results[0]["result"] == {"n": 1}
        assert results[1]["error"] == "missing.md: no such file or folder"
        assert results[2]["status"] == "rejected" and "unknown tool 'files.delete'" in results[2]["error"]
        assert "leads outside the workspace" in results[3]["error"]
        assert results[4]["result"]["text"] == "- ship it\n"

        browser.answer(delivery, status=200)
        wait_for(lambda: delivery_task().status == TaskStatus.SUCCEEDED, "the delivery to succeed")
    assert delivery_task().attempt_count == 1
    stored = Message.objects.get(source=Message.Source.CONDUCTOR)
    assert (stored.role, stored.text) == ("user", delivery["text"])


def test_a_failed_delivery_is_retried_with_the_same_key_and_the_tool_does_not_run_again(servers):
    with plugin(servers[0]) as browser:
        browser.send_final_message(final_message(block("echo", '{"once": true}')))
        first = browser.next_delivery(timeout=WAIT)
        browser.answer(first, ok=True, status=529, body='{"error": {"type": "overloaded_error"}}')
        second = browser.next_delivery(timeout=WAIT)
        assert second["delivery_key"] == first["delivery_key"]
        assert second["request_id"] != first["request_id"]
        assert second["request"] == first["request"]
        browser.answer(second, status=200)
        wait_for(lambda: delivery_task().status == TaskStatus.SUCCEEDED, "the delivery to succeed")

    task = delivery_task()
    assert task.attempt_count == 2
    assert "claude answered HTTP 529" in task.events.get(action="retry_later").error
    execute = AutomationTask.objects.get(kind=INSTRUCTION_EXECUTE)
    assert (execute.status, execute.attempt_count, execute.events.filter(action="start").count()) == (
        TaskStatus.SUCCEEDED, 1, 1,
    )


def test_an_offline_plugin_gets_its_delivery_after_it_reconnects_with_no_attempt_used(servers):
    dispatcher_pause_set(is_paused=True, actor="test")
    with plugin(servers[0]) as browser:
        browser.send_final_message(final_message(block("time.now")))
    # The socket's close reaches the server a moment later: a delivery started
    # before it did would use an attempt, as one cut mid-delivery does.
    wait_for(lambda: not plugin_client_is_connected(client_id="laptop"), "the server to see the plugin gone")
    dispatcher_pause_set(is_paused=False, actor="test")
    wait_for(lambda: AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER).exists(), "the delivery task")
    time.sleep(2)  # four ticks: none may claim it while the plugin is away
    task = delivery_task()
    assert (task.status, task.attempt_count) == (TaskStatus.PENDING, 0)
    assert not DeliveryRequest.objects.exists()

    with plugin(servers[1]) as browser:
        delivery = browser.next_delivery(timeout=WAIT)
        assert delivery["delivery_key"] == task.pk
        browser.answer(delivery)
        wait_for(lambda: delivery_task().status == TaskStatus.SUCCEEDED, "the delivery to succeed")
    assert delivery_task().attempt_count == 1


def test_a_plugin_that_disconnects_mid_delivery_gets_it_again_after_reconnecting(servers):
    with plugin(servers[1]) as browser:
        browser.send_final_message(final_message(block("echo")))
        first = browser.next_delivery(timeout=WAIT)
    # Closed without answering: the request is abandoned at once, not after its timeout.
    wait_for(lambda: delivery_task().status == TaskStatus.RETRY_WAIT, "the delivery to wait for a retry", timeout=8)
    assert "disconnected before answering" in delivery_task().last_error

    with plugin(servers[0]) as browser:
        second = browser.next_delivery(timeout=WAIT)
        assert second["delivery_key"] == first["delivery_key"]
        browser.answer(second)
        wait_for(lambda: delivery_task().status == TaskStatus.SUCCEEDED, "the delivery to succeed")
    assert Message.objects.filter(source=Message.Source.CONDUCTOR).count() == 1


def test_the_demo_replays_a_fixture_and_answers_every_delivery(servers, workspace, settings):
    settings.CONDUCTOR_WORKSPACE = workspace
    out = io.StringIO()
    call_command("demo", url=servers[0].ws_url, approve=True, stdout=out)
    text = out.getvalue()
    assert "✓ approved shell.run, files.write (--approve)" in text
    assert "5 deliveries answered." in text
    assert "✓ block 2 files.read: {\"path\": \"notes/todo.md\"" in text
    assert "✗ block 2 files.delete: rejected: unknown tool 'files.delete'" in text
    assert AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER, status=TaskStatus.SUCCEEDED).count() == 5
    assert Message.objects.filter(source=Message.Source.CONDUCTOR).count() == 5


def test_an_idle_conversation_is_renewed_through_its_plugin(servers):
    with plugin(servers[1]) as browser:
        browser.send_final_message(final_message("Done for today; no blocks."))
        an_hour_ago = timezone.now() - dt.timedelta(hours=1)
        Conversation.objects.update(
            renewal_enabled=True, renewal_text="Keep going, please.", last_activity_at=an_hour_ago,
        )
        out = io.StringIO()
        call_command("renew", stdout=out)
        assert "1 created" in out.getvalue()

        delivery = browser.next_delivery(timeout=WAIT)
        assert delivery["text"] == "Keep going, please."
        browser.answer(delivery)
        wait_for(lambda: AutomationTask.objects.get(kind=RENEWAL_DELIVER).status == TaskStatus.SUCCEEDED,
                 "the renewal to be delivered")
    assert Message.objects.get(source=Message.Source.CONDUCTOR).text == "Keep going, please."


def test_every_retried_blocks_result_comes_back_once_after_the_operator_retries_from_the_admin(servers):
    """The issue's message: shell.run A rejected, shell.run B cancelled, files.read C failed by itself."""
    from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
    from django.contrib.auth.models import User
    from django.test import Client

    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="pw"))

    def act(action, *tasks, **extra):
        data = {"action": action, ACTION_CHECKBOX_NAME: [t.pk for t in tasks], "post": "yes", **extra}
        assert admin.post("/admin/automation/automationtask/", data, follow=True).status_code == 200

    def blocks_of(delivery):
        return [(r["block"], r["tool"], r["ok"]) for r in parse_results(delivery["text"])]

    text = "\n".join([
        block("shell.run", '{"argv": ["sh", "-c", "echo A"]}'), block("shell.run", '{"argv": ["sh", "-c", "echo B"]}'),
        block("files.read", '{"path": "missing.md"}'),
    ])
    with plugin(servers[0]) as browser:
        browser.send_final_message(final_message(text))
        a, b, c = AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE).order_by("sequence")
        act("reject", a, reason="not now")
        act("cancel", b)
        first = browser.next_delivery(timeout=WAIT)  # C ran once nothing held it, and failed
        assert blocks_of(first) == [(1, "shell.run", False), (2, "shell.run", False), (3, "files.read", False)]
        browser.answer(first, status=200)

        act("retry", a, b, c)  # A and B wait for an approval again
        act("approve", a, b)
        follow_up = browser.next_delivery(timeout=WAIT)
        assert blocks_of(follow_up) == [(1, "shell.run", True), (2, "shell.run", True), (3, "files.read", False)]
        assert [r["result"]["stdout"] for r in parse_results(follow_up["text"])[:2]] == ["A\n", "B\n"]
        browser.answer(follow_up, status=200)

        act("retry", c)  # a second round: C's new result alone, once
        again = browser.next_delivery(timeout=WAIT)
        assert blocks_of(again) == [(3, "files.read", False)]
        browser.answer(again, status=200)
        with pytest.raises(TimeoutError):
            browser.next_delivery(timeout=3)
    assert AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER).count() == 3
