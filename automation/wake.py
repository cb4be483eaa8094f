"""Waking a running dispatcher loop across processes, through the channel layer.

Whatever makes tasks due calls ``dispatcher_wake_on_commit``: creating a task
(``task_create``, whoever calls it), an operator's approve or retry, resuming
a conversation or the dispatcher. The dispatcher loop (in a django-q2 worker)
listens with ``WakeListener`` and ticks at once instead of at its next
scheduled tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

from asgiref.sync import async_to_sync
from channels.layers import channel_layers, get_channel_layer
from django.db import transaction

from core.logfmt import log_event

logger = logging.getLogger(__name__)

WAKE_GROUP = "conductor-dispatcher-wake"


async def dispatcher_wake_async(layer=None) -> None:
    """Tell every running dispatcher loop that tasks just became due (from async code)."""
    await (layer or get_channel_layer()).group_send(WAKE_GROUP, {"type": "dispatcher.wake"})


def dispatcher_wake() -> None:
    """Tell the running dispatcher loop that due tasks were just committed.

    Best effort: when the channel layer is unreachable, the tasks wait for the
    next scheduled tick instead.
    """
    try:
        async_to_sync(dispatcher_wake_async)()
    except Exception:
        log_event(logger, "dispatcher_wake_failed", level=logging.ERROR, exc_info=True,
                  detail="the next tick claims the tasks")


# Set in a dispatcher's task threads: what they commit wakes that dispatcher.
_running_in = threading.local()


@contextlib.contextmanager
def wakes_go_to(event: threading.Event):
    """Within the block, this thread's wake-ups set ``event`` instead of crossing processes.

    A dispatcher runs each task (and its kind's follow-up, which may create
    the next task) in a thread of its own, and ticks again as soon as the
    task's thread sets its event: the round trip through the channel layer
    would only delay that. (A dispatcher that lost its run lease meanwhile
    does not tick; the loop that holds the lease claims the new task at its
    next tick.)
    """
    previous = getattr(_running_in, "event", None)
    _running_in.event = event
    try:
        yield
    finally:
        _running_in.event = previous


def dispatcher_wake_on_commit() -> None:
    """Wake the dispatcher once the current transaction commits (at once outside one).

    One wake per transaction however many tasks it creates: a wake already
    waiting for this transaction's commit is not queued again. (Django keeps
    the callbacks of the open transaction in ``connection.run_on_commit``,
    and drops those of a rolled-back savepoint, so a rollback never leaves a
    wake counted that will not happen.) In a dispatcher's task thread
    (``wakes_go_to``), the wake sets that dispatcher's event.
    """
    if (local := getattr(_running_in, "event", None)) is not None:
        transaction.on_commit(local.set)
        return
    connection = transaction.get_connection()
    if connection.in_atomic_block and any(
        callback is dispatcher_wake for _, callback, _ in connection.run_on_commit
    ):
        return
    transaction.on_commit(dispatcher_wake)


class WakeListener:
    """A thread that sets ``event`` whenever a wake-up arrives, until ``stop()``.

    It lives as long as the dispatcher loop, so it never times its receive
    out (a cancelled receive can drop the message it was taking); ``stop()``
    cancels it once. A lost channel layer (Redis restarted, say) is retried
    every ``RETRY_SECONDS``, and the group membership, which both layers
    expire after a day, is renewed every ``REJOIN_SECONDS``.
    """

    RETRY_SECONDS = 1.0
    REJOIN_SECONDS = 3600.0

    def __init__(self, event: threading.Event) -> None:
        self.event = event
        self.ready = threading.Event()
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._thread = threading.Thread(target=self._run, name="conductor-wake", daemon=True)

    def start(self) -> WakeListener:
        self._thread.start()
        self.ready.wait(10)
        return self

    def stop(self) -> None:
        self._stopping.set()
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(task.cancel)
        self._thread.join(10)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except asyncio.CancelledError:
            pass
        finally:
            self.ready.set()

    async def _main(self) -> None:
        self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        while not self._stopping.is_set():
            try:
                await self._listen()
            except Exception:
                log_event(logger, "dispatcher_wake_listener_failed", level=logging.ERROR, exc_info=True,
                          retry_seconds=self.RETRY_SECONDS)
                self.ready.set()  # ticks go on as scheduled meanwhile
                await asyncio.sleep(self.RETRY_SECONDS)

    async def _listen(self) -> None:
        # A layer of its own: layers bind to the event loop that receives on them.
        layer = channel_layers.make_backend("default")
        channel = await layer.new_channel()
        await layer.group_add(WAKE_GROUP, channel)
        self.ready.set()
        rejoin = asyncio.create_task(self._rejoin(layer, channel))
        try:
            while True:
                await layer.receive(channel)
                self.event.set()
        finally:
            rejoin.cancel()
            with contextlib.suppress(Exception):
                await layer.group_discard(WAKE_GROUP, channel)

    async def _rejoin(self, layer, channel: str) -> None:
        while True:
            await asyncio.sleep(self.REJOIN_SECONDS)
            try:
                await layer.group_add(WAKE_GROUP, channel)
            except Exception:
                log_event(logger, "dispatcher_wake_rejoin_failed", level=logging.ERROR, exc_info=True,
                          retry_seconds=self.REJOIN_SECONDS)
