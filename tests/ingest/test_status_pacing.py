"""A socket passes on at most one ``instruction.status`` per message per window, the latest (SPEC §6)."""

import asyncio

from ingest.panel.pacing import StatusPacer

WINDOW = 0.05


def pacer_and_sent():
    sent = []

    async def send(frame):
        sent.append(frame)

    return StatusPacer(send, window_seconds=WINDOW), sent


async def test_a_message_s_first_frame_goes_at_once_and_the_latest_of_the_window_at_its_end():
    pacer, sent = pacer_and_sent()
    await pacer.push("1", {"n": 1})
    assert sent == [{"n": 1}]
    for n in (2, 3, 4):  # from two processes, say, within the window
        await pacer.push("1", {"n": n})
    assert sent == [{"n": 1}]
    await asyncio.sleep(WINDOW * 3)
    assert sent == [{"n": 1}, {"n": 4}]
    await asyncio.sleep(WINDOW * 2)
    await pacer.push("1", {"n": 5})  # a window later: at once again
    assert sent[-1] == {"n": 5}


async def test_messages_are_paced_each_on_its_own():
    pacer, sent = pacer_and_sent()
    await pacer.push("1", {"m": 1})
    await pacer.push("2", {"m": 2})
    await pacer.push("1", {"m": 1, "later": True})
    assert sent == [{"m": 1}, {"m": 2}]
    await asyncio.sleep(WINDOW * 3)
    assert sent == [{"m": 1}, {"m": 2}, {"m": 1, "later": True}]


async def test_a_closed_socket_sends_nothing_that_waited():
    pacer, sent = pacer_and_sent()
    await pacer.push("1", {"n": 1})
    await pacer.push("1", {"n": 2})
    pacer.close()
    await asyncio.sleep(WINDOW * 3)
    assert sent == [{"n": 1}]
