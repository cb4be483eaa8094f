"""``instruction.status``: telling the person in the chat what became of each block, as it happens (SPEC §6).

Every committed change of a block's task or of a message's delivery
(``automation.changes``) and every stored message with blocks marks its
message here. Nothing is read in the committing thread: the dispatcher's
hot path pays a dict update for it, no statement. A thread of each process
(``StatusPush``) then reads the marked messages' statuses together, after
the commit, so the frame says the state as it is then (the latest state
wins), and sends one frame per message to the sockets of its conversation's
owner that look at that conversation (their side panel asked ``status.get``
for it: the group ``plugin_view_group_name``), never to another owner's; every
socket of the owner gets the owner's approvals count, which it passes on as
``approvals.waiting`` only when it changed for it. Nobody looking costs one
statement a round and no frame.

Coalescing: a message is sent at most once per ``window_seconds`` (200 ms)
by a process. Its first change goes at once; changes within the window
after a frame go together at the window's end. Two processes that change
the same message in the same window (a server and a worker) may each send
one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from django.db import OperationalError, close_old_connections, connections

from automation.models import AutomationTask
from core import layer_send
from core.logfmt import log_event
from ingest.panel import selectors
from ingest.models import plugin_owner_group_name, plugin_view_group_name
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 0.2
# How long the thread keeps its database connection after its last round.
IDLE_CLOSE_SECONDS = 5.0
# The kinds whose changes a message status shows.
STATUS_KINDS = frozenset({INSTRUCTION_EXECUTE, INSTRUCTION_DELIVER})
# The channel-layer message a socket turns into its frame (PluginConsumer.plugin_status).
LAYER_TYPE = "plugin.status"
# The one carrying an owner's approvals count (PluginConsumer.plugin_approvals).
APPROVALS_LAYER_TYPE = "plugin.approvals"

Send = Callable[[str, dict], None]


def status_frame(item: selectors.StatusOfMessage, *, approvals_waiting: int) -> dict:
    return {
        "type": "instruction.status",
        "platform": item.platform,
        "conversation_id": item.conversation_id,
        "message": item.status,
        "approvals_waiting": approvals_waiting,
    }


def statuses_send(message_ids: Iterable[int], *, send: Send = layer_send.group_send) -> int:
    """Read the statuses of ``message_ids`` and send each to the sockets looking at its conversation, and each
    owner's count to all its sockets; return the status frames sent.

    Messages whose owner has no plugin connected are not read past the first
    statement, nor those no client looks at (``statuses_to_push``). A
    socket passes the count on only when it changed for it
    (``PluginConsumer.plugin_approvals``).
    """
    ids = sorted(set(message_ids))
    if not ids:
        return 0
    round_ = selectors.statuses_to_push(message_ids=ids)
    for item in round_.statuses:
        send(plugin_view_group_name(item.owner, item.platform, item.conversation_id), {
            "type": LAYER_TYPE, "frame": status_frame(item, approvals_waiting=item.approvals_waiting or 0),
        })
    for owner, count in round_.approvals.items():
        send(plugin_owner_group_name(owner), {"type": APPROVALS_LAYER_TYPE, "count": count})
    return len(round_.statuses)


def _is_exiting(exc: Exception) -> bool:
    """Whether ``exc`` says the process is exiting: its channel layer's sends take nothing more.

    ``concurrent.futures`` refuses new work once the interpreter's exit has
    begun (before the main thread counts as stopped), with this message.
    """
    return not threading.main_thread().is_alive() or (
        isinstance(exc, RuntimeError) and "interpreter shutdown" in str(exc)
    )


class StatusPush:
    """Messages marked as changed, sent by a thread of this process within ``window_seconds`` of each other.

    ``mark`` is what the committing thread calls; it only notes the ids and
    wakes the thread. The thread waits until the earliest message is due,
    sends every message due, and closes its database connection once no
    round came for ``IDLE_CLOSE_SECONDS`` (it may sit idle for hours).
    """

    def __init__(
        self, *, window_seconds: float = WINDOW_SECONDS, send_due: Callable[[list[int]], object] = statuses_send,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_seconds = window_seconds
        self.send_due = send_due
        self.clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._due: dict[int, float] = {}  # message id -> when it may be sent
        self._sent_at: dict[int, float] = {}  # message id -> when it was last sent (within the window)
        self._thread: threading.Thread | None = None
        self._pid: int | None = None
        self._is_stopping = False
        self._retried: set[int] = set()  # messages whose round failed once (retried once, then left)

    def mark(self, message_ids: Iterable[int]) -> None:
        """Note that ``message_ids`` changed; the thread sends them when due. Reads nothing."""
        if not self.schedule(message_ids):
            return
        with self._lock:
            # A forked child (a django-q2 worker) has no thread of its parent's.
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="conductor-status-push", daemon=True)
                self._thread.start()
        self._wake.set()

    def schedule(self, message_ids: Iterable[int]) -> bool:
        """Make each message due now, or a window after it was last sent; return whether any is waiting."""
        now = self.clock()
        with self._lock:
            for message_id in message_ids:
                if message_id not in self._due:
                    self._due[message_id] = max(now, self._sent_at.get(message_id, now - self.window_seconds)
                                                + self.window_seconds)
            return bool(self._due)

    def take_due(self) -> tuple[list[int], float | None]:
        """The messages due now (marked as sent), and how long until the next one is due (None: none waits)."""
        now = self.clock()
        with self._lock:
            due = [message_id for message_id, at in self._due.items() if at <= now]
            for message_id in due:
                del self._due[message_id]
                self._sent_at[message_id] = now
            for message_id, at in list(self._sent_at.items()):
                if at <= now - self.window_seconds:
                    del self._sent_at[message_id]
            wait = min(self._due.values()) - now if self._due else None
        return sorted(due), wait

    def _run(self) -> None:
        has_connection = False
        while not self._is_stopping:
            due, wait = self.take_due()
            if due:
                self._send(due)
                has_connection = True
                continue
            if has_connection and wait is None:
                # Kept while changes keep coming (a connection a round costs more than
                # the round); closed once none came for a while.
                if not self._wake.wait(IDLE_CLOSE_SECONDS):
                    connections.close_all()
                    has_connection = False
            else:
                self._wake.wait(wait)
            self._wake.clear()
        connections.close_all()

    def _send(self, due: list[int]) -> None:
        try:
            close_old_connections()
            self.send_due(due)
        except OperationalError as exc:
            # A deadlock with a schema change or a truncation, a lost connection: the
            # database's to retry. Once, a window later; then the panel's next status.get catches up.
            connections.close_all()
            again = [message_id for message_id in due if message_id not in self._retried]
            self._retried.difference_update(due)
            self._retried.update(again)
            log_event(logger, "status_push_failed", level=logging.WARNING, messages=len(due), retried=len(again),
                      error=str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
            if again:
                self.schedule(again)
        except layer_send.ChannelLayerUnavailable as exc:
            # Redis away: the sockets that would get this lose their subscription and are
            # closed (4503); their panels ask again (status.get) when they reconnect.
            log_event(logger, "status_push_failed", level=logging.WARNING, messages=len(due), part="channel_layer",
                      error=str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
        except Exception as exc:
            # The person's panel misses this change; the next one, or its next status.get, catches up.
            if _is_exiting(exc):
                log_event(logger, "status_push_skipped_at_exit", messages=len(due))
                return
            log_event(logger, "status_push_failed", level=logging.ERROR, exc_info=True, messages=len(due))
            connections.close_all()
        else:
            self._retried.difference_update(due)

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread, its database connection closed (tests; a process's own ends with it)."""
        self._is_stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)


status_push = StatusPush()


def tasks_changed(tasks: Sequence[AutomationTask]) -> None:
    """``automation.changes`` listener: mark the messages whose blocks or delivery just changed."""
    message_ids = [task.message_id for task in tasks if task.kind in STATUS_KINDS and task.message_id is not None]
    if message_ids:
        status_push.mark(message_ids)
