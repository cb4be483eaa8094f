"""Waking a running dispatcher loop across processes, through the channel layer.

Ingest (in the ASGI server) calls ``dispatcher_wake`` after committing new
tasks; the dispatcher run (in a django-q2 worker) listens with ``WakeListener``
and ticks at once instead of at its next scheduled tick.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from asgiref.sync import async_to_sync
from channels.layers import channel_layers, get_channel_layer

logger = logging.getLogger(__name__)

WAKE_GROUP = "conductor-dispatcher-wake"


async def dispatcher_wake_async(layer=None) -> None:
    """Tell every running dispatcher loop that tasks just became due (from async code)."""
    await (layer or get_channel_layer()).group_send(WAKE_GROUP, {"type": "dispatcher.wake"})


def dispatcher_wake() -> None:
    """Tell every running dispatcher loop that due tasks were just committed.

    Best effort: when the channel layer is unreachable, the tasks wait for the
    next scheduled tick instead.
    """
    try:
        async_to_sync(dispatcher_wake_async)()
    except Exception:
        logger.exception("could not wake the dispatcher; the next tick will claim the tasks")


class WakeListener:
    """A thread that sets ``event`` whenever a wake-up arrives, until ``stop()``."""

    # How often the listener looks up from its channel to see whether to stop.
    POLL_SECONDS = 0.5

    def __init__(self, event: threading.Event) -> None:
        self.event = event
        self.ready = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="conductor-wake", daemon=True)

    def start(self) -> WakeListener:
        self._thread.start()
        self.ready.wait(10)
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(10)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:
            logger.exception("the dispatcher's wake-up listener stopped; ticks go on as scheduled")
        finally:
            self.ready.set()

    async def _main(self) -> None:
        # A layer of its own: layers bind to the event loop that receives on them.
        layer = channel_layers.make_backend("default")
        channel = await layer.new_channel()
        await layer.group_add(WAKE_GROUP, channel)
        self.ready.set()
        try:
            while not self._stopping.is_set():
                try:
                    await asyncio.wait_for(layer.receive(channel), timeout=self.POLL_SECONDS)
                except TimeoutError:
                    continue
                self.event.set()
        finally:
            await layer.group_discard(WAKE_GROUP, channel)
