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

    owner = f"writer-{writer}"
    rng = random.Random(writer)
    for n in range(rows):
        task, _ = task_create(kind="test.local", payload={"n": n}, actor=owner, now=1)
        tr.task_lease(task.pk, lease_owner=owner, lease_until=10**13, now=2)
        tr.task_start(task.pk, lease_owner=owner, lease_until=10**13, now=3)
        if rng.random() < 0.5:
            tr.task_succeed(task.pk, lease_owner=owner, result={"n": n}, now=4)
        else:
            tr.task_fail(task.pk, lease_owner=owner, error="no", now=4)
    return rows
