import logging

import pytest
from django.db.models import F

from automation.models import AutomationTask, Lease, TaskEvent, TaskStatus
from automation.services import transitions as tr
from tests.factories import LEASE_MS, OWNER, T0, lease_of, make_task, task_lease

S = TaskStatus
LATER = T0 + 10 * LEASE_MS  # every lease and retry time of make_task has passed
ROUTE = {
    "target_client_id": "laptop-chrome",
    "target_platform": "claude",
    "target_conversation_id": "conv-abc",
}

# name -> (call, allowed starting states, resulting state)
TRANSITIONS = {
    "lease": (
        lambda t: task_lease(t, lease_owner="dispatcher-2", lease_until=LATER + LEASE_MS, now=LATER),
        {S.PENDING, S.RETRY_WAIT},
        S.LEASED,
    ),
    "release": (
        lambda t, lease=None: tr.task_release(t, lease=lease or lease_of(t), reason="client offline", now=LATER),
        {S.LEASED},
        S.PENDING,
    ),
    "start": (
        lambda t, lease=None: tr.task_start(t, lease=lease or lease_of(t), lease_until=LATER + LEASE_MS, now=LATER),
        {S.LEASED},
        S.RUNNING,
    ),
    "heartbeat": (
        lambda t, lease=None: tr.task_heartbeat(t, lease=lease or lease_of(t), lease_until=LATER + LEASE_MS, now=LATER),
        {S.LEASED, S.RUNNING},
        None,  # unchanged
    ),
    "succeed": (
        lambda t, lease=None: tr.task_succeed(t, lease=lease or lease_of(t), result={"answer": 42}, now=LATER),
        {S.RUNNING},
        S.SUCCEEDED,
    ),
    "retry_later": (
        lambda t, lease=None: tr.task_retry_later(
            t, lease=lease or lease_of(t), error="timeout", retry_at=LATER + 5000,
            backoff_ms=5000, jitter_ms=120, now=LATER,
        ),
        {S.RUNNING},
        S.RETRY_WAIT,
    ),
    "fail": (
        lambda t, lease=None: tr.task_fail(t, lease=lease or lease_of(t), error="tool error", now=LATER),
        {S.RUNNING},
        S.FAILED,
    ),
    "reclaim_unstarted": (
        lambda t: tr.task_reclaim_unstarted(t, actor="dispatcher-2", now=LATER),
        {S.LEASED},
        S.PENDING,
    ),
    "reclaim_interrupted": (
        lambda t: tr.task_reclaim_interrupted(
            t, actor="dispatcher-2", retry_at=LATER + 5000, backoff_ms=5000, jitter_ms=0, now=LATER
        ),
        {S.RUNNING},
        S.RETRY_WAIT,
    ),
    "approve": (
        lambda t: tr.task_approve(t, actor="alice", now=LATER),
        {S.BLOCKED},
        S.PENDING,
    ),
    "reject": (
        lambda t: tr.task_reject(t, actor="alice", reason="too risky", now=LATER),
        {S.BLOCKED},
        S.FAILED,
    ),
    "cancel": (
        lambda t: tr.task_cancel(t, actor="alice", now=LATER),
        {S.PENDING, S.RETRY_WAIT, S.BLOCKED, S.RUNNING},
        S.CANCELLED,
    ),
    "retry": (
        lambda t: tr.task_retry(t, actor="alice", now=LATER),
        {S.FAILED, S.CANCELLED},
        S.PENDING,
    ),
}

UNDER_LEASE = {"release", "start", "heartbeat", "succeed", "retry_later", "fail"}

CASES = [
    pytest.param(name, status, id=f"{name}-from-{status}")
    for name in TRANSITIONS
    for status in S.values
]


def _snapshot(task_id):
    return AutomationTask.objects.values().get(pk=task_id)


@pytest.mark.django_db
@pytest.mark.parametrize("name,status", CASES)
def test_transition_applies_only_from_its_starting_states(name, status):
    call, allowed, to_status = TRANSITIONS[name]
    task = make_task(status, **ROUTE)
    before = _snapshot(task.pk)
    events_before = TaskEvent.objects.filter(task=task).count()

    if status in allowed:
        moved = call(task.pk)
        assert moved.status == (to_status or status)
        if name == "heartbeat":
            # A renewal is not a change of state: it writes no event.
            assert TaskEvent.objects.filter(task=task).count() == events_before
            assert moved.lease_until == LATER + LEASE_MS
            return
        event = TaskEvent.objects.filter(task=task).last()
        assert (event.action, event.status_from, event.status_to) == (
            name.split("_")[0] if name.startswith("reclaim") else name,
            status,
            moved.status,
        )
        assert event.actor
        assert TaskEvent.objects.filter(task=task).count() == events_before + 1
    else:
        # A caller under a lease whose task left leased/running has lost its lease;
        # one that still holds it but asks for the wrong edge is refused.
        lease_gone = name in UNDER_LEASE and status not in (S.LEASED, S.RUNNING)
        expected = tr.LeaseLost if lease_gone else tr.InvalidTransition
        with pytest.raises(expected):
            call(task.pk)
        assert _snapshot(task.pk) == before
        assert TaskEvent.objects.filter(task=task).count() == events_before


@pytest.mark.django_db
@pytest.mark.parametrize("name,status", [c for c in CASES if c.values[1] in TRANSITIONS[c.values[0]][1]])
def test_transition_keeps_routing_fields(name, status):
    call, _, _ = TRANSITIONS[name]
    task = make_task(status, **ROUTE)
    moved = call(task.pk)
    assert {key: getattr(moved, key) for key in ROUTE} == ROUTE


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(UNDER_LEASE))
@pytest.mark.parametrize("stale", ["another owner", "an earlier lease of the same owner"])
def test_a_stale_lease_changes_nothing(name, stale):
    call, allowed, _ = TRANSITIONS[name]
    status = S.RUNNING if S.RUNNING in allowed else S.LEASED
    task = make_task(status, owner="dispatcher-other")
    held = task.lease
    lease = Lease(OWNER, held.token) if stale == "another owner" else Lease(held.owner, held.token + 1)
    before = _snapshot(task.pk)
    events_before = TaskEvent.objects.filter(task=task).count()

    with pytest.raises(tr.LeaseLost):
        call(task.pk, lease=lease)

    assert _snapshot(task.pk) == before
    assert TaskEvent.objects.filter(task=task).count() == events_before


@pytest.mark.django_db
def test_worker_that_lost_its_lease_cannot_overwrite_the_new_holder():
    task = make_task(S.LEASED, owner="dispatcher-a")
    stale = task.lease
    tr.task_reclaim_unstarted(task.pk, actor="dispatcher-b", now=LATER)
    task_lease(task.pk, lease_owner="dispatcher-b", lease_until=LATER + LEASE_MS, now=LATER)
    tr.task_start(task.pk, lease=lease_of(task.pk), lease_until=LATER + LEASE_MS, now=LATER)

    with pytest.raises(tr.LeaseLost):
        tr.task_succeed(task.pk, lease=stale, result="stale", now=LATER)

    task.refresh_from_db()
    assert (task.status, task.lease_owner, task.result_json) == (S.RUNNING, "dispatcher-b", None)


@pytest.mark.django_db
def test_heartbeat_after_cancel_tells_the_worker_to_stop():
    task = make_task(S.RUNNING)
    tr.task_cancel(task.pk, actor="alice", now=T0 + 1000)

    with pytest.raises(tr.LeaseLost) as excinfo:
        tr.task_heartbeat(task.pk, lease=lease_of(task.pk), lease_until=T0 + 2 * LEASE_MS, now=T0 + 2000)
    assert excinfo.value.status == S.CANCELLED


@pytest.mark.django_db
def test_lease_writes_owner_and_until_and_refuses_a_task_not_yet_due():
    task = make_task(S.RETRY_WAIT)  # due at T0 + 5000
    with pytest.raises(tr.InvalidTransition, match="not due"):
        task_lease(task.pk, lease_owner="d", lease_until=T0 + LEASE_MS, now=T0 + 4999)

    leased = task_lease(task.pk, lease_owner="d", lease_until=T0 + 65000, now=T0 + 5000)
    assert (leased.lease_owner, leased.lease_until) == ("d", T0 + 65000)


@pytest.mark.django_db
def test_start_counts_an_attempt_and_release_does_not():
    task = make_task(S.LEASED)
    assert task.attempt_count == 0
    released = tr.task_release(task.pk, lease=lease_of(task.pk), reason="client offline", now=T0)
    assert (released.attempt_count, released.lease_owner, released.lease_until) == (0, None, None)

    task_lease(task.pk, lease_owner=OWNER, lease_until=T0 + LEASE_MS, now=T0)
    started = tr.task_start(task.pk, lease=lease_of(task.pk), lease_until=T0 + LEASE_MS, now=T0 + 10)
    assert (started.attempt_count, started.started_at) == (1, T0 + 10)


@pytest.mark.django_db
def test_retry_later_is_refused_when_no_attempts_are_left():
    task = make_task(S.RUNNING, max_attempts=1)
    with pytest.raises(tr.InvalidTransition, match="no attempts left"):
        tr.task_retry_later(
            task.pk, lease=lease_of(task.pk), error="e", retry_at=T0 + 5000, backoff_ms=5000,
            jitter_ms=0, now=T0,
        )
    failed = tr.task_fail(task.pk, lease=lease_of(task.pk), error="e", now=T0)
    assert failed.status == S.FAILED


@pytest.mark.django_db
def test_retry_later_records_backoff_jitter_and_error():
    task = make_task(S.RUNNING)
    waiting = tr.task_retry_later(
        task.pk, lease=lease_of(task.pk), error="timeout", retry_at=T0 + 5321, backoff_ms=5000,
        jitter_ms=321, now=T0,
    )
    assert (waiting.execute_after, waiting.last_error, waiting.lease_owner) == (T0 + 5321, "timeout", None)
    event = waiting.events.last()
    assert (event.backoff_ms, event.jitter_ms, event.error) == (5000, 321, "timeout")


@pytest.mark.django_db
def test_succeed_stores_the_result_and_finish_time():
    task = make_task(S.RUNNING)
    done = tr.task_succeed(task.pk, lease=lease_of(task.pk), result={"text": "hi"}, now=T0 + 7)
    assert (done.result_json, done.finished_at, done.lease_owner) == ('{"text": "hi"}', T0 + 7, None)


@pytest.mark.django_db
def test_reclaim_refuses_a_lease_that_has_not_expired():
    leased = make_task(S.LEASED)
    running = make_task(S.RUNNING)
    with pytest.raises(tr.InvalidTransition, match="valid until"):
        tr.task_reclaim_unstarted(leased.pk, actor="d2", now=T0 + LEASE_MS)
    with pytest.raises(tr.InvalidTransition, match="valid until"):
        tr.task_reclaim_interrupted(running.pk, actor="d2", retry_at=None, now=T0 + LEASE_MS)


@pytest.mark.django_db
def test_reclaimed_non_idempotent_task_fails_as_interrupted():
    task = make_task(S.RUNNING)
    failed = tr.task_reclaim_interrupted(task.pk, actor="d2", retry_at=None, now=LATER)
    assert failed.status == S.FAILED
    assert "interrupted" in failed.last_error
    assert failed.attempt_count == 1


@pytest.mark.django_db
def test_a_reclaim_may_not_retry_a_task_without_attempts_left():
    # The retry policy decides; the transition only asserts its answer.
    task = make_task(S.RUNNING, max_attempts=1)
    with pytest.raises(tr.InvalidTransition, match="no attempts left"):
        tr.task_reclaim_interrupted(task.pk, actor="d2", retry_at=LATER + 5000, now=LATER)
    failed = tr.task_reclaim_interrupted(task.pk, actor="d2", retry_at=None, now=LATER)
    assert failed.status == S.FAILED


@pytest.mark.django_db
def test_operator_retry_resets_attempts_and_makes_the_task_due():
    task = make_task(S.FAILED)
    assert task.attempt_count == 1
    again = tr.task_retry(task.pk, actor="alice", now=LATER)
    assert (again.status, again.attempt_count, again.execute_after, again.finished_at) == (
        S.PENDING, 0, LATER, None,
    )
    assert again.events.last().actor == "alice"


@pytest.mark.django_db
def test_a_retry_starts_clean_and_keeps_the_earlier_attempt_in_its_event():
    task = make_task(S.BLOCKED)
    rejected = tr.task_reject(task.pk, actor="bob", reason="too broad", now=LATER)
    assert rejected.last_error == "rejected by bob: too broad"
    again = tr.task_retry(task.pk, actor="alice", now=LATER + 1)
    assert (again.last_error, again.started_at, again.finished_at, again.finish_reason, again.result_json) == (
        None, None, None, None, None,
    )
    fresh = AutomationTask.objects.get(pk=task.pk)
    assert (fresh.last_error, fresh.finished_at, fresh.finish_reason) == (None, None, None)
    earlier = fresh.events.last().detail["earlier_attempt"]
    assert earlier == {"last_error": "rejected by bob: too broad", "finished_at": LATER, "finish_reason": "rejected"}

    # A run that failed with a result: its times and result move too.
    tr.task_approve(task.pk, actor="carol", now=LATER + 2)
    task_lease(task.pk, lease_owner="d1", lease_until=LATER + 60_000, now=LATER + 3)
    tr.task_start(task.pk, lease=lease_of(task.pk), lease_until=LATER + 60_000, now=LATER + 4)
    tr.task_fail(task.pk, lease=lease_of(task.pk), error="exited with code 1", result={"exit_code": 1}, now=LATER + 5)
    again = tr.task_retry(task.pk, actor="alice", now=LATER + 6)
    assert (again.last_error, again.started_at, again.result_json) == (None, None, None)
    assert again.events.last().detail["earlier_attempt"] == {
        "last_error": "exited with code 1", "started_at": LATER + 4, "finished_at": LATER + 5,
        "result_json": '{"exit_code": 1}',
    }


@pytest.mark.django_db
@pytest.mark.parametrize("end", [
    lambda pk: tr.task_reject(pk, actor="bob", reason="no", now=LATER),
    lambda pk: tr.task_cancel(pk, actor="bob", now=LATER),
])
def test_a_retry_of_a_task_never_approved_puts_it_back_to_wait_for_approval(end):
    task = make_task(S.BLOCKED)
    assert task.needs_approval
    end(task.pk)
    again = tr.task_retry(task.pk, actor="alice", now=LATER + 1)
    assert (again.status, again.attempt_count, again.finish_reason, again.approved_at) == (S.BLOCKED, 0, None, None)
    assert (again.events.last().action, again.events.last().status_to) == ("retry", S.BLOCKED)
    # Approved now, then failed in its run: the next retry runs it, with the retrier as its approver.
    approved = tr.task_approve(task.pk, actor="carol", now=LATER + 2)
    assert (approved.approved_by, approved.approved_at) == ("carol", LATER + 2)


@pytest.mark.django_db
def test_a_retry_of_an_approved_task_runs_it_and_records_the_retrier_as_its_approver():
    task = make_task(S.BLOCKED)
    tr.task_approve(task.pk, actor="carol", now=LATER)
    tr.task_cancel(task.pk, actor="bob", now=LATER)
    again = tr.task_retry(task.pk, actor="alice", now=LATER + 1)
    assert (again.status, again.approved_by, again.approved_at) == (S.PENDING, "alice", LATER + 1)


@pytest.mark.django_db
def test_the_retry_to_pending_refuses_a_task_never_approved_whatever_the_caller_read():
    """The guard is in the update itself: the edge cannot be taken past a missing approval."""
    task = make_task(S.BLOCKED)
    tr.task_reject(task.pk, actor="bob", reason="no", now=LATER)
    with pytest.raises(tr.InvalidTransition, match="never approved"):
        tr._transition(task.pk, tr.RETRY, actor="alice", now=LATER, guards=(tr.APPROVAL_HELD,))
    assert AutomationTask.objects.get(pk=task.pk).status == S.FAILED


@pytest.mark.django_db
def test_approve_makes_the_task_due_now_and_reject_fails_it_with_the_reason():
    approved = tr.task_approve(make_task(S.BLOCKED).pk, actor="alice", now=LATER)
    assert (approved.status, approved.execute_after) == (S.PENDING, LATER)

    rejected = tr.task_reject(make_task(S.BLOCKED).pk, actor="bob", reason="no shell today", now=LATER)
    assert rejected.status == S.FAILED
    assert rejected.last_error == "rejected by bob: no shell today"


@pytest.mark.django_db
def test_unknown_task_raises_task_not_found():
    with pytest.raises(tr.TaskNotFound):
        tr.task_cancel("no-such-task", actor="alice")


@pytest.mark.django_db
def test_each_transition_logs_one_structured_line(caplog):
    task = make_task(S.LEASED)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="automation.services.transitions"):
        tr.task_start(task.pk, lease=lease_of(task.pk), lease_until=LATER, now=T0)

    lines = [r.getMessage() for r in caplog.records if r.name == "automation.services.transitions"]
    assert len(lines) == 1
    assert lines[0].startswith(f"action=start task_id={task.pk} kind=test.instruction ")
    assert "status_from=leased status_to=running" in lines[0]
    assert f"lease_owner={OWNER}" in lines[0]


@pytest.mark.django_db
def test_event_timeline_records_every_step_in_order():
    task = make_task(S.SUCCEEDED)
    steps = list(task.events.values_list("action", "status_from", "status_to", "actor"))
    assert steps == [
        ("create", None, "pending", "test"),
        ("lease", "pending", "leased", OWNER),
        ("start", "leased", "running", OWNER),
        ("succeed", "running", "succeeded", OWNER),
    ]


@pytest.mark.django_db
def test_a_conditional_update_returns_only_the_row_its_condition_still_matches():
    """What the transitions build on (``statements.update_one``): ``UPDATE … RETURNING`` gives back
    the row it changed, or none.

    A second writer with the same condition finds none left; the row
    returned is the one written, with its values converted as a read would.
    """
    from automation.services.statements import update_one

    task = make_task(status=S.PENDING)
    claim = AutomationTask.objects.filter(pk=task.pk, status=S.PENDING, attempt_count=0)
    won = update_one(claim, {"attempt_count": F("attempt_count") + 1, "priority": 7})
    assert (won.pk, won.attempt_count, won.priority, won.status) == (task.pk, 1, 7, S.PENDING)
    assert update_one(claim, {"attempt_count": F("attempt_count") + 1}) is None
    task.refresh_from_db()
    assert task.attempt_count == 1
    assert [getattr(won, f.attname) for f in AutomationTask._meta.concrete_fields] == [
        getattr(task, f.attname) for f in AutomationTask._meta.concrete_fields
    ]


@pytest.mark.django_db
def test_a_recorded_step_writes_every_field_of_its_event_and_on_postgresql_in_the_updates_own_statement():
    """On PostgreSQL the row and its event are one ``WITH … UPDATE … RETURNING … INSERT``; elsewhere two statements."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    task = make_task(status=S.RUNNING)
    with CaptureQueriesContext(connection) as progress:
        tr.task_progress(task.pk, lease=lease_of(task.pk), action="deliver",
                         detail={"method": "http", "note": "it's \"quoted\""}, now=LATER)
    with CaptureQueriesContext(connection) as retry:
        moved = tr.task_retry_later(task.pk, lease=lease_of(task.pk), error="timeout: 'x'", retry_at=LATER + 5321,
                                    backoff_ms=5000, jitter_ms=321, now=LATER)
    assert (moved.status, moved.execute_after, moved.lease_owner, moved.last_error) == (
        S.RETRY_WAIT, LATER + 5321, None, "timeout: 'x'")
    step, retried = task.events.order_by("-pk")[:2][::-1]
    assert (step.action, step.status_from, step.status_to, step.actor, step.at, step.detail) == (
        "deliver", S.RUNNING, S.RUNNING, OWNER, LATER, {"method": "http", "note": "it's \"quoted\""})
    assert (retried.action, retried.status_from, retried.status_to, retried.error, retried.backoff_ms,
            retried.jitter_ms, retried.detail) == ("retry_later", S.RUNNING, S.RETRY_WAIT, "timeout: 'x'", 5000, 321, {})
    writes = [query["sql"] for query in progress.captured_queries + retry.captured_queries
              if query["sql"].startswith(("UPDATE", "INSERT", "WITH"))]
    if connection.vendor == "postgresql":
        assert [sql.split()[0] for sql in writes] == ["WITH", "WITH"]
    else:
        assert [sql.split()[0] for sql in writes] == ["UPDATE", "INSERT", "UPDATE", "INSERT"]
