"""The dispatcher's wake-up across processes: PostgreSQL's NOTIFY, or the channel layer on SQLite."""

import threading
import time

import pytest
from django.db import connection

from automation.services.tasks import task_create
from automation.wake import (
    ChannelWakeListener,
    EventWakes,
    NotifyWakeListener,
    WakeTopic,
    dispatcher_wake,
    topic_listener,
    wake_listener,
    wake_send,
    wakes_go_to,
)

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="LISTEN/NOTIFY is PostgreSQL's")


def woken(event: threading.Event, timeout: float = 10) -> bool:
    if event.wait(timeout):
        event.clear()
        return True
    return False


def test_the_listener_is_the_databases_own():
    expected = NotifyWakeListener if connection.vendor == "postgresql" else ChannelWakeListener
    assert isinstance(wake_listener(threading.Event()), expected)


def test_a_committed_task_wakes_the_listener(channel_layer):
    event = threading.Event()
    listener = wake_listener(event).start()
    try:
        time.sleep(0.2)  # the listener's receive is under way
        event.clear()
        task_create(kind="test.local", payload={}, actor="ingest")
        assert woken(event)
    finally:
        listener.stop()


class Heard:
    """A receiver that keeps the payloads it hears."""

    def __init__(self):
        self.payloads, self.arrived = [], threading.Event()

    def heard(self, payload):
        self.payloads.append(payload)
        self.arrived.set()

    def missed(self):
        pass


def test_a_topics_wake_carries_its_payload_to_that_topics_listeners_only(channel_layer):
    topic, other = WakeTopic("conductor_test_topic", "conductor-test-topic"), Heard()
    heard = Heard()
    listeners = [topic_listener(topic, heard).start(), wake_listener(threading.Event()).start(),
                 topic_listener(WakeTopic("conductor_test_other", "conductor-test-other"), other).start()]
    try:
        time.sleep(0.2)  # the listeners' receives are under way
        wake_send(topic, "r1 r2")
        assert heard.arrived.wait(10)
        assert heard.payloads == ["r1 r2"]
        assert not other.arrived.wait(0.3)
    finally:
        for listener in listeners:
            listener.stop()


@postgres_only
def test_a_notify_listener_whose_connection_was_cut_listens_again_and_ticks_for_what_it_missed():
    event = threading.Event()
    listener = NotifyWakeListener(EventWakes(event))
    listener.RETRY_SECONDS = 0.1
    listener.start()
    try:
        dispatcher_wake()
        assert woken(event)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND datname = current_database() AND query LIKE 'LISTEN %%'"
            )
            assert cursor.fetchone() is not None
        # A wake sent while nobody listened is lost; the listener wakes the loop once it listens again.
        assert woken(event)
        dispatcher_wake()
        assert woken(event)
    finally:
        listener.stop()
    assert not listener._thread.is_alive()


@postgres_only
def test_a_wake_is_one_notify_after_the_commit_not_before():
    event = threading.Event()
    listener = NotifyWakeListener(EventWakes(event)).start()
    try:
        from django.db import transaction

        with transaction.atomic():
            for _ in range(3):
                task_create(kind="test.local", payload={}, actor="ingest")
            assert not event.wait(0.3)  # nothing before the commit
        assert woken(event)
        assert not event.wait(0.3)  # one wake for the transaction
    finally:
        listener.stop()


def test_in_a_dispatchers_thread_created_tasks_are_listed_and_a_held_commit_leaves_the_event_alone():
    event = threading.Event()
    with wakes_go_to(event) as wakes:
        with wakes.held():
            task, _ = task_create(kind="test.local", payload={}, actor="d1")
        assert wakes.created == [task.pk]
        assert not event.is_set()
        other, _ = task_create(kind="test.local", payload={}, actor="d1")
        assert wakes.created == [task.pk, other.pk]
        assert event.is_set()
