"""Transition services for ``AutomationTask`` (SPEC §2.2).

One function per edge of the state diagram. Each runs in a transaction, checks
the starting state, applies fencing when the task leaves ``leased`` or
``running`` (only the lease that holds it, by its fencing token, may move it:
``Lease``), writes one
``TaskEvent`` with its actor and one structured log line, and raises a
``TransitionError`` subclass when the move is not allowed. Nothing else in the
code base assigns ``status``.

An edge whose starting state is known (one state, or a status that does not
change) is one conditional ``UPDATE … RETURNING``: the starting state, the
fence and the guards are its ``WHERE``, so no row is read or locked first,
and only a refused update reads the task to say why. On PostgreSQL the same
statement inserts the event (``WITH moved AS (UPDATE …) INSERT …``), so such
an edge is one statement, atomic without a transaction of its own. An edge from several
states reads and locks the task first, to record which state it left.
``tasks_lease`` leases the dispatcher's whole claim in one such statement,
giving each task a fencing token of its own, and learns what it leased
from the statement itself (``RETURNING``).
A heartbeat is not a change of state and writes no event. The state machine knows no kind and decides
nothing: what follows a change is the kind's ``follow_up``, which the callers
(the dispatcher, the reclaim, the operator services) run in the same
transaction through ``automation.services.steps.transition_and_follow_up``;
whether to retry is the ``RetryPolicy``'s answer, which the guards here only
assert.

Routing fields (``target_*``) are never touched here; ``task_retarget`` in
``automation.services.tasks`` is the one service that changes them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Callable, Collection, Mapping
from functools import reduce
from operator import or_
from typing import Any

from django.db import connection, connections, transaction
from django.db.models import F, Q, QuerySet
from django.db.models.sql import UpdateQuery

from automation.changes import tasks_changed_on_commit
from automation.models import (
    LEASE_HOLDING_STATUSES,
    ROUTING_FIELDS,
    AutomationTask,
    FinishReason,
    Lease,
    TaskEvent,
    new_lease_token,
)
# The diagram's edges, guards and errors: callers reach them through this module too.
from automation.services.diagram import (  # noqa: F401
    APPROVAL_HELD,
    APPROVAL_MISSING,
    APPROVE,
    ATTEMPTS_LEFT,
    CANCEL,
    DUE,
    EDGE_ACTIONS,
    FAIL,
    HEARTBEAT,
    INTERRUPTED_ERROR,
    LEASE,
    LEASE_EXPIRED,
    RECLAIM_TO_FAILED,
    RECLAIM_TO_RETRY,
    RECLAIM_UNSTARTED,
    REJECT,
    RELEASE,
    RETRY,
    RETRY_LATER,
    RETRY_TO_BLOCKED,
    START,
    SUCCEED,
    S,
    Edge,
    Guard,
    InvalidTransition,
    LeaseLost,
    TaskNotFound,
    TransitionError,
    edge,
)
from core.clock import now_ms
from core.logfmt import log_event

logger = logging.getLogger(__name__)


def _update_one(task: QuerySet, values: dict[str, Any], *, event: TaskEvent | None = None) -> AutomationTask | None:
    """Apply ``values`` (plain values or expressions) to ``task``, one row at most; return it as it is now, or None.

    One conditional ``UPDATE … RETURNING`` (PostgreSQL, and SQLite 3.35+):
    the ORM compiles the update (its values, expressions and ``WHERE``) and
    converts the returned row, which is what this statement wrote, read in
    the statement itself rather than by a second read. ``task`` names one
    row by its primary key. With ``event`` (only where ``_writes_in_with``),
    the same statement inserts it for the row it updated: ``WITH moved AS
    (UPDATE … RETURNING …) INSERT … SELECT … FROM moved``, its ``status_to``
    the row's new status and its ``status_from``, when not given, the same.
    """
    query = task.query.chain(UpdateQuery)
    query.add_update_values(values)
    compiler = query.get_compiler(task.db)
    if event is None:
        rows = compiler.execute_returning_sql(_FIELDS)
    else:
        rows = _update_and_record(compiler, event)
    return AutomationTask.from_db(task.db, _NAMES, rows[0]) if rows else None


def _writes_in_with(connection: Any) -> bool:
    """Whether the database takes an ``INSERT`` or ``UPDATE`` inside ``WITH`` (PostgreSQL does, SQLite does not)."""
    return getattr(connection.features, "supports_data_modifying_with", False)


# The event's columns the transition gives; ``task_id``, ``status_from`` and ``status_to`` come from the row.
_EVENT_GIVEN = ("action", "actor", "at", "jitter_ms", "backoff_ms", "error", "detail")


def _update_and_record(compiler: Any, event: TaskEvent) -> list[Any]:
    """Run the compiled update with ``event`` inserted in the same statement; return its converted rows."""
    connection = compiler.connection
    quote = connection.ops.quote_name
    compiler.returning_fields = _FIELDS
    update_sql, update_params = compiler.as_sql()
    record_sql, record_params = event_insert_sql("moved", event, connection)
    sql = (
        f"WITH moved AS ({update_sql}), recorded AS ({record_sql}) "
        f"SELECT {', '.join(quote(field.column) for field in _FIELDS)} FROM moved"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*update_params, *record_params])
        rows = cursor.fetchall()
    cols = [field.get_col(AutomationTask._meta.db_table) for field in _FIELDS]
    converters = compiler.get_converters(cols)
    return list(compiler.apply_converters(rows, converters)) if converters else rows


def event_insert_sql(source: str, event: TaskEvent, connection: Any) -> tuple[str, list[Any]]:
    """The ``INSERT … SELECT`` of ``event`` for each row of ``source`` (a ``WITH`` name whose rows have
    ``task_id`` and ``status``), and its parameters.

    Its ``status_to`` is the row's status; its ``status_from`` the event's, or
    when that is None and the event is not a ``create``, the row's status too.
    """
    quote = connection.ops.quote_name
    given = [TaskEvent._meta.get_field(name) for name in _EVENT_GIVEN]
    casts = ", ".join(f"CAST(%s AS {field.db_type(connection)})" for field in given)
    status = quote(AutomationTask._meta.get_field("status").column)
    status_from = "NULL" if event.action == "create" else f"COALESCE(CAST(%s AS varchar), {status})"
    sql = (
        f"INSERT INTO {quote(TaskEvent._meta.db_table)} ({quote('task_id')}, {quote('status_from')}, "
        f"{quote('status_to')}, {', '.join(quote(field.column) for field in given)}) "
        f"SELECT {quote('task_id')}, {status_from}, {status}, {casts} FROM {source}"
    )
    params = [
        *([] if event.action == "create" else [event.status_from]),
        *(field.get_db_prep_save(getattr(event, field.attname), connection) for field in given),
    ]
    return sql, params


_FIELDS = AutomationTask._meta.concrete_fields
_NAMES = [field.attname for field in _FIELDS]


def _returning(sql: str, params: list[Any], *, using: str) -> list[AutomationTask]:
    """Run ``sql`` (one whose rows are every column of the table: an ``UPDATE … RETURNING``, or a
    ``WITH`` around one) and build its rows as tasks."""
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [
        AutomationTask.from_db(using, _NAMES, [field.to_python(value) for field, value in zip(_FIELDS, row)])
        for row in rows
    ]


def _refusal(
    task_id: str, edge: Edge, task: AutomationTask | None, fenced: Lease | None,
    guards: Collection[Guard], now: int,
) -> TransitionError:
    """Why ``edge`` does not apply to ``task`` as it is now."""
    if task is None:
        return TaskNotFound(task_id)
    if fenced is not None and (task.status not in LEASE_HOLDING_STATUSES or task.lease != fenced):
        return LeaseLost(task_id, fenced, task.lease, task.status)
    if task.status not in edge.allowed_from:
        return InvalidTransition(task_id, edge.action, task.status)
    for guard in guards:
        if reason := guard.refusal(task, now):
            return InvalidTransition(task_id, edge.action, task.status, reason)
    return InvalidTransition(task_id, edge.action, task.status, "changed concurrently")


def _transition(
    task_id: str,
    edge: Edge,
    *,
    actor: str,
    now: int | None,
    fenced: Lease | None = None,
    guards: Collection[Guard] = (),
    changes: dict[str, Any] | None = None,
    error: str | None = None,
    jitter_ms: int | None = None,
    backoff_ms: int | None = None,
    detail: dict[str, Any] | None = None,
) -> AutomationTask:
    """Apply one transition; the single place where ``status`` is written after creation.

    ``fenced``: the transition applies only while that lease (its fencing
    token) holds the task. ``guards``: what else the task must meet. ``changes``: the other
    field updates (values or expressions of the row's own fields).
    """
    now = now_ms() if now is None else now
    values = dict(changes or {})
    if routed := ROUTING_FIELDS & values.keys():
        # A task's recipient is never cleared or changed by a change of state (SPEC §5.1).
        raise ValueError(f"task {task_id}: a transition may not write its route ({', '.join(sorted(routed))})")
    if edge.to_status is not None:
        values["status"] = edge.to_status
    values["updated_at"] = now
    if error is not None:
        values["last_error"] = error
    where = Q(pk=task_id, status__in=edge.allowed_from)
    if fenced is not None:
        where &= Q(lease_token=fenced.token, lease_owner=fenced.owner)
    for guard in guards:
        where &= guard.holds(now)

    event = TaskEvent(
        task_id=task_id, action=edge.action, status_from=edge.known_from, actor=actor, at=now,
        jitter_ms=jitter_ms, backoff_ms=backoff_ms, error=error, detail=detail or {},
    ) if edge.recorded else None
    reads_first = edge.known_from is None and edge.to_status is not None
    if not reads_first and _writes_in_with(connection):
        # One statement, the update and its event (PostgreSQL): atomic on its own.
        task = _update_one(AutomationTask.objects.filter(where), values, event=event)
        if task is None:
            raise _refusal(task_id, edge, AutomationTask.objects.filter(pk=task_id).first(), fenced, guards, now)
        status_from = edge.known_from or task.status
        if task.status != status_from:
            tasks_changed_on_commit([task])
        _log(task, edge.action, status_from, actor, error=error, jitter_ms=jitter_ms, backoff_ms=backoff_ms)
        return task

    # No savepoint inside a caller's transaction (a step and its follow-up): a refusal
    # writes nothing and is raised after the block, so the caller's transaction goes on
    # as it would after a savepoint's rollback; a database error fails it, as it should.
    refusal: TransitionError | None = None
    with transaction.atomic(savepoint=False):
        status_from = edge.known_from
        task = None
        if reads_first:
            # From one of several states: lock and read which, for the event.
            # (A row lock on PostgreSQL; on SQLite the IMMEDIATE transaction
            # already holds the write lock.)
            found = AutomationTask.objects.select_for_update().filter(pk=task_id).first()
            if found is None or found.status not in edge.allowed_from:
                refusal = _refusal(task_id, edge, found, fenced, guards, now)
            else:
                status_from = found.status
                where &= Q(status=status_from)
        if refusal is None:
            task = _update_one(AutomationTask.objects.filter(where), values)
            if task is None:
                found = AutomationTask.objects.filter(pk=task_id).first()
                refusal = _refusal(task_id, edge, found, fenced, guards, now)
        if task is not None:
            status_from = status_from or task.status
            if event is not None:
                event.status_from, event.status_to = status_from, task.status
                event.save(force_insert=True)
            if task.status != status_from:
                tasks_changed_on_commit([task])
    if refusal is not None:
        raise refusal
    _log(task, edge.action, status_from, actor, error=error, jitter_ms=jitter_ms, backoff_ms=backoff_ms)
    return task


def _log(task: AutomationTask, action: str, status_from: str, actor: str, **extra: Any) -> None:
    log_event(
        logger,
        action,
        task_id=task.pk,
        kind=task.kind,
        status_from=status_from,
        status_to=task.status,
        actor=actor,
        lease_owner=task.lease_owner,
        lease_token=f"{task.lease_token:016x}" if task.lease_token is not None else None,
        attempt=task.attempt_count,
        **extra,
    )


_CLEAR_LEASE = {"lease_owner": None, "lease_until": None, "lease_token": None}



def tasks_lease(
    seen: Mapping[str, str], *, still_claimable: Q, lease_owner: str, lease_until: int, now: int,
    detail: dict[str, Any] | None = None, start_kinds: Collection[str] = (),
) -> list[AutomationTask]:
    """pending / retry_wait -> leased for the dispatcher's claim: every task of
    ``seen`` (task id -> the status it was read in) that is still in that status,
    due and ``still_claimable``, each under a lease of its own; returns those leased.

    On SQLite, three statements in one transaction: the first reads which
    tasks of ``seen`` may be leased now (the transaction holds the write lock
    from its start), the second leases exactly those rows, the third writes
    their events. On PostgreSQL, one statement (``_lease_and_record``): its
    sub-select locks the rows that may be leased with ``SKIP LOCKED``, so a
    task another dispatcher is leasing at this moment is skipped, not waited
    for. Either way the update leases exactly those rows, each with a fencing
    token of its own (``Lease``), and returns them as it wrote them
    (``UPDATE … RETURNING``): the claim learns what it leased from the update
    itself, never from rows that look like its own (two threads of one process
    leasing in the same millisecond write the same owner and times). Raises
    ``IntegrityError`` when an in-flight limit's unique index refuses the batch
    (another dispatcher leased a task of the same target or lane meanwhile):
    the caller then leases one task at a time. ``detail`` goes on each lease event.

    Tasks of ``start_kinds`` (those the dispatcher runs at once, with no
    jitter to wait and no client to check first) are also started in the
    same statement: leased -> running, their attempt counted, with both
    events (``lease``, then ``start``) on their timelines. One transaction
    a task fewer; a dispatcher that dies before running such a task leaves
    it running, and the reclaim treats it as interrupted (SPEC 4.4).
    """
    if not seen:
        return []
    where = reduce(or_, (Q(pk=task_id, status=status) for task_id, status in seen.items())) & DUE.holds(now)
    claimable = AutomationTask.objects.filter(where).filter(still_claimable)
    lease = functools.partial(
        _lease_update, tokens_for=list(seen), lease_owner=lease_owner, lease_until=lease_until, now=now,
        start_kinds=start_kinds,
    )
    event_detail = {"lease_until": lease_until, **(detail or {})}
    if _writes_in_with(connection):
        # Atomic on its own; inside a caller's transaction, a savepoint keeps a refused batch
        # (``IntegrityError``) from failing the caller's, which may lease one task at a time.
        with transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext():
            leased = _lease_and_record(
                claimable, lease, seen=seen, lease_owner=lease_owner, now=now, detail=event_detail,
            )
        tasks_changed_on_commit(leased)
    else:
        if connection.features.has_select_for_update_skip_locked:
            of = ("self",) if connection.features.has_select_for_update_of else ()
            claimable = claimable.select_for_update(skip_locked=True, of=of)
        with transaction.atomic():
            task_ids = list(claimable.values_list("pk", flat=True))
            leased = _returning(*lease(", ".join(["%s"] * len(task_ids)), task_ids), using=connection.alias) \
                if task_ids else []
            events = []
            for task in leased:
                events.append(TaskEvent(task_id=task.pk, action=LEASE.action, status_from=seen[task.pk],
                                        status_to=S.LEASED, actor=lease_owner, at=now, detail=event_detail))
                if task.status == S.RUNNING:
                    events.append(TaskEvent(task_id=task.pk, action=START.action, status_from=S.LEASED,
                                            status_to=S.RUNNING, actor=lease_owner, at=now))
            TaskEvent.objects.bulk_create(events)
            tasks_changed_on_commit(leased)
    for task in leased:
        _log(task, LEASE.action, seen[task.pk], lease_owner)
        if task.status == S.RUNNING:
            _log(task, START.action, S.LEASED, lease_owner)
    return leased


def _lease_update(
    ids_sql: str, ids_params: list[Any], *, tokens_for: list[str], lease_owner: str, lease_until: int, now: int,
    start_kinds: Collection[str],
) -> tuple[str, list[Any]]:
    """The ``UPDATE … RETURNING`` that leases the rows whose ids ``ids_sql`` lists or selects.

    Written here, for the connection's cursor (the ORM's ``update()``
    returns a count, not rows): PostgreSQL and SQLite 3.35+ both answer it.
    Each row of ``tokens_for`` that it updates gets a fresh fencing token;
    the rows of ``start_kinds`` are started too. The rows it returns are what
    it changed, and nothing else.
    """
    quote = connection.ops.quote_name
    column = {field.name: quote(field.column) for field in _FIELDS}
    tokens = [(task_id, new_lease_token()) for task_id in tokens_for]
    assignments: list[tuple[str, str, list[Any]]] = [
        ("lease_owner", "%s", [lease_owner]),
        ("lease_until", "%s", [lease_until]),
        ("updated_at", "%s", [now]),
        ("lease_token", f"CASE {column['task_id']} {' '.join(['WHEN %s THEN %s'] * len(tokens))} END",
         [value for pair in tokens for value in pair]),
    ]
    if start_kinds:
        kinds_in = f"{column['kind']} IN ({', '.join(['%s'] * len(start_kinds))})"
        starts = list(start_kinds)
        assignments += [
            ("status", f"CASE WHEN {kinds_in} THEN %s ELSE %s END", [*starts, S.RUNNING, S.LEASED]),
            ("attempt_count",
             f"CASE WHEN {kinds_in} THEN {column['attempt_count']} + 1 ELSE {column['attempt_count']} END", starts),
            ("started_at", f"CASE WHEN {kinds_in} THEN %s ELSE {column['started_at']} END", [*starts, now]),
        ]
    else:
        assignments.append(("status", "%s", [S.LEASED]))
    sql = (
        f"UPDATE {quote(AutomationTask._meta.db_table)} SET "
        + ", ".join(f"{column[name]} = {expression}" for name, expression, _ in assignments)
        + f" WHERE {column['task_id']} IN ({ids_sql})"
        + f" RETURNING {', '.join(quote(field.column) for field in _FIELDS)}"
    )
    return sql, [param for _, _, values in assignments for param in values] + list(ids_params)


def _lease_and_record(
    claimable: QuerySet, lease: Callable[[str, list[Any]], tuple[str, list[Any]]], *, seen: Mapping[str, str],
    lease_owner: str, now: int, detail: dict[str, Any],
) -> list[AutomationTask]:
    """The lease in one statement (PostgreSQL): the claimable rows locked with ``SKIP LOCKED`` by a
    sub-select of the update, leased, and their events inserted, a task's ``lease`` before its
    ``start``: ``WITH moved AS (UPDATE … WHERE task_id IN (SELECT … FOR UPDATE SKIP LOCKED)
    RETURNING …) INSERT … SELECT … FROM moved``. Atomic on its own, so no transaction either."""
    quote = connection.ops.quote_name
    table = quote(AutomationTask._meta.db_table)
    ids_sql, ids_params = claimable.values("pk").query.get_compiler(connection.alias).as_sql()
    update_sql, update_params = lease(f"{ids_sql} FOR UPDATE OF {table} SKIP LOCKED", list(ids_params))
    task_id, status = quote("task_id"), quote("status")
    was = f"CASE {task_id} {' '.join(['WHEN %s THEN %s'] * len(seen))} END"
    detail_field = TaskEvent._meta.get_field("detail")
    jsonb = detail_field.db_type(connection)
    sql = (
        f"WITH moved AS ({update_sql}), recorded AS ("
        f"INSERT INTO {quote(TaskEvent._meta.db_table)} ({task_id}, {quote('action')}, {quote('status_from')}, "
        f"{quote('status_to')}, {quote('actor')}, {quote('at')}, {quote('detail')}) "
        f"SELECT {task_id}, action, status_from, status_to, %s, %s, detail FROM ("
        f"SELECT {task_id}, %s AS action, {was} AS status_from, %s AS status_to, CAST(%s AS {jsonb}) AS detail, 1 AS n "
        f"FROM moved UNION ALL "
        f"SELECT {task_id}, %s, %s, %s, CAST(%s AS {jsonb}), 2 FROM moved WHERE {status} = %s"
        f") AS events ORDER BY {task_id}, n) "
        f"SELECT {', '.join(quote(field.column) for field in _FIELDS)} FROM moved"
    )
    params = [
        *update_params, lease_owner, now,
        LEASE.action, *(value for pair in seen.items() for value in pair), S.LEASED,
        detail_field.get_db_prep_save(detail, connection),
        START.action, S.LEASED, S.RUNNING, detail_field.get_db_prep_save({}, connection), S.RUNNING,
    ]
    return _returning(sql, params, using=connection.alias)


def task_release(
    task_id: str, *, lease: Lease, reason: str, now: int | None = None
) -> AutomationTask:
    """leased -> pending, using no attempt: the holder gives the task back unstarted."""
    return _transition(
        task_id, RELEASE, actor=lease.owner, now=now,
        fenced=lease,
        changes=_CLEAR_LEASE,
        detail={"reason": reason},
    )


def task_start(
    task_id: str,
    *,
    lease: Lease,
    lease_until: int,
    jitter_ms: int | None = None,
    now: int | None = None,
) -> AutomationTask:
    """leased -> running; counts the run as an attempt. ``jitter_ms``: the wait before it."""
    now = now_ms() if now is None else now
    return _transition(
        task_id, START, actor=lease.owner, now=now,
        fenced=lease,
        changes={"attempt_count": F("attempt_count") + 1, "started_at": now, "lease_until": lease_until},
        jitter_ms=jitter_ms,
    )


def task_heartbeat(
    task_id: str, *, lease: Lease, lease_until: int, now: int | None = None
) -> AutomationTask:
    """Renew the lease of a task its owner still holds; the status does not change.

    One fenced update and no event: a renewal is not a change of state, and a
    long task renews every third of its lease. Raises ``LeaseLost`` when the task was cancelled or reclaimed meanwhile:
    the worker must then stop the task's work.
    """
    return _transition(
        task_id, HEARTBEAT, actor=lease.owner, now=now,
        fenced=lease,
        changes={"lease_until": lease_until},
    )


def task_progress(
    task_id: str, *, lease: Lease, action: str, detail: dict[str, Any], now: int | None = None
) -> AutomationTask:
    """Put a step of a running attempt on the task's timeline; the status does not change.

    What the executor did on the way to its outcome (an outbound task: the
    delivery method it used, each fallback and why). ``action`` names the
    step; a name the state diagram uses is refused, so a step never passes
    for a change of state. Fenced like a heartbeat: ``LeaseLost`` when the
    caller no longer holds the task.
    """
    if action in EDGE_ACTIONS:
        raise ValueError(f"{action!r} is a transition, not a step")
    return _transition(
        task_id, edge(action, {S.RUNNING}, None), actor=lease.owner, now=now,
        fenced=lease, detail=detail,
    )


def task_succeed(
    task_id: str, *, lease: Lease, result: Any, now: int | None = None
) -> AutomationTask:
    """running -> succeeded, storing the executor's result."""
    now = now_ms() if now is None else now
    return _transition(
        task_id, SUCCEED, actor=lease.owner, now=now,
        fenced=lease,
        changes={**_CLEAR_LEASE, "result_json": json.dumps(result), "finished_at": now},
    )


def task_retry_later(
    task_id: str,
    *,
    lease: Lease,
    error: str,
    retry_at: int,
    backoff_ms: int,
    jitter_ms: int,
    now: int | None = None,
) -> AutomationTask:
    """running -> retry_wait after a retryable failure, due again at ``retry_at``.

    Refused when the task has used all its attempts: the caller must fail it.
    """
    return _transition(
        task_id, RETRY_LATER, actor=lease.owner, now=now,
        fenced=lease,
        guards=(ATTEMPTS_LEFT,),
        changes={**_CLEAR_LEASE, "execute_after": retry_at},
        error=error,
        backoff_ms=backoff_ms,
        jitter_ms=jitter_ms,
    )


def task_fail(
    task_id: str,
    *,
    lease: Lease,
    error: str,
    result: Any = None,
    now: int | None = None,
    reason: FinishReason | None = None,
) -> AutomationTask:
    """running -> failed: a terminal failure, or a retryable one with no attempts left.

    ``reason`` only for a decision (a policy's no at run time): a fault has none.
    """
    now = now_ms() if now is None else now
    changes: dict[str, Any] = {**_CLEAR_LEASE, "finished_at": now, "finish_reason": reason}
    if result is not None:
        changes["result_json"] = json.dumps(result)
    return _transition(
        task_id, FAIL, actor=lease.owner, now=now,
        fenced=lease,
        changes=changes,
        error=error,
    )


def task_reclaim_unstarted(task_id: str, *, actor: str, now: int | None = None) -> AutomationTask:
    """leased -> pending when the lease expired before the task started: no side effect, no attempt."""
    return _transition(
        task_id, RECLAIM_UNSTARTED, actor=actor, now=now,
        guards=(LEASE_EXPIRED,),
        changes=_CLEAR_LEASE,
    )


def task_reclaim_interrupted(
    task_id: str,
    *,
    actor: str,
    retry_at: int | None,
    backoff_ms: int | None = None,
    jitter_ms: int | None = None,
    now: int | None = None,
) -> AutomationTask:
    """running -> retry_wait or failed when the worker died (its lease expired).

    The run already counted as an attempt. The caller gives ``retry_at`` only
    when the retry policy allows another run (the kind or tool is idempotent
    and attempts remain): the task then waits to be retried. Otherwise it
    fails with an error saying it was interrupted and not re-run; an operator
    may still retry it.
    """
    now = now_ms() if now is None else now
    if retry_at is None:
        return _transition(
            task_id, RECLAIM_TO_FAILED, actor=actor,
            now=now, guards=(LEASE_EXPIRED,), changes={**_CLEAR_LEASE, "finished_at": now},
            error=INTERRUPTED_ERROR,
        )
    return _transition(
        task_id, RECLAIM_TO_RETRY, actor=actor,
        now=now, guards=(LEASE_EXPIRED, ATTEMPTS_LEFT),
        changes={**_CLEAR_LEASE, "execute_after": retry_at}, error=INTERRUPTED_ERROR,
        backoff_ms=backoff_ms, jitter_ms=jitter_ms,
    )


def task_approve(task_id: str, *, actor: str, now: int | None = None) -> AutomationTask:
    """blocked -> pending, due at once: an operator allowed the held instruction, for this run."""
    now = now_ms() if now is None else now
    return _transition(
        task_id, APPROVE, actor=actor, now=now,
        changes={"execute_after": now, "approved_by": actor, "approved_at": now},
    )


def task_reject(task_id: str, *, actor: str, reason: str, now: int | None = None) -> AutomationTask:
    """blocked -> failed: an operator refused the held instruction."""
    now = now_ms() if now is None else now
    return _transition(
        task_id, REJECT, actor=actor, now=now,
        changes={"finished_at": now, "finish_reason": FinishReason.REJECTED},
        error=f"rejected by {actor}: {reason}" if reason else f"rejected by {actor}",
    )


def task_cancel(task_id: str, *, actor: str, now: int | None = None) -> AutomationTask:
    """pending / retry_wait / blocked / running -> cancelled, by an operator.

    Not fenced: the operator overrides the lease. A worker running the task
    finds out at its next heartbeat (``LeaseLost``) and stops the tool.
    """
    now = now_ms() if now is None else now
    return _transition(
        task_id, CANCEL, actor=actor, now=now,
        changes={**_CLEAR_LEASE, "finished_at": now},
    )


def task_retry(task_id: str, *, actor: str, now: int | None = None) -> AutomationTask:
    """failed / cancelled -> pending or blocked, by an operator, with a fresh set of attempts.

    A task that needs approval and never had it (cancelled or rejected while
    blocked) goes back to ``blocked``, to wait for an approval again; one that
    had it goes to ``pending`` with the retrier recorded as its approver, as
    a retry is a new run (``operator.tasks_retry`` checks the retrier may
    approve it). Which one is read first; the edge's guard holds it in the
    update itself.
    """
    now = now_ms() if now is None else now
    task = AutomationTask.objects.filter(pk=task_id).only("needs_approval", "approved_at").first()
    if task is None:
        raise TaskNotFound(task_id)
    changes: dict[str, Any] = {
        "attempt_count": 0, "execute_after": now, "finished_at": None, "finish_reason": None,
        "retry_count": F("retry_count") + 1,
    }
    if task.is_awaiting_approval_again:
        return _transition(task_id, RETRY_TO_BLOCKED, actor=actor, now=now, guards=(APPROVAL_MISSING,), changes=changes)
    if task.needs_approval:
        changes |= {"approved_by": actor, "approved_at": now}
    return _transition(task_id, RETRY, actor=actor, now=now, guards=(APPROVAL_HELD,), changes=changes)
