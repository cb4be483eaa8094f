"""The Redis channel layer's pool (conductor_site/redis_layer.py): a burst waits for connections instead of failing."""

import asyncio
import os

import pytest
from redis.asyncio import BlockingConnectionPool

from conductor_site.layer_messages import channel_layer_keys
from conductor_site.redis_layer import SealedRedisChannelLayer

KEYS = channel_layer_keys("test key")


def layer(address: str, **host) -> SealedRedisChannelLayer:
    return SealedRedisChannelLayer(
        hosts=[{"address": address, **host}], prefix="conductor-pool-test", symmetric_encryption_keys=KEYS
    )


def test_the_pool_is_a_blocking_one_of_the_configured_size():
    pool = layer("redis://:secret@redis.invalid:6379/3", max_connections=7, pool_timeout=4).create_pool(0)
    assert isinstance(pool, BlockingConnectionPool)
    assert (pool.max_connections, pool.timeout) == (7, 4)
    assert pool.connection_kwargs["password"] == "secret"


def test_the_settings_size_the_pool_from_conductor_redis_max_connections(settings):
    if not settings.REDIS_URL:
        pytest.skip("the Redis layer is configured only with REDIS_URL")
    host = settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]
    assert host["max_connections"] == settings.CONDUCTOR_REDIS_MAX_CONNECTIONS


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis (REDIS_URL)")
def test_three_hundred_group_discards_at_once_through_ten_connections_all_succeed():
    """What failed with MaxConnectionsError in 200 of 300 socket clean-ups on channels_redis's own pool."""
    small = layer(os.environ["REDIS_URL"], max_connections=10)

    async def burst():
        channels = [await small.new_channel() for _ in range(300)]
        await asyncio.gather(*(small.group_add(f"burst-{n}", channel) for n, channel in enumerate(channels)))
        await asyncio.gather(*(small.group_discard(f"burst-{n}", channel) for n, channel in enumerate(channels)))
        await small.flush()

    asyncio.run(burst())


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis (REDIS_URL)")
def test_sends_from_synchronous_code_share_one_kept_connection():
    """A dispatcher's task thread sends each delivery from the process's kept loop: no new connection per send.

    Through ``async_to_sync`` each send ran on a new event loop, and channels_redis
    keeps its connections per loop: 20 sends opened 20 connections.
    """
    import redis

    from core import layer_send

    sender = layer(os.environ["REDIS_URL"])
    assert sender.sends_from_a_kept_loop
    received = []

    async def receive_all():
        channel = await receiver.new_channel()
        await receiver.group_add("kept-loop", channel)
        ready.set()
        while len(received) < 21:
            received.append(await receiver.receive(channel))

    import threading

    receiver, ready = layer(os.environ["REDIS_URL"]), threading.Event()
    listening = threading.Thread(target=asyncio.run, args=(receive_all(),))
    listening.start()
    assert ready.wait(10)
    server = redis.Redis.from_url(os.environ["REDIS_URL"])
    layer_send.group_send("kept-loop", {"type": "test.message", "n": -1}, layer=sender)  # the loop's first connection
    opened_before = server.info("stats")["total_connections_received"]
    for n in range(20):
        layer_send.group_send("kept-loop", {"type": "test.message", "n": n}, layer=sender)
    opened = server.info("stats")["total_connections_received"] - opened_before
    listening.join(10)
    assert [message["n"] for message in received] == list(range(-1, 20))
    assert opened <= 2  # the kept loop's connection came back to its pool each time
