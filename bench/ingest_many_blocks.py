"""Ingest of one message holding far more ```baa blocks than SPEC §5 allows, over a real socket.

Starts one ASGI process (`manage.py serve --no-cluster`) on the configured
database, connects two plugins, and has the first send one final message of
--blocks empty ``~~~baa`` blocks (80,000 make a frame of just under 1 MiB).
Meanwhile the second plugin sends a one-block message every 100 ms, to show
how long other clients' acks wait behind it. Prints the big message's ack
time, the ``instructions`` of its ack, the Instruction rows stored for it,
and the other client's slowest ack. The frame rate limit and the hourly
instruction limit are lifted for the server under test.

    uv run python bench/ingest_many_blocks.py [--blocks 80000]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench uv run python bench/ingest_many_blocks.py
"""

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    UNLIMITED_INGEST, database_engine, echo_block, final_message, fresh_plugin_client, option_parser, plugin_socket,
    plugin_url, running_server, setup_django,
)

BIG_CLIENT, OTHER_CLIENT = "bench-many-blocks", "bench-other"
BLOCK = "~~~baa\n~~~\n"


async def drive(url: str, tokens: dict[str, str], blocks: int) -> tuple[float, dict, list[float]]:
    run = uuid.uuid4().hex[:8]
    done = asyncio.Event()
    other_latencies: list[float] = []

    async def other_client(other) -> None:
        n = 0
        while not done.is_set():
            started = time.perf_counter()
            await other.send(json.dumps(final_message(f"{run}-other-{n}", f"bench-other-{run}", echo_block(n))))
            frame = json.loads(await other.recv())
            assert frame["type"] == "ack", frame
            other_latencies.append(time.perf_counter() - started)
            n += 1
            await asyncio.sleep(0.1)

    frame = json.dumps(final_message(f"{run}-big", f"bench-many-{run}", BLOCK * blocks))
    print(f"frame_bytes={len(frame.encode())}", flush=True)
    async with (plugin_socket(url, BIG_CLIENT, tokens[BIG_CLIENT]) as big,
                plugin_socket(url, OTHER_CLIENT, tokens[OTHER_CLIENT]) as other):
        watcher = asyncio.create_task(other_client(other))
        await asyncio.sleep(0.3)  # the other client is under way when the big frame lands
        started = time.perf_counter()
        await big.send(frame)
        ack = json.loads(await big.recv())
        ack_seconds = time.perf_counter() - started
        await asyncio.sleep(0.3)
        done.set()
        await watcher
    return ack_seconds, ack, other_latencies


def main() -> None:
    args = option_parser(__doc__, blocks=80_000, port=8932).parse_args()

    setup_django(migrate=True)
    from ingest.models import Instruction

    tokens = {name: fresh_plugin_client(name)[1] for name in (BIG_CLIENT, OTHER_CLIENT)}

    with running_server(args.port, cluster=False, **UNLIMITED_INGEST, LOG_LEVEL="WARNING"):
        ack_seconds, ack, other = asyncio.run(drive(plugin_url(args.port), tokens, args.blocks))

    stored = Instruction.objects.filter(message_id=int(ack["message_id"])).count() if ack["type"] == "ack" else 0
    print(f"database={database_engine()} blocks={args.blocks}")
    print(f"ack_seconds={ack_seconds:.3f} ack_type={ack['type']} ack_instructions={ack.get('instructions')} "
          f"stored_instructions={stored}")
    print(f"other_client acks={len(other)} slowest_ack_seconds={max(other):.3f}")


if __name__ == "__main__":
    main()
