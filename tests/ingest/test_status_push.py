"""``instruction.status``, ``status.get`` and the side panel's pause and resume, through the socket (SPEC §6).

Real sockets of two owners on the configured channel layer and database;
tasks moved by the engine's own transitions and follow-ups, as the
dispatcher and the operator services move them.
"""

import logging
import math
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext

from automation.models import AutomationTask
from automation.services import operator
from automation.services import transitions as tr
from automation.services.steps import transition_and_follow_up
from conductor_site.asgi import application
from conversations.models import Conversation
from core.clock import now_ms
from core.layer_send import ChannelLayerUnavailable
from ingest.models import ClientAction
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.panel.push import StatusPush, statuses_send
from tests.factories import TEST_TOKEN, PluginClientFactory, lease_of, make_staff, task_lease

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

ECHO = '```baa\necho\n{"text": "hi"}\n```'
SHELL = '```baa\nshell.run\n{"argv": ["true"]}\n```'
BROKEN = "```baa\nno.such.tool\n{}\n```"
WAIT = 5.0


def final(text, *, message_id="m-1", frame_id="f-1", conversation_id="conv-a"):
    return {
        "type": "browser.final_message", "id": frame_id, "platform": "claude", "conversation_id": conversation_id,
        "message_id": message_id, "text": text, "page_url": f"https://claude.ai/chat/{conversation_id}",
    }


async def hello(client_id):
    communicator = WebsocketCommunicator(application, "/ws/plugin/", headers=[(b"host", b"conductor.test:8000")])
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({
        "type": "hello", "client_id": client_id, "token": TEST_TOKEN, "plugin_version": "1.0.0",
        "platforms": ["claude"], "capabilities": ["proxy_delivery"],
    })
    ok = await communicator.receive_json_from()
    assert ok["type"] == "hello.ok"
    communicator.hello_ok = ok
    return communicator


async def answer(communicator, frame, *, of_type):
    """Send ``frame``; return the answer of ``of_type``, passing over the pushes that came meanwhile."""
    await communicator.send_json_to(frame)
    return await next_frame(communicator, lambda f: f["type"] == of_type)


async def next_frame(communicator, wanted, *, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        frame = await communicator.receive_json_from(timeout=left)
        if wanted(frame):
            return frame
    raise AssertionError("no such frame in time")


async def look_at(communicator, conversation_id="conv-a"):
    """The side panel's ``status.get``: the socket looks at that conversation from now on."""
    return await answer(communicator, {"type": "status.get", "id": f"look-{conversation_id}", "platform": "claude",
                                       "conversation_id": conversation_id}, of_type="status")


async def status_where(communicator, *states, delivery=None):
    """The next ``instruction.status`` whose blocks are in ``states``, in order (and the delivery, when given)."""
    return await next_frame(communicator, lambda f: f["type"] == "instruction.status"
                            and [b["status"] for b in f["message"]["blocks"]] == list(states)
                            and (delivery is None or f["message"]["delivery"]["status"] == delivery))


@pytest.fixture
def clients(channel_layer, settings):
    return (
        PluginClientFactory(client_id="alice-laptop", owner="alice", capabilities=["proxy_delivery"]),
        PluginClientFactory(client_id="bob-laptop", owner="bob", capabilities=["proxy_delivery"]),
        PluginClientFactory(client_id="alice-desktop", owner="alice", capabilities=["proxy_delivery"]),
    )


def task_of(kind, **filters):
    return AutomationTask.objects.filter(kind=kind, **filters).order_by("created_at", "task_id").first()


def run(task_id, *, result=None, fail=None):
    """Lease, start and finish the task as the dispatcher does, its kind's follow-up in each step."""
    now = now_ms()
    task_lease(task_id, lease_owner="worker", lease_until=now + 60_000, now=now)
    transition_and_follow_up(
        lambda: tr.task_start(task_id, lease=lease_of(task_id), lease_until=now + 60_000, now=now), actor="worker"
    )
    return lambda: finish(task_id, result=result, fail=fail)


def finish(task_id, *, result=None, fail=None):
    lease = lease_of(task_id)
    if fail:
        transition_and_follow_up(lambda: tr.task_fail(task_id, lease=lease, error=fail), actor="worker")
    else:
        transition_and_follow_up(lambda: tr.task_succeed(task_id, lease=lease, result=result), actor="worker")


async def test_every_change_of_a_block_and_of_the_delivery_reaches_the_socket_looking_at_it(clients, status_push):
    laptop, desktop = await hello("alice-laptop"), await hello("alice-desktop")
    assert (await look_at(laptop))["messages"] == []  # a conversation not yet stored can be looked at
    ack = await answer(laptop, final(f"{ECHO}\n{SHELL}\n{BROKEN}"), of_type="ack")
    assert ack["instructions"] == 3

    first = await status_where(laptop, "queued", "waiting_approval", "rejected", delivery="none")
    assert first == {**first, "platform": "claude", "conversation_id": "conv-a", "approvals_waiting": 1}
    message = first["message"]
    assert (message["message_id"], message["conductor_message_id"]) == ("m-1", ack["message_id"])
    echo, shell, broken = message["blocks"]
    assert (echo["tool"], echo["target"], echo["params_preview"], echo["index"]) == (
        "echo", "conductor", '{"text":"hi"}', 1)
    assert shell["approve_url"].startswith("http://conductor.test:8000/admin/conversations/conversation/")
    assert "#block-" in shell["approve_url"] and echo["approve_url"] is None
    assert broken["error"].startswith("unknown tool")
    # Another socket of the owner, looking at no conversation, hears only that the count changed.
    assert await next_frame(desktop, lambda f: True) == {"type": "approvals.waiting", "count": 1}

    echo_task = await sync_to_async(task_of)(INSTRUCTION_EXECUTE, instruction__block_index=1)
    done = await sync_to_async(run)(echo_task.pk, result={"text": "hi"})
    await status_where(laptop, "running", "waiting_approval", "rejected")
    await sync_to_async(done)()
    succeeded = await status_where(laptop, "succeeded", "waiting_approval", "rejected")
    assert succeeded["message"]["blocks"][0]["result_preview"] == '{"text":"hi"}'

    shell_task = await sync_to_async(task_of)(INSTRUCTION_EXECUTE, instruction__block_index=2)
    report = await sync_to_async(operator.tasks_approve)(
        task_ids=[shell_task.pk], actor="admin", has_perm=operator.has_every_permission
    )
    assert report.done == [shell_task.pk]
    approved = await status_where(laptop, "succeeded", "queued", "rejected")
    assert approved["approvals_waiting"] == 0
    assert await next_frame(desktop, lambda f: True) == {"type": "approvals.waiting", "count": 0}
    done = await sync_to_async(run)(shell_task.pk, fail="exit status 1\nstderr: nope")
    await status_where(laptop, "succeeded", "running", "rejected")
    await sync_to_async(done)()
    failed = await status_where(laptop, "succeeded", "failed", "rejected", delivery="waiting")
    assert failed["message"]["blocks"][1]["error"] == "exit status 1"

    delivery = await sync_to_async(task_of)(INSTRUCTION_DELIVER)
    done = await sync_to_async(run)(delivery.pk, result={"method": "http", "status": 200})
    await status_where(laptop, "succeeded", "failed", "rejected", delivery="running")
    await sync_to_async(done)()
    delivered = await status_where(laptop, "succeeded", "failed", "rejected", delivery="delivered")
    assert delivered["message"]["delivery"] == {
        "status": "delivered", "method": "http", "error": None, "waiting_for": None,
        "results_not_delivered": 0}
    # Nothing else reached the desktop: no status, no count that did not change.
    assert await desktop.receive_nothing(timeout=0.3)
    await laptop.disconnect()
    await desktop.disconnect()


async def test_a_socket_looks_at_one_conversation_at_a_time(clients, status_push):
    alice = await hello("alice-laptop")
    await look_at(alice, "conv-b")
    await answer(alice, final(ECHO), of_type="ack")  # conv-a: looked at by nobody, its count unchanged
    await answer(alice, final(ECHO, message_id="m-2", frame_id="f-2", conversation_id="conv-b"), of_type="ack")
    pushed = await status_where(alice, "queued")
    assert (pushed["conversation_id"], pushed["message"]["message_id"]) == ("conv-b", "m-2")
    await look_at(alice, "conv-a")  # and no longer at conv-b
    echo_b = await sync_to_async(task_of)(INSTRUCTION_EXECUTE, instruction__message__remote_message_id="m-2")
    echo_a = await sync_to_async(task_of)(INSTRUCTION_EXECUTE, instruction__message__remote_message_id="m-1")
    await sync_to_async(await sync_to_async(run)(echo_b.pk, result={}))()
    await sync_to_async(await sync_to_async(run)(echo_a.pk, result={}))()
    succeeded = await status_where(alice, "succeeded")
    assert succeeded["message"]["message_id"] == "m-1"
    frames = []
    while not await alice.receive_nothing(timeout=0.5):
        frames.append(await alice.receive_json_from())
    assert {frame["conversation_id"] for frame in frames if frame["type"] == "instruction.status"} <= {"conv-a"}
    await alice.disconnect()


async def test_another_owners_sockets_hear_nothing(clients, status_push):
    alice, bob = await hello("alice-laptop"), await hello("bob-laptop")
    await look_at(alice)
    await answer(alice, final(f"{ECHO}\n{SHELL}"), of_type="ack")
    await status_where(alice, "queued", "waiting_approval")
    echo_task = await sync_to_async(task_of)(INSTRUCTION_EXECUTE, instruction__block_index=1)
    await sync_to_async(await sync_to_async(run)(echo_task.pk, result={}))()
    await status_where(alice, "succeeded", "waiting_approval")
    assert await bob.receive_nothing(timeout=0.5)
    assert bob.hello_ok["approvals_waiting"] == 0
    # Bob's own status and count know nothing of alice's conversation.
    answer_ = await answer(bob, {"type": "status.get", "id": "s-1", "platform": "claude", "conversation_id": "conv-a"},
                           of_type="status")
    assert (answer_["messages"], answer_["paused"], answer_["approvals_waiting"]) == ([], False, 0)
    await alice.disconnect()
    await bob.disconnect()


async def test_a_client_that_says_hello_learns_how_many_blocks_wait_for_approval(clients):
    alice = await hello("alice-laptop")
    await answer(alice, final(f"{SHELL}\n{SHELL}"), of_type="ack")
    desktop = await hello("alice-desktop")
    assert desktop.hello_ok["approvals_waiting"] == 2
    await alice.disconnect()
    await desktop.disconnect()


async def test_a_round_for_many_messages_reads_them_in_four_statements_with_each_owners_count(clients):
    alice, bob = await hello("alice-laptop"), await hello("bob-laptop")
    acks = [await answer(alice, final(f"{ECHO}\n{SHELL}", message_id=f"m-{n}", frame_id=f"f-{n}"), of_type="ack")
            for n in range(1, 6)]
    acks.append(await answer(bob, final(SHELL, message_id="b-1", frame_id="f-b", conversation_id="conv-b"),
                             of_type="ack"))
    echo_task = await sync_to_async(task_of)(INSTRUCTION_EXECUTE, instruction__message_id=acks[0]["message_id"],
                                             instruction__block_index=1)
    await sync_to_async(await sync_to_async(run)(echo_task.pk, result={"n": 1}))()
    await alice.disconnect()
    await bob.disconnect()
    alice = await hello("alice-laptop")  # bob's plugin is gone: his message is read no further

    def one_round():
        sent = []
        with CaptureQueriesContext(connection) as queries:
            statuses_send([ack["message_id"] for ack in acks], send=lambda group, event: sent.append(event))
        return len(queries), [event["frame"] for event in sent if "frame" in event], [
            event["count"] for event in sent if "count" in event]

    # Nobody looks at the conversation: one statement, the owner's count and no status.
    statements, frames, counts = await sync_to_async(one_round)()
    assert (statements, frames, counts) == (1, [], [5])
    await look_at(alice)
    statements, frames, counts = await sync_to_async(one_round)()
    # Who looks, then the messages with their deliveries, their blocks, why the open ones wait.
    assert (statements, counts) == (4, [5])
    assert [frame["message"]["message_id"] for frame in frames] == [f"m-{n}" for n in range(1, 6)]
    assert {frame["approvals_waiting"] for frame in frames} == {5}
    assert [block["status"] for block in frames[0]["message"]["blocks"]] == ["succeeded", "waiting_approval"]
    assert frames[0]["message"]["blocks"][0]["result_preview"] == '{"n":1}'
    assert frames[0]["message"]["delivery"]["status"] == "none"  # its shell block still waits
    assert [block["status"] for block in frames[1]["message"]["blocks"]] == ["queued", "waiting_approval"]
    await alice.disconnect()


async def test_status_get_answers_the_last_twenty_messages_with_blocks_newest_last(clients):
    alice = await hello("alice-laptop")
    for number in range(1, 23):
        text = ECHO if number != 5 else "no blocks here"
        await answer(alice, final(text, message_id=f"m-{number}", frame_id=f"f-{number}"), of_type="ack")
    status = await answer(
        alice, {"type": "status.get", "id": "s-1", "platform": "claude", "conversation_id": "conv-a"}, of_type="status",
    )
    assert (status["id"], status["platform"], status["conversation_id"], status["paused"]) == (
        "s-1", "claude", "conv-a", False)
    assert [m["message_id"] for m in status["messages"]] == [f"m-{n}" for n in range(2, 23) if n != 5]
    assert all(m["blocks"][0]["status"] == "queued" for m in status["messages"])

    unknown = await answer(
        alice, {"type": "status.get", "id": "s-2", "platform": "claude", "conversation_id": "no-such"}, of_type="status",
    )
    assert (unknown["messages"], unknown["paused"]) == ([], False)
    await alice.disconnect()


@pytest.mark.parametrize(("frame", "detail"), [
    ({"type": "status.get", "id": "s-1", "platform": "claude"}, "'conversation_id' is required"),
    ({"type": "status.get", "id": "s-1", "platform": "nope", "conversation_id": "c"}, "unknown platform"),
    ({"type": "conversation.pause", "id": "s-1", "platform": "claude", "conversation_id": 7}, "must be str"),
    ({"type": "conversation.resume", "id": "s-1", "platform": "claude", "conversation_id": "c" * 256}, "longer than"),
])
async def test_a_malformed_request_gets_an_invalid_error_and_the_socket_stays(clients, frame, detail):
    alice = await hello("alice-laptop")
    error = await answer(alice, frame, of_type="error")
    assert (error["id"], error["code"]) == ("s-1", "invalid") and detail in error["detail"]
    assert await answer(alice, {"type": "ping"}, of_type="pong") == {"type": "pong"}
    await alice.disconnect()


async def test_pause_and_resume_from_the_plugin_go_through_the_operator_service_and_are_on_the_story(clients, client):
    alice = await hello("alice-laptop")
    await answer(alice, final(ECHO), of_type="ack")
    pause = {"type": "conversation.pause", "id": "p-1", "platform": "claude", "conversation_id": "conv-a"}
    assert await answer(alice, pause, of_type="ack") == {"type": "ack", "id": "p-1", "paused": True}
    conversation = await Conversation.objects.aget(remote_id="conv-a")
    assert conversation.paused
    # Again: the state it is in; nothing changes, nothing more is recorded.
    assert (await answer(alice, {**pause, "id": "p-2"}, of_type="ack"))["paused"] is True
    status = await answer(alice, {**pause, "type": "status.get", "id": "s-1"}, of_type="status")
    assert status["paused"] is True
    resume = {**pause, "type": "conversation.resume", "id": "r-1"}
    assert await answer(alice, resume, of_type="ack") == {"type": "ack", "id": "r-1", "paused": False}
    actions = [(a.client_label, a.action) async for a in ClientAction.objects.order_by("at", "pk")]
    assert actions == [("alice-laptop", "pause"), ("alice-laptop", "resume")]
    await alice.disconnect()

    staff = await sync_to_async(make_staff)(
        "operator", "conversations.view_conversation", "automation.view_automationtask", password=None
    )
    await sync_to_async(client.force_login)(staff)
    response = await sync_to_async(client.get)(f"/admin/conversations/conversation/{conversation.pk}/story/")
    page = response.content.decode()
    assert "plugin client alice-laptop</strong>: Paused from the plugin" in page
    assert "plugin client alice-laptop</strong>: Resumed from the plugin" in page


async def test_another_owners_conversation_cannot_be_paused(clients):
    alice, bob = await hello("alice-laptop"), await hello("bob-laptop")
    await answer(alice, final(ECHO), of_type="ack")
    error = await answer(
        bob, {"type": "conversation.pause", "id": "p-1", "platform": "claude", "conversation_id": "conv-a"},
        of_type="error",
    )
    assert (error["id"], error["code"]) == ("p-1", "invalid")
    assert not (await Conversation.objects.aget(remote_id="conv-a")).paused
    assert not await ClientAction.objects.aexists()
    await alice.disconnect()
    await bob.disconnect()


def test_fifty_changes_in_a_tenth_of_a_second_make_at_most_two_frames_and_the_last_is_current():
    state = {"value": 0}
    sent: list[tuple[list[int], int]] = []
    done = threading.Event()

    def send_due(ids):
        sent.append((ids, state["value"]))
        if state["value"] == 50:
            done.set()

    push = StatusPush(send_due=send_due)
    started = time.monotonic()
    for _ in range(50):
        state["value"] += 1
        push.mark([7])
        time.sleep(0.002)
    elapsed = time.monotonic() - started
    assert done.wait(2)
    time.sleep(0.3)  # nothing more comes
    # One frame at once, then at most one a 200 ms window: two for about 100 ms of changes
    # (a loaded machine stretches the 100 ms, and the bound follows what it took).
    assert 1 <= len(sent) <= 1 + math.ceil(elapsed / 0.2)
    assert elapsed >= 0.2 or len(sent) <= 2
    assert sent[-1] == ([7], 50)


def test_a_message_is_sent_at_once_then_not_again_within_the_window():
    clock = {"now": 100.0}
    push = StatusPush(send_due=lambda ids: None, clock=lambda: clock["now"])
    push.schedule([1])
    assert push.take_due() == ([1], None)
    clock["now"] = 100.05
    push.schedule([1, 2])
    due, wait = push.take_due()
    assert due == [2] and wait == pytest.approx(0.15)
    clock["now"] = 100.2
    assert push.take_due() == ([1], None)
    clock["now"] = 100.5
    push.schedule([1])
    assert push.take_due()[0] == [1]  # the window since its last frame has passed: at once again


def test_a_round_the_database_refuses_is_retried_once_and_logged_in_one_line(caplog):
    calls: list[list[int]] = []
    done = threading.Event()

    def send_due(ids):
        calls.append(ids)
        if len(calls) <= 2:
            raise OperationalError("deadlock detected\nDETAIL: process 1 waits for process 2")
        done.set()

    push = StatusPush(send_due=send_due, window_seconds=0.05)
    with caplog.at_level(logging.WARNING, logger="ingest.panel.push"):
        push.mark([3])
        deadline = time.monotonic() + 2
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert calls == [[3], [3]]  # once again, then left to the panel's next status.get
        push.mark([3])
        assert done.wait(2)
    push.stop()
    assert calls == [[3], [3], [3]]
    failures = [record for record in caplog.records if "status_push_failed" in record.getMessage()]
    assert len(failures) == 2 and not any(record.exc_info for record in failures)
    assert "deadlock detected" in failures[0].getMessage() and "DETAIL" not in failures[0].getMessage()


def test_a_round_cut_short_by_the_process_exiting_is_noted_not_logged_as_an_error(caplog):
    sent = threading.Event()

    def send_due(ids):
        sent.set()
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    push = StatusPush(send_due=send_due, window_seconds=0.05)
    with caplog.at_level(logging.INFO, logger="ingest.panel.push"):
        push.mark([4])
        assert sent.wait(2)
        push.stop()
    assert [record.levelno for record in caplog.records if "status_push" in record.getMessage()] == [logging.INFO]
    assert "status_push_skipped_at_exit" in caplog.text


def test_a_round_the_channel_layer_refuses_is_one_warning_line_without_a_traceback(caplog):
    sent = threading.Event()

    def send_due(ids):
        sent.set()
        raise ChannelLayerUnavailable("ConnectionError: Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    push = StatusPush(send_due=send_due, window_seconds=0.05)
    with caplog.at_level(logging.INFO, logger="ingest.panel.push"):
        push.mark([5])
        assert sent.wait(2)
        time.sleep(0.1)
        push.stop()
    failures = [record for record in caplog.records if "status_push_failed" in record.getMessage()]
    assert [record.levelno for record in failures] == [logging.WARNING] and not failures[0].exc_info
    assert "part=channel_layer" in failures[0].getMessage()
