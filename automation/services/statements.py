"""The task writes written as one statement each, by hand where the ORM has no form for them.

A conditional ``UPDATE … RETURNING`` that reads back what it wrote
(``update_one``), on PostgreSQL with its event in the same statement
(``WITH moved AS (UPDATE …) INSERT …``, ``event_insert_sql``), and the rows of
such a statement built as tasks (``tasks_returned``). The transitions
(``transitions.py``), the lease (``leasing.py``) and the creation of tasks
(``tasks.py``) use them; each is tested on both databases through those.
"""

from __future__ import annotations

from typing import Any

from django.db import connections
from django.db.models import QuerySet
from django.db.models.sql import UpdateQuery

from automation.models import AutomationTask, TaskEvent


def update_one(task: QuerySet, values: dict[str, Any], *, event: TaskEvent | None = None) -> AutomationTask | None:
    """Apply ``values`` (plain values or expressions) to ``task``, one row at most; return it as it is now, or None.

    One conditional ``UPDATE … RETURNING`` (PostgreSQL, and SQLite 3.35+):
    the ORM compiles the update (its values, expressions and ``WHERE``) and
    converts the returned row, which is what this statement wrote, read in
    the statement itself rather than by a second read. ``task`` names one
    row by its primary key. With ``event`` (only where ``writes_in_with``),
    the same statement inserts it for the row it updated: ``WITH moved AS
    (UPDATE … RETURNING …) INSERT … SELECT … FROM moved``, its ``status_to``
    the row's new status and its ``status_from``, when not given, the same.
    """
    query = task.query.chain(UpdateQuery)
    query.add_update_values(values)
    compiler = query.get_compiler(task.db)
    if event is None:
        rows = compiler.execute_returning_sql(TASK_FIELDS)
    else:
        rows = update_and_record(compiler, event)
    return AutomationTask.from_db(task.db, TASK_NAMES, rows[0]) if rows else None


def writes_in_with(connection: Any) -> bool:
    """Whether the database takes an ``INSERT`` or ``UPDATE`` inside ``WITH`` (PostgreSQL does, SQLite does not)."""
    return getattr(connection.features, "supports_data_modifying_with", False)


# The event's columns the transition gives; ``task_id``, ``status_from`` and ``status_to`` come from the row.
EVENT_GIVEN = ("action", "actor", "at", "jitter_ms", "backoff_ms", "error", "detail")


def update_and_record(compiler: Any, event: TaskEvent) -> list[Any]:
    """Run the compiled update with ``event`` inserted in the same statement; return its converted rows."""
    connection = compiler.connection
    quote = connection.ops.quote_name
    compiler.returning_fields = TASK_FIELDS
    update_sql, update_params = compiler.as_sql()
    record_sql, record_params = event_insert_sql("moved", event, connection)
    sql = (
        f"WITH moved AS ({update_sql}), recorded AS ({record_sql}) "
        f"SELECT {', '.join(quote(field.column) for field in TASK_FIELDS)} FROM moved"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*update_params, *record_params])
        rows = cursor.fetchall()
    cols = [field.get_col(AutomationTask._meta.db_table) for field in TASK_FIELDS]
    converters = compiler.get_converters(cols)
    return list(compiler.apply_converters(rows, converters)) if converters else rows


def event_insert_sql(source: str, event: TaskEvent, connection: Any) -> tuple[str, list[Any]]:
    """The ``INSERT … SELECT`` of ``event`` for each row of ``source`` (a ``WITH`` name whose rows have
    ``task_id`` and ``status``), and its parameters.

    Its ``status_to`` is the row's status; its ``status_from`` the event's, or
    when that is None and the event is not a ``create``, the row's status too.
    """
    quote = connection.ops.quote_name
    given = [TaskEvent._meta.get_field(name) for name in EVENT_GIVEN]
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


TASK_FIELDS = AutomationTask._meta.concrete_fields
TASK_NAMES = [field.attname for field in TASK_FIELDS]


def tasks_returned(sql: str, params: list[Any], *, using: str) -> list[AutomationTask]:
    """Run ``sql`` (one whose rows are every column of the table: an ``UPDATE … RETURNING``, or a
    ``WITH`` around one) and build its rows as tasks."""
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [
        AutomationTask.from_db(using, TASK_NAMES, [field.to_python(value) for field, value in zip(TASK_FIELDS, row)])
        for row in rows
    ]
