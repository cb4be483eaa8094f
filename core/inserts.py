"""Inserting a row unless a unique key of it is taken, in one statement and without a savepoint."""

from __future__ import annotations

from django.db import connections, router
from django.db.models import Model
from django.db.models.sql import InsertQuery


def insert_unless_taken(obj: Model) -> bool:
    """Insert ``obj`` unless the values of one of its unique constraints are taken; True when inserted.

    ``INSERT … ON CONFLICT DO NOTHING RETURNING`` the primary key (PostgreSQL,
    SQLite 3.35+): a taken key leaves the caller's transaction whole, so no
    savepoint is needed around it, and the inserted row's key is set on
    ``obj`` without a second read. The fields are prepared as ``save`` would
    (``pre_save``: ``auto_now`` and the like).
    """
    model = type(obj)
    opts = model._meta
    using = router.db_for_write(model, instance=obj)
    connection = connections[using]
    fields = [
        field for field in opts.local_concrete_fields
        if not field.generated and not (field is opts.auto_field and obj.pk is None)
    ]
    query = InsertQuery(model)
    query.insert_values(fields, [obj])
    [(sql, params)] = query.get_compiler(using=using).as_sql()
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} ON CONFLICT DO NOTHING RETURNING {connection.ops.quote_name(opts.pk.column)}", params)
        row = cursor.fetchone()
    if row is None:
        return False
    obj.pk = opts.pk.to_python(row[0])
    obj._state.adding, obj._state.db = False, using
    return True
