"""An event loop kept running in a thread of its own, one per process, for synchronous callers.

``async_to_sync`` outside an event loop starts a new loop for each call, and
what lives on a loop (channels_redis's connections, an MCP server's session)
dies with it. A ``KeptLoop`` runs for the life of the process instead, so
those stay open between calls. ``PerProcess`` holds one of them (or of
anything else that owns a thread): a forked child, a django-q2 worker, has
none of its parent's threads, so it makes its own.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class KeptLoop:
    """An event loop running in a daemon thread named ``name`` for the life of the process."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name=name, daemon=True).start()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Start ``coroutine`` on the loop; its future is the caller's to wait on."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T], *, timeout: float) -> T:
        """Run ``coroutine`` on the loop and wait up to ``timeout`` seconds; past it, cancel it and
        raise ``TimeoutError``."""
        future = self.submit(coroutine)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise


class PerProcess(Generic[T]):
    """One ``make()`` per process, made on first use; a forked child makes its own."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._held: tuple[int, T] | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        with self._lock:
            if self._held is None or self._held[0] != os.getpid():
                self._held = (os.getpid(), self._make())
            return self._held[1]

    def current(self) -> T | None:
        """This process's one, or None when it has made none (a parent's does not count)."""
        held = self._held
        return held[1] if held is not None and held[0] == os.getpid() else None
