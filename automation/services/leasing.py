"""The dispatcher's claim leased: pending / retry_wait -> leased (and running) in one statement.

A transition like those of ``transitions.py``, for many tasks at once and
each under a lease token of its own (``Lease``); the claim
(``claim.py``) chooses the tasks, this leases what is still claimable.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Collection, Mapping
from functools import reduce
from operator import or_
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet

from automation.changes import tasks_changed_on_commit
from automation.models import AutomationTask, TaskEvent, new_lease_token
from automation.services.diagram import DUE, LEASE, START, S
from automation.services.statements import TASK_FIELDS, tasks_returned, writes_in_with
from automation.services.transitions import log_transition


# The SQL and parameters of a query of the ids still claimable among ``seen`` at ``now``.
ClaimableIds = Callable[[Mapping[str, str], int], tuple[str, list[Any]]]


def tasks_lease(
    seen: Mapping[str, str], *, still_claimable: Q | ClaimableIds, lease_owner: str, lease_until: int, now: int,
    detail: dict[str, Any] | None = None, start_kinds: Collection[str] = (),
) -> list[AutomationTask]:
    """pending / retry_wait -> leased for the dispatcher's claim: every task of
    ``seen`` (task id -> the status it was read in) that is still in that status,
    due and ``still_claimable``, each under a lease of its own; returns those leased.

    On SQLite, three statements in one transaction: the first reads which
    tasks of ``seen`` may be leased now (the transaction holds the write lock
    from its start), the second leases exactly those rows, the third writes
    their events. On PostgreSQL, one statement (``lease_and_record``): its
    sub-select locks the rows that may be leased with ``SKIP LOCKED``, so a
    task another dispatcher is leasing at this moment is skipped, not waited
    for. Either way the update leases exactly those rows, each with a lease
    token of its own (``Lease``), and returns them as it wrote them
    (``UPDATE … RETURNING``): the claim learns what it leased from the update
    itself, never from rows that look like its own (two threads of one process
    leasing in the same millisecond write the same owner and times). Raises
    ``IntegrityError`` when an in-flight limit's unique index refuses the batch
    (another dispatcher leased a task of the same target or lane meanwhile):
    the caller then leases one task at a time. ``detail`` goes on each lease event.
    ``still_claimable``: a condition on the ``leasable`` rows, or the statement
    that selects the ids of those still claimable (the claim's, compiled once).

    Tasks of ``start_kinds`` (those the dispatcher runs at once, with no
    jitter to wait and no client to check first) are also started in the
    same statement: leased -> running, their attempt counted, with both
    events (``lease``, then ``start``) on their timelines. One transaction
    a task fewer; a dispatcher that dies before running such a task leaves
    it running, and the reclaim treats it as interrupted (SPEC 4.4).
    """
    if not seen:
        return []
    claimable = still_claimable(seen, now) if callable(still_claimable) else (
        leasable(seen, now).filter(still_claimable).values("pk").query.get_compiler(connection.alias).as_sql()
    )
    lease = functools.partial(
        lease_update_sql, tokens_for=list(seen), lease_owner=lease_owner, lease_until=lease_until, now=now,
        start_kinds=start_kinds,
    )
    event_detail = {"lease_until": lease_until, **(detail or {})}
    if writes_in_with(connection):
        # Atomic on its own; inside a caller's transaction, a savepoint keeps a refused batch
        # (``IntegrityError``) from failing the caller's, which may lease one task at a time.
        with transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext():
            leased = lease_and_record(
                claimable, lease, seen=seen, lease_owner=lease_owner, now=now, detail=event_detail,
            )
        tasks_changed_on_commit(leased)
    else:
        leased = _lease_then_record(claimable, lease, seen=seen, lease_owner=lease_owner, now=now, detail=event_detail)
    for task in leased:
        log_transition(task, LEASE.action, seen[task.pk], lease_owner)
        if task.status == S.RUNNING:
            log_transition(task, START.action, S.LEASED, lease_owner)
    return leased


def leasable(seen: Mapping[str, str], now: int) -> QuerySet[AutomationTask]:
    """The tasks of ``seen`` still in the status they were read in, and due."""
    return AutomationTask.objects.filter(
        reduce(or_, (Q(pk=task_id, status=status) for task_id, status in seen.items())) & DUE.holds(now)
    )


def _lease_then_record(
    claimable: tuple[str, list[Any]], lease: Callable[[str, list[Any]], tuple[str, list[Any]]], *,
    seen: Mapping[str, str], lease_owner: str, now: int, detail: dict[str, Any],
) -> list[AutomationTask]:
    """``lease_and_record`` where one statement cannot both update and insert (SQLite): read, lease,
    record, in one transaction, which holds the database's write lock from its start."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(*claimable)
            task_ids = [task_id for task_id, in cursor.fetchall()]
        leased = tasks_returned(*lease(", ".join(["%s"] * len(task_ids)), task_ids), using=connection.alias) \
            if task_ids else []
        events = []
        for task in leased:
            events.append(TaskEvent(task_id=task.pk, action=LEASE.action, status_from=seen[task.pk],
                                    status_to=S.LEASED, actor=lease_owner, at=now, detail=detail))
            if task.status == S.RUNNING:
                events.append(TaskEvent(task_id=task.pk, action=START.action, status_from=S.LEASED,
                                        status_to=S.RUNNING, actor=lease_owner, at=now))
        TaskEvent.objects.bulk_create(events)
        tasks_changed_on_commit(leased)
    return leased


def lease_update_sql(
    ids_sql: str, ids_params: list[Any], *, tokens_for: list[str], lease_owner: str, lease_until: int, now: int,
    start_kinds: Collection[str],
) -> tuple[str, list[Any]]:
    """The ``UPDATE … RETURNING`` that leases the rows whose ids ``ids_sql`` lists or selects.

    Written here, for the connection's cursor (the ORM's ``update()``
    returns a count, not rows): PostgreSQL and SQLite 3.35+ both answer it.
    Each row of ``tokens_for`` that it updates gets a fresh lease token;
    the rows of ``start_kinds`` are started too. The rows it returns are what
    it changed, and nothing else.
    """
    quote = connection.ops.quote_name
    column = {field.name: quote(field.column) for field in TASK_FIELDS}
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
        + f" RETURNING {', '.join(quote(field.column) for field in TASK_FIELDS)}"
    )
    return sql, [param for _, _, values in assignments for param in values] + list(ids_params)


def lease_and_record(
    claimable: tuple[str, list[Any]], lease: Callable[[str, list[Any]], tuple[str, list[Any]]], *, seen: Mapping[str, str],
    lease_owner: str, now: int, detail: dict[str, Any],
) -> list[AutomationTask]:
    """The lease in one statement (PostgreSQL): the claimable rows locked with ``SKIP LOCKED`` by a
    sub-select of the update, leased, and their events inserted, a task's ``lease`` before its
    ``start``: ``WITH moved AS (UPDATE … WHERE task_id IN (SELECT … FOR UPDATE SKIP LOCKED)
    RETURNING …) INSERT … SELECT … FROM moved``. Atomic on its own, so no transaction either."""
    quote = connection.ops.quote_name
    table = quote(AutomationTask._meta.db_table)
    ids_sql, ids_params = claimable
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
        f"SELECT {', '.join(quote(field.column) for field in TASK_FIELDS)} FROM moved"
    )
    params = [
        *update_params, lease_owner, now,
        LEASE.action, *(value for pair in seen.items() for value in pair), S.LEASED,
        detail_field.get_db_prep_save(detail, connection),
        START.action, S.LEASED, S.RUNNING, detail_field.get_db_prep_save({}, connection), S.RUNNING,
    ]
    return tasks_returned(sql, params, using=connection.alias)
