import datetime as dt
import json
from unittest import mock

import pytest
from django.utils import timezone

from automation.models import AutomationTask
from conversations.models import Conversation, ConversationLink, Message
from ingest.frames import parse_final_message
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.models import Instruction, ToolPolicy
from ingest.services.messages import message_ingest, messages_store
from pipelines.deliveries import message_results_text
from tests.factories import PluginClientFactory, make_task
from tools.registry import Policy

pytestmark = pytest.mark.django_db


def block(tool, params=None, target=None):
    header = f"{target}::{tool}" if target else tool
    body = "" if params is None else json.dumps(params)
    return f"```baa\n{header}\n{body}\n```"


def frame(text, **overrides):
    return {
        "type": "browser.final_message", "id": "f-1", "platform": "claude",
        "conversation_id": "conv-1", "message_id": "msg-1", "parent_message_id": "msg-0",
        "organization_id": "org-1", "page_url": "https://claude.ai/chat/conv-1",
        "title": "Planning", "text": text, "observed_at": "2026-11-29T12:00:00Z", **overrides,
    }


def ingest(text="no blocks here", client=None, **overrides):
    return message_ingest(message=parse_final_message(frame(text, **overrides)), client=client)


@pytest.fixture
def client():
    return PluginClientFactory(client_id="laptop")


def test_stores_the_message_conversation_and_link(client):
    result = ingest("Hello", client)

    message = Message.objects.get()
    assert (result.message_id, result.instructions, result.duplicate) == (message.pk, 0, False)
    assert (message.role, message.source, message.text, message.remote_message_id) == (
        "assistant", "plugin", "Hello", "msg-1",
    )
    assert message.raw_frame["observed_at"] == "2026-11-29T12:00:00Z"
    conversation = message.conversation
    assert (conversation.platform, conversation.remote_id, conversation.title) == ("claude", "conv-1", "Planning")
    assert conversation.last_activity_at is not None
    link = ConversationLink.objects.get()
    assert (link.client, link.page_url, link.organization_id, link.last_assistant_message_id) == (
        client, "https://claude.ai/chat/conv-1", "org-1", "msg-1",
    )
    assert not AutomationTask.objects.exists()


def test_each_valid_block_becomes_an_instruction_and_a_task_in_order(client):
    text = "\n".join([block("echo", {"n": 1}), "and then", block("time.now"), block("files.read", {"path": "a.md"})])
    result = ingest(text, client)

    assert result.instructions == 3
    instructions = list(Instruction.objects.order_by("block_index"))
    assert [(i.block_index, i.tool, i.status) for i in instructions] == [
        (1, "echo", "pending"), (2, "time.now", "pending"), (3, "files.read", "pending"),
    ]
    conversation_id = instructions[0].message.conversation_id
    for instruction in instructions:
        task = instruction.tasks.get()
        assert (task.kind, task.status, task.conversation_id, task.message_id) == (
            INSTRUCTION_EXECUTE, "pending", conversation_id, instruction.message_id,
        )
        assert task.dedupe_key == f"execute:{instruction.pk}"
        assert task.target_client_id is None  # runs here, not in a browser
        payload = json.loads(task.payload_json)
        assert (payload["tool"], payload["params"], payload["instruction_id"]) == (
            instruction.tool, instruction.params, instruction.pk,
        )
        assert task.events.get().actor == "ingest"
    # Arrival order: creation time, then instruction id (block order within a message).
    ordered = AutomationTask.objects.order_by("created_at", "instruction_id")
    assert [t.instruction.block_index for t in ordered] == [1, 2, 3]


def test_tools_needing_approval_are_queued_blocked(client):
    ingest(block("shell.run", {"argv": ["ls"]}) + "\n" + block("echo"), client)
    shell = Instruction.objects.get(tool="shell.run")
    assert shell.status == "awaiting_approval"
    assert shell.tasks.get().status == "blocked"
    assert Instruction.objects.get(tool="echo").tasks.get().status == "pending"


@pytest.mark.parametrize(
    "text,error",
    [
        (block("files.delete", {"path": "a"}), "unknown tool 'files.delete'"),
        (block("echo", target="laptop"), "unknown target 'laptop'"),
        (block("files.read", {"path": 1}), "invalid params for files.read: params.path: 1 is not of type 'string'"),
        ("```baa\necho\n{broken\n```", "params are not valid JSON"),
    ],
)
def test_broken_blocks_are_rejected_with_their_error_and_the_chat_is_told_at_once(client, text, error):
    result = ingest(text, client)
    assert result.instructions == 1
    instruction = Instruction.objects.get()
    assert instruction.status == "rejected"
    assert error in instruction.error
    assert not instruction.tasks.exists()
    deliver = AutomationTask.objects.get()
    assert (deliver.kind, deliver.status, deliver.dedupe_key) == (
        INSTRUCTION_DELIVER, "pending", f"deliver:{result.message_id}",
    )
    assert (deliver.target_client_id, deliver.target_platform, deliver.target_conversation_id) == (
        "laptop", "claude", "conv-1",
    )


OVERFLOW_80000 = "too many blocks: a message may hold at most 32; 79968 more blocks from line 65 on were ignored"


def test_blocks_past_the_limit_are_stored_as_one_rejection_that_counts_them(client):
    text = "~~~baa\n~~~\n" * 80_000  # 80,000 empty blocks: each one a rejected block
    result = ingest(text, client)

    rows = list(Instruction.objects.order_by("block_index").values_list("block_index", "status", "error"))
    assert len(rows) == result.instructions == 33
    assert [index for index, _, _ in rows] == list(range(1, 34))
    assert {status for _, status, _ in rows} == {"rejected"}
    assert rows[-1][2] == OVERFLOW_80000
    # Every block was rejected: one delivery tells the chat, the overflow with the rest.
    deliver = AutomationTask.objects.get()
    assert deliver.kind == INSTRUCTION_DELIVER
    assert OVERFLOW_80000 in message_results_text(message_id=result.message_id)

    again = ingest(text, client)
    assert (again.message_id, again.instructions, again.duplicate) == (result.message_id, 33, True)


def test_valid_blocks_past_the_limit_are_not_queued(client):
    result = ingest("\n".join(block("echo", {"n": n}) for n in range(1, 41)), client)

    assert result.instructions == 33
    assert Instruction.objects.filter(status="pending").count() == 32
    overflow = Instruction.objects.get(block_index=33)
    assert (overflow.status, overflow.tool, overflow.raw_text) == ("rejected", "", "")
    assert overflow.error.endswith("; 8 more blocks from line 129 on were ignored")
    assert not overflow.tasks.exists()
    assert AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE).count() == 32


def test_denied_tools_are_rejected(client):
    ToolPolicy.objects.create(tool="echo", client=client, policy=Policy.DENY)
    ingest(block("echo"), client)
    assert Instruction.objects.get().error == "echo is denied by policy"


def test_a_message_with_a_valid_block_gets_no_delivery_at_ingest(client):
    ingest(block("echo") + "\n" + block("nope"), client)
    assert list(AutomationTask.objects.values_list("kind", flat=True)) == [INSTRUCTION_EXECUTE]


def test_the_same_message_id_again_is_a_duplicate(client):
    first = ingest(block("echo"), client)
    again = ingest(block("echo") + "edited", client)
    assert (again.message_id, again.instructions, again.duplicate) == (first.message_id, 1, True)
    assert Message.objects.count() == 1
    assert AutomationTask.objects.count() == 1


def test_without_a_message_id_the_same_text_is_a_duplicate(client):
    first = ingest("same text", client, message_id=None)
    assert ingest("same text", client, message_id=None).message_id == first.message_id
    assert not ingest("other text", client, message_id=None).duplicate
    assert Message.objects.count() == 2


def test_the_same_message_id_in_another_conversation_is_not_a_duplicate(client):
    ingest("a", client)
    assert not ingest("a", client, conversation_id="conv-2").duplicate


def test_a_duplicate_records_no_activity(client):
    ingest("a", client)
    conversation = Conversation.objects.get()
    Conversation.objects.update(last_activity_at=timezone.now() - dt.timedelta(days=1))
    ingest("a", client)
    conversation.refresh_from_db()
    assert conversation.last_activity_at < timezone.now() - dt.timedelta(hours=23)


def test_force_stores_the_message_again(client):
    first = ingest(block("echo"), client)
    forced = message_ingest(message=parse_final_message(frame(block("echo"))), client=client, force=True)
    assert not forced.duplicate and forced.message_id != first.message_id
    assert AutomationTask.objects.count() == 2


def test_a_conversation_seen_on_another_client_takes_its_waiting_deliveries_along(client):
    ingest("first", client)
    conversation = Conversation.objects.get()
    waiting = make_task(kind=INSTRUCTION_DELIVER, target_client_id="laptop", target_platform="claude",
                        target_conversation_id="conv-1", conversation_id=conversation.pk)
    desktop = PluginClientFactory(client_id="desktop")

    ingest("second", desktop, message_id="msg-2")

    waiting.refresh_from_db()
    assert waiting.target_client_id == "desktop"
    assert waiting.events.get(action="retarget").actor == "ingest"
    assert ConversationLink.objects.count() == 2


def test_the_hourly_limit_rejects_valid_blocks_past_it(client, settings):
    settings.CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR = 3
    ingest(block("echo") + "\n" + block("echo"), client)
    ingest("\n".join([block("echo"), block("nope"), block("echo")]), client, message_id="msg-2")

    statuses = list(Instruction.objects.order_by("message_id", "block_index").values_list("status", "error"))
    assert [s for s, _ in statuses] == ["pending", "pending", "pending", "rejected", "rejected"]
    assert "rate limit" in statuses[4][1] and "CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR" in statuses[4][1]


def test_the_hourly_limit_is_rolling(client, settings):
    settings.CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR = 1
    ingest(block("echo"), client)
    Instruction.objects.update(created_at=timezone.now() - dt.timedelta(minutes=61))
    ingest(block("echo"), client, message_id="msg-2")
    assert Instruction.objects.filter(status="pending").count() == 2


def test_messages_of_a_paused_conversation_are_still_stored_and_queued(client):
    Conversation.objects.create(platform="claude", remote_id="conv-1", paused=True)
    ingest(block("echo"), client)
    assert AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE).count() == 1


def test_the_dispatcher_is_woken_after_commit_only_when_work_was_queued(client, django_capture_on_commit_callbacks):
    with mock.patch("automation.wake.dispatcher_wake") as wake:
        with django_capture_on_commit_callbacks(execute=True):
            ingest("no blocks", client)
        wake.assert_not_called()
        with django_capture_on_commit_callbacks(execute=True):
            ingest(block("echo") + "\n" + block("time.now") + "\n" + block("echo"), client, message_id="msg-2")
        wake.assert_called_once()  # one wake for the three tasks of the transaction


# --- several frames at once (final_messages_ingest) ---------------------------------------------

def batch_frames(desktop):
    """Frames that exercise what a batch must store as one message after another would."""
    laptop_frames = [
        frame(block("echo", {"n": 1}) + "\n" + block("shell.run", {"argv": ["ls"]}), id="b-1", message_id="m-1"),
        frame(block("nope"), id="b-2", message_id="m-2", conversation_id="conv-2", title=""),
        frame(block("echo", {"n": 1}), id="b-3", message_id="m-1"),  # repeats b-1 within the batch
        frame("no blocks", id="b-4", message_id="m-0"),  # stored before the batch: a duplicate
        frame(block("echo") + "\n" + block("echo") + "\n" + block("echo"), id="b-5", message_id="m-3",
              page_url="", organization_id="", title="Renamed"),  # past the hourly limit halfway
        frame(block("echo"), id="b-6", message_id=None, conversation_id="conv-3"),  # dedupe by text
        frame(block("echo"), id="b-7", message_id=None, conversation_id="conv-3"),
        frame(block("time.now"), id="b-8", message_id="m-4", conversation_id="conv-2", page_url=""),
    ]
    return [(f, None) for f in laptop_frames] + [
        (frame(block("echo"), id="b-9", message_id="m-5", conversation_id="conv-4"), desktop),
    ]


def rows_snapshot(results):
    """What ingest stored and answered, without ids and times that differ from run to run."""
    remote = dict(Message.objects.values_list("pk", "remote_message_id"))
    tasks = list(AutomationTask.objects.order_by("sequence"))
    return {
        "results": [(remote[r.message_id], r.instructions, r.duplicate) for r in results],
        "conversations": sorted(Conversation.objects.values_list("remote_id", "title")),
        "links": sorted(ConversationLink.objects.values_list(
            "conversation__remote_id", "client__client_id", "page_url", "organization_id",
            "last_assistant_message_id")),
        "messages": list(Message.objects.order_by("pk").values_list(
            "conversation__remote_id", "remote_message_id", "dedupe_key", "text", "client__client_id", "source")),
        "instructions": list(Instruction.objects.order_by("pk").values_list(
            "message__remote_message_id", "block_index", "tool", "status", "error")),
        "tasks": [
            (t.kind, t.status, t.lane, t.target_client_id, t.target_platform, t.target_conversation_id,
             remote.get(t.message_id), t.instruction.block_index if t.instruction_id else None,
             [(e.action, e.status_from, e.status_to, e.actor, e.detail) for e in t.events.order_by("pk")])
            for t in tasks
        ],
    }


def ingest_scenario(client, together):
    from ingest.services.messages import ClientMessage, final_messages_ingest

    desktop = PluginClientFactory(client_id="desktop")
    ingest("no blocks", client, message_id="m-0")  # stored before
    # A delivery waiting for conv-4 on the laptop follows it to the desktop.
    ingest("hello", client, conversation_id="conv-4", message_id="m-00")
    make_task(kind=INSTRUCTION_DELIVER, target_client_id="laptop", target_platform="claude",
              target_conversation_id="conv-4", conversation_id=Conversation.objects.get(remote_id="conv-4").pk)
    arrivals = [
        ClientMessage(message=parse_final_message(f), client_pk=(other or client).pk)
        for f, other in batch_frames(desktop)
    ]
    if together:
        results = final_messages_ingest(arrivals=arrivals)
    else:
        results = [final_messages_ingest(arrivals=[arrival])[0] for arrival in arrivals]
    assert not [r for r in results if isinstance(r, Exception)]
    return rows_snapshot(results)


def test_frames_stored_together_are_stored_as_one_after_another_would_be(client, settings):
    settings.CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR = 4
    one_by_one = ingest_scenario(client, together=False)
    for model in (AutomationTask, Conversation, PluginClientFactory._meta.model):
        model.objects.all().delete()
    client = PluginClientFactory(client_id="laptop")

    with mock.patch("ingest.services.messages.messages_store", wraps=messages_store) as store:
        together = ingest_scenario(client, together=True)
    # Two frames stored before, then the batch in one go, not message by message.
    assert [len(call.kwargs["arrivals"]) for call in store.call_args_list] == [1, 1, 9]
    assert together == one_by_one
    assert [r[2] for r in together["results"]] == [False, False, True, True, False, False, True, False, False]
    assert ("echo", "rejected") in [(i[2], i[3]) for i in together["instructions"] if i[0] == "m-3"]


def test_a_batch_takes_a_fixed_number_of_statements_whatever_its_size(client, django_assert_max_num_queries):
    from ingest.services.messages import ClientMessage, final_messages_ingest

    for n in range(20):  # the conversations and their links exist
        ingest("first", client, conversation_id=f"conv-{n}", message_id=f"first-{n}")
    arrivals = [
        ClientMessage(message=parse_final_message(
            frame(block("echo", {"n": n}), conversation_id=f"conv-{n % 20}", message_id=f"m-{n}")), client_pk=client.pk)
        for n in range(40)
    ]
    # Per batch: the transaction, the client, the locks, duplicates, activity, the links, the time
    # of those that did not change, re-targeting, the hourly limit, policies and the four inserts;
    # then one update per link whose last message changed (each of the 20 here).
    with django_assert_max_num_queries(15 + 20):
        results = final_messages_ingest(arrivals=arrivals)
    assert [r.duplicate for r in results] == [False] * 40
    assert AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE).count() == 40


def test_a_batch_wakes_the_dispatcher_once(client, django_capture_on_commit_callbacks):
    from ingest.services.messages import ClientMessage, final_messages_ingest

    arrivals = [
        ClientMessage(message=parse_final_message(frame(block("echo"), message_id=f"m-{n}")), client_pk=client.pk)
        for n in range(3)
    ]
    with mock.patch("automation.wake.dispatcher_wake") as wake:
        with django_capture_on_commit_callbacks(execute=True):
            final_messages_ingest(arrivals=arrivals)
    wake.assert_called_once()


def test_a_frame_that_cannot_be_stored_fails_alone_and_the_others_are_stored(client):
    from ingest.services.messages import ClientMessage, final_messages_ingest

    gone = PluginClientFactory(client_id="gone")
    gone_pk = gone.pk
    gone.delete()
    arrivals = [
        ClientMessage(message=parse_final_message(frame("a", message_id="m-1")), client_pk=client.pk),
        ClientMessage(message=parse_final_message(frame("b", message_id="m-2")), client_pk=gone_pk),
        ClientMessage(message=parse_final_message(frame("c", message_id="m-3")), client_pk=client.pk),
    ]
    results = final_messages_ingest(arrivals=arrivals)
    assert isinstance(results[1], Exception)
    assert [r.duplicate for r in (results[0], results[2])] == [False, False]
    assert list(Message.objects.order_by("pk").values_list("remote_message_id", flat=True)) == ["m-1", "m-3"]


def test_a_failing_batch_is_rolled_back_and_its_frames_stored_one_by_one(client):
    from ingest.services.messages import ClientMessage, final_messages_ingest

    arrivals = [
        ClientMessage(message=parse_final_message(frame(block("echo"), message_id=f"m-{n}")), client_pk=client.pk)
        for n in range(3)
    ]
    from ingest.services.messages import tasks_create

    def fails_once(**kwargs):  # the batch's call fails; the single frames' calls work
        if fails_once.calls == 0:
            fails_once.calls += 1
            raise RuntimeError("a bug")
        return tasks_create(**kwargs)

    fails_once.calls = 0
    with mock.patch("ingest.services.messages.tasks_create", side_effect=fails_once):
        results = final_messages_ingest(arrivals=arrivals)
    assert [r.duplicate for r in results] == [False, False, False]
    assert Message.objects.count() == 3
    assert AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE).count() == 3


def test_a_lone_frame_takes_the_statements_of_a_batch(client, django_assert_max_num_queries):
    ingest("first", client, message_id="first")  # the conversation and its link exist
    # The batch's fixed statements (see above) and its one link update.
    with django_assert_max_num_queries(15):
        result = ingest(block("echo", {"n": 1}), client, message_id="second")
    assert not result.duplicate and AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE).count() == 1


def test_a_replayed_message_without_a_client_records_no_link_and_keeps_its_source(client):
    result = message_ingest(message=parse_final_message(frame(block("echo"))), client=None, source=Message.Source.REPLAY)
    stored = Message.objects.get(pk=result.message_id)
    assert (stored.source, stored.client_id) == (Message.Source.REPLAY, None)
    assert not ConversationLink.objects.exists()
    assert AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE).count() == 1


def test_forced_copies_in_one_batch_are_each_stored(client):
    from ingest.services.messages import ClientMessage, final_messages_ingest

    message = parse_final_message(frame(block("echo")))
    results = final_messages_ingest(arrivals=[
        ClientMessage(message=message, client_pk=client.pk, force=True) for _ in range(3)
    ])
    assert [r.duplicate for r in results] == [False] * 3
    assert Message.objects.count() == 3


def test_a_message_stored_by_another_writer_after_the_look_up_is_a_duplicate(client):
    """The race between two processes: the unique key refuses the loser's insert, and its second try reports the winner's."""
    from ingest.services import messages

    real = messages._store
    calls = []

    def lose_the_race(arrivals, now):
        calls.append(len(arrivals))
        if len(calls) == 1:
            real(arrivals, now)  # the winner, as another process would have
            raise messages.IntegrityError("duplicate key value violates unique constraint")
        return real(arrivals, now)

    with mock.patch.object(messages, "_store", side_effect=lose_the_race):
        result = ingest(block("echo"), client)
    assert calls == [1, 1] and result.duplicate and result.instructions == 1
    assert Message.objects.count() == 1
