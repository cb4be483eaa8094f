"""Creating tasks and changing their routing.

``task_create`` is the only way a task comes into being (its first event has no
``status_from``); ``task_retarget`` is the only service that changes a task's
routing fields (SPEC §2.2).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from automation.kinds import kinds
from automation.models import AutomationTask, TaskEvent, TaskStatus
from automation.wake import dispatcher_wake_on_commit
from conversations.selectors import conversation_route
from core.clock import now_ms, sequence_next
from core.logfmt import log_event

logger = logging.getLogger(__name__)

INITIAL_STATUSES = frozenset({TaskStatus.PENDING, TaskStatus.BLOCKED})
# Not yet running and not held by a dispatcher: safe to send elsewhere.
RETARGETABLE_STATUSES = (TaskStatus.PENDING, TaskStatus.RETRY_WAIT, TaskStatus.BLOCKED)


def task_create(
    *,
    kind: str,
    payload: dict[str, Any],
    actor: str,
    status: str = TaskStatus.PENDING,
    dedupe_key: str | None = None,
    priority: int = 0,
    execute_after: int | None = None,
    max_attempts: int | None = None,
    target_client_id: str | None = None,
    target_platform: str | None = None,
    target_conversation_id: str | None = None,
    conversation_id: int | None = None,
    message_id: int | None = None,
    instruction_id: int | None = None,
    now: int | None = None,
) -> tuple[AutomationTask, bool]:
    """Create a task in ``pending`` or ``blocked`` and write its first event.

    The kind's policy decides the rest: its ordering lane, and for an outbound
    kind its route, taken from the conversation's most recent link unless
    given. Only guarded kinds (instructions) may start ``blocked``: guardrails
    never apply to deliveries. Raises ``UnknownKind`` for an unregistered kind.

    Returns ``(task, created)``. With a ``dedupe_key`` that already exists,
    nothing is written and the existing task is returned with ``created=False``.
    A created task wakes the dispatcher once the transaction commits.
    """
    spec = kinds.get(kind)
    if status not in INITIAL_STATUSES:
        raise ValueError(f"a task starts pending or blocked, not {status!r}")
    if status == TaskStatus.BLOCKED and not spec.is_guarded:
        raise ValueError(f"{kind} tasks are never held for approval")
    if spec.is_outbound and target_client_id is None and conversation_id is not None:
        route = conversation_route(conversation_id=conversation_id)
        if route is not None:
            target_client_id, target_platform, target_conversation_id = route
    now = now_ms() if now is None else now
    task = AutomationTask(
        kind=kind,
        status=status,
        priority=priority,
        dedupe_key=dedupe_key,
        payload_json=json.dumps(payload),
        target_client_id=target_client_id,
        target_platform=target_platform,
        target_conversation_id=target_conversation_id,
        execute_after=now if execute_after is None else execute_after,
        lane=spec.lane,
        sequence=sequence_next(),
        max_attempts=settings.CONDUCTOR_MAX_ATTEMPTS if max_attempts is None else max_attempts,
        created_at=now,
        updated_at=now,
        conversation_id=conversation_id,
        message_id=message_id,
        instruction_id=instruction_id,
    )
    try:
        with transaction.atomic():
            task.save(force_insert=True)
            TaskEvent.objects.create(
                task=task, action="create", status_from=None, status_to=status, actor=actor, at=now
            )
    except IntegrityError:
        if dedupe_key is None:
            raise
        existing = AutomationTask.objects.filter(dedupe_key=dedupe_key).first()
        if existing is None:
            raise
        return existing, False
    dispatcher_wake_on_commit()
    log_event(
        logger,
        "create",
        task_id=task.task_id,
        kind=kind,
        status_to=status,
        actor=actor,
        dedupe_key=dedupe_key,
        target_client_id=target_client_id,
    )
    return task, True


def task_retarget(
    *, conversation_id: int, client_id: str, actor: str, now: int | None = None
) -> list[str]:
    """Send a conversation's not-yet-running outbound tasks to another plugin client.

    Called when the conversation is seen on ``client_id``. Only tasks that have
    a route (outbound ones) and are pending, waiting to retry or blocked move;
    a leased task is left to its dispatcher, which either sends it or releases
    it. Returns the ids of the tasks moved.
    """
    if not client_id:
        raise ValueError("routing fields are never cleared: client_id is required")
    now = now_ms() if now is None else now
    with transaction.atomic():
        tasks = list(
            AutomationTask.objects.select_for_update()
            .filter(
                conversation_id=conversation_id,
                status__in=RETARGETABLE_STATUSES,
                target_client_id__isnull=False,
            )
            .exclude(target_client_id=client_id)
            .only("task_id", "kind", "status", "target_client_id")
        )
        if not tasks:
            return []
        AutomationTask.objects.filter(pk__in=[task.pk for task in tasks]).update(
            target_client_id=client_id, updated_at=now
        )
        TaskEvent.objects.bulk_create(
            TaskEvent(
                task_id=task.pk,
                action="retarget",
                status_from=task.status,
                status_to=task.status,
                actor=actor,
                at=now,
                detail={"from_client_id": task.target_client_id, "to_client_id": client_id},
            )
            for task in tasks
        )
    for task in tasks:
        log_event(
            logger,
            "retarget",
            task_id=task.pk,
            kind=task.kind,
            status_from=task.status,
            status_to=task.status,
            actor=actor,
            from_client_id=task.target_client_id,
            to_client_id=client_id,
        )
    return [task.pk for task in tasks]
