"""Running claimed tasks: outcomes, retries, heartbeats, cancellation, lost leases."""

import dataclasses
import datetime as dt
import random
import re
import time

import pytest
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from automation.dispatcher import Dispatcher, DispatcherConfig
from automation.models import AutomationTask, DispatcherState, LeaseLoss, TaskStatus
from automation.services import transitions as tr
from automation.services.dispatcher_state import kind_pause_set
from automation.services.tasks import task_create
from core.clock import now_ms
from tests.factories import ConversationFactory, MessageFactory, PluginClientFactory, lease_of, task_lease

pytestmark = pytest.mark.django_db(transaction=True)

S = TaskStatus


class Clock:
    """A clock tests move by hand; it starts at the real time."""

    def __init__(self):
        self.now = now_ms()

    def __call__(self):
        return self.now


def make_dispatcher(clock=None, owner="d1", seed=1, **overrides):
    config = {
        "max_tasks_per_tick": 20, "lease_ms": 60_000, "outbound_jitter_max_ms": 0,
        "retry_backoff_seconds": (5, 15, 45), "retry_jitter_max_ms": 1000, **overrides,
    }
    return Dispatcher(owner=owner, config=DispatcherConfig(**config), clock=clock or now_ms,
                      rng=random.Random(seed))


def create(kind="test.local", **payload_and_fields):
    fields = {k: payload_and_fields.pop(k) for k in list(payload_and_fields)
              if k in ("conversation_id", "target_client_id", "target_platform", "max_attempts", "now")}
    task, _ = task_create(kind=kind, payload=payload_and_fields, actor="test", **fields)
    return task


def run_tick(dispatcher):
    report = dispatcher.tick()
    assert dispatcher.wait_idle(30)
    return report


def one_tick():
    """One tick of a fresh dispatcher, its tasks run to their end, then stopped: its report and itself."""
    dispatcher = make_dispatcher()
    try:
        return run_tick(dispatcher), dispatcher
    finally:
        dispatcher.stop(grace=5)


def reload(task):
    return AutomationTask.objects.get(pk=task.pk)


def test_success_stores_the_result():
    task = create(n=7)
    dispatcher = make_dispatcher()
    assert run_tick(dispatcher).claimed == [task.pk]
    done = reload(task)
    assert (done.status, done.result_json, done.attempt_count) == (S.SUCCEEDED, '{"echo": 7}', 1)
    assert [e.action for e in done.events.all()] == ["create", "lease", "start", "succeed"]


def test_a_retryable_failure_waits_the_backoff_plus_jitter_then_fails_when_attempts_run_out():
    clock = Clock()
    task = create(outcome="retryable", now=clock.now)
    dispatcher = make_dispatcher(clock)

    expected_backoffs = [5000, 15000]
    for backoff in expected_backoffs:
        run_tick(dispatcher)
        waiting = reload(task)
        event = waiting.events.last()
        assert (waiting.status, event.backoff_ms) == (S.RETRY_WAIT, backoff)
        assert 0 <= event.jitter_ms <= 1000
        assert waiting.execute_after == clock.now + backoff + event.jitter_ms
        assert run_tick(dispatcher).claimed == []  # not due yet
        clock.now = waiting.execute_after

    run_tick(dispatcher)
    failed = reload(task)
    assert (failed.status, failed.attempt_count) == (S.FAILED, 3)
    assert failed.last_error == "flaky (attempt 3 of 3, none left)"


def test_a_terminal_failure_is_not_retried():
    task = create(outcome="terminal")
    run_tick(make_dispatcher())
    failed = reload(task)
    assert (failed.status, failed.attempt_count, failed.last_error) == (S.FAILED, 1, "broken")


def test_an_executor_that_raises_fails_its_task_and_the_dispatcher_goes_on():
    bad, good = create(**{"raise": "boom"}), create(n=1)
    run_tick(make_dispatcher())
    assert reload(bad).status == S.FAILED
    assert reload(bad).last_error == "executor error: RuntimeError: boom"
    assert reload(good).status == S.SUCCEEDED


def test_a_slow_target_does_not_delay_another():
    for client_id in ("slow", "fast"):
        PluginClientFactory(client_id=client_id, connected=True, last_seen_at=timezone.now() + dt.timedelta(hours=1))
    slow = create("test.outbound", sleep=2, target_client_id="slow", target_platform="claude",
                  conversation_id=ConversationFactory().pk)
    fast = create("test.outbound", target_client_id="fast", target_platform="claude",
                  conversation_id=ConversationFactory().pk)
    dispatcher = make_dispatcher()
    dispatcher.tick()
    deadline = time.monotonic() + 1.5
    while reload(fast).status != S.SUCCEEDED and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reload(fast).status == S.SUCCEEDED
    assert reload(slow).status == S.RUNNING
    assert dispatcher.wait_idle(10)
    assert reload(slow).status == S.SUCCEEDED


def test_outbound_jitter_is_waited_and_recorded():
    PluginClientFactory(client_id="laptop", connected=True, last_seen_at=timezone.now() + dt.timedelta(hours=1))
    task = create("test.outbound", target_client_id="laptop", target_platform="claude",
                  conversation_id=ConversationFactory().pk)
    run_tick(make_dispatcher(outbound_jitter_max_ms=300, seed=5))
    start = reload(task).events.get(action="start")
    assert 0 <= start.jitter_ms <= 300
    assert start.jitter_ms == random.Random(5).randint(0, 300)


def test_a_client_gone_between_claim_and_send_gets_its_task_back_unstarted():
    client = PluginClientFactory(client_id="laptop", connected=True,
                                 last_seen_at=timezone.now() + dt.timedelta(hours=1))
    task = create("test.outbound", target_client_id="laptop", target_platform="claude",
                  conversation_id=ConversationFactory().pk)
    dispatcher = make_dispatcher(outbound_jitter_max_ms=500, seed=3)  # jitter > 0: time to vanish
    dispatcher.tick()
    client.connected = False
    client.save()
    assert dispatcher.wait_idle(5)

    released = reload(task)
    assert (released.status, released.attempt_count, released.target_client_id) == (S.PENDING, 0, "laptop")
    assert released.events.last().detail == {"reason": "client offline"}


def test_a_heartbeat_renews_the_lease_of_a_long_task():
    task = create(sleep=1.2)
    dispatcher = make_dispatcher(lease_ms=600)  # heartbeat every 0.2 s
    dispatcher.tick()
    first_until = renewed_until = None
    deadline = time.monotonic() + 5
    while renewed_until is None and time.monotonic() < deadline:
        current = reload(task)
        if current.status == S.RUNNING:
            first_until = first_until or current.lease_until
            if current.lease_until > first_until:
                renewed_until = current.lease_until
        time.sleep(0.05)
    assert dispatcher.wait_idle(10)
    done = reload(task)
    assert done.status == S.SUCCEEDED
    assert renewed_until is not None, "the lease was never renewed"
    # A renewal is not a change of state: the timeline has none.
    assert not done.events.filter(action="heartbeat").exists()


def test_cancelling_a_running_task_stops_it_at_the_next_heartbeat():
    task = create(sleep=30)
    dispatcher = make_dispatcher(lease_ms=600)
    dispatcher.tick()
    while reload(task).status != S.RUNNING:
        time.sleep(0.02)
    started = time.monotonic()
    tr.task_cancel(task.pk, actor="alice")
    assert dispatcher.wait_idle(5)
    assert time.monotonic() - started < 2
    cancelled = reload(task)
    assert (cancelled.status, cancelled.result_json) == (S.CANCELLED, None)
    assert cancelled.events.last().action == "cancel"


def test_a_worker_that_lost_its_lease_cannot_overwrite_the_outcome():
    clock = Clock()
    task = create(sleep=1.0, n=1, now=clock.now)
    slow = make_dispatcher(clock, owner="slow")  # heartbeat every 20 s: none before it ends
    slow.tick()
    while reload(task).status != S.RUNNING:
        time.sleep(0.02)

    # Its lease expires (on the injected clock); another dispatcher reclaims and reruns it.
    clock.now += 61_000
    other = make_dispatcher(clock, owner="other")
    other.tick()
    clock.now += 10 * 60_000
    AutomationTask.objects.filter(pk=task.pk).update(payload_json='{"n": 2}')
    report = other.tick()
    assert report.claimed == [task.pk]
    assert other.wait_idle(10) and slow.wait_idle(10)

    final = reload(task)
    assert (final.status, final.result_json, final.lease_owner) == (S.SUCCEEDED, '{"echo": 2}', None)
    assert final.events.filter(action="succeed").get().actor == "other"


def test_a_stale_worker_of_the_same_process_is_refused_by_its_lease_and_its_loss_counted():
    """Two workers of one process (one owner) hold two leases: only the current one finishes the task."""
    clock = Clock()
    task = create(sleep=1.0, n=1, now=clock.now)
    first = make_dispatcher(clock, owner="vm:1:a")  # heartbeat every 20 s: none before it ends
    first.tick()
    while reload(task).status != S.RUNNING:
        time.sleep(0.02)
    stale = reload(task).lease

    # Its lease expires (on the injected clock); the same process reclaims and leases it again.
    clock.now += 61_000
    second = make_dispatcher(clock, owner="vm:1:a")
    second.tick()
    clock.now += 10 * 60_000
    # The second run outlasts the first, so the stale worker writes its outcome first.
    AutomationTask.objects.filter(pk=task.pk).update(payload_json='{"n": 2, "sleep": 2.0}')
    assert second.tick().claimed == [task.pk]
    assert reload(task).lease.token != stale.token
    assert second.wait_idle(10) and first.wait_idle(10)

    final = reload(task)
    assert (final.status, final.result_json) == (S.SUCCEEDED, '{"echo": 2}')
    assert final.events.filter(action="succeed").count() == 1
    assert dict(LeaseLoss.objects.values_list("kind", "count")) == {"test.local": 1}


def test_an_operators_cancel_under_a_running_worker_is_not_a_lost_lease():
    task = create(sleep=30)
    dispatcher = make_dispatcher(lease_ms=600)
    dispatcher.tick()
    while reload(task).status != S.RUNNING:
        time.sleep(0.02)
    tr.task_cancel(task.pk, actor="alice")
    assert dispatcher.wait_idle(5)
    assert not LeaseLoss.objects.exists()


def test_an_outcome_written_before_its_connection_died_is_not_written_again_nor_a_lost_lease(monkeypatch):
    """The first write commits, then its connection dies before it returns: the retry finds the lease ended."""
    from automation import dispatcher as dispatcher_module

    real = dispatcher_module.transition_and_follow_up
    calls = []

    def commits_then_cut(transition, *, actor):
        calls.append(actor)
        task = real(transition, actor=actor)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return task

    monkeypatch.setattr(dispatcher_module, "transition_and_follow_up", commits_then_cut)
    monkeypatch.setattr(dispatcher_module, "RECORD_RETRY_SECONDS", 0.01)
    task = create(n=3)
    one_tick()
    done = reload(task)
    assert (done.status, done.result_json, len(calls)) == (S.SUCCEEDED, '{"echo": 3}', 2)
    assert done.events.filter(action="succeed").count() == 1
    assert not LeaseLoss.objects.exists()


def test_stop_gives_back_tasks_waiting_out_their_jitter():
    PluginClientFactory(client_id="laptop", connected=True, last_seen_at=timezone.now() + dt.timedelta(hours=1))
    task = create("test.outbound", target_client_id="laptop", target_platform="claude",
                  conversation_id=ConversationFactory().pk)
    dispatcher = make_dispatcher(outbound_jitter_max_ms=5000, seed=9)
    dispatcher.tick()
    time.sleep(0.1)
    assert dispatcher.stop(grace=5)
    released = reload(task)
    assert (released.status, released.attempt_count) == (S.PENDING, 0)
    assert released.events.last().detail == {"reason": "dispatcher stopping"}


def test_stop_waits_for_running_tasks_then_claims_nothing():
    task = create(sleep=0.3)
    dispatcher = make_dispatcher()
    dispatcher.tick()
    assert dispatcher.stop(grace=5)
    assert reload(task).status == S.SUCCEEDED
    later = create()
    assert dispatcher.tick().claimed == []
    assert reload(later).status == S.PENDING


def test_a_tick_writes_nothing_of_liveness(client):
    """Liveness is the loop's heartbeat (``automation.loop``), at most every half tick, not a write per tick."""
    with CaptureQueriesContext(connection) as queries:
        make_dispatcher().tick()
    # The claim reads the global pause; nothing writes a dispatcher-wide row or a loop's row.
    assert not [q["sql"] for q in queries if re.search(r'(UPDATE|INSERT INTO)\s+"automation_dispatcher', q["sql"])]
    assert not DispatcherState.objects.exists()
    assert client.get("/healthz").json()["dispatcher_last_tick_age_seconds"] is None


def test_a_tick_runs_no_more_than_the_free_slots():
    for _ in range(5):
        create(sleep=0.5)
    dispatcher = make_dispatcher(max_tasks_per_tick=3)
    assert len(dispatcher.tick().claimed) == 3
    assert dispatcher.tick().claimed == []  # all three slots still busy
    assert dispatcher.wait_idle(5)
    assert len(dispatcher.tick().claimed) == 2
    assert dispatcher.wait_idle(5)


def test_an_outbound_task_with_no_route_fails_at_once_instead_of_waiting_for_a_client():
    conversation = ConversationFactory()  # never seen through a plugin client: no link, no target
    message = MessageFactory(conversation=conversation)
    task = create("instruction.deliver", conversation_id=conversation.pk, message_id=message.pk)
    assert task.target_client_id is None
    dispatcher = make_dispatcher()
    run_tick(dispatcher)
    done = reload(task)
    assert (done.status, done.attempt_count) == (S.FAILED, 1)
    assert "no route for the conversation" in done.last_error
    assert not done.events.filter(action="release").exists()  # never put back to wait for nobody
    dispatcher.stop(grace=0)


def test_the_reclaim_of_an_interrupted_run_waits_the_injected_configs_backoff(settings):
    # The dispatcher's config decides the wait, not the settings it was not built from.
    settings.CONDUCTOR_RETRY_BACKOFF_SECONDS = (999,)
    clock = Clock()
    task = create(kind="test.local", sleep=0, now=clock.now)
    task_lease(task.pk, lease_owner="gone", lease_until=clock.now + 1000, now=clock.now)
    tr.task_start(task.pk, lease=lease_of(task.pk), lease_until=clock.now + 1000, now=clock.now)
    clock.now += 2000
    dispatcher = make_dispatcher(clock, retry_backoff_seconds=(7,), retry_jitter_max_ms=0)
    try:
        assert dispatcher.tick().reclaimed == [task.pk]
    finally:
        dispatcher.stop(grace=5)
    reclaimed = reload(task)
    assert (reclaimed.status, reclaimed.execute_after) == (S.RETRY_WAIT, clock.now + 7000)
    assert reclaimed.events.last().backoff_ms == 7000


def test_an_outcome_and_its_kinds_follow_up_commit_together(monkeypatch):
    from automation.kinds import kinds

    calls = []

    def follow_up(task, actor):
        calls.append((task.pk, task.status, actor))
        raise RuntimeError("follow-up broke")

    spec = kinds.get("test.local")
    monkeypatch.setitem(kinds._entries, "test.local", dataclasses.replace(spec, follow_up=follow_up))
    task = create(kind="test.local")
    one_tick()
    assert calls == [(task.pk, S.SUCCEEDED, "d1")]
    # The outcome rolled back with its follow-up: the task is reclaimed as interrupted later.
    assert reload(task).status == S.RUNNING


def follow_up_creating(kind="test.local", **fields):
    """A follow-up that creates one task of ``kind`` after each task that did not come from it."""

    def follow_up(task, actor):
        if "after" not in task.payload:
            task_create(kind=kind, payload={"after": task.pk}, actor=actor, **fields)

    return follow_up


def with_follow_up(monkeypatch, kind, follow_up):
    from automation.kinds import kinds

    monkeypatch.setitem(kinds._entries, kind, dataclasses.replace(kinds.get(kind), follow_up=follow_up))


def test_a_task_created_while_running_a_task_wakes_its_own_dispatcher_directly(monkeypatch):
    from unittest import mock

    with_follow_up(monkeypatch, "test.local", follow_up_creating())
    create(kind="test.local")
    dispatcher = make_dispatcher()
    try:
        with mock.patch("automation.wake.dispatcher_wake") as across_processes:
            run_tick(dispatcher)
            assert dispatcher.wake.is_set()
            across_processes.assert_not_called()
            # Outside a dispatcher's task thread, creating a task wakes across processes.
            create(kind="test.unrunnable")
            across_processes.assert_called_once_with()
    finally:
        dispatcher.stop(grace=5)
    assert AutomationTask.objects.filter(kind="test.local").count() == 2


def test_a_task_a_follow_up_created_runs_next_in_the_same_thread_without_a_tick(monkeypatch):
    with_follow_up(monkeypatch, "test.local", follow_up_creating())
    first = create(kind="test.local")
    report, _ = one_tick()
    assert report.claimed == [first.pk]  # one tick, one claim
    second = AutomationTask.objects.get(kind="test.local", payload_json__contains=first.pk)
    assert reload(second).status == S.SUCCEEDED
    lease = second.events.get(action="lease")
    # One lease like any other, held by this dispatcher, saying what it continued.
    assert (lease.actor, lease.detail["continues"]) == ("d1", first.pk)
    assert [e.action for e in second.events.all()] == ["create", "lease", "start", "succeed"]
    assert lease.at >= first.events.get(action="succeed").at


def test_a_continuation_keeps_the_per_target_limit_and_leaves_a_busy_target_to_the_claim(monkeypatch):
    PluginClientFactory(client_id="laptop", connected=True, last_seen_at=timezone.now() + dt.timedelta(hours=1))
    route = {"target_client_id": "laptop", "target_platform": "claude"}
    busy = create("test.outbound", conversation_id=ConversationFactory().pk, **route)
    task_lease(busy.pk, lease_owner="elsewhere", lease_until=now_ms() + 60_000)  # another dispatcher is delivering to the laptop
    with_follow_up(monkeypatch, "test.local",
                   follow_up_creating("test.outbound", conversation_id=ConversationFactory().pk, **route))
    first = create(kind="test.local")
    _, dispatcher = one_tick()
    assert reload(first).status == S.SUCCEEDED
    waiting = AutomationTask.objects.get(kind="test.outbound", payload_json__contains=first.pk)
    assert (waiting.status, waiting.lease_owner) == (S.PENDING, None)
    assert dispatcher.wake.is_set()  # the loop's claim takes it once the target is free


def test_a_continuation_leaves_a_task_of_a_paused_conversation_waiting(monkeypatch):
    conversation = ConversationFactory(paused=True)
    with_follow_up(monkeypatch, "test.local", follow_up_creating(conversation_id=conversation.pk))
    first = create(kind="test.local")
    one_tick()
    waiting = AutomationTask.objects.get(kind="test.local", payload_json__contains=first.pk)
    assert waiting.status == S.PENDING


def test_a_stopping_dispatcher_continues_into_nothing(monkeypatch):
    with_follow_up(monkeypatch, "test.local", follow_up_creating())
    first = create(kind="test.local", sleep=0.5)
    dispatcher = make_dispatcher()
    dispatcher.tick()
    time.sleep(0.1)
    assert dispatcher.stop(grace=10)
    assert reload(first).status == S.SUCCEEDED
    assert AutomationTask.objects.get(payload_json__contains=first.pk).status == S.PENDING


def test_an_outcome_whose_write_loses_the_database_connection_is_written_again(monkeypatch):
    """The tool ran: a connection cut under the write must not turn it into an interrupted run."""
    from automation import dispatcher as dispatcher_module

    writes = []
    succeed = dispatcher_module.task_succeed

    def succeed_after_a_cut(*args, **kwargs):
        writes.append(args)
        if len(writes) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return succeed(*args, **kwargs)

    monkeypatch.setattr(dispatcher_module, "task_succeed", succeed_after_a_cut)
    monkeypatch.setattr(dispatcher_module, "RECORD_RETRY_SECONDS", 0)
    task = create(n=3, idempotent=False)
    run_tick(make_dispatcher())
    done = reload(task)
    assert (done.status, done.attempt_count, done.result_json) == (S.SUCCEEDED, 1, '{"echo": 3}')
    assert len(writes) == 2


@pytest.mark.parametrize("idempotent,status,attempts", [(True, S.RETRY_WAIT, 0), (False, S.FAILED, 1)])
def test_a_lost_database_connection_under_the_executor_is_an_interruption(monkeypatch, idempotent, status, attempts):
    """An idempotent task waits for the database, using no attempt; another may have acted: it fails."""
    from automation.kinds import kinds

    def executor(ctx):
        raise OperationalError("terminating connection due to administrator command")

    spec = kinds.get("test.local")
    monkeypatch.setitem(kinds._entries, "test.local", dataclasses.replace(spec, executor=executor))
    task = create(idempotent=idempotent)
    run_tick(make_dispatcher())
    after = reload(task)
    assert (after.status, after.attempt_count) == (status, attempts)
    assert "interrupted: the database connection failed while it ran" in after.last_error
    if idempotent:
        assert after.last_error.startswith("waiting for the database: ")
        assert after.events.last().detail["part"] == "the database"


def test_a_channel_layer_that_refuses_makes_the_task_wait_without_an_attempt_until_it_answers(monkeypatch):
    """Redis away for a moment: the delivery is tried again when it is back, with all its attempts."""
    from automation.kinds import kinds
    from core.layer_send import ChannelLayerUnavailable

    layer_up = [False]

    def executor(ctx):
        if not layer_up[0]:
            raise ChannelLayerUnavailable("ConnectionError: Error 111 connecting to 127.0.0.1:6379")
        from automation.outcomes import Success

        return Success({"sent": True})

    spec = kinds.get("test.local")
    monkeypatch.setitem(kinds._entries, "test.local", dataclasses.replace(spec, executor=executor))
    task = create(idempotent=True)
    dispatcher = make_dispatcher()
    for _ in range(5):  # more waits than the task has attempts
        run_tick(dispatcher)
        waiting = reload(task)
        assert (waiting.status, waiting.attempt_count) == (S.RETRY_WAIT, 0)
        assert waiting.last_error.startswith("waiting for the channel layer (")
        assert "the channel layer did not take a message: ConnectionError: Error 111" in waiting.last_error
        assert waiting.part_away_since is not None
        AutomationTask.objects.filter(pk=task.pk).update(execute_after=0)  # due again now
    layer_up[0] = True
    run_tick(dispatcher)
    done = reload(task)
    assert (done.status, done.attempt_count, done.part_away_since) == (S.SUCCEEDED, 1, None)


def test_a_part_away_longer_than_the_limit_fails_the_task_naming_it(monkeypatch):
    from automation.kinds import kinds
    from core.layer_send import ChannelLayerUnavailable

    def executor(ctx):
        raise ChannelLayerUnavailable("TimeoutError: ")

    spec = kinds.get("test.local")
    monkeypatch.setitem(kinds._entries, "test.local", dataclasses.replace(spec, executor=executor))
    task = create(idempotent=True)
    dispatcher = make_dispatcher()
    run_tick(dispatcher)
    AutomationTask.objects.filter(pk=task.pk).update(
        execute_after=0, part_away_since=reload(task).part_away_since - dispatcher.config.part_away_max_ms - 1,
    )
    run_tick(dispatcher)
    failed = reload(task)
    assert failed.status == S.FAILED
    assert failed.last_error.startswith("the channel layer (")
    assert " did not answer for 15 min: " in failed.last_error


@pytest.mark.parametrize("paused", [True, False])
def test_the_dispatcher_runs_no_task_of_a_paused_kind(paused):
    if paused:
        kind_pause_set(kind="test.local", is_paused=True, actor="alice")
    task = create("test.local")
    run_tick(make_dispatcher())
    assert reload(task).status == (S.PENDING if paused else S.SUCCEEDED)
