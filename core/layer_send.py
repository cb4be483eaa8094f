"""Sending on the channel layer from synchronous code (a dispatcher's task thread, a service).

``async_to_sync`` outside an event loop starts a new loop for each call, and
channels_redis keeps its connections per loop: each send from a dispatcher's
task would connect to Redis anew, about 5 ms more per delivery
(``bench/wake_hop.py``). A layer that can be sent on from any event loop says
so with ``sends_from_a_kept_loop``; it is sent on from one event loop per
process, in a thread of its own (``core.kept_loop``), whose connections stay open. Other layers
(the embedded one, whose database calls must run on the calling thread's
executor) are sent on through ``async_to_sync`` as before, and so is any
layer when the caller is itself inside ``sync_to_async`` under an event loop
(an ASGI server), where ``async_to_sync`` already uses that loop.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from asgiref.sync import SyncToAsync, async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections

from core.kept_loop import KeptLoop, PerProcess

# How long a send may take before the caller gives up on it (the Redis
# layer's own pool waits up to 20 s for a connection).
SEND_TIMEOUT_SECONDS = 30.0


_kept = PerProcess(lambda: KeptLoop("conductor-layer-send"))


def _under_an_event_loop() -> bool:
    """True in a thread ``sync_to_async`` runs, whose caller's loop ``async_to_sync`` would use."""
    local = SyncToAsync.threadlocal
    loop = getattr(local, "main_event_loop", None)
    # A thread that once ran under a loop keeps the (closed) loop in its threadlocal.
    return loop is not None and loop.is_running() and getattr(local, "main_event_loop_pid", None) == os.getpid()


class ChannelLayerUnavailable(Exception):
    """The channel layer did not take a message: Redis refused, reset or timed out, the embedded
    layer's database was busy, or the layer was full. A part of the server, not the message's fault:
    trying again later is the answer (the dispatcher waits for the part, SPEC §4)."""


# What a mistake in the caller's own message raises: passed up as it is, never taken for an outage.
_CALLER_ERRORS = (TypeError, ValueError, AttributeError, KeyError)


def group_send(group: str, message: dict[str, Any], *, layer=None) -> None:
    """Send ``message`` to ``group`` on the channel layer, waiting until it is sent.

    Raises ``ChannelLayerUnavailable`` when the layer does not take it.
    """
    layer = layer or get_channel_layer()
    try:
        if getattr(layer, "sends_from_a_kept_loop", False) and not _under_an_event_loop():
            _kept.get().run(layer.group_send(group, message), timeout=SEND_TIMEOUT_SECONDS)
        else:
            async_to_sync(layer.group_send)(group, message)
    except _CALLER_ERRORS:
        raise
    except Exception as exc:
        raise ChannelLayerUnavailable(f"{type(exc).__name__}: {exc}") from exc


def first_line_of(exc: Exception) -> str:
    """An error's first line (its type's name when it has no text), to show without a traceback."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# How long a probe waits for Redis before calling the channel layer unreachable.
REDIS_PROBE_SECONDS = 2.0


@functools.cache
def _redis():
    import redis

    return redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=REDIS_PROBE_SECONDS, socket_timeout=REDIS_PROBE_SECONDS,
    )


def channel_layer_error() -> str | None:
    """Why the channel layer does not answer (Redis, or the embedded layer's database), or None when it does."""
    try:
        if settings.REDIS_URL:
            _redis().ping()
        else:
            with connections["channels"].cursor() as cursor:
                cursor.execute("SELECT 1")
    except Exception as exc:  # whatever the client raises: the part does not answer
        return f"{type(exc).__name__}: {first_line_of(exc)}"
    return None
