"""Mail between conversations (SPEC §3 ``mail.deliver``, §5.1 ``mail.send``), and the seed's three bugs.

Messages come in through ``message_ingest``; instructions run through a real
dispatcher; a thread plays the recipient's plugin where a mail is delivered.
"""

import datetime as dt
import json
import re
import random
import threading
import time

import pytest
from django.utils import timezone

from automation.dispatcher import Dispatcher, DispatcherConfig, execution_context
from automation.models import AutomationTask, Lease, TaskStatus
from automation.outcomes import Success
from automation.services import operator
from automation.services import transitions as tr
from automation.services.claim import tasks_claim, tasks_reclaim_expired
from conversations.models import Conversation, Message
from core.clock import now_ms
from ingest.frames import parse_delivery_result, parse_final_message
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.models import DeliveryRequest, Instruction, ToolPolicy
from ingest.services.deliveries import delivery_result_record
from ingest.services.messages import message_ingest
from pipelines.instructions import instruction_execute
from pipelines.mail import MAIL_BURST, MAIL_DELIVER, mail_pace_error
from pipelines.deliveries import message_results_text
from tests.factories import PluginClientFactory, lease_of, retry_policy, task_lease
from tools.registry import Policy

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

S = TaskStatus
LEASE = 60_000


def connect(client):
    """The client says hello: deliveries to it may go out (until then they wait for it)."""
    client.connected, client.last_seen_at = True, timezone.now() + dt.timedelta(hours=1)
    client.save()


@pytest.fixture
def writer():
    return PluginClientFactory(client_id="laptop", capabilities=["proxy_delivery"])


@pytest.fixture
def reviewer():
    return PluginClientFactory(client_id="desktop", capabilities=["proxy_delivery"])


def say(client, conversation_id, text, *, message_id, title="", platform="claude"):
    """An assistant message of ``conversation_id`` seen through ``client``."""
    frame = {
        "type": "browser.final_message", "id": f"f-{message_id}", "platform": platform,
        "conversation_id": conversation_id, "message_id": message_id, "title": title, "text": text,
        "page_url": f"https://claude.ai/chat/{conversation_id}",
    }
    return message_ingest(message=parse_final_message(frame), client=client)


def mail_block(to, text):
    return f"```baa\nmail.send\n{json.dumps({'to': to, 'text': text}, ensure_ascii=False)}\n```"


def conversation(remote_id, handle=None):
    found = Conversation.objects.get(remote_id=remote_id)
    if handle:
        Conversation.objects.filter(pk=found.pk).update(handle=handle)
    return Conversation.objects.get(pk=found.pk)


@pytest.fixture
def pair(writer, reviewer):
    """Two chats on two clients, each with a handle: "writer" and "reviewer"."""
    say(writer, "conv-w", "Hello", message_id="w0", title="Draft the notes")
    say(reviewer, "conv-r", "Hello", message_id="r0", title="Review the notes")
    return conversation("conv-w", "writer"), conversation("conv-r", "reviewer")


def dispatcher(**overrides):
    config = {
        "max_tasks_per_tick": 20, "lease_ms": LEASE, "outbound_jitter_max_ms": 0,
        "retry_backoff_seconds": (0,), "retry_jitter_max_ms": 0, **overrides,
    }
    return Dispatcher(owner="d1", config=DispatcherConfig(**config), rng=random.Random(1))


def run_instructions():
    """Run every due instruction to its end (no deliveries: those need a plugin)."""
    engine = dispatcher()
    try:
        while AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE, status=S.PENDING).exists():
            engine.tick()
            assert engine.wait_idle(30)
    finally:
        engine.stop(grace=5)


def mails():
    return list(AutomationTask.objects.filter(kind=MAIL_DELIVER).order_by("sequence"))


# --- mail.send ---------------------------------------------------------------------------------


def test_a_mail_send_becomes_one_mail_to_the_recipients_chat(pair, reviewer):
    writer_chat, reviewer_chat = pair
    say(reviewer, "conv-r", "Hello again", message_id="r1")  # the reviewer's link is its latest
    result = say(writer_chat_client(writer_chat), "conv-w", mail_block("reviewer", "Please review v2."),
                 message_id="w1")
    assert result.instructions == 1
    run_instructions()

    [mail] = mails()
    instruction = Instruction.objects.get(message_id=result.message_id)
    execute = instruction.tasks.get()
    assert json.loads(execute.result_json) == {"mail": mail.pk, "to": "reviewer"}
    assert (mail.status, mail.dedupe_key, mail.lane) == (S.PENDING, f"mail:{instruction.pk}", "outbound")
    assert (mail.target_client_id, mail.target_platform, mail.target_conversation_id) == ("desktop", "claude", "conv-r")
    assert (mail.conversation_id, mail.message_id, mail.instruction_id) == (reviewer_chat.pk, result.message_id, None)
    assert mail.payload["text"] == (
        'Mail from @writer ("Draft the notes"):\n\nPlease review v2.\n\n'
        'To answer, reply with a block:\n```baa\nmail.send\n{"to": "writer", "text": "..."}\n```'
    )
    # The instruction's own results go back to the sender as usual, naming the mail.
    assert AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER, conversation=writer_chat).count() == 1


def writer_chat_client(chat):
    return chat.links.get().client


def test_running_mail_send_again_makes_no_second_mail(pair):
    writer_chat, _ = pair
    say(writer_chat_client(writer_chat), "conv-w", mail_block("reviewer", "Once."), message_id="w1")
    run_instructions()
    execute = AutomationTask.objects.get(kind=INSTRUCTION_EXECUTE)
    # The tool runs again (a worker that died after sending it, say).
    again = instruction_execute(execution_context(execute, lease=Lease(owner="d2", token=1)))
    assert len(mails()) == 1
    assert again == Success({"mail": mails()[0].pk, "to": "reviewer"})
    assert json.loads(AutomationTask.objects.get(pk=execute.pk).result_json)["mail"] == mails()[0].pk


@pytest.mark.parametrize("params,error", [
    ({"to": "nobody", "text": "hi"}, "invalid params for mail.send: params.to: no conversation receives mail as 'nobody'"),
    ({"to": "Reviewer", "text": "hi"}, "does not match"),
    ({"to": "reviewer", "text": ""}, "should be non-empty"),
    ({"to": "reviewer", "text": "x" * 8001}, "is too long"),
    ({"to": "reviewer"}, "'text' is a required property"),
])
def test_a_mail_send_that_cannot_be_delivered_is_a_rejected_block(pair, params, error):
    writer_chat, _ = pair
    block = f"```baa\nmail.send\n{json.dumps(params)}\n```"
    say(writer_chat_client(writer_chat), "conv-w", block, message_id="w1")
    instruction = Instruction.objects.get(message__remote_message_id="w1")
    assert instruction.status == Instruction.Status.REJECTED
    assert error in instruction.error
    assert "writer" not in instruction.error  # no handle but the one written is ever listed
    assert not mails()


def test_mail_send_is_held_by_an_approve_policy_like_any_tool(pair):
    writer_chat, _ = pair
    ToolPolicy.objects.create(tool="mail.send", policy=Policy.APPROVE)
    say(writer_chat_client(writer_chat), "conv-w", mail_block("reviewer", "hi"), message_id="w1")
    assert AutomationTask.objects.get(kind=INSTRUCTION_EXECUTE).status == S.BLOCKED
    run_instructions()
    assert not mails()


def test_a_recipient_whose_handle_was_removed_no_longer_accepts_its_mail(pair, reviewer):
    writer_chat, reviewer_chat = pair
    say(writer_chat_client(writer_chat), "conv-w", mail_block("reviewer", "hi"), message_id="w1")
    run_instructions()
    Conversation.objects.filter(pk=reviewer_chat.pk).update(handle=None)
    connect(reviewer)
    [mail] = mails()
    engine = dispatcher()
    try:
        engine.tick()
        assert engine.wait_idle(30)
    finally:
        engine.stop(grace=5)
    mail.refresh_from_db()
    assert (mail.status, mail.last_error) == (S.FAILED, "the recipient no longer accepts mail: its handle was removed")


# --- the seed's bugs -----------------------------------------------------------------------------


def _route(task):
    task = AutomationTask.objects.get(pk=task.pk)
    return (task.target_client_id, task.target_platform, task.target_conversation_id)


def test_seed_bug_1_a_mail_keeps_its_recipient_through_requeue_reclaim_retries_and_an_operators_retry(pair):
    writer_chat, _ = pair
    say(writer_chat_client(writer_chat), "conv-w", mail_block("reviewer", "hi"), message_id="w1")
    run_instructions()
    [mail] = mails()
    route = _route(mail)
    assert route == ("desktop", "claude", "conv-r")
    now = now_ms()
    policy = retry_policy(random.Random(1))

    # Requeued: leased, then released unstarted.
    task_lease(mail.pk, lease_owner="d1", lease_until=now + LEASE, now=now)
    tr.task_release(mail.pk, lease=lease_of(mail.pk), reason="client offline", now=now)
    assert _route(mail) == route
    # Reclaimed after a crash: a worker died running it.
    task_lease(mail.pk, lease_owner="d1", lease_until=now + LEASE, now=now)
    tr.task_start(mail.pk, lease=lease_of(mail.pk), lease_until=now + LEASE, now=now)
    assert tasks_reclaim_expired(now=now + LEASE + 1, retry=policy, actor="d2")
    assert _route(mail) == route
    # Retried after failures until its attempts ran out, then retried by an operator.
    for _ in range(5):
        task = AutomationTask.objects.get(pk=mail.pk)
        if task.status == S.FAILED:
            break
        later = max(now, task.execute_after)
        task_lease(mail.pk, lease_owner="d1", lease_until=later + LEASE, now=later)
        tr.task_start(mail.pk, lease=lease_of(mail.pk), lease_until=later + LEASE, now=later)
        if task.attempt_count + 1 < task.max_attempts:
            tr.task_retry_later(mail.pk, lease=lease_of(mail.pk), error="HTTP 500", retry_at=later, backoff_ms=0,
                                jitter_ms=0, now=later)
        else:
            tr.task_fail(mail.pk, lease=lease_of(mail.pk), error="HTTP 500", now=later)
        assert _route(mail) == route
    assert AutomationTask.objects.get(pk=mail.pk).status == S.FAILED
    operator.tasks_retry(task_ids=[mail.pk], actor="operator", has_perm=operator.has_every_permission)
    assert _route(mail) == route
    # By construction: no change of state may write a route.
    with pytest.raises(ValueError, match="may not write its route"):
        tr._transition(mail.pk, tr.CANCEL, actor="operator", now=now, changes={"target_client_id": None})
    assert _route(mail) == route


def test_seed_bug_2_a_blocked_task_with_nothing_to_wait_for_never_runs_without_an_approve(pair):
    writer_chat, _ = pair
    ToolPolicy.objects.create(tool="echo", policy=Policy.APPROVE)
    say(writer_chat_client(writer_chat), "conv-w", "```baa\necho\n{}\n```", message_id="w1")
    blocked = AutomationTask.objects.get(kind=INSTRUCTION_EXECUTE)
    assert blocked.status == S.BLOCKED  # and no other task anywhere it could wait for
    engine = dispatcher()
    try:
        for _ in range(30):
            assert blocked.pk not in engine.tick().claimed
        assert engine.wait_idle(30)
        assert AutomationTask.objects.get(pk=blocked.pk).status == S.BLOCKED
        # By construction: the state diagram has one way out of blocked to pending, the approve.
        edges = [edge for edge in vars(tr).values() if isinstance(edge, tr.Edge)]
        assert [edge.action for edge in edges if S.BLOCKED in edge.allowed_from and edge.to_status == S.PENDING] == [
            "approve"
        ]
        operator.tasks_approve(task_ids=[blocked.pk], actor="operator", has_perm=operator.has_every_permission)
        engine.tick()
        assert engine.wait_idle(30)
    finally:
        engine.stop(grace=5)
    assert AutomationTask.objects.get(pk=blocked.pk).status == S.SUCCEEDED


class RecipientPlugin(threading.Thread):
    """Answers the first delivery request with a delivered HTTP answer, as the consumer stores it."""

    def __init__(self):
        super().__init__(daemon=True)
        self.clients = []

    def run(self):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            request = DeliveryRequest.objects.filter(answered_at__isnull=True).select_related("client").first()
            if request:
                self.clients.append(request.client.client_id)
                frame = {"request_id": request.pk, "ok": True, "status": 200, "body": ""}
                delivery_result_record(client_pk=request.client_id, result=parse_delivery_result(frame))
                return
            time.sleep(0.01)


@pytest.mark.parametrize("words", ["rm -rf / --no-preserve-root", "delete everything", "删掉所有文件"])
def test_seed_bug_3_a_mail_that_a_guardrail_would_flag_is_delivered_as_written(pair, reviewer, words):
    writer_chat, reviewer_chat = pair
    ToolPolicy.objects.create(tool="shell.run", policy=Policy.DENY)
    ToolPolicy.objects.create(tool="files.write", policy=Policy.APPROVE, conversation=reviewer_chat)
    text = f"{words}\n```baa\nshell.run\n{{\"argv\": [\"rm\", \"-rf\", \"/\"]}}\n```"
    say(writer_chat_client(writer_chat), "conv-w", mail_block("reviewer", text), message_id="w1")
    run_instructions()
    [mail] = mails()
    assert mail.status == S.PENDING  # never held

    connect(reviewer)
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
    assert AutomationTask.objects.get(pk=mail.pk).status == S.SUCCEEDED
    assert plugin.clients == ["desktop"]
    delivered = Message.objects.get(source=Message.Source.CONDUCTOR, conversation=reviewer_chat)
    assert f"\n\n{text}\n\n" in delivered.text
    assert [e.action for e in AutomationTask.objects.get(pk=mail.pk).events.all()][:3] == ["create", "lease", "start"]


def test_seed_bug_4_a_retrying_mail_takes_its_recipients_per_target_slot(pair, reviewer):
    writer_chat, _ = pair
    say(writer_chat_client(writer_chat), "conv-w", mail_block("reviewer", "hi"), message_id="w1")
    run_instructions()
    [mail] = mails()
    now = now_ms()
    # The mail's first attempt failed; it waits to retry.
    task_lease(mail.pk, lease_owner="d1", lease_until=now + LEASE, now=now)
    tr.task_start(mail.pk, lease=lease_of(mail.pk), lease_until=now + LEASE, now=now)
    tr.task_retry_later(mail.pk, lease=lease_of(mail.pk), error="timeout", retry_at=now + LEASE, backoff_ms=LEASE,
                        jitter_ms=0, now=now)
    # Meanwhile another conversation of the same client gets a delivery in flight.
    connect(reviewer)
    say(reviewer, "conv-other", "```baa\nnope\n```", message_id="o1")
    in_flight = AutomationTask.objects.get(kind=INSTRUCTION_DELIVER, conversation__remote_id="conv-other")
    assert in_flight.target_client_id == mail.target_client_id == "desktop"
    claimed = [t.pk for t in tasks_claim(lease_owner="d1", now=now_ms(), limit=20, lease_ms=LEASE)]
    assert claimed == [in_flight.pk]

    later = now + LEASE  # the mail is due again, but its client's slot is taken
    assert mail.pk not in [t.pk for t in tasks_claim(lease_owner="d1", now=later, limit=20, lease_ms=LEASE)]
    tr.task_start(in_flight.pk, lease=lease_of(in_flight.pk), lease_until=later + LEASE, now=later)
    tr.task_succeed(in_flight.pk, lease=lease_of(in_flight.pk), result=None, now=later)
    assert [t.pk for t in tasks_claim(lease_owner="d1", now=later, limit=20, lease_ms=LEASE)] == [mail.pk]


def test_a_mail_to_the_senders_own_handle_is_a_rejected_block_saying_so(pair):
    writer_chat, _ = pair
    say(writer_chat_client(writer_chat), "conv-w", mail_block("writer", "Note to self."), message_id="w1")
    instruction = Instruction.objects.get(message__remote_message_id="w1")
    assert (instruction.status, instruction.error) == (
        Instruction.Status.REJECTED,
        "invalid params for mail.send: params.to: 'writer' is this conversation's own handle; "
        "a conversation cannot mail itself",
    )
    assert not mails()


# --- loops -------------------------------------------------------------------------------------


def test_two_chats_mailing_each_other_go_at_the_hourly_budgets_pace_and_are_told_so(pair, settings):
    """The loop the budget alone let run to 139 mails in seconds: three each way, then one each 30 s."""
    settings.CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR = 120
    writer_chat, reviewer_chat = pair
    chats = {writer_chat.pk: ("conv-w", "reviewer"), reviewer_chat.pk: ("conv-r", "writer")}
    say(writer_chat_client(writer_chat), "conv-w", mail_block("reviewer", "ping 0"), message_id="m0")
    run_instructions()
    answered = set()
    for round_ in range(1, 20):
        new = [mail for mail in mails() if mail.pk not in answered]
        if not new:
            break
        for mail in new:
            answered.add(mail.pk)
            remote_id, to = chats[mail.conversation_id]
            say(mail.conversation.links.get().client, remote_id, mail_block(to, f"ping {round_}"),
                message_id=f"m{round_}-{mail.pk}")
        run_instructions()
    else:
        pytest.fail("the loop did not stop")
    assert len(mails()) == 2 * MAIL_BURST
    # The first mail over the pace failed, and its sender's chat is told why and when to try again.
    [failed] = Instruction.objects.filter(status=Instruction.Status.FAILED)
    text = message_results_text(message_id=failed.message_id)
    assert "mail rate: this conversation already mailed 'reviewer' 3 times in the last 90 s" in text
    assert "CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR = 120: one every 30 s" in text
    assert re.search(r"send it again in \d+ s or later", text)


def test_the_pace_lets_the_next_mail_go_once_the_oldest_leaves_the_window(pair, settings):
    settings.CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR = 120
    writer_chat, reviewer_chat = pair
    say(writer_chat_client(writer_chat), "conv-w",
        "\n".join(mail_block("reviewer", f"note {n}") for n in range(MAIL_BURST + 1)), message_id="w1")
    run_instructions()
    assert len(mails()) == MAIL_BURST
    oldest = min(mail.created_at for mail in mails())
    window_ms = MAIL_BURST * 30_000

    def pace_error(now):
        return mail_pace_error(sender=writer_chat, recipient=reviewer_chat, instruction_id=0, now=now)

    assert "send it again in 1 s or later" in pace_error(oldest + window_ms - 1)
    assert pace_error(oldest + window_ms) is None
    # The other direction, and another pair, have paces of their own.
    assert mail_pace_error(sender=reviewer_chat, recipient=writer_chat, instruction_id=0, now=oldest) is None




def test_two_chats_mailing_each_other_forever_stop_at_the_instruction_budget(pair, settings):
    settings.CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR = 3
    writer_chat, reviewer_chat = pair
    chats = {writer_chat.pk: ("conv-w", "reviewer"), reviewer_chat.pk: ("conv-r", "writer")}
    say(writer_chat_client(writer_chat), "conv-w", mail_block("reviewer", "ping 0"), message_id="m0")
    run_instructions()
    answered = set()
    for round_ in range(1, 20):
        # Each chat answers every mail it received with a mail back, as an eager assistant would.
        new = [mail for mail in mails() if mail.pk not in answered]
        if not new:
            break
        for mail in new:
            answered.add(mail.pk)
            remote_id, to = chats[mail.conversation_id]
            say(mail.conversation.links.get().client, remote_id, mail_block(to, f"ping {round_}"),
                message_id=f"m{round_}-{mail.pk}")
        run_instructions()
    else:
        pytest.fail("the loop did not stop")
    # Each conversation got at most its budget of valid blocks; the rest were rejected saying why.
    assert len(mails()) == 6
    rejected = Instruction.objects.filter(status=Instruction.Status.REJECTED)
    assert rejected.count() == 1
    assert "CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR" in rejected.get().error
