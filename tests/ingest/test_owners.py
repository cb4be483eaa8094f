"""Whose conversation: a conversation moves only between clients of its owner, and its results reach only them.

Through the socket, as a plugin would: client A (owner alice) holds a
conversation with results waiting; client B names that conversation, once as
another owner's browser and once as alice's.
"""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from automation.dispatcher import execution_context
from automation.models import AutomationTask
from automation.services import transitions
from conductor_site.asgi import application
from conversations.models import Conversation, ConversationLink, ConversationMove, Message
from conversations.selectors import conversation_route
from core.clock import now_ms
from ingest.models import Instruction
from ingest.services.instructions import INSTRUCTION_DELIVER
from pipelines.deliveries import instruction_deliver
from tests.factories import PluginClientFactory, TEST_TOKEN, lease_of, task_lease

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

ECHO = "```baa\necho\n{\"n\": 1}\n```"
# A block refused at ingest: its message's results are queued for delivery at once.
REFUSED = "```baa\nno.such.tool\n{}\n```"


def final(text, *, message_id, frame_id="f-1", conversation_id="conv-a"):
    return {
        "type": "browser.final_message", "id": frame_id, "platform": "claude", "conversation_id": conversation_id,
        "organization_id": "org-1", "message_id": message_id, "text": text,
        "page_url": f"https://claude.ai/chat/{conversation_id}",
    }


async def hello(client_id):
    communicator = WebsocketCommunicator(application, "/ws/plugin/")
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({
        "type": "hello", "client_id": client_id, "token": TEST_TOKEN, "plugin_version": "1.0.0",
        "platforms": ["claude"], "capabilities": ["proxy_delivery"],
    })
    assert (await communicator.receive_json_from())["type"] == "hello.ok"
    return communicator


async def send(communicator, frame):
    await communicator.send_json_to(frame)
    ack = await communicator.receive_json_from(timeout=5)
    assert ack["type"] == "ack", ack
    return ack


@pytest.fixture
def clients(channel_layer, settings):
    settings.CONDUCTOR_DELIVERY_TIMEOUT_SECONDS = 1
    return (
        PluginClientFactory(client_id="alice-laptop", owner="alice", capabilities=["proxy_delivery"]),
        PluginClientFactory(client_id="bob-laptop", owner="bob", capabilities=["proxy_delivery"]),
        PluginClientFactory(client_id="alice-desktop", owner="alice", capabilities=["proxy_delivery"]),
    )


def waiting_delivery() -> AutomationTask:
    """The delivery of alice's results, queued: what the re-target rule used to hand to any client."""
    return AutomationTask.objects.get(kind=INSTRUCTION_DELIVER)


def run_delivery(task_id: str):
    """Run the delivery as the dispatcher would: it sends to the task's target client and waits 1 s for an answer."""
    now = now_ms()
    task_lease(task_id, lease_owner="test", lease_until=now + 60_000, now=now)
    task = transitions.task_start(task_id, lease=lease_of(task_id), lease_until=now + 60_000, now=now)
    return instruction_deliver(execution_context(task))


async def test_another_owners_client_naming_a_conversation_gets_none_of_its_results(clients):
    alice, bob, _ = clients
    a = await hello("alice-laptop")
    await send(a, final(REFUSED, message_id="a-1"))
    task = await sync_to_async(waiting_delivery)()
    assert task.target_client_id == "alice-laptop"

    b = await hello("bob-laptop")
    ack = await send(b, final(ECHO + "\n" + ECHO, message_id="b-1", frame_id="f-2"))

    # Stored, nothing lost; but its blocks run nothing and nothing is delivered for it.
    assert (ack["instructions"], ack["duplicate"]) == (2, False)
    stored = await Message.objects.select_related("client").aget(pk=int(ack["message_id"]))
    assert stored.client.client_id == "bob-laptop"
    conversation = await Conversation.objects.aget(remote_id="conv-a")
    assert stored.conversation_id == conversation.pk and conversation.owner == "alice"
    instructions = [i async for i in Instruction.objects.filter(message=stored)]
    assert [i.status for i in instructions] == ["rejected", "rejected"]
    assert "belongs to owner 'alice'" in instructions[0].error
    assert await AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER).acount() == 1

    # The conversation did not move: no link through bob's client, the route and the waiting delivery stay alice's.
    assert not await ConversationLink.objects.filter(client=bob).aexists()
    assert not await ConversationMove.objects.aexists()
    route = await sync_to_async(conversation_route)(conversation_id=conversation.pk)
    assert route.client_id == "alice-laptop"
    task = await sync_to_async(waiting_delivery)()
    assert task.target_client_id == "alice-laptop"
    assert not await task.events.filter(action="retarget").aexists()

    # The delivery runs: alice's socket gets the results, bob's gets nothing.
    await sync_to_async(run_delivery, thread_sensitive=False)(task.pk)
    delivered = await a.receive_json_from(timeout=5)
    assert (delivered["type"], delivered["delivery_key"]) == ("browser.proxy_delivery", task.pk)
    assert await b.receive_nothing(timeout=0.5)
    await a.disconnect()
    await b.disconnect()


async def test_a_client_of_the_same_owner_takes_the_conversation_and_the_move_is_on_its_story(clients):
    alice, _, desktop = clients
    a = await hello("alice-laptop")
    await send(a, final(REFUSED, message_id="a-1"))
    task = await sync_to_async(waiting_delivery)()
    await a.disconnect()

    d = await hello("alice-desktop")
    await send(d, final("back on my desktop", message_id="a-2", frame_id="f-2"))

    task = await sync_to_async(waiting_delivery)()
    assert task.target_client_id == "alice-desktop"
    move = await ConversationMove.objects.aget()
    assert (move.from_client_id, move.to_client_id) == (alice.pk, desktop.pk)

    await sync_to_async(run_delivery, thread_sensitive=False)(task.pk)
    delivered = await d.receive_json_from(timeout=5)
    assert delivered["delivery_key"] == task.pk
    await d.disconnect()


def test_the_first_client_claims_the_conversation_for_its_owner_and_an_unclaimed_one_is_claimed(clients):
    from ingest.frames import parse_final_message
    from ingest.services.messages import message_ingest

    alice, bob, _ = clients
    message_ingest(message=parse_final_message(final("replayed", message_id="r-1", conversation_id="conv-r")),
                   client=None)
    assert Conversation.objects.get(remote_id="conv-r").owner == ""
    message_ingest(message=parse_final_message(final("hi", message_id="r-2", conversation_id="conv-r")), client=bob)
    assert Conversation.objects.get(remote_id="conv-r").owner == "bob"
    message_ingest(message=parse_final_message(final("hi", message_id="n-1", conversation_id="conv-n")), client=alice)
    assert Conversation.objects.get(remote_id="conv-n").owner == "alice"


def test_a_tool_guide_for_another_owners_conversation_is_the_platforms_own(clients):
    from ingest.frames import parse_final_message
    from ingest.models import ToolGuideServed
    from ingest.services.guides import tool_guide_serve
    from ingest.services.messages import message_ingest

    alice, bob, desktop = clients
    message_ingest(message=parse_final_message(final("hi", message_id="a-1")), client=alice)
    tool_guide_serve(client_pk=bob.pk, platform="claude", conversation_id="conv-a")
    tool_guide_serve(client_pk=desktop.pk, platform="claude", conversation_id="conv-a")
    served = dict(ToolGuideServed.objects.values_list("client__client_id", "conversation__remote_id"))
    assert served == {"bob-laptop": None, "alice-desktop": "conv-a"}
