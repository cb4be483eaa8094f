"""What the side panel's ``instruction.status`` costs: statements, frame sizes, and the time to the socket.

On the configured database, one plugin client (marked connected) stores
--messages messages with three blocks each (``echo``, ``files.list``,
``shell.run``, the last held for approval), then prints:

- the statements a task's change pays in the thread that commits it, with
  the push's listener on and off (``task_start`` of an ``echo`` block, as
  the dispatcher starts an outbound task; the claim's lease and every
  transition tell the listener the same way);
- the statements one round of the push's thread pays for k messages at once
  (k = 1 and k = --messages), and for a round whose owner has no plugin
  connected;
- the size of one frame: the three-block message as it is, and the largest
  a message can make (32 blocks, each with a 300-character error, a
  300-character result and its approval link);
- with --socket: the time from a change's commit to its frame at a plugin's
  socket of a running ``serve`` (the bench's own thread pushes through the
  channel layer, as a worker's does), median and p99 over --changes changes.

    uv run python bench/status_push.py [--messages 20] [--socket 1 --changes 100]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench REDIS_URL=redis://127.0.0.1:6379/14 \\
        uv run python bench/status_push.py --socket 1
"""

import asyncio
import json
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    channel_layer_backend, database_engine, final_message, fresh_plugin_client, option_parser, plugin_url,
    running_server, setup_django, summary,
)

BLOCKS = (
    '```baa\necho\n{"text": "step %d"}\n```',
    '```baa\nfiles.list\n{"path": "."}\n```',
    '```baa\nshell.run\n{"argv": ["ls", "-la"]}\n```',
)


def main() -> None:
    args = option_parser(__doc__, messages=20, socket=0, changes=100, port=8791).parse_args()
    setup_django(migrate=True)
    from django.db import connection
    from django.db.models import Q
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from automation.changes import task_changes
    from automation.models import AutomationTask
    from automation.services import transitions as tr
    from automation.services.leasing import tasks_lease
    from core.clock import now_ms
    from ingest.panel import status as shown
    from ingest.blocks import MAX_BLOCKS
    from ingest.frames import parse_final_message
    from ingest.models import PluginClient
    from ingest.kinds import INSTRUCTION_EXECUTE
    from ingest.services.messages import ClientMessage, final_messages_ingest
    from ingest.panel.push import status_frame, statuses_send, tasks_changed
    from ingest.panel.selectors import StatusOfMessage

    client, token = fresh_plugin_client(f"bench-status-{uuid.uuid4().hex[:6]}")
    run = uuid.uuid4().hex[:8]
    # An owner of its own: the clients of earlier runs must not count as listening.
    PluginClient.objects.filter(pk=client.pk).update(
        owner=f"bench-{run}", connected=True, last_seen_at=timezone.now()
    )
    arrivals = [
        ClientMessage(message=parse_final_message(final_message(
            f"{run}-{n}", f"status-{run}-{n}", "\n".join(block % n if "%d" in block else block for block in BLOCKS),
        )), client_pk=client.pk)
        for n in range(args.messages)
    ]
    results = final_messages_ingest(arrivals=arrivals)
    message_ids = [int(result.message_id) for result in results]

    print(f"database: {database_engine()}, channel layer: {channel_layer_backend()}")

    def start_one(message_id: int) -> int:
        task = AutomationTask.objects.filter(
            kind=INSTRUCTION_EXECUTE, status="pending", message_id=message_id
        ).order_by("created_at").first()
        now = now_ms()
        leased = tasks_lease({task.pk: task.status}, still_claimable=Q(), lease_owner="bench",
                                lease_until=now + 60_000, now=now)[0]
        with CaptureQueriesContext(connection) as captured:
            tr.task_start(task.pk, lease=leased.lease, lease_until=now + 60_000, now=now)
        return len(captured)

    task_changes.unsubscribe(tasks_changed)
    off = start_one(message_ids[0])
    task_changes.subscribe(tasks_changed)
    on = start_one(message_ids[1])
    print(f"a task's change, in the committing thread: {off} statements with the push off, {on} with it on")
    time.sleep(1)  # the push's own round for that change goes by first

    sent: list[dict] = []

    def record(group: str, message: dict) -> None:
        sent.append(message["frame"])

    for count in (1, len(message_ids)):
        with CaptureQueriesContext(connection) as captured:
            statuses_send(message_ids[:count], send=record)
        print(f"one round of the push for {count} message(s): {len(captured)} statements")
    PluginClient.objects.filter(pk=client.pk).update(connected=False)
    with CaptureQueriesContext(connection) as captured:
        statuses_send(message_ids, send=record)
    print(f"one round whose owner has no plugin connected: {len(captured)} statements")
    PluginClient.objects.filter(pk=client.pk).update(connected=True, last_seen_at=timezone.now())

    typical = json.dumps(sent[0], ensure_ascii=False).encode()
    worst_block = shown.block_status(shown.BlockRow(
        index=MAX_BLOCKS, target="x" * 100, tool="t" * 100, params={"p": "\u00e9" * 1000},
        instruction_status="pending", instruction_error="", task_id="0" * 32, task_status="failed",
        task_error="\u00e9" * 1000, task_result=None, updated_at=now_ms(),
    ), approve_url=None)
    worst_block["result_preview"] = "\u00e9" * shown.MAX_PREVIEW_CHARS
    worst_block["approve_url"] = "https://conductor.example.org/admin/conversations/conversation/999999/story/?task=" \
        + "0" * 32 + "#block-99999999"
    worst = status_frame(StatusOfMessage(
        owner="o", platform="claude", conversation_id="c" * 255, status=shown.message_status(
            remote_message_id="m" * 255, message_pk=10**12, blocks=[worst_block] * MAX_BLOCKS,
            delivery={"status": "failed", "method": "http", "error": "\u00e9" * shown.MAX_ERROR_CHARS},
        )), approvals_waiting=10**6)
    print(f"frame size: {len(typical)} bytes for the three-block message; "
          f"at most {len(json.dumps(worst, ensure_ascii=False).encode())} bytes ({MAX_BLOCKS} blocks, every field full)")

    if args.socket:
        socket_latency(args, client, token, message_ids)


def socket_latency(args, client, token, message_ids) -> None:
    """Commit a change, time its frame's arrival at a plugin's socket of a running server."""
    import websockets
    from django.db import transaction

    from conversations.models import Message
    from ingest.panel.push import status_push

    arrived: dict[int, float] = {}
    ready = threading.Event()
    done = threading.Event()

    async def listen() -> None:
        async with websockets.connect(plugin_url(args.port), origin="chrome-extension://bench",
                                      max_size=2**22) as socket:
            await socket.send(json.dumps({
                "type": "hello", "client_id": client.client_id, "token": token, "plugin_version": "1.0.0",
                "platforms": ["claude"],
            }))
            assert json.loads(await socket.recv())["type"] == "hello.ok"
            ready.set()
            while not done.is_set():
                try:
                    frame = json.loads(await asyncio.wait_for(socket.recv(), 0.5))
                except TimeoutError:
                    continue
                if frame.get("type") == "instruction.status":
                    arrived.setdefault(int(frame["message"]["conductor_message_id"]), time.perf_counter())

    with running_server(args.port, cluster=False):
        listener = threading.Thread(target=lambda: asyncio.run(listen()), daemon=True)
        listener.start()
        assert ready.wait(30), "the plugin's socket did not connect"
        took = []
        for n in range(args.changes):
            message_id = message_ids[n % len(message_ids)]
            arrived.pop(message_id, None)
            time.sleep(0.25)  # past the window of this message's last frame
            with transaction.atomic():
                Message.objects.filter(pk=message_id).update(text=f"change {n}")
                transaction.on_commit(lambda mid=message_id: status_push.mark([mid]))
            committed = time.perf_counter()
            for _ in range(500):
                if message_id in arrived:
                    break
                time.sleep(0.002)
            if message_id in arrived:
                took.append((arrived[message_id] - committed) * 1000)
        done.set()
        listener.join(5)
    print(f"commit → frame at the socket, {len(took)} of {args.changes} changes: {summary(took, decimals=1)} ms")


if __name__ == "__main__":
    main()
