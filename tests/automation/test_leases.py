"""One task, one lease (SPEC §4.1, §4.4): a random lease token per lease, and a claim that knows what it leased.

Two claims of one owner in one millisecond write the same owner and times;
only the update itself can say which rows each leased. Run on the suite's
database, so both configurations prove it.
"""

import threading
from collections import Counter

import pytest
from django.db import close_old_connections, connection
from django.db.models import Q

from automation.models import AutomationTask, TaskEvent, TaskStatus
from automation.services import transitions as tr
from automation.services.leasing import tasks_lease
from automation.services.claim import tasks_claim
from automation.services.tasks import NewTask, task_create, tasks_create
from core.clock import now_ms

S = TaskStatus
LEASE_MS = 30_000


def pending(n=1):
    return [task_create(kind="test.local", payload={"n": i}, actor="test")[0] for i in range(n)]


@pytest.mark.django_db
def test_a_second_claim_in_the_same_millisecond_gets_only_what_it_leased():
    d, e = pending(2)
    now = now_ms()
    lease = dict(still_claimable=Q(), lease_owner="vm:1:a", lease_until=now + LEASE_MS, now=now,
                 start_kinds=["test.local"])
    first = tasks_lease({d.pk: S.PENDING}, **lease)
    second = tasks_lease({d.pk: S.PENDING, e.pk: S.PENDING}, **lease)
    assert [t.pk for t in first] == [d.pk]
    assert [t.pk for t in second] == [e.pk]
    # Each lease has a token of its own, and the task holds the one its claim returned.
    assert first[0].lease != second[0].lease
    assert AutomationTask.objects.get(pk=d.pk).lease == first[0].lease


@pytest.mark.django_db
def test_the_claim_returns_the_rows_as_its_update_wrote_them():
    (task,) = pending()
    now = now_ms()
    (leased,) = tasks_claim(lease_owner="d1", now=now, limit=5, lease_ms=LEASE_MS, start_at_once=True)
    stored = AutomationTask.objects.get(pk=task.pk)
    fields = [f.attname for f in AutomationTask._meta.concrete_fields]
    assert {f: getattr(leased, f) for f in fields} == {f: getattr(stored, f) for f in fields}
    assert (leased.status, leased.attempt_count, leased.started_at) == (S.RUNNING, 1, now)
    assert leased.needs_approval is False  # a boolean, as the ORM reads it, on every database


@pytest.mark.django_db
def test_a_task_leased_again_by_the_same_owner_refuses_its_first_lease():
    (task,) = pending()
    now = now_ms()
    (leased,) = tasks_claim(lease_owner="vm:1:a", now=now, limit=1, lease_ms=LEASE_MS, start_at_once=True)
    first = leased.lease
    # Two heartbeats missed: reclaimed, then leased again by the same process.
    later = now + LEASE_MS + 1
    tr.task_reclaim_interrupted(task.pk, actor="vm:1:a", retry_at=later, now=later)
    (again,) = tasks_claim(lease_owner="vm:1:a", now=later, limit=1, lease_ms=LEASE_MS, start_at_once=True)
    assert (again.lease.owner, again.lease.token != first.token) == ("vm:1:a", True)

    with pytest.raises(tr.LeaseLost):
        tr.task_heartbeat(task.pk, lease=first, lease_until=later + LEASE_MS, now=later)
    with pytest.raises(tr.LeaseLost):
        tr.task_succeed(task.pk, lease=first, result="stale", now=later)
    tr.task_heartbeat(task.pk, lease=again.lease, lease_until=later + LEASE_MS, now=later)
    done = tr.task_succeed(task.pk, lease=again.lease, result="current", now=later)
    assert (done.status, done.result_json, done.lease) == (S.SUCCEEDED, '"current"', None)


@pytest.mark.django_db(transaction=True)
def test_eight_threads_claiming_at_one_frozen_millisecond_lease_every_task_exactly_once():
    tasks_create(tasks=[NewTask(kind="test.local", payload={"n": n}) for n in range(2000)], actor="test")
    now = now_ms()  # every claim happens at this one millisecond
    leased: list[list[str]] = [[] for _ in range(8)]
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def claimer(n):
        try:
            start.wait()
            while batch := tasks_claim(lease_owner="vm:1:a", now=now, limit=20, lease_ms=LEASE_MS):
                leased[n] += [task.pk for task in batch]
        except BaseException as exc:  # noqa: BLE001 (the main thread reports it)
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not errors, errors
    handed_out = Counter(task_id for batch in leased for task_id in batch)
    assert len(handed_out) == 2000 and set(handed_out.values()) == {1}
    assert AutomationTask.objects.filter(status=S.LEASED).count() == 2000
    assert AutomationTask.objects.values("lease_token").distinct().count() == 2000
    lease_events = Counter(TaskEvent.objects.filter(action="lease").values_list("task_id", flat=True))
    assert len(lease_events) == 2000 and set(lease_events.values()) == {1}
