"""The dispatcher loop: its lease and standby, its ticks, wake-ups, hand-over and stopping."""

import itertools
import os
import signal
import threading
import time

import pytest

from automation.dispatcher import Dispatcher, DispatcherConfig
from automation.loop import LEASE_MIN_SECONDS, dispatcher_loop, lease_seconds
from automation.models import AutomationTask, DispatcherState, TaskStatus
from automation.services.tasks import task_create
from automation.wake import dispatcher_wake
from core.clock import now_ms
from tests.procs import spawn_process

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

S = TaskStatus
FOREVER = 2**62


class RecordingDispatcher(Dispatcher):
    def __init__(self, *, failing_ticks=0, **kwargs):
        kwargs.setdefault("config", DispatcherConfig(
            max_tasks_per_tick=20, lease_ms=60_000, outbound_jitter_max_ms=0,
            retry_backoff_seconds=(0,), retry_jitter_max_ms=0,
        ))
        super().__init__(**kwargs)
        self.tick_times = []
        self.failing_ticks = failing_ticks

    def tick(self):
        if self.failing_ticks:
            self.failing_ticks -= 1
            raise RuntimeError("the database went away")
        self.tick_times.append(time.monotonic())
        return super().tick()


class LoopThread:
    """A dispatcher loop in a thread of this process, stopped by ``stop()``."""

    started = []

    def __init__(self, owner, *, tick_seconds=0.1, listen_for_wake=False, **kwargs):
        self.dispatcher = kwargs.pop("dispatcher", None) or RecordingDispatcher(owner=owner)
        self.stop_event = threading.Event()
        self.report = None
        self._thread = threading.Thread(target=self._run, kwargs=dict(
            stop=self.stop_event, tick_seconds=tick_seconds, dispatcher=self.dispatcher,
            listen_for_wake=listen_for_wake, **kwargs,
        ))
        self._thread.start()
        LoopThread.started.append(self)

    def _run(self, **kwargs):
        self.report = dispatcher_loop(**kwargs)

    def stop(self, timeout=20):
        self.stop_event.set()
        return self.join(timeout)

    def join(self, timeout=20):
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the loop did not end"
        return self.report


@pytest.fixture(autouse=True)
def stop_every_loop():
    """No loop outlives its test, whatever the test's outcome."""
    yield
    while LoopThread.started:
        loop = LoopThread.started.pop()
        loop.stop_event.set()
        loop._thread.join(20)


def state():
    return DispatcherState.objects.filter(pk=1).first() or DispatcherState(pk=1)


def wait_for(condition, timeout=15):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return value


def test_the_lease_is_three_ticks_and_never_shorter_than_the_minimum():
    assert lease_seconds(0.2) == LEASE_MIN_SECONDS == 10
    assert lease_seconds(5) == 15


def test_a_loop_ticks_on_the_wall_clock_until_stopped_and_then_releases_its_lease():
    loop = LoopThread("runner", tick_seconds=0.25)
    time.sleep(2.0)  # longer than any fixed run would be in this test
    report = loop.stop()
    assert report.held_lease and not report.stood_by and 7 <= report.ticks <= 10
    gaps = [b - a for a, b in itertools.pairwise(loop.dispatcher.tick_times)]
    assert all(0.2 < gap < 0.35 for gap in gaps), gaps
    assert (state().run_owner, state().standby_owner) == ("", "")


def test_one_loop_ticks_one_stands_by_and_any_other_returns_once_it_sees_both_alive():
    first = LoopThread("first", exit_when_covered=True)
    wait_for(lambda: state().run_owner == "first")
    second = LoopThread("second", exit_when_covered=True)
    wait_for(lambda: state().standby_owner == "second")

    third = LoopThread("third", exit_when_covered=True).join(5)
    assert (third.held_lease, third.stood_by, third.ticks) == (False, False, 0)

    time.sleep(0.5)
    assert second.dispatcher.tick_times == []  # the standby never ticks beside the runner
    first_report = first.stop()
    wait_for(lambda: second.dispatcher.tick_times)
    handover = min(second.dispatcher.tick_times) - max(first.dispatcher.tick_times)
    second_report = second.stop()

    assert first_report.held_lease and not first_report.stood_by
    assert second_report.stood_by and second_report.held_lease
    assert handover < 0.5  # a released lease is taken at the standby's next look
    assert (state().run_owner, state().standby_owner) == ("", "")


def test_a_standby_takes_a_lapsed_lease_over_within_the_lease_plus_one_tick():
    # The holder died a moment ago: its lease runs out in a second.
    DispatcherState.objects.create(pk=1, run_owner="dead", run_until=now_ms() + 1000)
    started = time.monotonic()
    standby = LoopThread("standby", tick_seconds=0.2, exit_when_covered=True)
    wait_for(lambda: standby.dispatcher.tick_times)
    takeover = min(standby.dispatcher.tick_times) - started
    report = standby.stop()
    assert report.stood_by and report.held_lease
    assert 0.9 < takeover < 1.0 + 0.2 + 0.3


def test_a_loop_that_finds_both_places_held_by_dead_loops_takes_over_instead_of_returning():
    # A cluster killed and restarted within the lease: its dead loops still hold both places.
    DispatcherState.objects.create(pk=1, run_owner="dead", run_until=now_ms() + 1000,
                                   standby_owner="dead-standby", standby_until=now_ms() + 1000)
    started = LoopThread("restarted", tick_seconds=0.2, exit_when_covered=True)
    wait_for(lambda: started.dispatcher.tick_times)
    report = started.stop()
    assert report.held_lease and report.ticks >= 1


def test_a_foreground_loop_keeps_standing_by_while_both_places_are_taken():
    DispatcherState.objects.create(pk=1, run_owner="cluster", run_until=FOREVER,
                                   standby_owner="cluster-standby", standby_until=FOREVER)
    loop = LoopThread("foreground")
    time.sleep(0.5)
    report = loop.stop()
    assert (report.held_lease, report.stood_by, report.ticks) == (False, False, 0)


def test_a_failing_tick_is_logged_and_the_loop_goes_on():
    loop = LoopThread("shaky", dispatcher=RecordingDispatcher(owner="shaky", failing_ticks=2))
    wait_for(lambda: len(loop.dispatcher.tick_times) >= 3)
    report = loop.stop()
    assert report.tick_errors == 2 and report.ticks >= 3


def test_a_task_outlives_many_ticks_and_is_never_cut_short_by_the_loop():
    task, _ = task_create(kind="test.local", payload={"sleep": 2.5}, actor="test")
    dispatcher = RecordingDispatcher(owner="patient", config=DispatcherConfig(
        max_tasks_per_tick=20, lease_ms=1000, outbound_jitter_max_ms=0,
        retry_backoff_seconds=(0,), retry_jitter_max_ms=0,
    ))
    loop = LoopThread("patient", dispatcher=dispatcher, tick_seconds=0.05)
    wait_for(lambda: AutomationTask.objects.get(pk=task.pk).is_terminal, timeout=20)
    loop.stop()
    done = AutomationTask.objects.get(pk=task.pk)
    assert (done.status, done.attempt_count) == (S.SUCCEEDED, 1)
    assert not done.events.filter(action="reclaim").exists()
    assert len(dispatcher.tick_times) > 20


def test_a_loop_whose_lease_was_taken_over_lets_its_running_task_finish():
    task, _ = task_create(kind="test.local", payload={"sleep": 1.5}, actor="test")
    loop = LoopThread("stalled")
    wait_for(lambda: AutomationTask.objects.get(pk=task.pk).status == S.RUNNING)
    # As if this loop had stalled past its lease and a standby had taken over.
    DispatcherState.objects.filter(pk=1).update(run_owner="successor", run_until=FOREVER)

    report = loop.join(10)  # it ends by itself, without a stop
    assert report.lost_lease and not loop.stop_event.is_set()
    done = AutomationTask.objects.get(pk=task.pk)
    assert (done.status, done.attempt_count) == (S.SUCCEEDED, 1)
    assert state().run_owner == "successor"  # its release touched nothing of the successor's


def test_a_wake_up_makes_the_running_loop_claim_new_tasks_at_once(channel_layer):
    loop = LoopThread("waker", tick_seconds=30, listen_for_wake=True)
    try:
        wait_for(lambda: loop.dispatcher.tick_times)
        time.sleep(0.3)  # past the first tick; the next is 30 s away
        for _ in range(3):
            task, _ = task_create(kind="test.local", payload={}, actor="ingest")
            woken_at = time.monotonic()
            dispatcher_wake()
            wait_for(lambda task=task: AutomationTask.objects.get(pk=task.pk).status == S.SUCCEEDED, timeout=5)
            assert time.monotonic() - woken_at < 5
    finally:
        report = loop.stop()
    assert report.woken >= 3


def test_a_burst_of_wake_ups_does_not_put_the_scheduled_ticks_off(channel_layer):
    """Each wake-up ticks at once; the regular ticks, which renew the run lease, keep their pace."""
    loop = LoopThread("burst", tick_seconds=1.0, listen_for_wake=True)
    ticks = loop.dispatcher.tick_times
    try:
        wait_for(lambda: ticks)
        for _ in range(12):  # plugins saying hello one after another, each waking the loop
            seen = len(ticks)
            dispatcher_wake()
            wait_for(lambda seen=seen: len(ticks) > seen)
        burst_over, seen = time.monotonic(), len(ticks)
        # Before, every woken tick put the next scheduled one a whole tick
        # later: twelve wake-ups silenced the loop for twelve seconds, and a
        # burst longer than the run lease handed the loop to its standby.
        wait_for(lambda: len(ticks) >= seen + 2, timeout=6)
        assert ticks[-1] - burst_over < 6
    finally:
        report = loop.stop()
    assert report.held_lease and not report.lost_lease and report.woken >= 12


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_scheduled_task_stops_within_a_tick_on_a_signal(signum):
    process = spawn_process("automation.jobs:dispatch_run", ())
    try:
        wait_for(lambda: DispatcherState.objects.filter(pk=1).exclude(run_owner="").exists(), timeout=30)
        started = time.monotonic()
        os.kill(process.pid, signum)
        process.join(15)
        assert process.exitcode == 0
        assert time.monotonic() - started < 5
    finally:
        if process.is_alive():
            process.kill()
    assert state().run_owner == ""
