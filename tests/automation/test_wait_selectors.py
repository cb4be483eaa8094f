"""Why a task waits (``automation.wait_selectors``): each reason from a real situation, the claim's own rules."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from automation import wait_selectors as waits
from automation.models import TaskStatus
from automation.services import operator
from automation.services import transitions as tr
from automation.services.claim import tasks_claim
from automation.services.dispatcher_state import dispatcher_pause_set, kind_pause_set
from automation.services.tasks import task_create
from core.clock import now_ms
from tests.factories import ConversationFactory, PluginClientFactory, lease_of, task_lease

pytestmark = pytest.mark.django_db

S = TaskStatus
LEASE = 60_000


@pytest.fixture
def now():
    return now_ms()


def create(kind="test.instruction", now=None, **kwargs):
    task, _ = task_create(kind=kind, payload=kwargs.pop("payload", {}), actor="test", now=now, **kwargs)
    return task


def connected(client_id):
    return PluginClientFactory(client_id=client_id, connected=True,
                               last_seen_at=timezone.now() + dt.timedelta(hours=1))


def outbound(conversation, client_id="laptop", now=None):
    return create("test.outbound", now=now, conversation_id=conversation.pk, target_client_id=client_id,
                  target_platform="claude", target_conversation_id=conversation.remote_id)


def code_of(task, now):
    wait = waits.task_wait(task_id=task.pk, now=now)
    return wait.code if wait is not None else None


def start(task, now):
    task_lease(task.pk, lease_owner="d1", lease_until=now + LEASE, now=now)
    return tr.task_start(task.pk, lease=lease_of(task.pk), lease_until=now + LEASE, now=now)


def test_a_block_behind_one_waiting_for_approval_names_that_one(now):
    conversation = ConversationFactory()
    held = create(status=S.BLOCKED, conversation_id=conversation.pk, now=now)
    second = create(conversation_id=conversation.pk, now=now)
    third = create(conversation_id=conversation.pk, now=now)
    other = create(conversation_id=ConversationFactory().pk, now=now)

    found = waits.task_waits(task_ids=[held.pk, second.pk, third.pk, other.pk], now=now)
    assert found[held.pk].code == waits.APPROVAL
    assert (found[second.pk].code, found[second.pk].ahead_task_id) == (waits.BEHIND_APPROVAL, held.pk)
    assert (found[third.pk].code, found[third.pk].ahead_task_id) == (waits.BEHIND_APPROVAL, held.pk)
    assert held.pk[:8] in found[second.pk].text and "approval" in found[second.pk].text
    assert other.pk not in found  # another conversation runs in parallel

    operator.tasks_approve(task_ids=[held.pk], actor="admin", has_perm=operator.has_every_permission)
    behind = waits.task_wait(task_id=second.pk, now=now)
    assert (behind.code, behind.ahead_task_id) == (waits.BEHIND_EARLIER, held.pk)
    assert "pending" in behind.text


def test_the_held_block_is_named_before_an_unfinished_one_ahead_of_it(now):
    conversation = ConversationFactory()
    running = create(conversation_id=conversation.pk, now=now)
    start(running, now)
    held = create(status=S.BLOCKED, conversation_id=conversation.pk, now=now)
    last = create(conversation_id=conversation.pk, now=now)
    wait = waits.task_wait(task_id=last.pk, now=now)
    assert (wait.code, wait.ahead_task_id) == (waits.BEHIND_APPROVAL, held.pk)
    assert code_of(running, now) is None


def test_the_fields_asked_of_the_task_ahead_come_in_the_same_statement(now):
    conversation = ConversationFactory()
    held = create(status=S.BLOCKED, conversation_id=conversation.pk, now=now)
    later = create(conversation_id=conversation.pk, now=now)
    with CaptureQueriesContext(connection) as queries:
        wait = waits.task_wait(task_id=later.pk, now=now)
    assert len(queries) == 1
    assert waits.task_waits(task_ids=[later.pk], now=now, ahead_fields={"kind": "kind", "state": "status"})[
        later.pk].ahead == {"kind": "test.instruction", "state": S.BLOCKED}
    assert wait.ahead == {} and wait.ahead_task_id == held.pk


def test_pauses_of_the_conversation_the_kind_and_the_dispatcher(now):
    conversation = ConversationFactory(paused=True)
    task = create(conversation_id=conversation.pk, now=now)
    assert code_of(task, now) == waits.CONVERSATION_PAUSED
    kind_pause_set(kind="test.instruction", is_paused=True, actor="admin")
    assert code_of(task, now) == waits.KIND_PAUSED
    assert "test.instruction" in waits.task_wait(task_id=task.pk, now=now).text
    dispatcher_pause_set(is_paused=True, actor="admin")
    assert code_of(task, now) == waits.DISPATCHER_PAUSED


def test_a_delivery_waits_for_its_plugin_then_for_its_target(now):
    conversation = ConversationFactory()
    delivery = outbound(conversation, client_id="laptop", now=now)
    wait = waits.task_wait(task_id=delivery.pk, now=now)
    assert wait.code == waits.NO_PLUGIN and "laptop" in wait.text
    connected("laptop")
    in_flight = outbound(ConversationFactory(), client_id="laptop", now=now - 1)
    start(in_flight, now)
    wait = waits.task_wait(task_id=delivery.pk, now=now)
    assert (wait.code, wait.ahead_task_id) == (waits.TARGET_BUSY, in_flight.pk)


def test_a_retry_and_a_task_not_yet_due_wait_out_their_time(now):
    retrying = create(kind="test.local", now=now)
    start(retrying, now)
    tr.task_retry_later(retrying.pk, lease=lease_of(retrying.pk), error="flaky", retry_at=now + 5000,
                        backoff_ms=5000, jitter_ms=0, now=now)
    later = create(kind="test.local", now=now, execute_after=now + 60_000)
    retry_wait = waits.task_wait(task_id=retrying.pk, now=now)
    assert (retry_wait.code, retry_wait.until) == (waits.BACKOFF, now + 5000)
    assert "backoff" in retry_wait.text
    assert (code_of(later, now), waits.task_wait(task_id=later.pk, now=now).until) == (waits.BACKOFF, now + 60_000)
    assert code_of(retrying, now + 5000) is None  # due: the next claim takes it


def test_a_leased_task_waits_for_its_worker_and_a_running_or_finished_one_for_nothing(now):
    leased = create(kind="test.local", now=now)
    task_lease(leased.pk, lease_owner="d1", lease_until=now + LEASE, now=now)
    wait = waits.task_wait(task_id=leased.pk, now=now)
    assert (wait.code, wait.until) == (waits.LEASED, now + LEASE) and "d1" in wait.text
    running = start(create(kind="test.local", now=now), now)
    assert code_of(running, now) is None
    assert code_of(tr.task_succeed(running.pk, lease=lease_of(running.pk), result=None, now=now), now) is None
    assert waits.task_waits(task_ids=["no-such-task"], now=now) == {}


def test_a_kind_without_an_executor_says_nothing_runs_it(now):
    assert code_of(create(kind="test.unrunnable", now=now), now) == waits.NO_EXECUTOR


def test_what_waits_for_nothing_is_exactly_what_the_claim_takes(now):
    connected("laptop")
    busy = ConversationFactory()
    held = create(status=S.BLOCKED, conversation_id=busy.pk, now=now)
    tasks = [
        held, create(conversation_id=busy.pk, now=now),
        create(conversation_id=ConversationFactory(paused=True).pk, now=now),
        create(conversation_id=ConversationFactory().pk, now=now),
        create(kind="test.local", now=now, execute_after=now + 1000),
        create(kind="test.local", now=now),
        outbound(ConversationFactory(), client_id="laptop", now=now),
        outbound(ConversationFactory(), client_id="desk", now=now),
    ]
    found = waits.task_waits(task_ids=[task.pk for task in tasks], now=now)
    free = {task.pk for task in tasks if task.pk not in found}
    claimed = {task.pk for task in tasks_claim(lease_owner="d1", now=now, limit=50, lease_ms=LEASE)}
    assert claimed == free and len(free) == 3


def test_many_tasks_cost_one_statement_per_batch(now):
    conversation = ConversationFactory()
    create(status=S.BLOCKED, conversation_id=conversation.pk, now=now)
    few = [create(conversation_id=conversation.pk, now=now).pk for _ in range(3)]
    with CaptureQueriesContext(connection) as queries:
        assert len(waits.task_waits(task_ids=few, now=now, ahead_fields={"kind": "kind"})) == 3
    assert len(queries) == 1
    many = few + [create(conversation_id=ConversationFactory().pk, now=now, execute_after=now + 1).pk
                  for _ in range(waits.BATCH + 20)]
    with CaptureQueriesContext(connection) as queries:
        found = waits.task_waits(task_ids=many, now=now, ahead_fields={"kind": "kind"})
    assert len(queries) == 2  # one statement per BATCH tasks
    assert len(found) == len(many)
