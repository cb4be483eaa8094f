"""The dispatcher's wake-up across processes: the channel layer's hop against PostgreSQL's
``LISTEN``/``NOTIFY``.

A listener process waits for wake-ups as the dispatcher loop does; this process commits a
transaction that makes a task due (a one-row ``UPDATE``) and wakes it, --wakes times, one
every --every seconds. Four ways, one after the other, each with a listener of its own:

- ``conductor``: what Conductor does (``automation.wake``): ``dispatcher_wake_on_commit`` in
  the transaction, which on PostgreSQL sends ``NOTIFY`` on the same connection once it
  commits, and the loop's own listener, ``wake_listener`` (``NotifyWakeListener``);
- ``channel_layer``: what Conductor did before, and still does on SQLite: ``group_send`` to
  the wake group through ``async_to_sync`` once the transaction commits, and
  ``ChannelWakeListener``. ``async_to_sync`` starts a new event loop per call, and
  channels_redis keeps its connections per loop, so each wake-up connects to Redis anew;
- ``channel_layer_one_loop``: the same ``group_send``, but from one event loop that lives in a
  thread of its own for the whole run, with one layer made for it;
- ``notify_in_transaction``: ``NOTIFY`` inside the transaction (PostgreSQL delivers it at the
  commit), and a psycopg connection that ``LISTEN``\\ s.

For each: the latency from just before the commit to the listener's wake (both clocks are this
machine's monotonic clock), and how long the committing thread was held (commit plus the
wake-up's send). Needs PostgreSQL, and for the channel layer Redis (or the embedded layer).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench REDIS_URL=redis://127.0.0.1:6379/14 \\
        uv run python bench/wake_hop.py [--wakes 200] [--every 0.05]
"""

import bisect
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import channel_layer_backend, database_engine, option_parser, setup_django, summary  # noqa: E402

NOTIFY_CHANNEL = "conductor_bench_wake"


def _listened(ready: str, timeout: float, wait_for_wake) -> list[int]:
    """Touch ``ready``, then the moment of each wake ``wait_for_wake`` sees, until ``ready`` is gone."""
    Path(ready).touch()
    woke = []
    deadline = time.monotonic() + timeout
    while Path(ready).exists() and time.monotonic() < deadline:
        if wait_for_wake(0.2):
            woke.append(time.monotonic_ns())
    return woke


def listen_conductor(ready: str, timeout: float) -> list[int]:
    """In a child process: the dispatcher loop's own listener; the moment of each wake-up."""
    from automation.wake import wake_listener

    return _listened_by(wake_listener, ready, timeout)


def listen_channel_layer(ready: str, timeout: float) -> list[int]:
    """In a child process: the channel layer's listener; the moment of each wake-up."""
    from automation.wake import ChannelWakeListener, EventWakes

    return _listened_by(lambda event: ChannelWakeListener(EventWakes(event)), ready, timeout)


def _listened_by(make_listener, ready: str, timeout: float) -> list[int]:
    event = threading.Event()
    listener = make_listener(event).start()

    def wait_for_wake(seconds: float) -> bool:
        if event.wait(seconds):
            event.clear()
            return True
        return False

    try:
        return _listened(ready, timeout, wait_for_wake)
    finally:
        listener.stop()


def listen_notify(ready: str, timeout: float) -> list[int]:
    """In a child process: a connection that LISTENs; the moment of each notification."""
    import psycopg
    from django.db import connection

    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as listening:
        listening.execute(f"LISTEN {NOTIFY_CHANNEL}")

        def wait_for_wake(seconds: float) -> bool:
            return any(True for _ in listening.notifies(timeout=max(0.0, seconds), stop_after=1))

        return _listened(ready, timeout, wait_for_wake)


class OneLoop:
    """An event loop in a thread of its own, and a channel layer made for it."""

    def __init__(self):
        import asyncio

        from channels.layers import channel_layers

        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="wake-sender", daemon=True).start()
        self.layer = channel_layers.make_backend("default")

    def wake(self) -> None:
        import asyncio

        from automation.wake import WAKE_GROUP

        asyncio.run_coroutine_threadsafe(
            self.layer.group_send(WAKE_GROUP, {"type": "dispatcher.wake"}), self.loop
        ).result(timeout=10)


_one_loop: OneLoop | None = None


def wake(way: str) -> None:
    """Commit a one-row update and wake the listener ``way``."""
    global _one_loop
    from django.db import connection, transaction
    from django.db.models import F

    from asgiref.sync import async_to_sync

    from automation.models import DispatcherState
    from automation.wake import dispatcher_wake_on_commit

    with transaction.atomic():
        DispatcherState.objects.filter(pk=1).update(is_paused=F("is_paused"))  # a write that changes nothing
        if way == "notify_in_transaction":
            with connection.cursor() as cursor:
                cursor.execute(f"NOTIFY {NOTIFY_CHANNEL}")
        elif way == "channel_layer_one_loop":
            _one_loop = _one_loop or OneLoop()
            transaction.on_commit(_one_loop.wake)
        elif way == "channel_layer":
            transaction.on_commit(lambda: async_to_sync(ChannelLayerWake.send)())
        else:
            dispatcher_wake_on_commit()


class ChannelLayerWake:
    @staticmethod
    async def send() -> None:
        from channels.layers import get_channel_layer

        from automation.wake import WAKE_GROUP

        await get_channel_layer().group_send(WAKE_GROUP, {"type": "dispatcher.wake"})


LISTENERS = {"conductor": "bench.wake_hop:listen_conductor",
             "channel_layer": "bench.wake_hop:listen_channel_layer",
             "channel_layer_one_loop": "bench.wake_hop:listen_channel_layer",
             "notify_in_transaction": "bench.wake_hop:listen_notify"}


def measure(way: str, wakes: int, every: float) -> tuple[list[float], list[float], int]:
    """Latencies (ms) from before each commit to the next wake, the committing thread's time (ms), and
    the sends no wake followed."""
    from automation.models import DispatcherState
    from tests.procs import started_in_processes

    DispatcherState.objects.get_or_create(pk=1)
    with tempfile.TemporaryDirectory() as folder:
        ready = Path(folder) / "ready"
        with started_in_processes(LISTENERS[way], [(str(ready), 60 + wakes * every * 2)]) as (pending,):
            while not ready.exists():
                time.sleep(0.05)
            time.sleep(0.5)  # the listener's first receive is under way
            sent, held = [], []
            for _ in range(wakes):
                started = time.monotonic_ns()
                wake(way)
                held.append((time.monotonic_ns() - started) / 1e6)
                sent.append(started)
                time.sleep(every)
            time.sleep(1)  # the last wake-ups on their way
            ready.unlink()
            woke = pending.get(timeout=120)
    # Each send's latency runs to the first wake after it: two sends whose wake-ups came while the
    # listener was still busy with the one before (a loaded machine) share one wake, as the
    # dispatcher's event does, and none is paired with an earlier send's wake.
    latencies = []
    for at in sent:
        if (n := bisect.bisect_left(woke, at)) < len(woke):
            latencies.append((woke[n] - at) / 1e6)
    return latencies, held, wakes - len(latencies)


def main() -> None:
    args = option_parser(__doc__, wakes=200, every=0.05).parse_args()
    setup_django(migrate=True)
    if database_engine() != "postgresql":
        raise SystemExit("LISTEN/NOTIFY needs PostgreSQL: set DATABASE_URL")
    print(f"database={database_engine()} layer={channel_layer_backend()} wakes={args.wakes} every_s={args.every:g}")
    for way in LISTENERS:
        latencies, held, lost = measure(way, args.wakes, args.every)
        print(f"wake {way} commit_to_wake_ms {summary(latencies, decimals=2)} "
              f"sender_held_ms {summary(held, decimals=2)} not_woken={lost}")


if __name__ == "__main__":
    main()
