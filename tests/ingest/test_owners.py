"""Whose conversation: a conversation is its owner's (SPEC §6 ``browser.final_message``, docs/security.md).

Through the socket, as a plugin would, on the configured database and
channel layer: bob's client and alice's send the same conversation id; each
gets a conversation of its own, whose blocks run, whose dedupe, status,
panel, pause, guide and story hold only that owner's messages. Alice's other
client takes her conversation with it.
"""

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from automation.dispatcher import Dispatcher, DispatcherConfig, execution_context
from automation.models import AutomationTask, TaskStatus
from automation.services import transitions
from conductor_site.asgi import application
from conversations.models import Conversation, ConversationLink, ConversationMove, Message
from conversations.selectors import conversation_route
from core.clock import now_ms
from ingest.frames import parse_final_message
from ingest.models import ClientAction, Instruction, ToolGuideServed
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.services.messages import ClientMessage, final_messages_ingest, message_ingest
from pipelines.deliveries import instruction_deliver
from tests.factories import PluginClientFactory, TEST_TOKEN, lease_of, make_staff, task_lease
from tests.procs import run_in_processes

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

ECHO = "```baa\necho\n{\"n\": 1}\n```"
SHELL = "```baa\nshell.run\n{\"argv\": [\"true\"]}\n```"
# A block refused at ingest: its message's results are queued for delivery at once.
REFUSED = "```baa\nno.such.tool\n{}\n```"


def final(text, *, message_id, frame_id="f-1", conversation_id="conv-x"):
    return {
        "type": "browser.final_message", "id": frame_id, "platform": "claude", "conversation_id": conversation_id,
        "organization_id": "org-1", "message_id": message_id, "text": text,
        "page_url": f"https://claude.ai/chat/{conversation_id}",
    }


async def hello(client_id):
    communicator = WebsocketCommunicator(application, "/ws/plugin/", headers=[(b"host", b"conductor.test:8000")])
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({
        "type": "hello", "client_id": client_id, "token": TEST_TOKEN, "plugin_version": "1.0.0",
        "platforms": ["claude"], "capabilities": ["proxy_delivery"],
    })
    assert (await communicator.receive_json_from(timeout=10))["type"] == "hello.ok"
    return communicator


async def send(communicator, frame):
    return await answer(communicator, frame, of_type="ack")


async def answer(communicator, frame, *, of_type):
    """Send ``frame``; return its answer of ``of_type``, passing over the pushes that came meanwhile."""
    await communicator.send_json_to(frame)
    return await next_frame(communicator, lambda f: f["type"] == of_type)


async def next_frame(communicator, wanted, *, timeout=10.0):
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        frame = await communicator.receive_json_from(timeout=left)
        if wanted(frame):
            return frame
    raise AssertionError("no such frame in time")


async def frames_within(communicator, seconds):
    """Every frame the socket receives within ``seconds`` (a receive that times out would end the socket)."""
    frames = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not await communicator.receive_nothing(timeout=0.1):
            frames.append(await communicator.receive_json_from())
    return frames


def status_get(conversation_id="conv-x", frame_id="s-1"):
    return {"type": "status.get", "id": frame_id, "platform": "claude", "conversation_id": conversation_id}


async def statuses(communicator, conversation_id="conv-x"):
    """The chat message ids ``status.get`` lists for the conversation, newest last, and the answer."""
    status = await answer(communicator, status_get(conversation_id), of_type="status")
    return [message["message_id"] for message in status["messages"]], status


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



# --- another owner's client, the same conversation id: a conversation of its own ------------------


def dispatcher_for_test():
    return Dispatcher(owner="owners-test", config=DispatcherConfig(
        max_tasks_per_tick=8, lease_ms=60_000, outbound_jitter_max_ms=0, retry_backoff_seconds=(0,),
        retry_jitter_max_ms=0,
    ))


def tick_until_delivered(dispatcher, count, *, seconds=20):
    """Tick until ``count`` deliveries succeeded: every block run, every result delivered and answered."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        dispatcher.tick()
        dispatcher.wait_idle(timeout=10)
        if AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER, status=TaskStatus.SUCCEEDED).count() >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{count} deliveries did not succeed in time")


async def answer_delivery(communicator):
    """Take the next delivery the socket is sent and answer it as a plugin that posted it; return it."""
    delivery = await next_frame(communicator, lambda f: f["type"] == "browser.proxy_delivery", timeout=20)
    await communicator.send_json_to({
        "type": "browser.proxy_delivery.result", "request_id": delivery["request_id"], "ok": True, "status": 200,
        "body": "", "error": None,
    })
    return delivery


async def test_bob_first_then_alice_in_the_same_conversation_id_each_run_their_own_blocks_and_see_their_own(clients):
    b = await hello("bob-laptop")
    bob_ack = await send(b, final(ECHO, message_id="b-1"))
    a = await hello("alice-laptop")
    alice_ack = await send(a, final(f"{ECHO}\n{ECHO}", message_id="a-1", frame_id="f-2"))

    # Her message is new, in a conversation of her own; her blocks are queued, not rejected.
    assert (alice_ack["instructions"], alice_ack["duplicate"]) == (2, False)
    assert alice_ack["message_id"] != bob_ack["message_id"]
    conversations = {c.owner: c async for c in Conversation.objects.filter(platform="claude", remote_id="conv-x")}
    assert set(conversations) == {"bob", "alice"}
    hers = await Message.objects.aget(pk=int(alice_ack["message_id"]))
    assert hers.conversation_id == conversations["alice"].pk
    assert [i.status async for i in Instruction.objects.filter(message=hers).order_by("block_index")] == [
        "pending", "pending"]
    route = await sync_to_async(conversation_route)(conversation_id=conversations["alice"].pk)
    assert route.client_id == "alice-laptop"
    assert (await sync_to_async(conversation_route)(conversation_id=conversations["bob"].pk)).client_id == "bob-laptop"

    # The dispatcher runs every block; each owner's results go to that owner's socket only.
    dispatcher = await sync_to_async(dispatcher_for_test)()
    try:
        ticking = asyncio.get_running_loop().run_in_executor(None, tick_until_delivered, dispatcher, 2)
        to_alice, to_bob = await asyncio.gather(answer_delivery(a), answer_delivery(b))
        await ticking
    finally:
        await sync_to_async(dispatcher.stop)(grace=5)
    assert (to_alice["conversation_id"], to_bob["conversation_id"]) == ("conv-x", "conv-x")
    assert to_alice["text"].count("```baa-result") == 2 and to_bob["text"].count("```baa-result") == 1
    assert await AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE, status=TaskStatus.SUCCEEDED).acount() == 3
    assert await b.receive_nothing(timeout=0.3)

    # Each status.get lists that owner's own message, none of the other's.
    ids, bobs_status = await statuses(b)
    assert ids == ["b-1"]
    assert "alice" not in str(bobs_status)
    ids, hers_status = await statuses(a)
    assert ids == ["a-1"]
    assert [block["status"] for block in hers_status["messages"][0]["blocks"]] == ["succeeded", "succeeded"]
    await a.disconnect()
    await b.disconnect()


async def test_bob_sending_her_message_id_or_her_text_first_suppresses_nothing_of_hers(clients):
    b = await hello("bob-laptop")
    await send(b, final("decoy with her coming id", message_id="a-1"))
    no_id = final(ECHO, message_id="", frame_id="f-2")
    await send(b, no_id)

    a = await hello("alice-laptop")
    first = await send(a, final(ECHO, message_id="a-1", frame_id="f-3"))
    by_text = await send(a, {**no_id, "id": "f-4"})
    assert (first["duplicate"], first["instructions"]) == (False, 1)
    assert (by_text["duplicate"], by_text["instructions"]) == (False, 1)
    for ack in (first, by_text):
        stored = await Message.objects.select_related("conversation").aget(pk=int(ack["message_id"]))
        assert stored.conversation.owner == "alice"
        assert await Instruction.objects.filter(message=stored, status="pending").acount() == 1
    # Her own repeat is still hers to dedupe.
    again = await send(a, final(ECHO, message_id="a-1", frame_id="f-5"))
    assert (again["duplicate"], again["message_id"], again["instructions"]) == (True, first["message_id"], 1)
    await a.disconnect()
    await b.disconnect()


async def test_a_message_id_of_another_owner_is_answered_as_one_never_seen(clients):
    a = await hello("alice-laptop")
    hers = await send(a, final(f"{ECHO}\n{ECHO}", message_id="a-1"))
    b = await hello("bob-laptop")
    probe = await send(b, final("is a-1 there?", message_id="a-1", frame_id="f-2"))
    never = await send(b, final("is a-404 there?", message_id="a-404", frame_id="f-3"))

    # The same answer as for an id no one sent: new, his own, none of her blocks.
    for ack in (probe, never):
        assert (ack["duplicate"], ack["instructions"]) == (False, 0)
        assert ack["message_id"] != hers["message_id"]
    assert await Message.objects.filter(conversation__owner="alice").acount() == 1
    await a.disconnect()
    await b.disconnect()


async def test_twenty_posts_by_bob_leave_her_panel_and_her_badge_alone(clients, status_push):
    a = await hello("alice-laptop")
    await send(a, final(ECHO, message_id="a-1"))
    await statuses(a)  # her panel looks at the conversation he posts to
    b = await hello("bob-laptop")
    for number in range(1, 21):
        await send(b, final(SHELL, message_id=f"b-{number}", frame_id=f"f-{number}"))
    # Her socket hears pushes of her own message only (if any comes late), never of his, nor his count.
    frames = await frames_within(a, 1.0)
    pushed = [f for f in frames if f["type"] == "instruction.status"]
    assert {f["message"]["message_id"] for f in pushed} <= {"a-1"}
    assert all(f["approvals_waiting"] == 0 for f in pushed)
    assert not [f for f in frames if f["type"] == "approvals.waiting"]

    ids, status = await statuses(a)
    assert (ids, status["approvals_waiting"]) == (["a-1"], 0)
    ids, status = await statuses(b)
    assert ids == [f"b-{n}" for n in range(1, 21)] and status["approvals_waiting"] == 20
    await a.disconnect()
    await b.disconnect()


async def test_pause_and_resume_act_on_the_owners_own_conversation_only(clients, client):
    a, b = await hello("alice-laptop"), await hello("bob-laptop")
    await send(a, final(ECHO, message_id="a-1"))
    await send(b, final(ECHO, message_id="b-1"))
    pause = {"type": "conversation.pause", "id": "p-1", "platform": "claude", "conversation_id": "conv-x"}
    assert (await answer(b, pause, of_type="ack"))["paused"] is True

    paused = dict([(c.owner, c.paused) async for c in Conversation.objects.filter(remote_id="conv-x")])
    assert paused == {"bob": True, "alice": False}
    assert (await statuses(a))[1]["paused"] is False
    assert (await statuses(b))[1]["paused"] is True
    assert [(action.client_label, action.conversation_id) async for action in ClientAction.objects.all()] == [
        ("bob-laptop", (await Conversation.objects.aget(owner="bob", remote_id="conv-x")).pk)]

    # The admin's pause of her conversation is hers alone too.
    staff = await sync_to_async(make_staff)("operator", "conversations.change_conversation", password=None)
    await sync_to_async(client.force_login)(staff)
    hers = await Conversation.objects.aget(owner="alice", remote_id="conv-x")
    await sync_to_async(client.post)(
        "/admin/conversations/conversation/", {"action": "resume", "_selected_action": [hers.pk]}
    )
    await sync_to_async(client.post)(
        "/admin/conversations/conversation/", {"action": "pause", "_selected_action": [hers.pk]}
    )
    assert await Conversation.objects.filter(remote_id="conv-x", paused=True).acount() == 2
    resume = {**pause, "type": "conversation.resume", "id": "r-1"}
    assert (await answer(b, resume, of_type="ack"))["paused"] is False
    paused = dict([(c.owner, c.paused) async for c in Conversation.objects.filter(remote_id="conv-x")])
    assert paused == {"bob": False, "alice": True}
    await a.disconnect()
    await b.disconnect()


async def test_the_guide_and_the_story_of_a_shared_id_are_each_owners_own(clients, client):
    a = await hello("alice-laptop")
    await send(a, final("alice's own words", message_id="a-1"))
    b = await hello("bob-laptop")
    guide_get = {"type": "guide.get", "id": "g-1", "platform": "claude", "conversation_id": "conv-x"}
    await answer(b, guide_get, of_type="guide")  # before bob sent anything: the platform's guide
    await send(b, final("bob's own words", message_id="b-1"))
    await answer(b, {**guide_get, "id": "g-2"}, of_type="guide")
    await answer(a, {**guide_get, "id": "g-3"}, of_type="guide")

    served = [(row.client.client_id, row.conversation.owner if row.conversation else None)
              async for row in ToolGuideServed.objects.select_related("client", "conversation").order_by("pk")]
    assert served == [("bob-laptop", None), ("bob-laptop", "bob"), ("alice-laptop", "alice")]

    staff = await sync_to_async(make_staff)(
        "operator", "conversations.view_conversation", "automation.view_automationtask", password=None
    )
    await sync_to_async(client.force_login)(staff)
    for owner, own, other in (("alice", "alice's own words", "bob's own words"),
                              ("bob", "bob's own words", "alice's own words")):
        conversation = await Conversation.objects.aget(owner=owner, remote_id="conv-x")
        page = (await sync_to_async(client.get)(
            f"/admin/conversations/conversation/{conversation.pk}/story/")).content.decode()
        assert own.replace("'", "&#x27;") in page and other.replace("'", "&#x27;") not in page
    await a.disconnect()
    await b.disconnect()


# --- claiming, and the key within one batch ---------------------------------------------------------


def test_the_first_client_claims_an_unclaimed_conversation_and_another_owner_gets_one_of_its_own(clients):
    alice, bob, _ = clients

    def ingest(message_id, client, conversation_id="conv-r"):
        message = parse_final_message(final("hi", message_id=message_id, conversation_id=conversation_id))
        return message_ingest(message=message, client=client)

    replayed = ingest("r-1", None)
    assert Conversation.objects.get(remote_id="conv-r").owner == ""
    ingest("r-2", bob)
    assert Conversation.objects.get(remote_id="conv-r").owner == "bob"
    assert Message.objects.get(pk=replayed.message_id).conversation.owner == "bob"  # the claimed row, as it was
    ingest("r-3", alice)
    assert dict(Conversation.objects.filter(remote_id="conv-r").values_list("owner", "pk"))["alice"] != (
        Conversation.objects.get(owner="bob").pk)
    # A later message through no client (a replay) goes to the first conversation stored with the id.
    later = ingest("r-4", None)
    assert Message.objects.get(pk=later.message_id).conversation.owner == "bob"
    ingest("n-1", alice, conversation_id="conv-n")
    assert Conversation.objects.get(remote_id="conv-n").owner == "alice"


def test_one_batch_holding_two_owners_messages_with_one_id_stores_them_apart(clients):
    alice, bob, _ = clients
    arrivals = [
        ClientMessage(message=parse_final_message(final(ECHO, message_id="m-1", frame_id=f"f-{n}")), client_pk=pk)
        for n, pk in enumerate([bob.pk, alice.pk, bob.pk])
    ]
    results = final_messages_ingest(arrivals=arrivals)
    assert [(r.duplicate, r.instructions) for r in results] == [(False, 1), (False, 1), (True, 1)]
    assert results[2].message_id == results[0].message_id != results[1].message_id
    owners = dict(Message.objects.values_list("pk", "conversation__owner"))
    assert (owners[results[0].message_id], owners[results[1].message_id]) == ("bob", "alice")
    assert Instruction.objects.filter(status="pending").count() == 2


def test_a_batch_mixing_a_client_and_no_client_on_one_id_is_stored_message_by_message(clients):
    alice, _, _ = clients
    arrivals = [
        ClientMessage(message=parse_final_message(final("a", message_id="m-1")), client_pk=alice.pk),
        ClientMessage(message=parse_final_message(final("b", message_id="m-2")), client_pk=None),
    ]
    results = final_messages_ingest(arrivals=arrivals)
    assert [r.duplicate for r in results] == [False, False]
    # One after the other: the replayed one lands in alice's conversation, the first stored with the id.
    assert set(Message.objects.values_list("conversation__owner", flat=True)) == {"alice"}


def test_two_owners_clients_racing_on_an_unclaimed_conversation_each_get_one_conversation(clients):
    alice, bob, desktop = clients
    message_ingest(message=parse_final_message(final("replayed", message_id="r-1", conversation_id="conv-race")),
                   client=None)
    unclaimed = Conversation.objects.get(remote_id="conv-race")
    # Four processes at once: two of alice's clients, bob's client twice; 25 messages each.
    work = [(client.pk, "conv-race", [f"{name}-{n}" for n in range(25)])
            for client, name in ((alice, "laptop"), (bob, "bob"), (desktop, "desktop"), (bob, "bob-again"))]
    stored = run_in_processes("tests.ingest.workers:final_messages_ingest_as", work)

    conversations = {c.owner: c for c in Conversation.objects.filter(remote_id="conv-race")}
    assert set(conversations) == {"alice", "bob"}
    assert unclaimed.pk in {c.pk for c in conversations.values()}  # one of them claimed it, the other made its own
    owner_of = dict(Message.objects.filter(client__isnull=False).values_list("pk", "conversation__owner"))
    for (client_pk, _, _), message_pks in zip(work, stored, strict=True):
        expected = "bob" if client_pk == bob.pk else "alice"
        assert {owner_of[pk] for pk in message_pks} == {expected}
    assert Message.objects.filter(client__isnull=False).count() == 100
