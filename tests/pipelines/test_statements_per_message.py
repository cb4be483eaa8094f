"""The SQL statements one message with one block costs, end to end, in one process.

A plugin's socket (the consumer, in this process) sends a final message with
one ``echo`` block; a dispatcher of this process claims and runs the block
and delivers its result to the same socket, which answers 200. Every
statement any connection of this process runs from the send to the
delivery's success is counted (a counting wrapper around every cursor):
the consumer's, the dispatcher's tick and task threads', the answer's. The
number of the message's own path is pinned per database; the status push's
rounds (their number follows timing) and the SQLite channel layer's tables
are counted apart and printed. On failure the table names each statement's
shape and where it ran; ``bench/statements_per_message.py`` counts the same
on a running server from PostgreSQL's own log.
"""

import asyncio
import re
import threading
import time
import traceback
from collections import Counter
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.db.backends import utils

from automation import dispatcher as dispatcher_module
from automation.dispatcher import Dispatcher, DispatcherConfig
from automation.models import AutomationTask, TaskStatus
from conductor_site.asgi import application
from ingest.kinds import INSTRUCTION_DELIVER
from ingest.models import ToolPolicyVersion
from tests.factories import TEST_TOKEN, PluginClientFactory

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

ROOT = str(Path(__file__).resolve().parents[2]) + "/"
# The message's own statements, per configuration (SQLite; PostgreSQL). A change
# that adds one fails here: say why in the commit, and change the number.
MESSAGE_STATEMENTS = {"sqlite": 48, "postgresql": 32}
SHAPES = [(re.compile(r"'(?:[^']|'')*'"), "?"), (re.compile(r"\b\d+\b"), "?"), (re.compile(r"%s|\?(?:, \?)*"), "?")]


class Statements:
    """Counts the statements every connection of this process runs while ``counting``, by part and shape.

    The parts: the status push's own thread (its rounds coalesce changes, so
    their number follows timing), the channel layer's tables (SQLite's
    layer; Redis takes none), and the message's own path: the rest.
    """

    def __init__(self, monkeypatch):
        self.counting = False
        self.aside = threading.local()  # the test's own reads
        self.seen = {part: Counter() for part in ("message", "push", "layer")}
        self._lock = threading.Lock()
        real = utils.CursorWrapper._execute_with_wrappers
        statements = self

        def counted(cursor, sql, params, many, executor):
            if statements.counting and not getattr(statements.aside, "on", False):
                statements.add(sql)
            return real(cursor, sql, params, many, executor)

        monkeypatch.setattr(utils.CursorWrapper, "_execute_with_wrappers", counted)

    def add(self, sql):
        if threading.current_thread().name.startswith("conductor-status-push"):
            part = "push"
        elif "channels_lite_" in sql:
            part = "layer"
        else:
            part = "message"
        for pattern, replacement in SHAPES:
            sql = pattern.sub(replacement, sql)
        # Where it ran: the innermost frames of the project's code.
        frames = [f"{frame.filename.removeprefix(ROOT)}:{frame.lineno}" for frame in traceback.extract_stack()
                  if frame.filename.startswith(ROOT) and "/.venv/" not in frame.filename
                  and not frame.filename.endswith(__name__.rpartition(".")[2] + ".py")]
        with self._lock:
            self.seen[part][f"{sql[:90]} @ {' < '.join(reversed(frames[-2:]))}"] += 1

    def total(self, part):
        return sum(self.seen[part].values())

    def table(self):
        return "\n".join(
            f"{part} {self.total(part)}\n" + "\n".join(f"{n:3} {sql}" for sql, n in shapes.most_common())
            for part, shapes in self.seen.items()
        )


async def hello():
    communicator = WebsocketCommunicator(application, "/ws/plugin/", headers=[(b"host", b"conductor.test:8000")])
    assert (await communicator.connect())[0]
    await communicator.send_json_to({
        "type": "hello", "client_id": "laptop", "token": TEST_TOKEN, "plugin_version": "1.0.0",
        "platforms": ["claude"], "capabilities": ["proxy_delivery"],
    })
    assert (await communicator.receive_json_from())["type"] == "hello.ok"
    return communicator


async def next_of(communicator, kind, timeout=10):
    while True:
        frame = await communicator.receive_json_from(timeout=timeout)
        if frame["type"] == kind:
            return frame


def message_frame(message_id):
    return {
        "type": "browser.final_message", "id": f"f-{message_id}", "platform": "claude",
        "conversation_id": "conv-1", "organization_id": "org-1", "message_id": message_id,
        "text": f"Here.\n```baa\necho\n{{\"n\": \"{message_id}\"}}\n```", "page_url": "https://claude.ai/chat/conv-1",
    }


async def one_message(communicator, dispatcher, statements, message_id):
    await communicator.send_json_to(message_frame(message_id))
    await next_of(communicator, "ack")
    ticking = asyncio.get_running_loop().run_in_executor(None, tick_until_delivered, dispatcher, statements, message_id)
    delivery = await next_of(communicator, "browser.proxy_delivery")
    await communicator.send_json_to({
        "type": "browser.proxy_delivery.result", "request_id": delivery["request_id"], "ok": True, "status": 200,
        "body": "", "error": None,
    })
    await ticking


def tick_until_delivered(dispatcher, statements, message_id):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        dispatcher.tick()
        dispatcher.wait_idle(timeout=10)
        statements.aside.on = True
        delivery = AutomationTask.objects.filter(
            kind=INSTRUCTION_DELIVER, message__remote_message_id=message_id).values_list("status", flat=True).first()
        statements.aside.on = False
        if delivery == TaskStatus.SUCCEEDED:
            return
    raise AssertionError(f"message {message_id} was not delivered")


@pytest.fixture
def statements(monkeypatch):
    return Statements(monkeypatch)


async def test_one_message_with_one_block_costs_at_most_its_statements(
    channel_layer, status_push, statements, monkeypatch
):
    # The reclaim and the tick's record run on the first tick (the warm message's), then
    # every HOUSEKEEPING_EVERY_MS of the clock: their number follows time, not the message.
    monkeypatch.setattr(dispatcher_module, "HOUSEKEEPING_EVERY_MS", 3_600_000)
    # A migrated database holds the policies' version row; a transactional test run before this one
    # in the same database may have emptied its table, and without it every batch reads the policies.
    await ToolPolicyVersion.objects.aget_or_create(pk=1)
    await sync_to_async(PluginClientFactory)(client_id="laptop", capabilities=["proxy_delivery"])
    communicator = await hello()
    dispatcher = await sync_to_async(Dispatcher)(owner="counted", config=DispatcherConfig(
        max_tasks_per_tick=4, lease_ms=60_000, outbound_jitter_max_ms=0, retry_backoff_seconds=(0,),
        retry_jitter_max_ms=0,
    ))
    try:
        await one_message(communicator, dispatcher, statements, "warm")  # the conversation, its link, the caches
        statements.counting = True
        await one_message(communicator, dispatcher, statements, "counted")
        statements.counting = False
    finally:
        await sync_to_async(dispatcher.stop)(grace=5)
        await communicator.disconnect()
    print(f"\n{statements.table()}")
    assert statements.total("message") <= MESSAGE_STATEMENTS[connection.vendor], statements.table()
