"""Functions that tests run in child processes (see tests/procs.py)."""

import asyncio
import random


def echo_peer(parent_channel: str, count: int) -> int:
    """Announce a channel to the parent, echo ``count`` messages back, then send one late message."""
    from channels.layers import channel_layers

    async def main() -> int:
        layer = channel_layers.make_backend("default")
        me = await layer.new_channel()
        await layer.send(parent_channel, {"type": "ready", "channel": me})
        for _ in range(count):
            message = await layer.receive(me)
            await layer.send(message["reply_to"], {"type": "echo.reply", "n": message["n"]})
        final = await layer.receive(me)
        await layer.send(final["reply_to"], {"type": "late.reply", "after": final["after"]})
        return count

    return asyncio.run(main())


def write_rows(writer: int, rows: int) -> int:
    """Create and finish ``rows`` tasks through the services, as a busy process would."""
    from automation.services import transitions as tr
    from automation.services.tasks import task_create
    from tests.factories import task_lease

    owner = f"writer-{writer}"
    rng = random.Random(writer)
    for n in range(rows):
        task, _ = task_create(kind="test.local", payload={"n": n}, actor=owner, now=1)
        lease = task_lease(task.pk, lease_owner=owner, lease_until=10**13, now=2).lease
        tr.task_start(task.pk, lease=lease, lease_until=10**13, now=3)
        if rng.random() < 0.5:
            tr.task_succeed(task.pk, lease=lease, result={"n": n}, now=4)
        else:
            tr.task_fail(task.pk, lease=lease, error="no", now=4)
    return rows


def doorbell_layer(fallback_seconds: float):
    """The embedded layer with pollers that poll only every ``fallback_seconds`` unless rung."""
    from django.conf import settings

    from conductor_site.channel_layer import DoorbellSQLiteChannelLayer

    return DoorbellSQLiteChannelLayer(
        database="channels", capacity=1000, expiry=60, doorbell_fallback_interval=fallback_seconds,
        symmetric_encryption_keys=settings.CHANNEL_LAYER_KEYS,
    )


def doorbell_echo(parent_channel: str, group: str, count: int, fallback_seconds: float) -> int:
    """Join ``group``, announce a channel to the parent, echo ``count`` messages (sent to the
    channel or to the group) back, on a layer whose receivers sleep ``fallback_seconds`` unless rung."""

    async def main() -> int:
        layer = doorbell_layer(fallback_seconds)
        me = await layer.new_channel()
        await layer.group_add(group, me)
        await layer.send(parent_channel, {"type": "ready", "channel": me})
        for _ in range(count):
            message = await layer.receive(me)
            await layer.send(parent_channel, {"type": "echo.reply", "n": message["n"]})
        return count

    return asyncio.run(main())


def doorbell_flood(parent_channel: str, sender: int, count: int, fallback_seconds: float) -> int:
    """Send ``count`` messages to the parent as fast as possible."""

    async def main() -> int:
        layer = doorbell_layer(fallback_seconds)
        for n in range(count):
            await layer.send(parent_channel, {"type": "flood", "sender": sender, "n": n})
        return count

    return asyncio.run(main())


def plain_send(channel: str, message: dict) -> None:
    """Send ``message`` with channels-lite's own layer (sealed with the installation's key), which rings no doorbell."""
    from channels_lite.layers.core import SQLiteChannelLayer
    from django.conf import settings

    layer = SQLiteChannelLayer(
        database="channels", capacity=1000, expiry=60, symmetric_encryption_keys=settings.CHANNEL_LAYER_KEYS
    )
    asyncio.run(layer.send(channel, message))
