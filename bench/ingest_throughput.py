"""Ingest throughput over a real socket: final messages per second, one block each.

Starts one ASGI process (`manage.py serve --no-cluster`) on the configured
database, connects as a plugin, and sends final messages with one ```baa block
each, keeping up to --window unacknowledged. Prints messages per second and
the ack latency, and the CPU time the server's processes and this client used
per message (CPU-seconds, so other work on the machine does not count). The
frame rate limit and the hourly instruction limit are
lifted for the server under test; messages go round-robin to 20 conversations.

    uv run python bench/ingest_throughput.py [--messages 2000] [--window 32]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench uv run python bench/ingest_throughput.py
"""

import asyncio
import json
import math
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    UNLIMITED_INGEST, database_engine, echo_block, final_message, fresh_plugin_client, option_parser, plugin_socket,
    plugin_url, process_tree, processes_cpu_seconds, running_server, setup_django, summary,
)


async def drive(url: str, token: str, count: int, window: int, *,
                seconds: float | None = None) -> tuple[float, list[float]]:
    """Send ``count`` messages, up to ``window`` unacknowledged, and wait for every ack; with
    ``seconds``, send no more once that many seconds have passed. Returns the seconds from
    the first send to the last ack, and each message's ack latency in ms."""
    run = uuid.uuid4().hex[:8]
    sent_at: dict[str, float] = {}
    latencies: list[float] = []
    async with plugin_socket(url, "bench-client", token) as ws:
        slots = asyncio.Semaphore(window)

        async def receive_acks() -> None:
            while True:
                frame = json.loads(await ws.recv())
                if frame["type"] == "instruction.status":
                    continue  # the side panel's news, sent to every socket of the owner (SPEC §6)
                assert frame["type"] == "ack", frame
                latencies.append((time.perf_counter() - sent_at.pop(frame["id"])) * 1000)
                slots.release()

        async def send() -> None:
            for n in range(count):
                await slots.acquire()
                if time.perf_counter() >= deadline:
                    slots.release()
                    break
                frame_id = f"{run}-{n}"
                sent_at[frame_id] = time.perf_counter()
                await ws.send(json.dumps(final_message(frame_id, f"bench-{run}-{n % 20}",
                                                       f"Step {n}.\n{echo_block(n)}")))
            for _ in range(window):  # every slot back: every message sent is acknowledged
                await slots.acquire()

        started = time.perf_counter()
        deadline = started + seconds if seconds else math.inf
        receiver, sender = asyncio.create_task(receive_acks()), asyncio.create_task(send())
        done, _ = await asyncio.wait([sender, receiver], return_when=asyncio.FIRST_COMPLETED)
        elapsed = time.perf_counter() - started
        receiver.cancel()
        sender.cancel()
        for task in done:
            task.result()  # the receiver ends only on an error: raise it
        return elapsed, latencies


def main() -> None:
    args = option_parser(__doc__, messages=2000, window=32, port=8931).parse_args()

    setup_django(migrate=True)
    _, token = fresh_plugin_client("bench-client")
    with running_server(args.port, cluster=False, **UNLIMITED_INGEST, LOG_LEVEL="WARNING") as server:
        processes = process_tree(server.pid)
        server_cpu, client_cpu = processes_cpu_seconds(processes), time.process_time()
        seconds, latencies = asyncio.run(drive(plugin_url(args.port), token, args.messages, args.window))
        server_cpu, client_cpu = processes_cpu_seconds(processes) - server_cpu, time.process_time() - client_cpu

    print(f"database={database_engine()} messages={args.messages} window={args.window}")
    print(f"throughput={args.messages / seconds:.0f} messages/s ({seconds:.2f} s)")
    print(f"ack_latency_ms {summary(latencies, decimals=1)}")
    print(f"cpu_ms_per_message server={server_cpu * 1000 / args.messages:.2f} "
          f"client={client_cpu * 1000 / args.messages:.2f}")


if __name__ == "__main__":
    main()
