"""Waking an executor that waits for a plugin's answer to its delivery request (``delivery_answer_wait``).

The answer is stored by whichever ASGI server holds the plugin's socket; the
executor waits in a dispatcher's task thread, in a django-q2 worker or in the
serve process, often another process. Once the answer commits,
``answers_wake_on_commit`` wakes its waiter: directly when it waits in this
process, else through the engine's wake-ups (``automation.wake``: a
``NOTIFY`` carrying the request ids on PostgreSQL, the channel layer
elsewhere). Each process hears them with one listener (``AnswerWaiters``),
started at its first wait and kept for its life, which sets the event of
each request id it has a waiter for and ignores the others.

A wake can be lost (a listener reconnecting, a channel full); the waiter
reads its request's row again every ``ANSWER_SAFETY_POLL_SECONDS`` all the
same, so a lost wake costs at most that.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import threading
from collections.abc import Collection, Iterator

from django.db import transaction

from automation.wake import WakeListener, WakeTopic, topic_listener, wake_send
from core.logfmt import log_event

logger = logging.getLogger(__name__)

ANSWER_WAKES = WakeTopic(notify_channel="conductor_delivery_answer", group="conductor-delivery-answer")
# Request ids per wake-up: 100 of at most 64 characters stay within NOTIFY's 8000 bytes.
IDS_PER_WAKE = 100


class AnswerWaiters:
    """The delivery requests this process's executors wait on, each with the event its answer sets."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starting = threading.Lock()
        self._events: dict[str, threading.Event] = {}
        self._listener: WakeListener | None = None
        # The process that started the listener: a forked child has no thread of its parent's.
        self._pid: int | None = None

    @contextlib.contextmanager
    def waiting(self, request_id: str) -> Iterator[threading.Event]:
        """Within the block, a wake-up for ``request_id`` sets the event yielded.

        The process's listener listens before the block starts, so an answer
        committed after the caller's next read of the row wakes it.
        """
        self._listen()
        event = threading.Event()
        with self._lock:
            self._events[request_id] = event
        try:
            yield event
        finally:
            with self._lock:
                if self._events.get(request_id) is event:
                    del self._events[request_id]

    def wake_here(self, request_id: str) -> bool:
        """Set the event of ``request_id``'s waiter in this process; False when none waits here."""
        with self._lock:
            event = self._events.get(request_id)
        if event is None:
            return False
        event.set()
        return True

    # --- the listener's receiver (automation.wake.WakeReceiver) --------------

    def heard(self, payload: str) -> None:
        for request_id in payload.split():
            self.wake_here(request_id)

    def missed(self) -> None:
        with self._lock:
            events = list(self._events.values())
        for event in events:
            event.set()

    # --- the listener ----------------------------------------------------------

    def _listen(self) -> None:
        # Held while the first wait starts the listener (a few milliseconds): the
        # waits beside it wait for it too. Its thread takes only ``_lock``.
        with self._starting:
            if self._listener is None or self._pid != os.getpid():
                self._listener, self._pid = topic_listener(ANSWER_WAKES, self).start(), os.getpid()

    def stop(self) -> None:
        """Stop the listener (a test's database is about to go); the next wait starts one again."""
        with self._starting:
            if self._listener is not None and self._pid == os.getpid():
                self._listener.stop()
            self._listener = None


answer_waiters = AnswerWaiters()


def answers_wake(*, request_ids: Collection[str]) -> None:
    """Wake the executors waiting for ``request_ids``' answers, here or in any other process.

    Best effort: a wake that cannot be sent is logged, and the waiter's safety
    poll reads the answer instead.
    """
    elsewhere = sorted(request_id for request_id in request_ids if not answer_waiters.wake_here(request_id))
    for batch in itertools.batched(elsewhere, IDS_PER_WAKE):
        try:
            wake_send(ANSWER_WAKES, " ".join(batch))
        except Exception:
            log_event(logger, "delivery_answer_wake_failed", level=logging.ERROR, exc_info=True,
                      requests=len(batch), detail="the waiters' safety poll reads the answers")


def answers_wake_on_commit(*, request_ids: Collection[str]) -> None:
    """Wake the waiters of ``request_ids`` once the current transaction commits (at once outside one)."""
    if request_ids:
        transaction.on_commit(functools.partial(answers_wake, request_ids=list(request_ids)))
