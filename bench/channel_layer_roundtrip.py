"""Cross-process round trip through the configured channel layer.

A peer process echoes every message (``echo_peer`` of the cross-process test);
this process sends one at a time and waits for the reply. Prints the median and p99 round trip and the messages
lost (no reply within the timeout).

    uv run python bench/channel_layer_roundtrip.py [--messages 200]
    REDIS_URL=redis://127.0.0.1:6379/15 uv run python bench/channel_layer_roundtrip.py

Uses the configured databases (the embedded layer's SQLite file by default).
"""

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import channel_layer_backend, option_parser, setup_django, summary  # noqa: E402


async def measure(layer, me: str, count: int, timeout: float) -> tuple[list[float], int]:
    ready = await asyncio.wait_for(layer.receive(me), timeout=60)
    times, lost = [], 0
    for n in range(count):
        started = time.perf_counter()
        await layer.send(ready["channel"], {"type": "echo", "n": n, "reply_to": me})
        try:
            while (await asyncio.wait_for(layer.receive(me), timeout=timeout))["n"] != n:
                pass
        except TimeoutError:
            lost += 1
            continue
        times.append((time.perf_counter() - started) * 1000)
    return times, lost


def main() -> None:
    args = option_parser(__doc__, messages=200, timeout=5.0).parse_args()

    setup_django(migrate=True)
    from channels.layers import channel_layers

    from tests.procs import started_in_processes

    layer = channel_layers.make_backend("default")
    me = asyncio.run(layer.new_channel())
    # After its echoes the peer waits for the test's one late message; leaving the block ends it.
    with started_in_processes("tests.conductor_site.workers:echo_peer", [(me, args.messages)]):
        times, lost = asyncio.run(measure(layer, me, args.messages, args.timeout))

    print(f"layer={channel_layer_backend()} messages={args.messages} lost={lost}")
    print(f"round_trip_ms {summary(times, decimals=1)}")


if __name__ == "__main__":
    main()
