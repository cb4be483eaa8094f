"""An instruction's life after ingest: its status, and its message's delivery (SPEC §3, §5.3).

Ingest turns each valid block into an ``instruction.execute`` task and each
message into one ``instruction.deliver`` task; the pipelines of those kinds
(``pipelines.instructions``, ``pipelines.deliveries``) run them and call back
here when an instruction's task changes state.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from django.db import connection

from automation.models import AutomationTask, TaskStatus
from automation.services.tasks import NewTask, task_create
from conversations.models import Message
from core.logfmt import log_event
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from ingest.models import Instruction

logger = logging.getLogger(__name__)

S = TaskStatus
I = Instruction.Status

# An instruction's status while it has a task: its task's, told in the instruction's words.
STATUS_OF_TASK = {
    S.PENDING: I.PENDING,
    S.LEASED: I.PENDING,
    S.RUNNING: I.PENDING,
    S.RETRY_WAIT: I.PENDING,
    S.BLOCKED: I.AWAITING_APPROVAL,
    S.SUCCEEDED: I.SUCCEEDED,
    S.FAILED: I.FAILED,
    S.CANCELLED: I.CANCELLED,
}
FINISHED = (I.SUCCEEDED, I.FAILED, I.REJECTED, I.CANCELLED)
# The instruction keeps its task's error only in these states.
WITH_ERROR = (I.FAILED, I.CANCELLED)


def delivery_key(message_id: int) -> str:
    """The dedupe key of a message's one delivery."""
    return f"deliver:{message_id}"


def instruction_status_set(*, task: AutomationTask, actor: str) -> str:
    """Mirror the state of the instruction's task on the instruction; return the new status.

    The one place an instruction's status changes after ingest. A change is
    logged as an ``instruction_status`` event with its actor.
    """
    status = STATUS_OF_TASK[task.status]
    error = (task.last_error or "") if status in WITH_ERROR else ""
    previous = _status_replace(task.instruction_id, status=status, error=error)
    if previous is not None:
        log_event(
            logger, "instruction_status", instruction_id=task.instruction_id, task_id=task.pk,
            status_from=previous, status_to=status, actor=actor,
        )
    return status


def _status_replace(pk: int, *, status: str, error: str) -> str | None:
    """Give the instruction ``status`` and ``error`` where it has others; return the status it had, or
    None when it had these (or is gone).

    Only its task's changes write the instruction, each in the transaction
    that holds the task's row lock, so what is read is what the update
    replaces. Where an ``UPDATE … FROM`` returns its other tables' rows
    (PostgreSQL), one statement: the row joined to itself is the row before.
    A finished block that opens again (a retry) is marked
    ``reopened_since_delivery``, in the same statement, which also locks the
    block's message row: of two blocks of one message finishing at once in
    two transactions, the second waits for the first, and then reads its
    block finished (``message_delivery_ensure``). SQLite runs one writing
    transaction at a time.
    """
    reopening = status not in FINISHED
    if not getattr(connection.features, "returns_from_tables_of_update", False):
        previous = Instruction.objects.filter(pk=pk).values_list("status", "error").first()
        if previous is None or previous == (status, error):
            return None
        reopened = {"reopened_since_delivery": True} if reopening and previous[0] in FINISHED else {}
        Instruction.objects.filter(pk=pk).update(status=status, error=error, **reopened)
        return previous[0]
    table, messages, quote = Instruction._meta.db_table, Message._meta.db_table, connection.ops.quote_name
    finished = ", ".join(["%s"] * len(FINISHED))
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH message AS (SELECT id FROM {quote(messages)} WHERE id = "
            f"(SELECT message_id FROM {quote(table)} WHERE id = %s) FOR UPDATE) "
            f"UPDATE {quote(table)} AS fresh SET status = %s, error = %s, reopened_since_delivery = "
            f"(fresh.reopened_since_delivery OR (%s AND was.status IN ({finished}))) FROM {quote(table)} AS was, message "
            f"WHERE fresh.id = %s AND was.id = fresh.id AND message.id = was.message_id "
            f"AND (was.status <> %s OR was.error <> %s) RETURNING was.status",
            [pk, status, error, reopening, *FINISHED, pk, status, error],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def instruction_task(*, instruction: Instruction, conversation_id: int, status: str) -> NewTask:
    """The instruction's ``instruction.execute`` task, ``pending`` or ``blocked``, to create."""
    message_id = instruction.message_id
    return NewTask(
        kind=INSTRUCTION_EXECUTE,
        payload={
            "instruction_id": instruction.pk, "message_id": message_id, "conversation_id": conversation_id,
            "target": instruction.target, "tool": instruction.tool, "params": instruction.params,
        },
        status=status,
        dedupe_key=f"execute:{instruction.pk}",
        conversation_id=conversation_id, message_id=message_id, instruction_id=instruction.pk,
    )


def message_delivery_task(*, message_id: int, conversation_id: int | None) -> NewTask:
    """The message's one delivery, to create once its blocks have all finished."""
    return NewTask(
        kind=INSTRUCTION_DELIVER,
        payload={"message_id": message_id, "instruction_ids": None},
        dedupe_key=delivery_key(message_id),
        conversation_id=conversation_id,
        message_id=message_id,
    )


def message_delivery_ensure(*, message_id: int, conversation_id: int | None, actor: str) -> AutomationTask | None:
    """Deliver the results of the message's blocks once every block has finished; return the task created.

    The first delivery carries every block (created at ingest when every
    block was rejected, else when the last open block finishes). Blocks an
    operator retried after it (``Instruction.reopened_since_delivery``)
    finish again with new results: when every block of the message has
    finished again, one follow-up carries each of them, so each result is
    delivered exactly once, whatever order the blocks finish in and however
    many rounds of retries there are (SPEC §3). Returns None when blocks
    are still open or every result is delivered.

    Called in the transaction that changed a block's status, whose update
    locked the message's row (``_status_replace``): of two blocks finishing
    at once, the second transaction reads the first's block finished.
    """
    blocks = list(Instruction.objects.filter(message_id=message_id).values_list("pk", "status", "reopened_since_delivery"))
    if any(status not in FINISHED for _, status, _ in blocks):
        return None
    reopened = sorted(pk for pk, _, is_reopened in blocks if is_reopened)
    new = message_delivery_task(message_id=message_id, conversation_id=conversation_id)
    task, created = task_create(**vars(new), actor=actor)
    if not created and reopened:
        # The first delivery exists: a follow-up, the message's n-th delivery, carries the new results.
        earlier = AutomationTask.objects.filter(kind=INSTRUCTION_DELIVER, message_id=message_id).count()
        task, created = task_create(**vars(replace(
            new, dedupe_key=f"{new.dedupe_key}:follow-up:{earlier}",
            payload={**new.payload, "instruction_ids": reopened},
        )), actor=actor)
    if not created:
        return None
    if reopened:  # carried now (by the first delivery too, for a block retried before it)
        Instruction.objects.filter(pk__in=reopened).update(reopened_since_delivery=False)
    return task
