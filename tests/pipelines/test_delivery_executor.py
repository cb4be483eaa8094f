"""The delivery executors' outcomes (SPEC §3), with the plugin's answer stored as a consumer would store it."""

import threading
import time

import pytest

from ingest.kinds import INSTRUCTION_DELIVER
from ingest.models import DeliveryRequest
from automation.dispatcher import execution_context
from automation.outcomes import RetryableFailure, Success, TerminalFailure
from automation.services import transitions
from automation.services.tasks import task_create
from conversations.models import Message
from core.clock import now_ms
from ingest.frames import parse_delivery_result
from ingest.models import PluginClient
from ingest.services.deliveries import delivery_result_record
from pipelines.deliveries import instruction_deliver
from pipelines.renewal import RENEWAL_DELIVER, renewal_deliver
from platforms import platforms
from tests.factories import (
    ConversationFactory,
    ConversationLinkFactory,
    InstructionFactory,
    MessageFactory,
    PluginClientFactory,
    task_lease,
    lease_of,
)

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@pytest.fixture(autouse=True)
def quick_timeout(settings):
    settings.CONDUCTOR_DELIVERY_TIMEOUT_SECONDS = 1


@pytest.fixture
def link():
    return ConversationLinkFactory(
        client=PluginClientFactory(capabilities=["proxy_delivery"]),
        conversation=ConversationFactory(remote_id="conv-9"), organization_id="org-9",
        last_assistant_message_id="assistant-1",
    )


def running(task):
    """The context of the task's run, started as the dispatcher "test" would: a delivery records steps."""
    now = now_ms()
    task.refresh_from_db()
    if task.status != "running":  # else a second run within the same attempt
        task_lease(task.pk, lease_owner="test", lease_until=now + 60_000, now=now)
        task = transitions.task_start(task.pk, lease=lease_of(task.pk), lease_until=now + 60_000, now=now)
    return execution_context(task)


def renewal_task(conversation, text="Please continue."):
    task, _ = task_create(
        kind=RENEWAL_DELIVER, payload={"conversation_id": conversation.pk, "text": text}, actor="test",
        conversation_id=conversation.pk,
    )
    return task


class Plugin(threading.Thread):
    """Answers the first delivery request it finds, as the consumer stores a plugin's result."""

    def __init__(self, **answer):
        super().__init__(daemon=True)
        self.answer = {"ok": True, "status": 200, "body": "", "error": None, **answer}

    def run(self):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            request = DeliveryRequest.objects.filter(answered_at__isnull=True).first()
            if request:
                frame = {"type": "browser.proxy_delivery.result", "request_id": request.pk, **self.answer}
                delivery_result_record(client_pk=request.client_id, result=parse_delivery_result(frame))
                return
            time.sleep(0.02)


def deliver(executor, task, **answer):
    plugin = Plugin(**answer)
    plugin.start()
    outcome = executor(running(task))
    plugin.join()
    return outcome


def test_a_delivered_text_is_stored_once_as_the_conversations_user_message(link):
    task = renewal_task(link.conversation)
    outcome = deliver(renewal_deliver, task,
                      body='event: message_start\ndata: {"type": "message_start", "message": {"uuid": "assistant-2"}}\n\n')
    assert isinstance(outcome, Success)
    stored = Message.objects.get(source=Message.Source.CONDUCTOR)
    assert (stored.role, stored.text, stored.client_id, stored.parent_message_id) == (
        "user", "Please continue.", link.client_id, "assistant-1",
    )
    assert outcome.result == {
        "request_id": DeliveryRequest.objects.get().pk, "method": "http", "status": 200,
        "message_id": stored.pk, "remote_message_id": "assistant-2",
    }
    # The next delivery replies under the message the platform just created.
    link.refresh_from_db()
    assert link.last_assistant_message_id == "assistant-2"
    # A second run of the same task (a retry after a lost lease) stores nothing new.
    deliver(renewal_deliver, task)
    assert Message.objects.filter(source=Message.Source.CONDUCTOR).count() == 1


@pytest.mark.parametrize("answer,error", [
    ({"status": 429, "body": '{"error": {"type": "rate_limit_error", "message": "slow down"}}'},
     "claude answered HTTP 429"),
    ({"ok": False, "status": None, "error": "TypeError: Failed to fetch"}, "Failed to fetch"),
    ({"status": 200, "body": 'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error"}}\n\n'},
     "overloaded_error"),
])
def test_an_answer_that_is_not_a_delivery_is_retryable(link, answer, error):
    outcome = deliver(renewal_deliver, renewal_task(link.conversation), **answer)
    assert isinstance(outcome, RetryableFailure)
    assert error in outcome.error
    assert not Message.objects.filter(source=Message.Source.CONDUCTOR).exists()


def test_no_answer_in_time_is_retryable(link):
    outcome = renewal_deliver(running(renewal_task(link.conversation)))
    assert isinstance(outcome, RetryableFailure)
    assert outcome.error == f"no answer from plugin client '{link.client.client_id}' within 1 s"


def test_a_cancelled_delivery_stops_waiting(link):
    ctx = running(renewal_task(link.conversation))
    ctx.cancelled.set()
    started = time.monotonic()
    renewal_deliver(ctx)
    assert time.monotonic() - started < 0.5


def test_the_results_of_a_messages_blocks_are_the_delivered_text(link):
    message = MessageFactory(conversation=link.conversation)
    InstructionFactory(message=message, block_index=1, tool="echo", status="succeeded")
    InstructionFactory(message=message, block_index=2, tool="files.delete", status="rejected", error="unknown tool")
    task, _ = task_create(kind=INSTRUCTION_DELIVER, payload={"message_id": message.pk, "instruction_ids": None},
                          actor="test", conversation_id=link.conversation_id, message_id=message.pk)
    assert isinstance(deliver(instruction_deliver, task), Success)
    text = Message.objects.get(source=Message.Source.CONDUCTOR).text
    assert text.startswith("Conductor results for 2 blocks")
    assert '"tool": "files.delete", "ok": false, "status": "rejected", "error": "unknown tool"' in text


@pytest.mark.parametrize("executor,payload,error", [
    (instruction_deliver, {"message_id": 999999}, "payload missing: message 999999 does not exist"),
    (instruction_deliver, {}, "payload missing: message None does not exist"),
    (renewal_deliver, {"text": "  "}, "payload missing: no renewal text"),
])
def test_a_missing_payload_is_terminal(link, executor, payload, error):
    kind = INSTRUCTION_DELIVER if executor is instruction_deliver else RENEWAL_DELIVER
    task, _ = task_create(kind=kind, payload=payload, actor="test", conversation_id=link.conversation_id)
    outcome = executor(running(task))
    assert outcome == TerminalFailure(error)


def test_a_conversation_never_seen_through_a_plugin_has_no_route():
    outcome = renewal_deliver(running(renewal_task(ConversationFactory())))
    assert outcome == TerminalFailure("no route for the conversation: it was never seen through a plugin client")


def test_an_unsupported_platform_is_terminal(link):
    task, _ = task_create(
        kind=RENEWAL_DELIVER, payload={"text": "hi"}, actor="test", conversation_id=link.conversation_id,
        target_client_id=link.client.client_id, target_platform="bing", target_conversation_id="c",
    )
    outcome = renewal_deliver(running(task))
    assert isinstance(outcome, TerminalFailure)
    assert outcome.error == f"unsupported platform 'bing'; known: {', '.join(platforms.names())}"


def test_a_task_routed_to_a_client_given_another_owner_since_is_never_sent_to_it(link):
    task = renewal_task(link.conversation)
    assert task.target_client_id == link.client.client_id
    PluginClient.objects.filter(pk=link.client_id).update(owner="someone-else")
    outcome = renewal_deliver(running(task))
    assert isinstance(outcome, TerminalFailure)
    assert "results never go to another owner's client" in outcome.error
    assert not DeliveryRequest.objects.exists()
