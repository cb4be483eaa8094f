"""Group commit of final messages: those that arrive while a batch is being stored go together in the next.

A process stores final messages one batch at a time, on the database thread
that every socket of the process shares (``database_sync_to_async``). Frames
that arrive meanwhile, from any socket, wait in this queue and are stored by
the next batch, in one transaction (``final_messages_ingest``): under load a
batch holds many messages and its commit, wake-up and statements are paid
once for them all; when idle a batch holds one message and waits for nothing.
Each frame's future gives what its ack needs once its batch has committed.
"""

from __future__ import annotations

import asyncio
import weakref

from channels.db import database_sync_to_async

from ingest.services.messages import ClientMessage, IngestResult, final_messages_ingest

# At most this many messages in one transaction; more wait for the next.
MAX_BATCH = 64


class FinalMessageQueue:
    """The final messages waiting to be stored, and the task storing them; one per event loop."""

    def __init__(self) -> None:
        self._waiting: list[tuple[ClientMessage, asyncio.Future[IngestResult]]] = []
        self._storing: asyncio.Task | None = None

    @property
    def waiting(self) -> int:
        """How many messages wait for the next batch."""
        return len(self._waiting)

    def submit(self, arrival: ClientMessage) -> asyncio.Future[IngestResult]:
        """Queue ``arrival``; the future gives its result once committed, or the error that kept it out."""
        stored: asyncio.Future[IngestResult] = asyncio.get_running_loop().create_future()
        self._waiting.append((arrival, stored))
        if self._storing is None or self._storing.done():
            self._storing = asyncio.ensure_future(self._store_waiting())
        return stored

    async def _store_waiting(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            try:
                results = await database_sync_to_async(final_messages_ingest)(
                    arrivals=[arrival for arrival, _ in batch]
                )
            except Exception as exc:  # the database thread could not even start (its connection)
                results = [exc] * len(batch)
            for (_, stored), result in zip(batch, results, strict=True):
                if stored.done():  # its socket closed and stopped waiting
                    continue
                if isinstance(result, Exception):
                    stored.set_exception(result)
                else:
                    stored.set_result(result)


_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FinalMessageQueue] = weakref.WeakKeyDictionary()


def final_message_queue() -> FinalMessageQueue:
    """The queue of the running event loop (a test's loop gets its own)."""
    loop = asyncio.get_running_loop()
    if loop not in _queues:
        _queues[loop] = FinalMessageQueue()
    return _queues[loop]
