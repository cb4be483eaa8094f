"""Mail stays within an owner (SPEC §5.1): the guide, ``mail.send`` at ingest and when it runs, and delivery.

Owner A ("alice") and owner B ("bob") share one Conductor, each with a
plugin client. Only ``CONDUCTOR_MAIL_BETWEEN_OWNERS`` lets them mail each other.
"""

import time

import pytest

from automation.models import AutomationTask, TaskStatus
from automation.services import operator
from conversations.models import Conversation, Message
from ingest.kinds import INSTRUCTION_EXECUTE
from ingest.models import DeliveryRequest, Instruction, ToolPolicy
from ingest.selectors.guides import tool_guide, tool_guide_facts
from ingest.services.guides import tool_guide_serve
from pipelines.mail import mail_send, mail_send_check
from pipelines.deliveries import message_results_text
from tests.factories import PluginClientFactory
from tests.pipelines.test_mail import RecipientPlugin, connect, dispatcher, mail_block, mails, run_instructions, say
from tools.registry import Policy, ToolCall, ToolError, ToolOrigin

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

S = TaskStatus
SECRET = "alice-secret-project"
ALICE_AND_BOB = frozenset({frozenset({"alice", "bob"})})


@pytest.fixture
def alice():
    return PluginClientFactory(client_id="alice-laptop", owner="alice", capabilities=["proxy_delivery"])


@pytest.fixture
def bob():
    return PluginClientFactory(client_id="bob-laptop", owner="bob", capabilities=["proxy_delivery"])


def chat(client, remote_id, handle):
    """A conversation first seen through ``client`` (so of its owner), with ``handle``."""
    say(client, remote_id, "Hello", message_id=f"{remote_id}-0")
    Conversation.objects.filter(remote_id=remote_id).update(handle=handle)
    return Conversation.objects.get(remote_id=remote_id)


@pytest.fixture
def chats(alice, bob):
    """A's secret project and notes; B's desk and notes."""
    return {
        "a": chat(alice, "conv-a", SECRET),
        "a-notes": chat(alice, "conv-a-notes", "alice-notes"),
        "b": chat(bob, "conv-b", "bob-desk"),
        "b-notes": chat(bob, "conv-b-notes", "bob-notes"),
    }


def rejection(client, remote_id, to, *, message_id):
    """The error of a ``mail.send`` block to ``to``, sent in ``remote_id`` through ``client``."""
    say(client, remote_id, mail_block(to, "INJECTED FROM OWNER B"), message_id=message_id)
    instruction = Instruction.objects.get(message__remote_message_id=message_id)
    assert instruction.status == Instruction.Status.REJECTED
    return instruction.error


def nothing_reached(client_id):
    """No task is routed to ``client_id``'s browser and no delivery was asked of it."""
    return (
        not AutomationTask.objects.filter(target_client_id=client_id).exists()
        and not DeliveryRequest.objects.filter(client__client_id=client_id).exists()
    )


# --- the guide ----------------------------------------------------------------------------------


def test_a_guide_lists_only_the_handles_of_its_own_owners_conversations(chats, alice, bob):
    b_facts = tool_guide_facts(platform="claude", conversation=chats["b"], client_pk=bob.pk)
    assert b_facts.mail_handles == ("bob-notes",)
    a_facts = tool_guide_facts(platform="claude", conversation=chats["a"], client_pk=alice.pk)
    assert a_facts.mail_handles == ("alice-notes",)
    # A new chat on B's client, and A's chat asked for by B's client (served as a new one), list B's.
    assert tool_guide_facts(platform="claude", client_pk=bob.pk).mail_handles == ("bob-desk", "bob-notes")
    served = tool_guide_serve(client_pk=bob.pk, platform="claude", conversation_id="conv-a")
    assert served.facts.mail_handles == ("bob-desk", "bob-notes")
    for guide in (tool_guide(platform="claude", conversation=chats["b"], client_pk=bob.pk), served):
        assert "alice" not in guide.text


def test_a_guide_lists_no_mail_when_its_owner_has_no_other_handle(chats, bob):
    Conversation.objects.filter(pk=chats["b-notes"].pk).update(handle=None)
    guide = tool_guide(platform="claude", conversation=chats["b"], client_pk=bob.pk)
    assert guide.facts.mail_handles == ()
    assert "mail.send" not in guide.text and SECRET not in guide.text


# --- mail.send across owners --------------------------------------------------------------------


def test_a_mail_to_another_owners_handle_is_refused_exactly_as_an_unknown_handle(chats, alice, bob):
    foreign = rejection(bob, "conv-b", SECRET, message_id="b1")
    unknown = rejection(bob, "conv-b", "nobody-at-all", message_id="b2")
    assert foreign == f"invalid params for mail.send: params.to: no conversation receives mail as {SECRET!r}"
    assert foreign.replace(SECRET, "?") == unknown.replace("nobody-at-all", "?")
    assert not AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE).exists()
    assert not mails()
    # What B's chat is told back says no more than that.
    for message_id, handle in (("b1", SECRET), ("b2", "nobody-at-all")):
        results = message_results_text(message_id=Instruction.objects.get(message__remote_message_id=message_id).message_id)
        assert f"no conversation receives mail as '{handle}'" in results
        assert "alice" not in results.replace(SECRET, "")
    # A's browser hears nothing of it, even once connected and with a dispatcher running.
    connect(alice)
    run_instructions()
    assert nothing_reached("alice-laptop")
    assert not Message.objects.filter(conversation=chats["a"], source=Message.Source.CONDUCTOR).exists()


def test_the_run_refuses_another_owners_handle_with_the_unknown_handles_words(chats):
    """The check again when the tool runs (after an approval, say): the same words for both."""
    def run(to):
        origin = ToolOrigin(instruction_id=1, message_id=None, conversation_id=chats["b"].pk)
        call = ToolCall(params={"to": to, "text": "hi"}, workspace=None, shell_max_timeout_seconds=1, origin=origin)
        with pytest.raises(ToolError) as raised:
            mail_send(call)
        return str(raised.value)

    assert run(SECRET) == f"no conversation receives mail as {SECRET!r}"
    assert run(SECRET).replace(SECRET, "?") == run("nobody-at-all").replace("nobody-at-all", "?")
    assert (mail_send_check({"to": SECRET}, conversation_id=chats["b"].pk).replace(SECRET, "?")
            == mail_send_check({"to": "nobody-at-all"}, conversation_id=chats["b"].pk).replace("nobody-at-all", "?"))
    assert not mails()


def test_a_held_mail_approved_after_its_owners_were_parted_fails_as_if_the_handle_did_not_exist(
    chats, bob, settings
):
    settings.CONDUCTOR_MAIL_BETWEEN_OWNERS = ALICE_AND_BOB
    ToolPolicy.objects.create(tool="mail.send", policy=Policy.APPROVE)
    say(bob, "conv-b", mail_block(SECRET, "hi"), message_id="b1")
    held = AutomationTask.objects.get(kind=INSTRUCTION_EXECUTE)
    assert held.status == S.BLOCKED
    settings.CONDUCTOR_MAIL_BETWEEN_OWNERS = frozenset()
    operator.tasks_approve(task_ids=[held.pk], actor="operator", has_perm=operator.has_every_permission)
    run_instructions()
    held.refresh_from_db()
    assert (held.status, held.last_error) == (S.FAILED, f"params.to: no conversation receives mail as {SECRET!r}")
    assert not mails() and nothing_reached("alice-laptop")


# --- mail between two owners an operator paired -----------------------------------------------------


def test_with_the_pair_allowed_a_mail_crosses_to_the_other_owners_chat(chats, alice, bob, settings):
    settings.CONDUCTOR_MAIL_BETWEEN_OWNERS = ALICE_AND_BOB
    b_facts = tool_guide_facts(platform="claude", conversation=chats["b"], client_pk=bob.pk)
    assert b_facts.mail_handles == ("alice-notes", SECRET, "bob-notes")
    say(bob, "conv-b", mail_block(SECRET, "Hello from Bob."), message_id="b1")
    run_instructions()
    [mail] = mails()
    assert (mail.conversation_id, mail.target_client_id, mail.status) == (chats["a"].pk, "alice-laptop", S.PENDING)

    connect(alice)
    plugin = RecipientPlugin()
    plugin.start()
    engine = dispatcher()
    try:
        deadline = time.monotonic() + 20
        while AutomationTask.objects.get(pk=mail.pk).status != S.SUCCEEDED and time.monotonic() < deadline:
            engine.tick()
            engine.wait_idle(30)
    finally:
        engine.stop(grace=5)
        plugin.join()
    assert plugin.clients == ["alice-laptop"]
    delivered = Message.objects.get(conversation=chats["a"], source=Message.Source.CONDUCTOR)
    assert "Mail from @bob-desk" in delivered.text and "Hello from Bob." in delivered.text


def test_a_pair_allows_both_ways_and_no_one_else(chats, settings):
    carol = PluginClientFactory(client_id="carol-laptop", owner="carol")
    carols = chat(carol, "conv-c", "carol-desk")
    settings.CONDUCTOR_MAIL_BETWEEN_OWNERS = ALICE_AND_BOB
    assert mail_send_check({"to": "bob-desk"}, conversation_id=chats["a"].pk) is None
    assert mail_send_check({"to": SECRET}, conversation_id=chats["b"].pk) is None
    refused = "params.to: no conversation receives mail as {!r}"
    assert mail_send_check({"to": "carol-desk"}, conversation_id=chats["b"].pk) == refused.format("carol-desk")
    assert mail_send_check({"to": SECRET}, conversation_id=carols.pk) == refused.format(SECRET)


def test_a_mail_made_while_allowed_is_not_delivered_once_the_pair_is_removed(chats, alice, bob, settings):
    settings.CONDUCTOR_MAIL_BETWEEN_OWNERS = ALICE_AND_BOB
    say(bob, "conv-b", mail_block(SECRET, "hi"), message_id="b1")
    run_instructions()
    [mail] = mails()
    settings.CONDUCTOR_MAIL_BETWEEN_OWNERS = frozenset()
    connect(alice)
    engine = dispatcher()
    try:
        engine.tick()
        assert engine.wait_idle(30)
    finally:
        engine.stop(grace=5)
    mail.refresh_from_db()
    assert mail.status == S.FAILED
    assert mail.last_error.startswith("the recipient no longer accepts mail from the sender")
    assert not DeliveryRequest.objects.filter(client=alice).exists()
