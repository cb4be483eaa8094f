"""A message's delivery follows its last finished block (SPEC §3)."""

import json

import pytest

from automation.kinds import kinds
from automation.models import AutomationTask, TaskStatus
from automation.services import transitions as tr
from automation.services.operator import (
    has_every_permission,
    tasks_approve,
    tasks_cancel,
    tasks_reject,
    tasks_retry,
)
from ingest.frames import parse_final_message
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from pipelines.deliveries import message_results_text
from ingest.models import Instruction
from ingest.panel.selectors import message_statuses
from ingest.services.messages import message_ingest
from tests.factories import PluginClientFactory, lease_of, task_lease

pytestmark = pytest.mark.django_db

S = TaskStatus
NOW = 1_900_000_000_000


def ingest(text, message_id="m1"):
    client = PluginClientFactory(client_id=f"laptop-{message_id}")
    frame = {"type": "browser.final_message", "platform": "claude", "conversation_id": "c1",
             "message_id": message_id, "text": text}
    return message_ingest(message=parse_final_message(frame), client=client)


def blocks(*tools):
    return "\n".join(f"```baa\n{tool}\n```" for tool in tools)


def execute_tasks(message_id):
    return list(AutomationTask.objects.filter(kind=INSTRUCTION_EXECUTE, message_id=message_id)
                .order_by("sequence"))


def deliveries():
    return list(AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER).order_by("sequence"))


def run(task, outcome="succeed", owner="d1"):
    """Run the task as the dispatcher does: the outcome, then the kind's follow-up."""
    task_lease(task.pk, lease_owner=owner, lease_until=NOW + 60_000, now=NOW)
    tr.task_start(task.pk, lease=lease_of(task.pk), lease_until=NOW + 60_000, now=NOW)
    if outcome == "succeed":
        task = tr.task_succeed(task.pk, lease=lease_of(task.pk), result={"ok": True}, now=NOW)
    else:
        task = tr.task_fail(task.pk, lease=lease_of(task.pk), error="tool error", now=NOW)
    kinds.follow_up(task, actor=owner)
    return task


def test_the_delivery_is_created_with_the_last_finished_block_and_only_then():
    result = ingest(blocks("echo", "time.now", "nope"))
    first, second = execute_tasks(result.message_id)

    run(first)
    assert deliveries() == []
    assert Instruction.objects.get(pk=first.instruction_id).status == "succeeded"

    run(second, "fail")
    [delivery] = deliveries()
    assert (delivery.dedupe_key, delivery.status, delivery.message_id) == (f"deliver:{result.message_id}", S.PENDING, result.message_id)
    assert json.loads(delivery.payload_json) == {"message_id": result.message_id, "instruction_ids": None}
    assert (delivery.target_client_id, delivery.target_platform, delivery.target_conversation_id) == ("laptop-m1", "claude", "c1")
    instruction = Instruction.objects.get(pk=second.instruction_id)
    assert (instruction.status, instruction.error) == ("failed", "tool error")
    assert delivery.events.get().actor == "d1"


def test_a_block_waiting_for_approval_holds_the_delivery_until_decided():
    result = ingest(blocks("echo", 'shell.run\n{"argv": ["ls"]}'))
    echo, shell = execute_tasks(result.message_id)
    run(echo)
    assert deliveries() == []
    assert Instruction.objects.get(pk=shell.instruction_id).status == "awaiting_approval"
    assert tasks_reject(task_ids=[shell.pk], actor="alice", reason="no").done == [shell.pk]
    assert len(deliveries()) == 1
    assert Instruction.objects.get(pk=shell.instruction_id).status == "failed"


def test_a_cancelled_block_counts_as_finished():
    result = ingest(blocks("echo"))
    [task] = execute_tasks(result.message_id)
    assert tasks_cancel(task_ids=[task.pk], actor="alice").done == [task.pk]
    assert Instruction.objects.get(pk=task.instruction_id).status == "cancelled"
    assert len(deliveries()) == 1


def test_a_block_retried_after_delivery_gets_a_follow_up_delivery_each_time():
    result = ingest(blocks("echo", "time.now"))
    first, second = execute_tasks(result.message_id)
    run(first)
    run(second, "fail")
    assert len(deliveries()) == 1

    for attempt in (1, 2):
        assert tasks_retry(task_ids=[second.pk], actor="alice", has_perm=has_every_permission).done == [second.pk]
        assert Instruction.objects.get(pk=second.instruction_id).status == "pending"
        run(second, "fail")  # failed again: still finished, so the chat hears of it again
        follow_up = deliveries()[-1]
        assert follow_up.dedupe_key == f"deliver:{result.message_id}:follow-up:{attempt}"
        assert json.loads(follow_up.payload_json)["instruction_ids"] == [second.instruction_id]
    assert len(deliveries()) == 3


def not_delivered(message_id):
    [shown] = message_statuses(message_ids=[message_id])
    return shown.status["delivery"]["results_not_delivered"]


def carried(delivery):
    return json.loads(delivery.payload_json)["instruction_ids"]


def test_every_retried_block_is_delivered_once_when_the_round_ends_whatever_order_they_finish_in():
    """The issue's message: shell.run A rejected, shell.run B cancelled, files.read C failed by itself."""
    result = ingest(blocks('shell.run\n{"argv": ["true"]}', 'shell.run\n{"argv": ["true"]}',
                           'files.read\n{"path": "missing.txt"}'))
    a, b, c = execute_tasks(result.message_id)
    tasks_reject(task_ids=[a.pk], actor="alice", reason="not now")
    tasks_cancel(task_ids=[b.pk], actor="alice")
    run(c, "fail")
    [first] = deliveries()
    assert carried(first) is None  # every block
    ids = [a.instruction_id, b.instruction_id, c.instruction_id]

    # Round one: all three retried (A and B wait for an approval again), finishing C, A, B.
    retried = tasks_retry(task_ids=[a.pk, b.pk, c.pk], actor="alice", has_perm=has_every_permission)
    assert sorted(retried.done) == sorted([a.pk, b.pk, c.pk])
    assert sorted(retried.awaiting_approval) == sorted([a.pk, b.pk])
    tasks_approve(task_ids=[a.pk, b.pk], actor="alice", has_perm=has_every_permission)
    assert not_delivered(result.message_id) == 3  # the side panel's footer: 3 results not yet delivered
    for finishing in (c, a, b):
        assert len(deliveries()) == 1  # nothing while a block of the round is open
        run(finishing, "fail" if finishing is c else "succeed")
    [_, follow_up] = deliveries()
    assert not_delivered(result.message_id) == 0
    assert sorted(carried(follow_up)) == sorted(ids), "each retried block's new result, in one follow-up"
    text = message_results_text(message_id=result.message_id, instruction_ids=carried(follow_up))
    assert [line for line in text.splitlines() if line.startswith("Block ")] == [
        "Block 1 · shell.run · succeeded", "Block 2 · shell.run · succeeded", "Block 3 · files.read · failed",
    ]
    assert not any(Instruction.objects.filter(pk__in=ids).values_list("reopened_since_delivery", flat=True))

    # Round two: C again; only its new result goes, once.
    tasks_retry(task_ids=[c.pk], actor="alice", has_perm=has_every_permission)
    run(c, "fail")
    [_, _, again] = deliveries()
    assert carried(again) == [c.instruction_id]


def test_a_follow_up_carries_only_the_results_not_delivered_yet():
    result = ingest(blocks("echo", "time.now", "echo"))
    first, second, third = execute_tasks(result.message_id)
    for task in (first, third):
        run(task)
    run(second, "fail")
    tasks_retry(task_ids=[second.pk], actor="alice", has_perm=has_every_permission)
    run(second)
    assert carried(deliveries()[-1]) == [second.instruction_id]
    # Nothing new to carry: no delivery.
    from ingest.services.instructions import message_delivery_ensure

    assert message_delivery_ensure(message_id=result.message_id, conversation_id=None, actor="t") is None
    assert len(deliveries()) == 2


def test_a_message_whose_blocks_were_all_rejected_is_delivered_at_ingest_once():
    result = ingest(blocks("nope", "Bad Header"))
    [delivery] = deliveries()
    assert delivery.dedupe_key == f"deliver:{result.message_id}"
