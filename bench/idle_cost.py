"""Idle cost of ``manage.py serve``: CPU of all its processes at rest, and of its ASGI process
with many plugins connected.

Starts ``manage.py serve`` (daphne + the django-q2 cluster, as ``make run``
does) on the configured database and channel layer and lets start-up settle
for --settle seconds. Then:

- with --plugins 0 (at rest: no plugin, nothing queued), measures for
  --seconds the CPU-seconds of the server's process and all its descendants
  (utime + stime from /proc) and prints them as a percentage of one core;
- with --plugins N, connects N plugins (each its own client, saying hello and
  then ``{"type":"ping"}`` every --ping-every seconds, the first pings spread
  over that interval), waits --settle seconds again, and measures the ASGI
  (daphne) process alone for --seconds: its CPU as a percentage of one core
  and its largest resident memory.

    uv run python bench/idle_cost.py [--settle 10] [--seconds 30]
    uv run python bench/idle_cost.py --plugins 200 --seconds 60
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench REDIS_URL=redis://127.0.0.1:6379/14 \\
        uv run python bench/idle_cost.py --plugins 200
"""

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    ProcessMeter, asgi_pid, channel_layer_backend, database_engine, fresh_plugin_client, option_parser, plugin_socket,
    plugin_url, process_tree, running_server, setup_django, stop_on_signals,
)

# Plugins connect at most this many at a time, as browsers coming back after a restart would not
# all at the same instant either.
CONNECTING_AT_ONCE = 20


def plugin_clients(count: int, *, prefix: str = "bench-idle") -> list[tuple[str, str]]:
    """``count`` fresh plugin clients: (client id, token) of each."""
    clients = []
    for n in range(count):
        client, token = fresh_plugin_client(f"{prefix}-{n}")
        clients.append((client.client_id, token))
    return clients


def quiet_at_rest(server: subprocess.Popen, seconds: float) -> str:
    """Measure every process of ``server`` for ``seconds``; return the figure's line."""
    with ProcessMeter(lambda: process_tree(server.pid)) as meter:
        time.sleep(seconds)
    return (f"quiet_at_rest processes={meter.processes} window_s={meter.seconds:.1f} "
            f"cpu_s={meter.cpu_seconds:.2f} cpu_percent={meter.cpu_percent:.2f}")


def plugins_line(meter: ProcessMeter, *, plugins: int, ping_every: float) -> str:
    """The figure's line of ``meter``, which measured the ASGI process with ``plugins`` connected."""
    return (f"plugins count={plugins} ping_every_s={ping_every:g} window_s={meter.seconds:.1f} "
            f"asgi_cpu_s={meter.cpu_seconds:.2f} asgi_cpu_percent={meter.cpu_percent:.2f} "
            f"asgi_rss_peak_mb={meter.rss_peak_bytes / 1e6:.0f}")


@contextlib.contextmanager
def plugins_connected(url: str, clients: Sequence[tuple[str, str]], *, ping_every: float) -> Iterator[None]:
    """Inside the block, each of ``clients`` holds a socket to ``url`` on which it said hello and
    sends ``{"type":"ping"}`` every ``ping_every`` seconds, reading what comes back, as the
    reference plugin's service worker does. The sockets live in an event loop on a thread of its
    own; the block begins once all of them are connected and raises if one could not be."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    connected = threading.Event()
    failure: list[BaseException] = []

    async def hold() -> None:
        slots = asyncio.Semaphore(CONNECTING_AT_ONCE)
        async with contextlib.AsyncExitStack() as sockets:
            async def connect(client_id: str, token: str):
                async with slots:
                    # Browsers send no WebSocket-level pings: only the plugin's frames keep it present.
                    return await sockets.enter_async_context(plugin_socket(url, client_id, token, ping_interval=None))

            connections = await asyncio.gather(*(connect(client_id, token) for client_id, token in clients))
            connected.set()
            # The first pings spread over the interval, as plugins that connected at different times.
            tasks = [asyncio.create_task(keep_pinging(ws, ping_every, first=ping_every * (n + 1) / len(connections)))
                     for n, ws in enumerate(connections)]
            tasks += [asyncio.create_task(drain_frames(ws)) for ws in connections]
            await stop.wait()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def run() -> None:
        try:
            loop.run_until_complete(hold())
        except BaseException as exc:  # handed to the thread that entered the block
            failure.append(exc)
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="plugins", daemon=True)
    thread.start()
    try:
        while not connected.wait(0.1):
            if not thread.is_alive():
                raise RuntimeError(f"the plugins could not connect: {failure[0]!r}") from failure[0]
        yield
    finally:
        if thread.is_alive():
            loop.call_soon_threadsafe(stop.set)
        thread.join(30)


async def keep_pinging(ws, every: float, *, first: float) -> None:
    await asyncio.sleep(first)
    while True:
        await ws.send(json.dumps({"type": "ping"}))
        await asyncio.sleep(every)


async def drain_frames(ws) -> None:
    """Read and drop what the server sends (its pongs)."""
    async for _ in ws:
        pass


def main() -> None:
    args = option_parser(__doc__, settle=10.0, seconds=30.0, plugins=0, ping_every=20.0, port=9171).parse_args()
    stop_on_signals()
    setup_django(migrate=True)
    clients = plugin_clients(args.plugins)
    print(f"database={database_engine()} layer={channel_layer_backend()}")
    with running_server(args.port, LOG_LEVEL="WARNING") as server:
        time.sleep(args.settle)
        if not args.plugins:
            print(quiet_at_rest(server, args.seconds))
            return
        with plugins_connected(plugin_url(args.port), clients, ping_every=args.ping_every):
            time.sleep(args.settle)
            with ProcessMeter(lambda: [asgi_pid(server)]) as meter:
                time.sleep(args.seconds)
        print(plugins_line(meter, plugins=args.plugins, ping_every=args.ping_every))


if __name__ == "__main__":
    main()
