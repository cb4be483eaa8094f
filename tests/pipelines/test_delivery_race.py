"""Two blocks of one message finishing at the same moment in two processes: the message is delivered once.

One block finishes its run in a dispatcher while an operator rejects the
other, held for approval (a conversation runs one block at a time, so two
runs never finish together). Each transaction sees its own block finished;
without the message's lock (taken by the block's status update), each could
read the other's block still open under PostgreSQL's read committed, and
neither would deliver.
"""

import time

import pytest

from automation.models import AutomationTask
from automation.services import transitions as tr
from automation.services.operator import tasks_reject
from automation.services.steps import transition_and_follow_up
from core.clock import now_ms
from ingest.frames import parse_final_message
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.services.messages import message_ingest
from tests.factories import PluginClientFactory, lease_of, task_lease
from tests.procs import run_in_processes

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = 12
SLOT_SECONDS = 0.25
HELD = '```baa\nshell.run\n{"argv": ["true"]}\n```'


def finish_at(task_ids: list[str], start_at: float, how: str) -> int:
    """At each task's slot (``start_at`` plus its index's slots) succeed it as a dispatcher does, or reject it
    as an operator does; return how many."""
    for index, task_id in enumerate(task_ids):
        time.sleep(max(0.0, start_at + index * SLOT_SECONDS - time.time()))
        if how == "reject":
            assert tasks_reject(task_ids=[task_id], actor="alice").done == [task_id]
            continue
        lease = lease_of(task_id)
        transition_and_follow_up(lambda: tr.task_succeed(task_id, lease=lease, result={"ok": True}), actor="w")
    return len(task_ids)


def test_two_blocks_finishing_at_once_in_two_processes_deliver_their_message_exactly_once():
    client = PluginClientFactory(client_id="laptop")
    firsts, seconds, message_ids = [], [], []
    for number in range(MESSAGES):
        frame = {"type": "browser.final_message", "platform": "claude", "conversation_id": f"c{number}",
                 "message_id": f"m{number}", "text": f"```baa\necho\n```\n{HELD}"}
        message_ids.append(message_ingest(message=parse_final_message(frame), client=client).message_id)
        running, held = AutomationTask.objects.filter(
            kind=INSTRUCTION_EXECUTE, message_id=message_ids[-1],
        ).order_by("sequence")
        now = now_ms()
        task_lease(running.pk, lease_owner="w", lease_until=now + 600_000, now=now)
        tr.task_start(running.pk, lease=lease_of(running.pk), lease_until=now + 600_000, now=now)
        firsts.append(running.pk)
        seconds.append(held.pk)

    start_at = time.time() + 8  # both children started and set up
    assert run_in_processes("tests.pipelines.test_delivery_race:finish_at",
                            [(firsts, start_at, "succeed"), (seconds, start_at, "reject")]) == [MESSAGES, MESSAGES]
    delivered = list(AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER).values_list("message_id", flat=True))
    assert sorted(delivered) == sorted(message_ids)
