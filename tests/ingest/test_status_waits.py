"""``waiting_for`` in ``status`` and ``instruction.status`` frames (SPEC §6): why a block or a delivery does not run.

Real sockets on the configured channel layer and database; each situation
made as the product makes it (ingest, the panel's pause, the overview's
pauses, the engine's transitions), and read back through the socket.
"""

import pytest
from asgiref.sync import sync_to_async

from automation.models import AutomationTask
from automation.services import transitions as tr
from automation.services.dispatcher_state import dispatcher_pause_set, kind_pause_set
from automation.services.steps import transition_and_follow_up
from core.clock import now_ms
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from tests.factories import PluginClientFactory, lease_of, task_lease
from tests.ingest.test_status_push import ECHO, SHELL, answer, final, hello, next_frame, run

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

STATUS_GET = {"type": "status.get", "id": "s-1", "platform": "claude", "conversation_id": "conv-a"}


@pytest.fixture
def clients(channel_layer):
    return (
        PluginClientFactory(client_id="alice-laptop", owner="alice", capabilities=["proxy_delivery"]),
        PluginClientFactory(client_id="alice-desktop", owner="alice", capabilities=["proxy_delivery"]),
    )


def task_of(kind, **filters):
    return AutomationTask.objects.filter(kind=kind, **filters).order_by("sequence").first()


async def status_get(communicator):
    return await answer(communicator, STATUS_GET, of_type="status")


def waiting_of(status, message=0):
    """``waiting_for`` of each block of the answer's ``message``-th message, and of its delivery."""
    shown = status["messages"][message]
    return [block["waiting_for"] for block in shown["blocks"]], shown["delivery"]["waiting_for"]


async def test_a_block_behind_one_waiting_for_approval_says_which_with_its_approval_link(clients, status_push):
    alice = await hello("alice-laptop")
    await status_get(alice)  # her panel looks at the conversation
    await answer(alice, final(f"{SHELL}\n{ECHO}"), of_type="ack")
    await answer(alice, final(ECHO, message_id="m-2", frame_id="f-2"), of_type="ack")

    pushed = await next_frame(alice, lambda f: f["type"] == "instruction.status"
                              and f["message"]["message_id"] == "m-1")
    shell, echo = pushed["message"]["blocks"]
    assert shell["waiting_for"] == {"code": "approval"}
    assert echo["waiting_for"] == {
        "code": "earlier_block", "approval": True, "message_id": "m-1",
        "conductor_message_id": pushed["message"]["conductor_message_id"], "index": 1, "approve_url": shell["approve_url"],
    }
    assert echo["waiting_for"]["approve_url"].startswith("http://conductor.test:8000/admin/")

    status = await status_get(alice)
    assert [message["message_id"] for message in status["messages"]] == ["m-1", "m-2"]
    later = waiting_of(status, 1)[0][0]  # the next message's block waits behind the same one
    assert (later["code"], later["approval"], later["message_id"], later["index"]) == ("earlier_block", True, "m-1", 1)
    await alice.disconnect()


async def test_pauses_of_the_conversation_the_kind_and_the_dispatcher_are_named(clients):
    alice = await hello("alice-laptop")
    await answer(alice, final(ECHO), of_type="ack")
    assert waiting_of(await status_get(alice)) == ([None], None)  # due: the next claim takes it

    pause = {**STATUS_GET, "type": "conversation.pause", "id": "p-1"}
    await answer(alice, pause, of_type="ack")
    assert waiting_of(await status_get(alice))[0] == [{"code": "paused", "paused": "conversation"}]
    await answer(alice, {**pause, "type": "conversation.resume", "id": "r-1"}, of_type="ack")

    await sync_to_async(kind_pause_set)(kind=INSTRUCTION_EXECUTE, is_paused=True, actor="admin")
    assert waiting_of(await status_get(alice))[0] == [{"code": "paused", "paused": "kind"}]
    await sync_to_async(dispatcher_pause_set)(is_paused=True, actor="admin")
    assert waiting_of(await status_get(alice))[0] == [{"code": "paused", "paused": "dispatcher"}]
    await alice.disconnect()


async def test_a_delivery_whose_plugin_is_gone_waits_for_it(clients):
    laptop = await hello("alice-laptop")
    await answer(laptop, final(ECHO), of_type="ack")
    echo = await sync_to_async(task_of)(INSTRUCTION_EXECUTE)
    await sync_to_async(await sync_to_async(run)(echo.pk, result={"text": "hi"}))()
    assert waiting_of(await status_get(laptop))[1] is None  # the delivery goes to the laptop, connected
    await laptop.disconnect()

    desktop = await hello("alice-desktop")
    status = await status_get(desktop)
    assert status["messages"][0]["delivery"]["status"] == "waiting"
    assert waiting_of(status) == ([None], {"code": "no_plugin"})
    delivery = await sync_to_async(task_of)(INSTRUCTION_DELIVER)
    assert delivery.target_client_id == "alice-laptop"
    await desktop.disconnect()


def retry_later(task_id, *, retry_at):
    now = now_ms()
    task_lease(task_id, lease_owner="worker", lease_until=now + 60_000, now=now)
    transition_and_follow_up(
        lambda: tr.task_start(task_id, lease=lease_of(task_id), lease_until=now + 60_000, now=now), actor="worker")
    transition_and_follow_up(lambda: tr.task_retry_later(
        task_id, lease=lease_of(task_id), error="timed out", retry_at=retry_at, backoff_ms=5000, jitter_ms=0,
    ), actor="worker")


async def test_a_block_waiting_out_its_backoff_says_until_when(clients):
    alice = await hello("alice-laptop")
    await answer(alice, final(f"{ECHO}\n{ECHO}"), of_type="ack")
    first = await sync_to_async(task_of)(INSTRUCTION_EXECUTE)
    retry_at = now_ms() + 60_000
    await sync_to_async(retry_later)(first.pk, retry_at=retry_at)
    blocks = (await status_get(alice))["messages"][0]["blocks"]
    assert [block["status"] for block in blocks] == ["queued", "queued"]
    assert blocks[0]["waiting_for"] == {"code": "backoff", "until": retry_at}
    assert blocks[0]["error"] == "timed out"
    assert (blocks[1]["waiting_for"]["code"], blocks[1]["waiting_for"]["approval"]) == ("earlier_block", False)
    assert blocks[1]["waiting_for"]["index"] == 1 and "approve_url" not in blocks[1]["waiting_for"]
    await alice.disconnect()
