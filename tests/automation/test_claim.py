"""The claim path: what may run now, and what must wait (SPEC §3, §4)."""

import datetime as dt
import random

import pytest
from django.utils import timezone

from automation.models import AutomationTask, TaskStatus
from automation.services import transitions as tr
from automation.services.claim import tasks_claim, tasks_reclaim_expired
from automation.services.dispatcher_state import dispatcher_pause_set, kind_pause_set
from automation.services.tasks import task_create
from core.clock import now_ms
from tests.factories import ConversationFactory, PluginClientFactory, lease_of, retry_policy, task_lease

pytestmark = pytest.mark.django_db

S = TaskStatus
LEASE = 60_000


@pytest.fixture
def now():
    return now_ms()


def claim(now, limit=20, owner="d1"):
    return [t.pk for t in tasks_claim(lease_owner=owner, now=now, limit=limit, lease_ms=LEASE)]


def connected(client_id):
    return PluginClientFactory(
        client_id=client_id, connected=True, last_seen_at=timezone.now() + dt.timedelta(hours=1)
    )


def create(kind="test.local", now=None, **kwargs):
    task, _ = task_create(kind=kind, payload=kwargs.pop("payload", {}), actor="test", now=now, **kwargs)
    return task


def outbound(conversation, client_id="laptop", now=None, target_platform="claude", **kwargs):
    return create("test.outbound", now=now, conversation_id=conversation.pk, target_client_id=client_id,
                  target_platform=target_platform, target_conversation_id=conversation.remote_id, **kwargs)


def finish(task_id, now, owner="d1"):
    tr.task_start(task_id, lease=lease_of(task_id), lease_until=now + LEASE, now=now)
    return tr.task_succeed(task_id, lease=lease_of(task_id), result=None, now=now)


def test_claims_due_tasks_only_and_leases_them(now):
    due = create(now=now)
    create(now=now, execute_after=now + 1000)
    assert claim(now) == [due.pk]
    due.refresh_from_db()
    assert (due.status, due.lease_owner, due.lease_until) == (S.LEASED, "d1", now + LEASE)


def test_at_most_the_limit_per_tick_in_priority_then_due_order(now):
    low = [create(now=now - 10) for _ in range(3)]
    high = create(now=now, priority=5)
    assert claim(now, limit=2) == [high.pk, low[0].pk]


def test_tasks_of_kinds_without_an_executor_are_left_alone(now):
    create("test.unrunnable", now=now)
    assert claim(now) == []


def test_a_leased_task_is_not_claimed_twice(now):
    create(now=now)
    assert len(claim(now, owner="d1")) == 1
    assert claim(now, owner="d2") == []


def test_one_outbound_task_in_flight_per_target(now):
    connected("laptop")
    first = outbound(ConversationFactory(), now=now)
    second = outbound(ConversationFactory(), now=now)
    other_target = outbound(ConversationFactory(), now=now, target_platform="gemini")

    assert claim(now) == [first.pk, other_target.pk]
    assert claim(now) == []
    finish(first.pk, now)
    assert claim(now) == [second.pk]


def test_instructions_of_a_conversation_run_one_at_a_time_in_arrival_order(now):
    conversation = ConversationFactory()
    first, second = (create("test.instruction", now=now, conversation_id=conversation.pk) for _ in range(2))
    other = create("test.instruction", now=now, conversation_id=ConversationFactory().pk)

    assert claim(now) == [first.pk, other.pk]
    tr.task_start(first.pk, lease=lease_of(first.pk), lease_until=now + LEASE, now=now)
    tr.task_fail(first.pk, lease=lease_of(first.pk), error="tool error", now=now)
    assert claim(now) == [second.pk]  # a failed block does not stop the later ones


def test_a_blocked_instruction_never_runs_and_holds_back_the_later_ones(now):
    conversation = ConversationFactory()
    blocked = create("test.instruction", now=now, conversation_id=conversation.pk, status=S.BLOCKED)
    later = create("test.instruction", now=now, conversation_id=conversation.pk)

    for minutes in (0, 10, 60 * 24):
        assert claim(now + minutes * 60_000) == []
    assert tasks_reclaim_expired(actor="d1", now=now + 10**9, retry=retry_policy(random.Random())) == []
    blocked.refresh_from_db()
    assert blocked.status == S.BLOCKED

    tr.task_approve(blocked.pk, actor="alice", now=now)
    assert claim(now) == [blocked.pk]
    finish(blocked.pk, now)
    assert claim(now) == [later.pk]


def test_a_blocked_instruction_does_not_hold_back_deliveries(now):
    connected("laptop")
    conversation = ConversationFactory()
    create("test.instruction", now=now, conversation_id=conversation.pk, status=S.BLOCKED)
    delivery = outbound(conversation, now=now)
    assert claim(now) == [delivery.pk]


def test_a_delivery_waiting_to_retry_holds_back_later_deliveries_of_its_conversation(now):
    connected("laptop")
    conversation = ConversationFactory()
    first, second = outbound(conversation, now=now), outbound(conversation, now=now)
    assert claim(now) == [first.pk]
    tr.task_start(first.pk, lease=lease_of(first.pk), lease_until=now + LEASE, now=now)
    tr.task_retry_later(first.pk, lease=lease_of(first.pk), error="HTTP 502", retry_at=now + 5000,
                        backoff_ms=5000, jitter_ms=0, now=now)

    assert claim(now + 1000) == []  # `second` waits behind the retry
    assert claim(now + 5000) == [first.pk]  # the retry keeps its place in line
    finish(first.pk, now + 5000)
    assert claim(now + 5000) == [second.pk]


def test_a_retry_never_bypasses_the_per_target_limit(now):
    connected("laptop")
    waiting = outbound(ConversationFactory(), now=now)
    busy = outbound(ConversationFactory(), now=now)
    claim(now, limit=1)  # takes `waiting`
    tr.task_start(waiting.pk, lease=lease_of(waiting.pk), lease_until=now + LEASE, now=now)
    tr.task_retry_later(waiting.pk, lease=lease_of(waiting.pk), error="timeout", retry_at=now + 5000,
                        backoff_ms=5000, jitter_ms=0, now=now)
    assert claim(now) == [busy.pk]
    assert claim(now + 5000) == []  # due again, but its target is busy
    finish(busy.pk, now + 5000)
    assert claim(now + 5000) == [waiting.pk]


def test_tasks_of_a_paused_conversation_wait_until_it_resumes(now):
    conversation = ConversationFactory(paused=True)
    task = create("test.instruction", now=now, conversation_id=conversation.pk)
    assert claim(now) == []
    task.refresh_from_db()
    assert task.status == S.PENDING
    conversation.paused = False
    conversation.save()
    assert claim(now) == [task.pk]


def test_the_global_pause_stops_all_claiming(now):
    task = create(now=now)
    dispatcher_pause_set(is_paused=True, actor="alice")
    assert claim(now) == []
    dispatcher_pause_set(is_paused=False, actor="alice")
    assert claim(now) == [task.pk]


@pytest.mark.parametrize(
    "client_state",
    [
        {"connected": False, "last_seen_at": None},
        {"connected": True, "last_seen_at": timezone.now() - dt.timedelta(minutes=5)},  # presence expired
        {"connected": True, "last_seen_at": timezone.now(), "enabled": False},
    ],
)
def test_outbound_tasks_wait_for_a_connected_client_without_using_an_attempt(now, client_state):
    client = PluginClientFactory(client_id="laptop", **client_state)
    task = outbound(ConversationFactory(), now=now)
    assert claim(now) == []
    task.refresh_from_db()
    assert (task.status, task.attempt_count) == (S.PENDING, 0)

    client.connected, client.enabled, client.last_seen_at = True, True, timezone.now()
    client.save()
    assert claim(now_ms()) == [task.pk]


def test_reclaim_returns_unstarted_tasks_and_keeps_their_target(now):
    connected("laptop")
    task = outbound(ConversationFactory(), now=now)
    claim(now)
    [reclaimed] = tasks_reclaim_expired(actor="d2", now=now + LEASE + 1, retry=retry_policy(random.Random()))
    assert reclaimed.pk == task.pk
    assert (reclaimed.status, reclaimed.attempt_count, reclaimed.target_client_id) == (S.PENDING, 0, "laptop")


def test_the_dispatchers_claim_starts_what_runs_at_once_and_only_leases_outbound_tasks(now):
    connected("laptop")
    local, delivery = create(now=now), outbound(ConversationFactory(), now=now)
    claimed = tasks_claim(lease_owner="d1", now=now, limit=20, lease_ms=LEASE, start_at_once=True)
    by_id = {task.pk: task for task in claimed}
    # One statement: the local task is leased and started, its attempt counted, both steps on its timeline.
    assert (by_id[local.pk].status, by_id[local.pk].attempt_count, by_id[local.pk].started_at) == (S.RUNNING, 1, now)
    assert [(e.action, e.status_from, e.status_to, e.at) for e in local.events.all()] == [
        ("create", None, S.PENDING, now), ("lease", S.PENDING, S.LEASED, now), ("start", S.LEASED, S.RUNNING, now),
    ]
    # An outbound task waits its jitter and checks its client before it starts.
    assert (by_id[delivery.pk].status, by_id[delivery.pk].attempt_count) == (S.LEASED, 0)
    assert [e.action for e in delivery.events.all()] == ["create", "lease"]


def test_with_no_outbound_jitter_the_claim_starts_outbound_tasks_whose_client_is_connected(now):
    connected("laptop")
    delivery, offline = outbound(ConversationFactory(), now=now), outbound(ConversationFactory(), "gone", now=now)
    claimed = tasks_claim(lease_owner="d1", now=now, limit=20, lease_ms=LEASE, start_at_once=True,
                          outbound_jitter=False)
    assert [(task.pk, task.status, task.attempt_count) for task in claimed] == [(delivery.pk, S.RUNNING, 1)]
    assert AutomationTask.objects.get(pk=offline.pk).status == S.PENDING


@pytest.mark.parametrize("idempotent,status", [(True, S.RETRY_WAIT), (False, S.FAILED)])
def test_a_task_started_by_the_claim_whose_dispatcher_died_is_reclaimed_as_interrupted(now, idempotent, status):
    task = create(now=now, payload={"idempotent": idempotent})
    tasks_claim(lease_owner="d1", now=now, limit=20, lease_ms=LEASE, start_at_once=True)
    [reclaimed] = tasks_reclaim_expired(actor="d2", now=now + LEASE + 1, retry=retry_policy(random.Random(4)))
    assert (reclaimed.pk, reclaimed.status, reclaimed.attempt_count) == (task.pk, status, 1)


@pytest.mark.parametrize("idempotent,status", [(True, S.RETRY_WAIT), (False, S.FAILED)])
def test_reclaim_of_an_interrupted_run_retries_only_idempotent_work(now, idempotent, status):
    task = create(now=now, payload={"idempotent": idempotent})
    claim(now)
    tr.task_start(task.pk, lease=lease_of(task.pk), lease_until=now + LEASE, now=now)

    assert tasks_reclaim_expired(actor="d2", now=now + LEASE - 1, retry=retry_policy(random.Random())) == []
    [reclaimed] = tasks_reclaim_expired(actor="d2", now=now + LEASE + 1, retry=retry_policy(random.Random(4)))
    assert (reclaimed.status, reclaimed.attempt_count) == (status, 1)
    event = reclaimed.events.last()
    assert (event.action, event.actor) == ("reclaim", "d2")
    if idempotent:
        assert event.backoff_ms == 5000 and 0 <= event.jitter_ms <= 1000
        assert reclaimed.execute_after == now + LEASE + 1 + event.backoff_ms + event.jitter_ms
    else:
        assert "interrupted" in reclaimed.last_error


def test_the_database_refuses_a_second_in_flight_task_per_target_and_lane(now):
    from django.db import IntegrityError, transaction

    connected("laptop")
    conversation = ConversationFactory()
    first, second = outbound(conversation, now=now), outbound(ConversationFactory(), now=now)
    claim(now, limit=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        AutomationTask.objects.filter(pk=second.pk).update(status=S.LEASED, lease_owner="rogue")
    lane_a, lane_b = (create("test.instruction", now=now, conversation_id=conversation.pk) for _ in range(2))
    claim(now)
    with pytest.raises(IntegrityError), transaction.atomic():
        AutomationTask.objects.filter(pk=lane_b.pk).update(status=S.LEASED, lease_owner="rogue")
    assert first.pk and lane_a.pk


def _race_setup(now):
    connected("laptop")
    connected("desktop")
    contested = outbound(ConversationFactory(), now=now)
    rivals_pick = outbound(ConversationFactory(), now=now)  # same target as contested
    other_target = outbound(ConversationFactory(), client_id="desktop", now=now)
    local = create(now=now)
    return contested, rivals_pick, other_target, local


def test_a_task_whose_target_another_dispatcher_took_meanwhile_is_left_out_of_the_batch(now, monkeypatch):
    """Another dispatcher leases a task of the same target between this claim's
    read and its update: the update's own conditions leave the contested task
    out and lease the rest in the same statement."""
    from automation.services import claim as claim_module

    contested, rivals_pick, other_target, local = _race_setup(now)
    batches, real_lease = [], claim_module.tasks_lease

    def lease_after_the_rival(seen, **kwargs):
        if not batches:
            task_lease(rivals_pick.pk, lease_owner="rival", lease_until=now + LEASE, now=now)
        batches.append(sorted(seen))
        return real_lease(seen, **kwargs)

    monkeypatch.setattr(claim_module, "tasks_lease", lease_after_the_rival)
    claimed = claim(now)

    assert batches == [sorted([contested.pk, other_target.pk, local.pk])]  # one per target, one statement
    assert sorted(claimed) == sorted([other_target.pk, local.pk])
    assert AutomationTask.objects.get(pk=contested.pk).status == S.PENDING
    assert AutomationTask.objects.get(pk=rivals_pick.pk).lease_owner == "rival"


def test_a_batch_the_unique_index_refuses_is_leased_one_task_at_a_time(now, monkeypatch):
    """On PostgreSQL a rival's lease not yet committed is invisible to the
    update's conditions, and the in-flight index refuses the whole batch: the
    claim then leases each candidate on its own, and loses only the contested one."""
    from django.db import IntegrityError

    from automation.services import claim as claim_module

    contested, rivals_pick, other_target, local = _race_setup(now)
    batches, real_lease = [], claim_module.tasks_lease

    def refused_once(seen, **kwargs):
        batches.append(sorted(seen))
        if len(batches) == 1:
            task_lease(rivals_pick.pk, lease_owner="rival", lease_until=now + LEASE, now=now)
            raise IntegrityError("duplicate key value violates unique constraint (as the rival's commit lands)")
        if seen.keys() == {contested.pk}:
            raise IntegrityError("duplicate key value violates unique constraint")
        return real_lease(seen, **kwargs)

    monkeypatch.setattr(claim_module, "tasks_lease", refused_once)
    claimed = claim(now)

    assert len(batches) == 4  # the refused batch, then each of its three candidates
    assert sorted(claimed) == sorted([other_target.pk, local.pk])
    assert AutomationTask.objects.get(pk=contested.pk).status == S.PENDING
    assert AutomationTask.objects.filter(status=S.LEASED, lease_owner="d1").count() == 2


@pytest.mark.parametrize("paused", [True, False])
def test_a_paused_kind_is_not_claimed_and_others_are(now, paused):
    local = create("test.local", now=now)
    other = create("test.instruction", now=now)
    if paused:
        assert kind_pause_set(kind="test.local", is_paused=True, actor="alice")
    claimed = claim(now)
    assert other.pk in claimed
    assert (local.pk in claimed) is not paused


def test_resuming_a_kind_lets_its_waiting_tasks_be_claimed(now):
    kind_pause_set(kind="test.local", is_paused=True, actor="alice")
    task = create("test.local", now=now)
    assert claim(now) == []
    assert kind_pause_set(kind="test.local", is_paused=False, actor="alice")
    assert not kind_pause_set(kind="test.local", is_paused=False, actor="alice")
    assert claim(now) == [task.pk]


def test_a_claim_compiles_its_statements_once_and_an_empty_one_costs_one_statement(now):
    from unittest import mock

    from django.db import connection
    from django.db.models.sql.compiler import SQLCompiler
    from django.test.utils import CaptureQueriesContext

    conversation = ConversationFactory()
    connected("laptop")
    first = outbound(conversation, now=now)
    assert claim(now) == [first.pk]  # compiled here, and kept
    finish(first.pk, now)
    second = outbound(conversation, now=now)
    with mock.patch.object(SQLCompiler, "as_sql", autospec=True, side_effect=SQLCompiler.as_sql) as compiled:
        assert claim(now + 1) == [second.pk]
        assert compiled.call_count == 0  # the read and the lease's sub-select, both as compiled before
        with CaptureQueriesContext(connection) as queries:
            assert claim(now + 2) == []
        assert len(queries) == 1
        assert compiled.call_count == 0
