"""A burst of dropped sockets leaves no ghost clients (ingest/cleanup.py), against a running server.

On Redis, 300 sockets dropped at once used to leave 200 clients looking
connected for the presence window (40 s): their clean-ups failed with
``MaxConnectionsError`` in ``group_discard`` and skipped presence with it.
Runs in both configurations (embedded, and PostgreSQL + Redis in CI).
"""

import asyncio
import json
import time

import pytest
import requests
from websockets.asyncio.client import connect

from ingest.models import PluginClient
from tests.factories import TEST_TOKEN, PluginClientFactory
from tests.server import running_server

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

SOCKETS = 300
CONNECTING_AT_ONCE = 20  # as browsers coming back after a restart: not all at the same instant
SETTLE_SECONDS = 5


def connected_clients(server) -> int:
    return requests.get(f"{server.base_url}/healthz", timeout=10).json()["connected_clients"]


async def say_hello(url: str, client_id: str):
    ws = await connect(url, open_timeout=60, max_queue=None)
    await ws.send(json.dumps({"type": "hello", "client_id": client_id, "token": TEST_TOKEN}))
    reply = json.loads(await asyncio.wait_for(ws.recv(), 60))
    assert reply["type"] == "hello.ok", reply
    return ws


async def hold_then_drop(server, client_ids: list[str]) -> list[tuple[float, int]]:
    """Connect every client, drop all their sockets at once (no close frame), then poll /healthz.

    Returns (seconds since the drop, connected clients) at each poll, until 0 or SETTLE_SECONDS.
    """
    sockets = []
    for start in range(0, len(client_ids), CONNECTING_AT_ONCE):
        batch = client_ids[start : start + CONNECTING_AT_ONCE]
        sockets += await asyncio.gather(*(say_hello(server.ws_url, client_id) for client_id in batch))
    assert await asyncio.to_thread(connected_clients, server) == len(client_ids)

    for ws in sockets:
        ws.transport.abort()  # a reset, as a killed browser or a lost network leaves it
    dropped = time.monotonic()
    seen = []
    while True:
        count = await asyncio.to_thread(connected_clients, server)
        seen.append((round(time.monotonic() - dropped, 2), count))
        if count == 0 or time.monotonic() - dropped > SETTLE_SECONDS:
            return seen
        await asyncio.sleep(0.25)


def test_three_hundred_sockets_dropped_at_once_leave_no_client_connected_within_five_seconds(
    django_db_setup, django_db_blocker, tmp_path
):
    clients = PluginClientFactory.create_batch(SOCKETS)
    with running_server(tmp_path) as server:
        seen = asyncio.run(hold_then_drop(server, [client.client_id for client in clients]))
        log = server.log()

    assert seen[-1][1] == 0, f"connected clients after the drop (seconds, count): {seen}"
    assert seen[-1][0] <= SETTLE_SECONDS
    print(f"connected clients after the drop (seconds, count): {seen}")
    assert not PluginClient.objects.filter(connected=True).exists()
    assert "step=group attempt=3" not in log, "a socket's group clean-up failed for good"
    assert groups_left_in_redis(clients) == 0


def groups_left_in_redis(clients) -> int:
    """How many of the clients' groups still hold a channel on Redis (0 on the embedded layer, not read)."""
    from django.conf import settings

    if not settings.REDIS_URL:
        return 0
    import redis

    prefix = settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
    with redis.Redis.from_url(settings.REDIS_URL) as connection:
        return sum(connection.zcard(f"{prefix}:group:{client.group_name}") > 0 for client in clients)
