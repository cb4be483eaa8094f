"""What a closed socket leaves behind, cleaned up in parts that cannot skip each other.

Three things outlive a socket unless it removes them: its place in its
client's channel-layer group, its client's presence, and the delivery
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
    step: str, operation: Callable[[], Awaitable[T]], *, client_id: str | None,
    pauses: Sequence[float] = RETRY_PAUSES_SECONDS,
) -> T | Any:
    """``operation``'s result, tried once and again after each of ``pauses``; ``FAILED`` if every try raised.

    Each failed try is logged (``socket_clean_up_failed`` with the step and
    the try's number); the last one with its traceback.
    """
    tries = len(pauses) + 1
    for attempt in range(1, tries + 1):
        try:
            return await operation()
        except Exception:
            is_last = attempt == tries
            log_event(
                logger, "socket_clean_up_failed", level=logging.ERROR if is_last else logging.WARNING,
                exc_info=is_last, client_id=client_id, step=step, attempt=attempt, tries=tries,
                next_try_s=None if is_last else pauses[attempt - 1],
            )
            if is_last:
                return FAILED
            await asyncio.sleep(pauses[attempt - 1])
    return FAILED  # not reached: the loop returns


async def socket_clean_up(*, layer, client_pk: int, client_id: str | None, channel_name: str) -> None:
    """Remove what the socket ``channel_name`` of client ``client_pk`` leaves behind (see the module docstring)."""

    async def leave_group() -> None:
        await layer.group_discard(plugin_group_name(client_pk), channel_name)

    async def clear_presence_and_requests() -> None:
        was_current = await with_retries(
            "presence",
            lambda: database_sync_to_async(clients.plugin_client_disconnect)(
                client_pk=client_pk, channel_name=channel_name
            ),
            client_id=client_id,
        )
        if was_current is False:
            # A newer socket of the client took over: the requests are its to answer.
            return
        # Nobody is left to answer what this socket was sent: its executors
        # retry later instead of waiting out their timeout. When the presence
        # step failed it is not known whether a newer socket took over; the
        # requests are abandoned all the same, which costs at worst a retry.
        await with_retries(
            "delivery_requests",
            lambda: database_sync_to_async(delivery_requests_abandon)(
                client_pk=client_pk, reason="the plugin disconnected before answering"
            ),
            client_id=client_id,
        )

    await asyncio.gather(
        with_retries("group", leave_group, client_id=client_id),
        clear_presence_and_requests(),
    )
