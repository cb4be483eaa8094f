"""``guide.get`` over the plugin socket (SPEC §6), and the guide's examples fed back as an assistant's answer."""

import itertools

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.models import Instruction, ToolGuideServed, ToolPolicy
from ingest.selectors.guides import tool_guide
from tests.factories import ConversationLinkFactory, PluginClientFactory
from tests.ingest.test_consumers import hello, open_socket
from tools.registry import Policy, tools

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

TOOL_NAMES = sorted(spec.name for spec in tools)
POLICIES = [Policy.ALLOW, Policy.APPROVE, Policy.DENY]
SCOPES = ["global", "client", "conversation"]
conversation_numbers = itertools.count(1)


@pytest.fixture
def client(channel_layer):
    return PluginClientFactory(client_id="laptop-chrome")


async def ask(communicator, **fields):
    await communicator.send_json_to({"type": "guide.get", "id": "g1", "platform": "claude", **fields})
    return await communicator.receive_json_from(timeout=5)


async def test_a_known_conversation_gets_its_own_guide_and_it_is_recorded(client):
    link = await _link(client, handle="me")
    await ToolPolicy.objects.acreate(tool="echo", policy=Policy.DENY, conversation=link.conversation)
    communicator, _ = await hello("laptop-chrome")

    reply = await ask(communicator, conversation_id=link.conversation.remote_id)
    assert reply["type"] == "guide" and reply["id"] == "g1"
    assert "`echo`" not in reply["text"] and reply["text"].startswith(f"# Conductor tool guide ({reply['version']})")
    again = await ask(communicator, conversation_id=link.conversation.remote_id)
    assert again["version"] == reply["version"]
    await communicator.disconnect()

    served = await ToolGuideServed.objects.aget(conversation=link.conversation)
    assert (served.version, served.count, served.client_id, served.text) == (
        reply["version"], 2, client.pk, reply["text"],
    )


async def test_an_unknown_conversation_gets_the_platforms_guide_with_the_clients_policies(client):
    await ToolPolicy.objects.acreate(tool="time.now", policy=Policy.DENY, client=client)
    communicator, _ = await hello("laptop-chrome")
    for conversation_id in ("never-seen", None):
        reply = await ask(communicator, conversation_id=conversation_id)
        assert reply["type"] == "guide"
        assert "`time.now`" not in reply["text"] and "`echo`" in reply["text"]
    await communicator.disconnect()
    assert await ToolGuideServed.objects.filter(conversation=None, client=client).acount() == 1


@pytest.mark.parametrize("frame, detail", [
    ({"type": "guide.get", "id": "g1"}, "'platform' is required"),
    ({"type": "guide.get", "id": "g1", "platform": "myspace"}, "unknown platform"),
    ({"type": "guide.get", "id": "g1", "platform": "claude", "conversation_id": 7}, "'conversation_id' must be str"),
    ({"type": "guide.get", "id": "g1", "platform": "claude", "conversation_id": "x" * 256}, "longer than 255"),
])
async def test_a_bad_guide_request_gets_an_invalid_error_and_the_socket_stays_open(client, frame, detail):
    communicator, _ = await hello("laptop-chrome")
    await communicator.send_json_to(frame)
    reply = await communicator.receive_json_from(timeout=5)
    assert (reply["type"], reply["code"], reply["id"]) == ("error", "invalid", "g1")
    assert detail in reply["detail"]
    await communicator.send_json_to({"type": "ping"})
    assert (await communicator.receive_json_from(timeout=5))["type"] == "pong"
    await communicator.disconnect()


async def test_guide_get_before_hello_is_unauthorized(client):
    communicator, _, _ = await open_socket()
    await communicator.send_json_to({"type": "guide.get", "id": "g1", "platform": "claude"})
    reply = await communicator.receive_json_from(timeout=5)
    assert reply["code"] == "unauthorized"
    assert (await communicator.receive_output(timeout=3))["code"] == 4401


def _link_sync(client, handle=None):
    number = next(conversation_numbers)
    return ConversationLinkFactory(
        client=client, conversation__remote_id=f"guided-{number}", conversation__handle=handle,
    )


async def _link(client, handle=None):
    return await sync_to_async(_link_sync)(client, handle)


policy_sets = st.lists(
    st.tuples(st.sampled_from(TOOL_NAMES), st.sampled_from(SCOPES), st.sampled_from(POLICIES)), max_size=12,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(policy_sets=policy_sets, with_mail=st.booleans())
def test_every_example_of_every_guide_runs_as_the_tool_it_names(client, policy_sets, with_mail):
    """Property: whatever the policies, the guide's examples, sent back as an answer, are the blocks it shows.

    Each is queued (at once or held for approval, as the guide says), none is
    rejected, and no denied tool is named.
    """
    ToolPolicy.objects.all().delete()
    if with_mail:
        _link_sync(PluginClientFactory(), handle=f"peer-{next(conversation_numbers)}")
    link = _link_sync(client)
    for tool, scope, policy in policy_sets:
        where = {"client": client} if scope == "client" else {"conversation": link.conversation} if scope == "conversation" else {}
        ToolPolicy.objects.update_or_create(tool=tool, **{"client": None, "conversation": None, **where},
                                            defaults={"policy": policy})
    expected = tool_guide(platform="claude", conversation=link.conversation, client_pk=client.pk)
    shown = [(tool.spec.name, tool.runs_at_once) for tool in expected.facts.tools]
    example_tools = [line for line in expected.text.split("## Examples", 1)[-1].split("## What comes back")[0].splitlines()
                     if line and not line.startswith(("```", "{"))]

    text, _ = async_to_sync(_round_trip)(link.conversation.remote_id)

    assert text == expected.text
    instructions = list(Instruction.objects.filter(message__conversation=link.conversation).order_by("block_index"))
    assert [i.tool for i in instructions] == example_tools
    runs_at_once = dict(shown)
    for instruction in instructions:
        assert instruction.status != Instruction.Status.REJECTED, instruction.error
        waits = instruction.status == Instruction.Status.AWAITING_APPROVAL
        assert waits == (not runs_at_once[instruction.tool])
    denied = set(TOOL_NAMES) - set(runs_at_once)
    for name in denied:
        assert f"`{name}`" not in text


async def _round_trip(conversation_id):
    communicator, _ = await hello("laptop-chrome")
    guide = await ask(communicator, conversation_id=conversation_id)
    await communicator.send_json_to({
        "type": "browser.final_message", "id": "f1", "platform": "claude", "conversation_id": conversation_id,
        "message_id": f"answer-{conversation_id}", "text": guide["text"],
    })
    ack = await communicator.receive_json_from(timeout=10)
    assert ack["type"] == "ack", ack
    await communicator.disconnect()
    return guide["text"], ack
