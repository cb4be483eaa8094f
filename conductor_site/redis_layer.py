"""The channel layer on Redis: channels_redis's, with sealed messages and a pool that waits.

- Sealed messages (``conductor_site.layer_messages``): a message written to
  Redis without the installation's key is dropped by the receiving process,
  never dispatched to a consumer.
- A pool that waits: channels_redis gives each event loop one redis-py pool
  per host, which fails at once with ``MaxConnectionsError`` when a burst of
  calls (300 sockets closing together, each leaving its group) asks for more
  than ``max_connections`` connections. Here the pool is redis-py's
  ``BlockingConnectionPool``: a call past the limit waits up to
  ``pool_timeout`` seconds for a connection to come back instead. Size
  ``max_connections`` for the sockets one server holds (docs/operations.md).
- Sent on from one kept event loop by synchronous code
  (``core.layer_send``), rather than a new loop, and so a new connection,
  per send.
"""

from __future__ import annotations

import contextlib
import functools

from channels_redis.core import RedisChannelLayer
from redis.asyncio import BlockingConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError

from conductor_site.layer_messages import RefusesForgedMessages


class SealedRedisChannelLayer(RefusesForgedMessages, RedisChannelLayer):
    # channels_redis keeps a pool per event loop: synchronous code sends from
    # one loop a process keeps, and its connections stay open (core.layer_send).
    sends_from_a_kept_loop = True

    async def receive_single(self, channel):
        # channels_redis reads a message, then decodes it; a message that
        # cannot be opened is already taken off Redis, so the next one is read.
        return await self._skipping_refused(functools.partial(super().receive_single, channel))

    async def _clean_receive_backup(self, index, channel):
        # channels_redis runs this in a task nobody awaits, so a Redis that went away
        # meanwhile ends in "Task exception was never retrieved" and a traceback. The
        # backup it trims is of a message already handed over, and expires by itself.
        with contextlib.suppress(RedisError, OSError):
            await super()._clean_receive_backup(index, channel)

    def create_pool(self, index):
        host = dict(self.hosts[index])
        if "address" not in host:
            return super().create_pool(index)  # Sentinel or host/port entries: channels_redis's own pools
        address = host.pop("address")
        host.setdefault("max_connections", 100)
        # A connection the pool kept across a Redis restart fails on its next
        # use: the call is tried again on a fresh one rather than failing (a
        # process's sends share its pool, core.layer_send).
        host.setdefault("retry", Retry(ExponentialBackoff(cap=1.0, base=0.05), 3))
        host["timeout"] = host.pop("pool_timeout", 20)
        return BlockingConnectionPool.from_url(address, **host)
