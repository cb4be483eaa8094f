"""What a closed socket leaves behind, cleaned up in parts that cannot skip each other.

Three things outlive a socket unless it removes them: its places in its
client's and its owner's channel-layer groups, its client's presence, and the delivery
requests it was sent and did not answer. Each is its own step with its own
retries and its own log line, and the group step runs beside the database
steps: a channel layer out of connections (a burst of closes on Redis) must
not leave the client looking connected, and a database that does not answer
must not leave the socket in its group.

What a step that still fails leaves behind goes on its own: presence expires
after twice the ping interval, a group entry when the layer's group expiry
passes, and an unanswered request when its executor's timeout runs out.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from channels.db import database_sync_to_async

from core.logfmt import log_event
from ingest.models import plugin_group_name
from ingest.services import clients
from ingest.services.deliveries import delivery_requests_abandon

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Pauses between a step's tries: three tries within about a second and a half,
# well inside the ping interval a presence would otherwise linger for.
RETRY_PAUSES_SECONDS: Sequence[float] = (0.25, 1.0)

# Marks a step that failed for good: its result is unknown.
FAILED = object()


async def with_retries(
    step: str, operation: Callable[[], Awaitable[T]], *, pauses: Sequence[float] = RETRY_PAUSES_SECONDS,
    **fields: Any,
) -> T | Any:
    """``operation``'s result, tried once and again after each of ``pauses``; ``FAILED`` if every try raised.

    Each failed try is logged (``socket_clean_up_failed`` with the step and
    the try's number, and ``fields``); the last one with its traceback.
    """
    tries = len(pauses) + 1
    for attempt in range(1, tries + 1):
        try:
            return await operation()
        except Exception:
            is_last = attempt == tries
            log_event(
                logger, "socket_clean_up_failed", level=logging.ERROR if is_last else logging.WARNING,
                exc_info=is_last, step=step, attempt=attempt, tries=tries, **fields,
                next_try_s=None if is_last else pauses[attempt - 1],
            )
            if is_last:
                return FAILED
            await asyncio.sleep(pauses[attempt - 1])
    return FAILED  # not reached: the loop returns


class BatchedStep:
    """One clean-up step for every socket of an event loop, run in batches on the database thread.

    The database thread is shared by every socket of the process: a burst of
    300 closes, each paying its own statements there in turn, used to outlast
    daphne's ten seconds for an application to end, and the sockets still in
    the queue were killed with their clients marked connected. Here the
    sockets that close while a batch runs go together in the next one, as
    final messages do (``ingest.batching``).

    ``run(items)`` is the step's service, taking a batch and returning what
    each item's caller reads from it (``result_of(returned, item)``); a batch
    is tried as ``with_retries`` tries, and gives ``FAILED`` to each of its
    items when no try worked.
    """

    max_batch = 256

    def __init__(self, step: str, run: Callable[[list], Any], result_of: Callable[[Any, Any], Any]) -> None:
        self.step, self._run, self._result_of = step, run, result_of
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list] = weakref.WeakKeyDictionary()
        self._workers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task] = (
            weakref.WeakKeyDictionary()
        )

    async def __call__(self, item, *, client_id: str | None) -> Any:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self._queues.setdefault(loop, []).append((item, client_id, done))
        worker = self._workers.get(loop)
        if worker is None or worker.done():
            self._workers[loop] = asyncio.ensure_future(self._drain(loop))
        # Shielded: a socket whose task is cancelled while it waits leaves its
        # item in the batch, which runs all the same.
        return await asyncio.shield(done)

    async def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        queue = self._queues[loop]
        while queue:
            batch, queue[:] = queue[: self.max_batch], queue[self.max_batch :]
            items = [item for item, _, _ in batch]
            returned = await with_retries(
                self.step, lambda: database_sync_to_async(self._run)(items),
                client_id=batch[0][1] if len(batch) == 1 else None, sockets=len(batch),
            )
            for item, _, done in batch:
                if not done.done():
                    done.set_result(FAILED if returned is FAILED else self._result_of(returned, item))


clear_presence = BatchedStep(
    "presence",
    lambda sockets: clients.plugin_clients_disconnect(sockets=sockets),
    # Whether the socket was still its client's: the client is gone now.
    lambda gone, socket: socket[0] in gone,
)
abandon_requests = BatchedStep(
    "delivery_requests",
    lambda client_pks: delivery_requests_abandon(
        client_pks=set(client_pks), reason="the plugin disconnected before answering"
    ),
    lambda abandoned, client_pk: abandoned,
)


async def socket_clean_up(
    *, layer, client_pk: int, client_id: str | None, channel_name: str, groups: Sequence[str] = ()
) -> None:
    """Remove what the socket ``channel_name`` of client ``client_pk`` leaves behind (see the module docstring).

    ``groups``: the groups it is in besides its client's (its owner's).
    """

    def leave(group: str) -> Callable[[], Awaitable[None]]:
        return lambda: layer.group_discard(group, channel_name)

    async def leave_groups() -> None:
        # One after the other, each with its own tries: a burst of closes asks
        # the layer for no more connections at once than one group each would.
        for group in (plugin_group_name(client_pk), *groups):
            await with_retries("group", leave(group), client_id=client_id, group=group)

    async def clear_presence_and_requests() -> None:
        was_current = await clear_presence((client_pk, channel_name), client_id=client_id)
        if was_current is False:
            # A newer socket of the client took over: the requests are its to answer.
            return
        # Nobody is left to answer what this socket was sent: its executors
        # retry later instead of waiting out their timeout. When the presence
        # step failed it is not known whether a newer socket took over; the
        # requests are abandoned all the same, which costs at worst a retry.
        await abandon_requests(client_pk, client_id=client_id)

    await asyncio.gather(
        leave_groups(),
        clear_presence_and_requests(),
    )
