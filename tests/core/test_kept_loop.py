"""``KeptLoop`` runs coroutines on one loop across calls; ``PerProcess`` makes one per process."""

import asyncio
import os

import pytest

from core.kept_loop import KeptLoop, PerProcess


def test_calls_share_one_loop_and_a_slow_one_is_cancelled_at_its_timeout():
    kept = KeptLoop("test-kept-loop")

    async def the_loop():
        return asyncio.get_running_loop()

    assert kept.run(the_loop(), timeout=5) is kept.run(the_loop(), timeout=5) is kept.loop
    cancelled = asyncio.Event()

    async def slow():
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(TimeoutError):
        kept.run(slow(), timeout=0.1)
    assert kept.run(asyncio.wait_for(cancelled.wait(), 5), timeout=6) is True


def test_a_forked_child_makes_its_own_and_does_not_see_its_parents():
    made = []
    held = PerProcess(lambda: made.append(os.getpid()) or object())
    parents = held.get()
    assert held.get() is parents and held.current() is parents
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        ok = held.current() is None and held.get() is not parents and held.get() is held.get()
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(child, 0)
    assert held.get() is parents and made == [os.getpid()]
