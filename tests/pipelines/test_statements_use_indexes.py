"""No statement of a message's path reads a table that grows with history from end to end.

One message with one ``echo`` block goes through as in
``test_statements_per_message.py`` (the consumer, a dispatcher of this
process, the delivery answered over the socket, the status push's rounds),
and every statement it ran is explained on PostgreSQL with sequential scans
turned off: a plan that still scans a table whose rows pile up (messages,
blocks, tasks, their events, deliveries, conversations) has no index it can
use, so its cost would grow with every message the server ever took. The
planner picks a sequential scan of a small table freely; turning them off
asks whether it has any choice.
"""

import re
import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.db.backends import utils

from automation import dispatcher as dispatcher_module
from automation.dispatcher import Dispatcher, DispatcherConfig
from ingest.models import ToolPolicyVersion
from tests.factories import PluginClientFactory
from tests.pipelines.test_statements_per_message import hello, one_message

pytestmark = [
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner is asked"),
]

# Tables whose rows grow with every message, and so with the server's age.
GROWING = (
    "conversations_message", "conversations_conversation", "ingest_instruction", "automation_tasks",
    "automation_taskevent", "ingest_deliveryrequest",
)
SEQ_SCAN = re.compile(r"Seq Scan on (\w+)")
READS = re.compile(r"^\s*(SELECT|UPDATE|DELETE|WITH)\b", re.IGNORECASE)


class Recorded:
    """Every statement (with its parameters) this process's connections to the default database run while on."""

    def __init__(self, monkeypatch):
        self.on = False
        self.statements: list[tuple[str, object]] = []
        self._lock = threading.Lock()
        real = utils.CursorWrapper._execute_with_wrappers
        recorded = self

        def record(cursor, sql, params, many, executor):
            if recorded.on and not many and cursor.db.alias == "default" and READS.match(sql):
                with recorded._lock:
                    recorded.statements.append((sql, params))
            return real(cursor, sql, params, many, executor)

        monkeypatch.setattr(utils.CursorWrapper, "_execute_with_wrappers", record)


def full_scans(sql, params) -> set[str]:
    """The growing tables the plan of ``sql`` reads end to end even when the planner must avoid it."""
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")
    return {table for table in SEQ_SCAN.findall(plan) if table in GROWING}


async def test_no_statement_of_a_messages_path_reads_a_growing_table_end_to_end(
    channel_layer, status_push, monkeypatch
):
    monkeypatch.setattr(dispatcher_module, "HOUSEKEEPING_EVERY_MS", 3_600_000)  # the hourly work is not the message's
    recorded = Recorded(monkeypatch)
    await ToolPolicyVersion.objects.aget_or_create(pk=1)
    await sync_to_async(PluginClientFactory)(client_id="laptop", capabilities=["proxy_delivery"])
    communicator = await hello()
    dispatcher = await sync_to_async(Dispatcher)(owner="explained", config=DispatcherConfig(
        max_tasks_per_tick=4, lease_ms=60_000, outbound_jitter_max_ms=0, retry_backoff_seconds=(0,),
        retry_jitter_max_ms=0,
    ))
    try:
        await one_message(communicator, dispatcher, _NoCount(), "warm")
        recorded.on = True
        await one_message(communicator, dispatcher, _NoCount(), "explained")
        recorded.on = False
    finally:
        await sync_to_async(dispatcher.stop)(grace=5)
        await communicator.disconnect()
    assert len(recorded.statements) >= 10  # the path was recorded
    # The question can be answered "yes": a search of a text column has no index to use.
    assert await sync_to_async(full_scans)(
        "SELECT id FROM ingest_instruction WHERE error LIKE %s", ["%lost%"]) == {"ingest_instruction"}
    scanning = {}
    for sql, params in recorded.statements:
        if tables := await sync_to_async(full_scans)(sql, params):
            scanning[sql[:300]] = sorted(tables)
    assert not scanning, "\n\n".join(f"{tables}: {sql}" for sql, tables in scanning.items())


class _NoCount:
    """What ``one_message`` expects of a statement counter, counting nothing."""

    def __init__(self):
        self.aside = threading.local()
