"""The scheduled dispatcher run: its schedule, its lease, its ticks, wake-ups and stopping."""

import itertools
import os
import signal
import threading
import time

import pytest
from django_q.models import Schedule

from automation.dispatcher import Dispatcher, dispatcher_run
from automation.models import AutomationTask, DispatcherState, TaskStatus
from automation.schedules import schedules_register
from automation.services.tasks import task_create
from automation.wake import dispatcher_wake
from tests.procs import spawn_process

S = TaskStatus


class RecordingDispatcher(Dispatcher):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.tick_times = []

    def tick(self):
        self.tick_times.append(time.monotonic())
        return super().tick()


def run_in_thread(**kwargs):
    result = {}
    thread = threading.Thread(target=lambda: result.update(report=dispatcher_run(**kwargs)))
    thread.start()
    return thread, result


def wait_for(condition, timeout=15):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.django_db
def test_the_schedules_are_registered_once_however_often_migrate_runs():
    schedules_register()
    schedules_register()
    rows = {s.name: (s.func, s.schedule_type, s.minutes, s.repeats) for s in Schedule.objects.all()}
    assert rows == {
        "conductor.dispatch": ("automation.tasks.dispatch_run", "I", 1, -1),
        "conductor.prune": ("automation.tasks.prune_daily", "D", None, -1),
        "conductor.renew": ("automation.tasks.renew_scheduled", "I", 1, -1),
    }


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_run_ticks_on_the_wall_clock_and_releases_its_lease():
    dispatcher = RecordingDispatcher(owner="runner")
    report = dispatcher_run(seconds=1.0, tick_seconds=0.25, stop=threading.Event(),
                            dispatcher=dispatcher, listen_for_wake=False)
    assert report.held_lease and 4 <= report.ticks <= 5
    gaps = [b - a for a, b in itertools.pairwise(dispatcher.tick_times)]
    assert all(0.2 < gap < 0.35 for gap in gaps), gaps
    assert DispatcherState.objects.get().run_owner == ""


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_only_one_run_ticks_at_a_time_and_the_next_takes_over_at_once():
    first_dispatcher, second_dispatcher = RecordingDispatcher(owner="first"), RecordingDispatcher(owner="second")
    first, first_result = run_in_thread(seconds=1.0, tick_seconds=0.1, stop=threading.Event(),
                                        dispatcher=first_dispatcher, listen_for_wake=False)
    wait_for(lambda: DispatcherState.objects.filter(run_owner="first").exists())
    second, second_result = run_in_thread(seconds=1.0, tick_seconds=0.1, stop=threading.Event(),
                                          dispatcher=second_dispatcher, listen_for_wake=False,
                                          standby_seconds=5)
    first.join(10)
    second.join(10)

    assert first_result["report"].held_lease and second_result["report"].held_lease
    assert max(first_dispatcher.tick_times) < min(second_dispatcher.tick_times)  # never both
    handover = min(second_dispatcher.tick_times) - max(first_dispatcher.tick_times)
    assert handover < 0.5


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_run_that_never_gets_the_lease_ends_without_ticking():
    DispatcherState.objects.create(pk=1, run_owner="someone-else", run_until=2**62)
    report = dispatcher_run(seconds=0.3, tick_seconds=0.1, stop=threading.Event(),
                            dispatcher=Dispatcher(owner="late"), listen_for_wake=False)
    assert (report.held_lease, report.ticks) == (False, 0)


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_wake_up_makes_the_running_loop_claim_new_tasks_at_once(channel_layer):
    stop = threading.Event()
    thread, result = run_in_thread(seconds=30, tick_seconds=30, stop=stop, dispatcher=Dispatcher(owner="waker"))
    try:
        wait_for(lambda: DispatcherState.objects.filter(run_owner="waker", last_tick_at__isnull=False).exists())
        time.sleep(0.3)  # past the first tick; the next is 30 s away
        task, _ = task_create(kind="test.local", payload={}, actor="ingest")
        woken_at = time.monotonic()
        dispatcher_wake()
        wait_for(lambda: AutomationTask.objects.get(pk=task.pk).status == S.SUCCEEDED, timeout=5)
        assert time.monotonic() - woken_at < 5
    finally:
        stop.set()
        thread.join(15)
    assert result["report"].woken >= 1


@pytest.mark.django_db(transaction=True, databases="__all__")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_scheduled_task_stops_within_a_tick_on_a_signal(signum):
    process = spawn_process("automation.tasks:dispatch_run", (60,))
    try:
        wait_for(lambda: DispatcherState.objects.exclude(run_owner="").exists(), timeout=30)
        started = time.monotonic()
        os.kill(process.pid, signum)
        process.join(15)
        assert process.exitcode == 0
        assert time.monotonic() - started < 5
    finally:
        if process.is_alive():
            process.kill()
    assert DispatcherState.objects.get().run_owner == ""
