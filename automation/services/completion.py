"""What follows an instruction's outcome (SPEC §3): its status, and its message's delivery.

Runs inside the transaction of the task's transition, so a message's last
finished block and its ``instruction.deliver`` commit together.
"""

from __future__ import annotations

from automation import kinds
from automation.models import AutomationTask, TaskStatus
from automation.services.tasks import task_create
from ingest.models import Instruction

S = TaskStatus
I = Instruction.Status

INSTRUCTION_STATUS = {
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


def delivery_key(message_id: int) -> str:
    return f"deliver:{message_id}"


def instruction_task_transitioned(*, task: AutomationTask, status_to: str, actor: str) -> None:
    """Mirror the task's state on its instruction; deliver the message once every block is done.

    Exactly one delivery per message: it is created when the last open block
    finishes. A block an operator retried after that delivery gets a
    follow-up delivery of its own, keyed by how often it was retried.
    """
    if task.instruction_id is None:
        return
    status = INSTRUCTION_STATUS[status_to]
    error = task.last_error or "" if status in (I.FAILED, I.CANCELLED) else ""
    Instruction.objects.filter(pk=task.instruction_id).update(status=status, error=error)
    if status not in FINISHED or task.message_id is None:
        return
    if Instruction.objects.filter(message_id=task.message_id).exclude(status__in=FINISHED).exists():
        return

    main_key = delivery_key(task.message_id)
    if not AutomationTask.objects.filter(dedupe_key=main_key).exists():
        key, instruction_ids = main_key, None
    else:
        retries = task.events.filter(action="retry").count()
        key = f"{main_key}:block:{task.instruction_id}:retry:{retries}"
        instruction_ids = [task.instruction_id]
    task_create(
        kind=kinds.INSTRUCTION_DELIVER,
        payload={"message_id": task.message_id, "instruction_ids": instruction_ids},
        actor=actor,
        dedupe_key=key,
        conversation_id=task.conversation_id,
        message_id=task.message_id,
    )
