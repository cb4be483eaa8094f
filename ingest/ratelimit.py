"""Per-connection frame rate limit (SPEC §6, ``CONDUCTOR_MAX_FRAMES_PER_SECOND``)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class SlidingWindowLimiter:
    """At most ``limit`` events in any ``window`` seconds; refused events do not count."""

    def __init__(self, limit: int, window: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self.window = window
        self.clock = clock
        self._times: deque[float] = deque()

    def allow(self) -> bool:
        now = self.clock()
        while self._times and self._times[0] <= now - self.window:
            self._times.popleft()
        if len(self._times) >= self.limit:
            return False
        self._times.append(now)
        return True
