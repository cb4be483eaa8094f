"""At most one ``instruction.status`` per message per 200 ms on a socket, whichever process sent it (SPEC §6).

Each process coalesces its own changes (``ingest/panel/push.py``), but a
server and a worker that change the same message within one window each
send a frame. Every frame for a socket passes through its consumer, so the
socket paces them: a message's first frame goes at once; frames of the same
message within the window after it wait, and only the latest of them goes
at the window's end (the latest state wins).

Used from the socket's event loop only; time is ``clock``'s (seconds).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

Frame = dict[str, Any]


class StatusPacer:
    def __init__(
        self, send: Callable[[Frame], Awaitable[None]], *, window_seconds: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self.window_seconds = window_seconds
        self._clock = clock
        self._sent_at: dict[str, float] = {}  # message -> when its last frame went (within the window)
        self._waiting: dict[str, Frame] = {}  # message -> its latest frame not sent yet
        self._flusher: asyncio.Task | None = None

    async def push(self, message: str, frame: Frame) -> None:
        """Send ``frame`` of ``message`` now, or once a window has passed since its last one."""
        now = self._clock()
        self._forget(now)
        if message in self._waiting:
            self._waiting[message] = frame
            return
        if message not in self._sent_at:
            self._sent_at[message] = now
            await self._send(frame)
            return
        self._waiting[message] = frame
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())

    def close(self) -> None:
        """The socket is gone: what waits is dropped (its panel asks ``status.get`` when it comes back)."""
        if self._flusher is not None:
            self._flusher.cancel()
        self._waiting.clear()

    def _forget(self, now: float) -> None:
        """Drop the messages whose window is over and that have nothing waiting."""
        over = [m for m, at in self._sent_at.items() if at + self.window_seconds <= now and m not in self._waiting]
        for message in over:
            del self._sent_at[message]

    async def _flush(self) -> None:
        while self._waiting:
            due = min(self._sent_at[message] + self.window_seconds for message in self._waiting)
            await asyncio.sleep(max(0.0, due - self._clock()))
            now = self._clock()
            for message in [m for m in self._waiting if self._sent_at[m] + self.window_seconds <= now]:
                frame = self._waiting.pop(message)
                self._sent_at[message] = now
                await self._send(frame)
