"""Waking a running dispatcher loop across processes.

Whatever makes tasks due calls ``dispatcher_wake_on_commit``: creating a task
(``task_create``, whoever calls it), an operator's approve or retry, resuming
a conversation or the dispatcher. The dispatcher loop (in a django-q2 worker)
listens with ``wake_listener`` and ticks at once instead of at its next
scheduled tick.

On PostgreSQL the wake-up is a ``NOTIFY`` on the database connection the work
was committed on, and the loop ``LISTEN``s on a connection of its own
(``NotifyWakeListener``): no other service's hop, and about a third of the channel
layer's (``bench/wake_hop.py``). On SQLite it crosses the channel layer
(``ChannelWakeListener``).

The same two ways carry other wake-ups, each a ``WakeTopic`` of its own with
a payload (``wake_send``, ``topic_listener``): an executor waiting for a
plugin's answer is woken so (``ingest/answer_wakes.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import threading
from collections.abc import Collection, Iterator
from typing import Protocol

import psycopg
from channels.db import database_sync_to_async
from channels.layers import channel_layers, get_channel_layer
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from core import layer_send
from core.logfmt import log_event

logger = logging.getLogger(__name__)

@dataclasses.dataclass(frozen=True)
class WakeTopic:
    """One kind of wake-up: the ``NOTIFY`` channel it goes by on PostgreSQL, the channel-layer group elsewhere."""

    notify_channel: str
    group: str


DISPATCHER_WAKES = WakeTopic(notify_channel="conductor_dispatcher_wake", group="conductor-dispatcher-wake")
WAKE_GROUP = DISPATCHER_WAKES.group
NOTIFY_CHANNEL = DISPATCHER_WAKES.notify_channel
# The channel-layer message a wake-up is; its listener reads only the payload.
LAYER_TYPE = "conductor.wake"


async def dispatcher_wake_async(layer=None) -> None:
    """Tell every running dispatcher loop that tasks just became due (from async code)."""
    if wakes_by_notify():
        await database_sync_to_async(dispatcher_wake)()
    else:
        await (layer or get_channel_layer()).group_send(WAKE_GROUP, {"type": LAYER_TYPE, "payload": ""})


def wakes_by_notify() -> bool:
    """True when wake-ups go by PostgreSQL's ``NOTIFY`` rather than the channel layer."""
    return connections[DEFAULT_DB_ALIAS].vendor == "postgresql"


def wake_send(topic: WakeTopic, payload: str = "") -> None:
    """Send one wake-up of ``topic`` to every process listening for it, now; raises when it cannot.

    On PostgreSQL ``payload`` must be shorter than 8000 bytes (``NOTIFY``'s limit).
    """
    if wakes_by_notify():
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [topic.notify_channel, payload])
    else:
        layer_send.group_send(topic.group, {"type": LAYER_TYPE, "payload": payload})


def dispatcher_wake() -> None:
    """Tell the running dispatcher loop that due tasks were just committed.

    Best effort: when the database or the channel layer is unreachable, the
    tasks wait for the next scheduled tick instead.
    """
    try:
        wake_send(DISPATCHER_WAKES)
    except Exception:
        log_event(logger, "dispatcher_wake_failed", level=logging.ERROR, exc_info=True,
                  detail="the next tick claims the tasks")


@dataclasses.dataclass
class ThreadWakes:
    """Where a dispatcher's task thread's wake-ups go (``wakes_go_to``)."""

    event: threading.Event
    # The ids of the tasks this thread created, added as each creation commits.
    created: list[str] = dataclasses.field(default_factory=list)
    holding: bool = False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Within the block, commits add the tasks they created but leave the event to the caller.

        The dispatcher records a task's outcome (and its kind's follow-up,
        which may create the next task) so, then leases what it may run next
        in the same thread, and only then sets the event: the loop's tick,
        which the event starts, would race it for the same task.
        """
        self.holding = True
        try:
            yield
        finally:
            self.holding = False


# Set in a dispatcher's task threads: what they commit wakes that dispatcher.
_running_in = threading.local()


@contextlib.contextmanager
def wakes_go_to(event: threading.Event) -> Iterator[ThreadWakes]:
    """Within the block, this thread's wake-ups set ``event`` instead of crossing processes.

    A dispatcher runs each task (and its kind's follow-up, which may create
    the next task) in a thread of its own, and ticks again as soon as the
    task's thread sets its event: the round trip through the channel layer
    would only delay that. (A dispatcher that lost its run lease meanwhile
    does not tick; the loop that holds the lease claims the new task at its
    next tick.) Yields the thread's ``ThreadWakes``: the tasks it created are
    listed there, and the dispatcher may run one of them next in the same
    thread (its continuation).
    """
    previous = getattr(_running_in, "wakes", None)
    _running_in.wakes = wakes = ThreadWakes(event)
    try:
        yield wakes
    finally:
        _running_in.wakes = previous


def dispatcher_wake_on_commit(*, created: Collection[str] = ()) -> None:
    """Wake the dispatcher once the current transaction commits (at once outside one).

    One wake per transaction however many tasks it creates: a wake already
    waiting for this transaction's commit is not queued again. (Django keeps
    the callbacks of the open transaction in ``connection.run_on_commit``,
    and drops those of a rolled-back savepoint, so a rollback never leaves a
    wake counted that will not happen.) In a dispatcher's task thread
    (``wakes_go_to``), the ids of the ``created`` tasks are listed for it and
    the wake sets its event, unless the thread holds its wakes.
    """
    if (local := getattr(_running_in, "wakes", None)) is not None:
        if created:
            transaction.on_commit(functools.partial(local.created.extend, created))
        if not local.holding:
            transaction.on_commit(local.event.set)
        return
    connection = transaction.get_connection()
    if connection.in_atomic_block and any(
        callback is dispatcher_wake for _, callback, _ in connection.run_on_commit
    ):
        return
    transaction.on_commit(dispatcher_wake)


class WakeReceiver(Protocol):
    """What a listener tells of the wake-ups of its topic."""

    def heard(self, payload: str) -> None:
        """A wake-up arrived, with its payload ("" for none)."""

    def missed(self) -> None:
        """Wake-ups may have been sent while the listener did not listen (it reconnected)."""


@dataclasses.dataclass(frozen=True)
class EventWakes:
    """A receiver that sets ``event`` at any wake-up, heard or missed: the dispatcher loop's."""

    event: threading.Event

    def heard(self, payload: str) -> None:
        self.event.set()

    def missed(self) -> None:
        self.event.set()


def wake_listener(event: threading.Event) -> WakeListener:
    """The dispatcher's listener for this database: it sets ``event`` at each wake-up once started."""
    return topic_listener(DISPATCHER_WAKES, EventWakes(event))


def topic_listener(topic: WakeTopic, receiver: WakeReceiver) -> WakeListener:
    """The listener for this database that tells ``receiver`` of ``topic``'s wake-ups once started."""
    listener = NotifyWakeListener if wakes_by_notify() else ChannelWakeListener
    return listener(receiver, topic=topic)


class WakeListener:
    """A thread that tells ``receiver`` of each wake-up of ``topic``, from ``start()`` until ``stop()``.

    What the two ways share: the thread, ``ready`` (set once it listens, or
    once it failed, when ticks go on as scheduled), the stop signal, and a
    failure logged and retried every ``RETRY_SECONDS``. Each way says how it
    listens (``_run``).
    """

    RETRY_SECONDS = 1.0

    def __init__(self, receiver: WakeReceiver, *, topic: WakeTopic = DISPATCHER_WAKES) -> None:
        self.receiver = receiver
        self.topic = topic
        self.ready = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="conductor-wake", daemon=True)

    def start(self) -> WakeListener:
        self._thread.start()
        self.ready.wait(10)
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(10)

    def _run(self) -> None:
        raise NotImplementedError

    def _failed(self, topic_name: str) -> None:
        """The listening failed: logged, and ticks go on as scheduled until it listens again."""
        log_event(logger, "wake_listener_failed", level=logging.ERROR, exc_info=True,
                  topic=topic_name, retry_seconds=self.RETRY_SECONDS)
        self.ready.set()


class NotifyWakeListener(WakeListener):
    """``LISTEN`` on a PostgreSQL connection of its own; each ``NOTIFY`` is a wake-up.

    The connection is outside Django's (it lives as long as the loop, in
    autocommit). A lost connection (the server restarted, say) is opened again
    every ``RETRY_SECONDS``, and the receiver is told wake-ups were missed: one
    sent while no connection listened is not kept, so the loop ticks at once
    after a reconnect rather than waiting out its tick.
    """

    # How often the waiting thread looks at its stop signal.
    POLL_SECONDS = 0.5

    def _run(self) -> None:
        params = connections[DEFAULT_DB_ALIAS].get_connection_params()
        listened_before = False
        while not self._stopping.is_set():
            try:
                with psycopg.connect(**params, autocommit=True) as listening:
                    listening.execute(f"LISTEN {self.topic.notify_channel}")
                    if listened_before:
                        self.receiver.missed()  # what was sent while nobody listened
                    listened_before = True
                    self.ready.set()
                    while not self._stopping.is_set():
                        for notify in listening.notifies(timeout=self.POLL_SECONDS, stop_after=1):
                            self.receiver.heard(notify.payload)
            except Exception:
                self._failed(self.topic.notify_channel)
                self._stopping.wait(self.RETRY_SECONDS)


class ChannelWakeListener(WakeListener):
    """Receive on the channel layer, in an event loop of the thread's own; each message is a wake-up.

    It lives as long as the dispatcher loop, so it never times its receive
    out (a cancelled receive can drop the message it was taking); ``stop()``
    cancels it once. A lost channel layer (Redis restarted, say) is retried
    every ``RETRY_SECONDS``, and the group membership, which both layers
    expire after a day, is renewed every ``REJOIN_SECONDS``.
    """

    REJOIN_SECONDS = 3600.0

    def __init__(self, receiver: WakeReceiver, *, topic: WakeTopic = DISPATCHER_WAKES) -> None:
        super().__init__(receiver, topic=topic)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None

    def stop(self) -> None:
        self._stopping.set()
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(task.cancel)
        self._thread.join(10)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except asyncio.CancelledError:
            pass
        finally:
            self.ready.set()

    async def _main(self) -> None:
        self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        while not self._stopping.is_set():
            try:
                await self._listen()
            except Exception:
                self._failed(self.topic.group)
                await asyncio.sleep(self.RETRY_SECONDS)

    async def _listen(self) -> None:
        # A layer of its own: layers bind to the event loop that receives on them.
        layer = channel_layers.make_backend("default")
        channel = await layer.new_channel()
        await layer.group_add(self.topic.group, channel)
        self.ready.set()
        rejoin = asyncio.create_task(self._rejoin(layer, channel))
        try:
            while True:
                message = await layer.receive(channel)
                self.receiver.heard(message.get("payload") or "")
        finally:
            rejoin.cancel()
            with contextlib.suppress(Exception):
                await layer.group_discard(self.topic.group, channel)

    async def _rejoin(self, layer, channel: str) -> None:
        while True:
            await asyncio.sleep(self.REJOIN_SECONDS)
            try:
                await layer.group_add(self.topic.group, channel)
            except Exception:
                log_event(logger, "wake_rejoin_failed", level=logging.ERROR, exc_info=True,
                          topic=self.topic.group, retry_seconds=self.REJOIN_SECONDS)
