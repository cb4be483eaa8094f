"""Creating tasks and changing their routing.

``task_create`` is the only way a task comes into being (its first event has no
``status_from``), and ``tasks_create`` its form for several tasks at once,
through the same checks; ``task_retarget`` is the only service that changes a
task's routing fields (SPEC §2.2).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connections, router, transaction
from django.db.models import Q
from django.db.models.sql import InsertQuery

from automation.changes import tasks_changed_on_commit
from automation.kinds import kinds
from automation.models import AutomationTask, TaskEvent, TaskStatus
from automation.services.statements import event_insert_sql
from automation.services.transitions import log_transition
from automation.wake import dispatcher_wake_on_commit
from conversations.selectors import Route, conversation_route
from core.clock import now_ms, sequence_next


INITIAL_STATUSES = frozenset({TaskStatus.PENDING, TaskStatus.BLOCKED})
# Not yet running and not held by a dispatcher: safe to send elsewhere.
RETARGETABLE_STATUSES = (TaskStatus.PENDING, TaskStatus.RETRY_WAIT, TaskStatus.BLOCKED)


@dataclass(frozen=True)
class NewTask:
    """What ``task_create`` takes about one task, for creating several at once (``tasks_create``)."""

    kind: str
    payload: dict[str, Any]
    status: str = TaskStatus.PENDING
    dedupe_key: str | None = None
    priority: int = 0
    execute_after: int | None = None
    max_attempts: int | None = None
    target_client_id: str | None = None
    target_platform: str | None = None
    target_conversation_id: str | None = None
    conversation_id: int | None = None
    message_id: int | None = None
    instruction_id: int | None = None


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
    new = NewTask(
        kind=kind, payload=payload, status=status, dedupe_key=dedupe_key, priority=priority,
        execute_after=execute_after, max_attempts=max_attempts, target_client_id=target_client_id,
        target_platform=target_platform, target_conversation_id=target_conversation_id,
        conversation_id=conversation_id, message_id=message_id, instruction_id=instruction_id,
    )
    now = now_ms() if now is None else now
    task = _task_build(new, now=now, routes={})
    first_event = TaskEvent(action="create", status_from=None, actor=actor, at=now)
    if not _insert_recorded([task], first_event, unless_taken=True):
        existing = AutomationTask.objects.filter(dedupe_key=dedupe_key).first() if dedupe_key is not None else None
        if existing is None:
            raise IntegrityError(f"task {task.pk} was not inserted, and no task holds its dedupe key")
        return existing, False
    dispatcher_wake_on_commit(created=[task.pk])
    tasks_changed_on_commit([task])
    _log_create(task, actor)
    return task, True


def tasks_create(*, tasks: Sequence[NewTask], actor: str, now: int | None = None) -> list[AutomationTask]:
    """Create the ``tasks`` in one go, in their order, as one ``task_create`` each would.

    Each gets the same checks, lane, route, first event and log line, and a
    ``sequence`` that follows the list's order; one wake for them all once
    the transaction commits. The same statements however many tasks (the
    routes' reads aside): for creators that make many at once (ingest). Unlike ``task_create``, a
    ``dedupe_key`` that exists already is an error: ``IntegrityError``, and
    nothing is written. Returns the created tasks, in order.
    """
    if not tasks:
        return []
    now = now_ms() if now is None else now
    routes: dict[int, Route | None] = {}
    created = [_task_build(new, now=now, routes=routes) for new in tasks]
    # Within a caller's transaction, no savepoint: an error here fails the caller's transaction anyway.
    _insert_recorded(created, TaskEvent(action="create", status_from=None, actor=actor, at=now))
    dispatcher_wake_on_commit(created=[task.pk for task in created])
    tasks_changed_on_commit(created)
    for task in created:
        _log_create(task, actor)
    return created


def _insert_recorded(tasks: list[AutomationTask], event: TaskEvent, *, unless_taken: bool = False) -> int:
    """Insert ``tasks``, each with ``event`` (its ``status_to`` the task's status) as its first; return how many.

    Where the database writes inside ``WITH`` (PostgreSQL), tasks and events
    are one statement; elsewhere the events follow the tasks. With
    ``unless_taken`` (one task), a task whose dedupe key is taken is left out
    (``ON CONFLICT DO NOTHING``: no savepoint needed to survive it within the
    caller's transaction); without, it is an ``IntegrityError``.
    """
    using = router.db_for_write(AutomationTask)
    connection = connections[using]
    query = InsertQuery(AutomationTask)
    query.insert_values(AutomationTask._meta.concrete_fields, tasks)
    statements = query.get_compiler(using=using).as_sql()
    conflict = " ON CONFLICT DO NOTHING" if unless_taken else ""
    quote = connection.ops.quote_name
    in_with = getattr(connection.features, "supports_data_modifying_with", False) and len(statements) == 1
    with transaction.atomic(using=using, savepoint=False), connection.cursor() as cursor:
        if in_with:
            [(insert_sql, insert_params)] = statements
            record_sql, record_params = event_insert_sql("made", event, connection)
            cursor.execute(
                f"WITH made AS ({insert_sql}{conflict} RETURNING {quote('task_id')}, {quote('status')}), "
                f"recorded AS ({record_sql}) SELECT {quote('task_id')} FROM made",
                [*insert_params, *record_params],
            )
            inserted = len(cursor.fetchall())
        else:
            inserted = _insert_then_record(cursor, statements, tasks, event, conflict=conflict)
    if inserted == len(tasks):
        for task in tasks:
            task._state.adding, task._state.db = False, using
    return inserted


def _insert_then_record(
    cursor: Any, statements: list[tuple[str, Any]], tasks: list[AutomationTask], event: TaskEvent, *, conflict: str
) -> int:
    """``_insert_recorded`` where the events cannot be written in the tasks' statement: after them."""
    inserted = 0
    for insert_sql, insert_params in statements:
        cursor.execute(insert_sql + conflict, insert_params)
        inserted += cursor.rowcount
    if inserted < len(tasks):
        if inserted:
            raise ValueError("a task whose dedupe key may be taken is inserted alone")
        return 0
    TaskEvent.objects.using(cursor.db.alias).bulk_create(
        TaskEvent(task=task, status_to=task.status, **{
            name: getattr(event, name) for name in ("action", "status_from", "actor", "at", "detail")
        })
        for task in tasks
    )
    return inserted


def _task_build(new: NewTask, *, now: int, routes: dict[int, Route | None]) -> AutomationTask:
    """The unsaved task ``new`` describes, checked against its kind; ``routes`` caches conversations' routes."""
    spec = kinds.get(new.kind)
    if new.status not in INITIAL_STATUSES:
        raise ValueError(f"a task starts pending or blocked, not {new.status!r}")
    if new.status == TaskStatus.BLOCKED and not spec.is_guarded:
        raise ValueError(f"{new.kind} tasks are never held for approval")
    target = (new.target_client_id, new.target_platform, new.target_conversation_id)
    if spec.is_outbound and new.target_client_id is None and new.conversation_id is not None:
        if new.conversation_id not in routes:
            routes[new.conversation_id] = conversation_route(conversation_id=new.conversation_id)
        target = routes[new.conversation_id] or target
    return AutomationTask(
        kind=new.kind,
        status=new.status,
        needs_approval=new.status == TaskStatus.BLOCKED,
        priority=new.priority,
        dedupe_key=new.dedupe_key,
        payload_json=json.dumps(new.payload),
        target_client_id=target[0],
        target_platform=target[1],
        target_conversation_id=target[2],
        execute_after=now if new.execute_after is None else new.execute_after,
        lane=spec.lane,
        sequence=sequence_next(),
        max_attempts=settings.CONDUCTOR_MAX_ATTEMPTS if new.max_attempts is None else new.max_attempts,
        created_at=now,
        updated_at=now,
        conversation_id=new.conversation_id,
        message_id=new.message_id,
        instruction_id=new.instruction_id,
    )


def _log_create(task: AutomationTask, actor: str) -> None:
    log_transition(task, "create", None, actor, dedupe_key=task.dedupe_key, target_client_id=task.target_client_id)


def task_retarget(
    *, conversation_id: int, client_id: str, actor: str, now: int | None = None
) -> list[str]:
    """Send a conversation's not-yet-running outbound tasks to another plugin client.

    Called when the conversation is seen on ``client_id``. Only tasks that have
    a route (outbound ones) and are pending, waiting to retry or blocked move;
    a leased task is left to its dispatcher, which either sends it or releases
    it. Returns the ids of the tasks moved.
    """
    return tasks_retarget(client_ids={conversation_id: client_id}, actor=actor, now=now)


def tasks_retarget(*, client_ids: dict[int, str], actor: str, now: int | None = None) -> list[str]:
    """``task_retarget`` for several conversations at once: ``client_ids`` maps each to its client.

    One look-up for them all, and one update per client the tasks move to.
    """
    if not all(client_ids.values()):
        raise ValueError("routing fields are never cleared: client_id is required")
    if not client_ids:
        return []
    now = now_ms() if now is None else now
    conversations_of: dict[str, list[int]] = {}
    for conversation_id, client_id in client_ids.items():
        conversations_of.setdefault(client_id, []).append(conversation_id)
    elsewhere = Q()
    for client_id, conversation_ids in conversations_of.items():
        elsewhere |= Q(conversation_id__in=conversation_ids) & ~Q(target_client_id=client_id)
    # Within a caller's transaction, no savepoint: an error here fails the caller's transaction anyway.
    with transaction.atomic(savepoint=False):
        tasks = list(
            AutomationTask.objects.select_for_update()
            .filter(elsewhere, status__in=RETARGETABLE_STATUSES, target_client_id__isnull=False)
            .only(
                "task_id", "kind", "status", "target_client_id", "conversation_id",
                "lease_owner", "lease_token", "attempt_count",
            )
        )
        if not tasks:
            return []
        for client_id in {client_ids[task.conversation_id] for task in tasks}:
            AutomationTask.objects.filter(
                pk__in=[task.pk for task in tasks if client_ids[task.conversation_id] == client_id]
            ).update(target_client_id=client_id, updated_at=now)
        TaskEvent.objects.bulk_create(
            TaskEvent(
                task_id=task.pk,
                action="retarget",
                status_from=task.status,
                status_to=task.status,
                actor=actor,
                at=now,
                detail={"from_client_id": task.target_client_id, "to_client_id": client_ids[task.conversation_id]},
            )
            for task in tasks
        )
    for task in tasks:
        log_transition(
            task, "retarget", task.status, actor,
            from_client_id=task.target_client_id, to_client_id=client_ids[task.conversation_id],
        )
    return [task.pk for task in tasks]
