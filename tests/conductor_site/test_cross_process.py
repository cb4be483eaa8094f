"""What several real processes share: the channel layer and the database."""

import asyncio
import time

import pytest
from channels.layers import channel_layers

from automation.models import AutomationTask, TaskEvent
from tests.procs import run_in_processes, started_in_processes

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

ECHOES = 20
IDLE_SECONDS = 11  # past redis-py 8's 5 s default read timeout


def test_messages_cross_processes_and_an_idle_receiver_still_receives():
    async def exchange(layer, me):
        ready = await asyncio.wait_for(layer.receive(me), timeout=60)
        peer = ready["channel"]
        replies = []
        for n in range(ECHOES):
            await layer.send(peer, {"type": "echo", "n": n, "reply_to": me})
            replies.append((await asyncio.wait_for(layer.receive(me), timeout=10))["n"])

        # Leave both receivers idle, then make sure the connection still works.
        receive = asyncio.ensure_future(layer.receive(me))
        await asyncio.sleep(IDLE_SECONDS)
        assert not receive.done()
        await layer.send(peer, {"type": "late", "after": IDLE_SECONDS, "reply_to": me})
        late = await asyncio.wait_for(receive, timeout=10)
        return replies, late

    layer = channel_layers.make_backend("default")
    me = asyncio.run(layer.new_channel())
    with started_in_processes("tests.conductor_site.workers:echo_peer", [(me, ECHOES)]) as (peer,):
        started = time.monotonic()
        replies, late = asyncio.run(exchange(layer, me))
        assert peer.get(timeout=30) == ECHOES

    assert replies == list(range(ECHOES))
    assert late == {"type": "late.reply", "after": IDLE_SECONDS}
    assert time.monotonic() - started >= IDLE_SECONDS


def test_concurrent_writers_in_several_processes_never_see_database_is_locked():
    writers, rows = 4, 60
    assert run_in_processes(
        "tests.conductor_site.workers:write_rows", [(n, rows) for n in range(writers)]
    ) == [rows] * writers
    assert AutomationTask.objects.count() == writers * rows
    assert TaskEvent.objects.count() == writers * rows * 4
