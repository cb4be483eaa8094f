"""A delivery's executor waits for the plugin's answer without polling: the answer's commit wakes it,
here or in another process, and a slow safety poll catches a lost wake."""

import math
import tempfile
import threading
import time
from pathlib import Path

import pytest
from django.db import connection, transaction

from automation.services.tasks import task_create
from ingest import answer_wakes
from ingest.frames import parse_delivery_result
from ingest.services import deliveries
from ingest.services.deliveries import (
    delivery_answer_wait,
    delivery_request_create,
    delivery_requests_abandon,
    delivery_result_record,
)
from tests.factories import PluginClientFactory
from tests.procs import started_in_processes

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@pytest.fixture
def client():
    return PluginClientFactory()


def pending_request(client) -> str:
    task, _ = task_create(kind="test.local", payload={}, actor="test")
    return delivery_request_create(task_id=task.pk, client_pk=client.pk, method="http").pk


def answer(client, request_id: str, **fields) -> bool:
    frame = {"type": "browser.proxy_delivery.result", "request_id": request_id,
             "ok": True, "status": 200, "body": "done", "error": None, **fields}
    return delivery_result_record(client_pk=client.pk, result=parse_delivery_result(frame))


class Waiter(threading.Thread):
    """``delivery_answer_wait`` in a thread of its own, as a dispatcher's task thread runs it."""

    def __init__(self, request_id: str, *, timeout: float = 20, cancelled: threading.Event | None = None):
        super().__init__(daemon=True)
        self.request_id, self.timeout = request_id, timeout
        self.cancelled = cancelled or threading.Event()
        self.waiting = threading.Event()
        self.result: dict | None = None
        self.returned_at: float | None = None

    def run(self):
        self.waiting.set()
        try:
            self.result = delivery_answer_wait(
                request_id=self.request_id, timeout=self.timeout, cancelled=self.cancelled
            )
        finally:
            self.returned_at = time.monotonic()
            connection.close()

    def start_waiting(self) -> "Waiter":
        self.start()
        self.waiting.wait(5)
        deadline = time.monotonic() + 5
        while self.request_id not in answer_wakes.answer_waiters._events and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # past its first read
        return self


@pytest.fixture
def no_safety_poll(monkeypatch):
    """Within the tests' time, only a wake-up brings the answer."""
    monkeypatch.setattr(deliveries, "ANSWER_SAFETY_POLL_SECONDS", 60.0)


def test_an_answer_another_thread_stores_wakes_the_waiter_at_once(client, no_safety_poll):
    request_id = pending_request(client)
    waiter = Waiter(request_id).start_waiting()
    stored_at = time.monotonic()
    assert answer(client, request_id)
    waiter.join(10)
    assert waiter.result["body"] == "done"
    assert waiter.returned_at - stored_at < 1


def test_an_answer_another_process_stores_wakes_the_waiter_there(client):
    """The executor waits in a dispatcher's process, the answer comes through an ASGI server's."""
    first, second = pending_request(client), pending_request(client)
    with tempfile.TemporaryDirectory() as folder:
        ready = Path(folder) / "ready"
        with started_in_processes("tests.ingest.workers:answers_waited", [([first, second], str(ready), 20)]) as (
            pending,
        ):
            deadline = time.monotonic() + 60
            while not ready.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.2)  # past their first read
            stored_at = time.monotonic_ns()
            assert answer(client, first)
            # A closed socket answers the other one with a failure, and wakes it so too.
            assert delivery_requests_abandon(client_pks=[client.pk], reason="socket closed") == 1
            waited = pending.get(timeout=60)
    (first_answer, first_at, first_statements), (second_answer, second_at, second_statements) = waited
    assert first_answer["body"] == "done"
    assert second_answer == {"ok": False, "status": None, "body": None, "error": "socket closed"}
    # No safety poll within the child's 20 s: each was woken, and read its row once more.
    assert (first_at - stored_at) / 1e9 < 5 and (second_at - stored_at) / 1e9 < 5
    assert first_statements <= 2 and second_statements <= 2


def test_a_waiting_delivery_reads_its_row_only_at_the_safety_polls():
    """Three seconds of waiting cost one read at the start and one per safety poll, not one per 20-100 ms."""
    client = PluginClientFactory()
    request_id = pending_request(client)
    seconds = 3
    statements = []
    started = time.monotonic()
    with connection.execute_wrapper(lambda execute, sql, *args: statements.append(sql) or execute(sql, *args)):
        assert delivery_answer_wait(request_id=request_id, timeout=seconds, cancelled=threading.Event()) is None
    assert time.monotonic() - started >= seconds
    assert len(statements) <= 1 + math.ceil(seconds / deliveries.ANSWER_SAFETY_POLL_SECONDS)
    assert all(sql.lstrip().upper().startswith("SELECT") for sql in statements)


def test_a_lost_wake_is_caught_by_the_safety_poll(client, monkeypatch):
    lost = []
    monkeypatch.setattr(answer_wakes, "answers_wake", lambda *, request_ids: lost.extend(request_ids))
    monkeypatch.setattr(deliveries, "ANSWER_SAFETY_POLL_SECONDS", 0.5)
    request_id = pending_request(client)
    waiter = Waiter(request_id).start_waiting()
    stored_at = time.monotonic()
    assert answer(client, request_id)
    waiter.join(10)
    assert lost == [request_id]
    assert waiter.result["body"] == "done"
    assert waiter.returned_at - stored_at < 0.5 + 1


def test_the_wake_comes_after_the_answer_commits(client, no_safety_poll):
    request_id = pending_request(client)
    waiter = Waiter(request_id).start_waiting()
    with transaction.atomic():
        assert answer(client, request_id)
        waiter.join(0.3)
        assert waiter.is_alive()  # nothing to read before the commit, and no wake-up either
        committing_at = time.monotonic()
    waiter.join(10)
    assert waiter.result["body"] == "done"
    assert waiter.returned_at - committing_at < 1


def test_a_cancelled_wait_returns_none_at_once(client, no_safety_poll):
    waiter = Waiter(pending_request(client)).start_waiting()
    cancelled_at = time.monotonic()
    waiter.cancelled.set()
    waiter.join(10)
    assert waiter.result is None
    assert waiter.returned_at - cancelled_at < 0.5


def test_a_wait_that_times_out_returns_none_at_its_deadline(client, no_safety_poll):
    started = time.monotonic()
    assert delivery_answer_wait(request_id=pending_request(client), timeout=0.5, cancelled=threading.Event()) is None
    assert 0.5 <= time.monotonic() - started < 1.5


def test_an_answer_stored_before_the_wait_is_read_at_once(client, no_safety_poll):
    request_id = pending_request(client)
    assert answer(client, request_id)
    started = time.monotonic()
    assert delivery_answer_wait(request_id=request_id, timeout=20, cancelled=threading.Event())["body"] == "done"
    assert time.monotonic() - started < 1


def test_a_wake_for_a_request_nobody_waits_for_here_is_sent_to_the_other_processes(client, monkeypatch):
    sent = []
    monkeypatch.setattr(answer_wakes, "wake_send", lambda topic, payload: sent.append((topic, payload)))
    waiter = Waiter(pending_request(client)).start_waiting()
    answer_wakes.answers_wake(request_ids=[waiter.request_id, "elsewhere-1", "elsewhere-2"])
    waiter.cancelled.set()
    waiter.join(10)
    assert sent == [(answer_wakes.ANSWER_WAKES, "elsewhere-1 elsewhere-2")]


def test_many_wakes_go_in_payloads_notify_accepts(monkeypatch):
    sent = []
    monkeypatch.setattr(answer_wakes, "wake_send", lambda topic, payload: sent.append(payload))
    request_ids = [f"{n:064d}" for n in range(answer_wakes.IDS_PER_WAKE + 1)]
    answer_wakes.answers_wake(request_ids=request_ids)
    assert [len(payload.split()) for payload in sent] == [answer_wakes.IDS_PER_WAKE, 1]
    assert all(len(payload.encode()) < 8000 for payload in sent)
