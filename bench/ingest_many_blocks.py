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

from bench.common import database_engine, fresh_plugin_client, option_parser, running_server, setup_django  # noqa: E402

BIG_CLIENT, OTHER_CLIENT = "bench-many-blocks", "bench-other"
BLOCK = "~~~baa\n~~~\n"


async def hello(url: str, client_id: str, token: str):
    from websockets.asyncio.client import connect

    ws = await connect(url, max_size=None)
    await ws.send(json.dumps({"type": "hello", "client_id": client_id, "token": token}))
    assert json.loads(await ws.recv())["type"] == "hello.ok"
    return ws


async def drive(url: str, tokens: dict[str, str], blocks: int) -> tuple[float, dict, list[float]]:
    run = uuid.uuid4().hex[:8]
    big = await hello(url, BIG_CLIENT, tokens[BIG_CLIENT])
    other = await hello(url, OTHER_CLIENT, tokens[OTHER_CLIENT])
    done = asyncio.Event()
    other_latencies: list[float] = []

    async def other_client() -> None:
        n = 0
        while not done.is_set():
            started = time.perf_counter()
            await other.send(json.dumps({
                "type": "browser.final_message", "id": f"{run}-other-{n}", "platform": "claude",
                "conversation_id": f"bench-other-{run}", "message_id": f"{run}-other-{n}",
                "text": f'```baa\necho\n{{"n": {n}}}\n```',
            }))
            frame = json.loads(await other.recv())
            assert frame["type"] == "ack", frame
            other_latencies.append(time.perf_counter() - started)
            n += 1
            await asyncio.sleep(0.1)

    frame = json.dumps({
        "type": "browser.final_message", "id": f"{run}-big", "platform": "claude",
        "conversation_id": f"bench-many-{run}", "message_id": f"{run}-big", "text": BLOCK * blocks,
    })
    print(f"frame_bytes={len(frame.encode())}", flush=True)
    watcher = asyncio.create_task(other_client())
    await asyncio.sleep(0.3)  # the other client is under way when the big frame lands
    started = time.perf_counter()
    await big.send(frame)
    ack = json.loads(await big.recv())
    ack_seconds = time.perf_counter() - started
    await asyncio.sleep(0.3)
    done.set()
    await watcher
    await big.close()
    await other.close()
    return ack_seconds, ack, other_latencies


def main() -> None:
    args = option_parser(__doc__, blocks=80_000, port=8932).parse_args()

    setup_django(migrate=True)
    from ingest.models import Instruction

    tokens = {name: fresh_plugin_client(name)[1] for name in (BIG_CLIENT, OTHER_CLIENT)}

    with running_server(args.port, cluster=False, CONDUCTOR_MAX_FRAMES_PER_SECOND="1000000",
                        CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR="1000000", LOG_LEVEL="WARNING"):
        ack_seconds, ack, other = asyncio.run(
            drive(f"ws://127.0.0.1:{args.port}/ws/plugin/", tokens, args.blocks)
        )

    stored = Instruction.objects.filter(message_id=int(ack["message_id"])).count() if ack["type"] == "ack" else 0
    print(f"database={database_engine()} blocks={args.blocks}")
    print(f"ack_seconds={ack_seconds:.3f} ack_type={ack['type']} ack_instructions={ack.get('instructions')} "
          f"stored_instructions={stored}")
    print(f"other_client acks={len(other)} slowest_ack_seconds={max(other):.3f}")


if __name__ == "__main__":
    main()
