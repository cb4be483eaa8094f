"""The dispatcher loop: every loop ticks, one scheduled loop a server, heartbeats and stalled loops, wake-ups, stopping."""

import itertools
import os
import signal
import threading
import time

import pytest

import automation.loop
from automation.dispatcher import Dispatcher, DispatcherConfig
from automation.loop import STALL_MIN_SECONDS, dispatcher_loop, stall_seconds
from automation.models import AutomationTask, DispatcherWorker, TaskEvent, TaskStatus
from automation.services.dispatcher_state import dispatcher_worker_heartbeat, dispatcher_workers_prune_stalled
from automation.services.tasks import task_create
from automation.wake import dispatcher_wake
from core.clock import now_ms
from tests.procs import spawn_process

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

S = TaskStatus


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


def workers():
    """The loops' rows: ``{owner: server}``."""
    return dict(DispatcherWorker.objects.values_list("owner", "server"))


def wait_for(condition, timeout=15):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return value


def test_a_loop_stalls_after_three_ticks_without_a_heartbeat_and_never_sooner_than_the_minimum():
    assert stall_seconds(0.2) == STALL_MIN_SECONDS == 10
    assert stall_seconds(5) == 15


def test_a_loop_ticks_on_the_wall_clock_until_stopped_beating_meanwhile_and_then_leaves():
    loop = LoopThread("runner", tick_seconds=0.25)
    wait_for(lambda: "runner" in workers())
    beats = set()
    end = time.monotonic() + 2.0  # longer than any fixed run would be in this test
    while time.monotonic() < end:
        beats.update(DispatcherWorker.objects.filter(owner="runner").values_list("heartbeat_at", flat=True))
        time.sleep(0.05)
    report = loop.stop()
    assert not report.covered and 7 <= report.ticks <= 10
    gaps = [b - a for a, b in itertools.pairwise(loop.dispatcher.tick_times)]
    assert all(0.2 < gap < 0.35 for gap in gaps), gaps
    assert len(beats) >= 4  # a heartbeat every tick or so
    assert workers() == {}


def test_every_loop_ticks_and_claims_beside_the_others_and_each_task_runs_once():
    loops = [LoopThread(f"loop-{n}", server=f"server-{n}", tick_seconds=0.1) for n in range(3)]
    wait_for(lambda: len(workers()) == 3)
    # Each task outlasts the creation of all sixty and a tick of every loop: no loop frees a slot
    # before all are claimed, so each, with 20 slots, claims its 20 (faster tasks let a loop's
    # second batch come before another loop's first).
    tasks = [task_create(kind="test.local", payload={"sleep": 0.5}, actor="test")[0] for _ in range(60)]
    wait_for(lambda: AutomationTask.objects.filter(pk__in=[t.pk for t in tasks], status=S.SUCCEEDED).count() == 60,
             timeout=30)
    for loop in loops:
        loop.stop()
    starts = TaskEvent.objects.filter(task__in=tasks, action="start").values_list("task_id", "actor")
    assert len(starts) == 60 and len({task_id for task_id, _ in starts}) == 60  # each task started once
    assert {actor for _, actor in starts} == {"loop-0", "loop-1", "loop-2"}  # by every loop
    assert all(len(loop.dispatcher.tick_times) > 3 for loop in loops)


def test_a_scheduled_loop_returns_once_it_sees_an_older_loop_of_its_server_beat():
    first = LoopThread("first", server="server-a", exit_when_covered=True)
    wait_for(lambda: "first" in workers())  # it joined: its first tick's beat
    second = LoopThread("second", server="server-a", exit_when_covered=True).join(5)
    assert second.covered and second.ticks == 0
    other = LoopThread("other", server="server-b", exit_when_covered=True)  # another server: it ticks
    wait_for(lambda: other.dispatcher.tick_times)
    wait_for(lambda: set(workers()) == {"first", "other"})
    assert not first.stop().covered and not other.stop().covered
    assert workers() == {}


def test_a_scheduled_loop_that_finds_its_servers_older_loop_dead_ticks_instead_of_returning():
    # A cluster killed and restarted within the stall time: its dead loop's row is still there.
    now = now_ms()
    dispatcher_worker_heartbeat(owner="dead", server="server-a", now=now - 9_000)
    started = time.monotonic()
    restarted = LoopThread("restarted", server="server-a", tick_seconds=0.2, exit_when_covered=True)
    wait_for(lambda: restarted.dispatcher.tick_times)
    takeover = min(restarted.dispatcher.tick_times) - started
    wait_for(lambda: "dead" not in workers())  # stalled: the live loop deletes its row at its first beat
    report = restarted.stop()
    assert not report.covered and report.ticks >= 1
    assert takeover < 1.0 + 0.2 + 0.5  # the dead row's last second, a tick, and polling


def test_a_foreground_loop_ticks_even_beside_an_older_loop_of_its_server():
    dispatcher_worker_heartbeat(owner="cluster", server="server-a", now=now_ms() + 60_000)
    loop = LoopThread("foreground", server="server-a")
    wait_for(lambda: loop.dispatcher.tick_times)
    assert loop.stop().ticks >= 1


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
    # The loop ticked on through the run, past two of the task's leases (a busy machine ticks less often).
    ticks = dispatcher.tick_times
    assert len(ticks) > 5 and ticks[-1] - ticks[0] > 2 * 1.0


def test_a_loop_whose_row_was_pruned_as_stalled_rejoins_and_its_running_task_finishes():
    task, _ = task_create(kind="test.local", payload={"sleep": 1.5}, actor="test")
    loop = LoopThread("stalled", tick_seconds=0.1)
    wait_for(lambda: AutomationTask.objects.get(pk=task.pk).status == S.RUNNING and "stalled" in workers())
    # As if this loop had stalled past the stall time and another loop had deleted its row.
    assert DispatcherWorker.objects.filter(owner="stalled").delete()[0] == 1
    wait_for(lambda: "stalled" in workers())
    wait_for(lambda: AutomationTask.objects.get(pk=task.pk).is_terminal, timeout=10)
    report = loop.stop()
    assert report.rejoined == 1
    done = AutomationTask.objects.get(pk=task.pk)
    assert (done.status, done.attempt_count) == (S.SUCCEEDED, 1)


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
    """Each wake-up ticks at once; the regular ticks, which carry the heartbeat, keep their pace."""
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
        # burst longer than the stall time made a live loop look dead.
        wait_for(lambda: len(ticks) >= seen + 2, timeout=6)
        assert ticks[-1] - burst_over < 6
    finally:
        report = loop.stop()
    assert report.rejoined == 0 and report.woken >= 12


def test_a_heartbeat_renews_only_its_own_row_and_pruning_deletes_only_stalled_rows():
    now = now_ms()
    assert dispatcher_worker_heartbeat(owner="stalled", server="server-a", now=now - 20_000) is False
    assert dispatcher_worker_heartbeat(owner="live", server="server-a", now=now - 1000) is False
    assert dispatcher_worker_heartbeat(owner="live", server="server-a", now=now) is True
    assert set(workers()) == {"stalled", "live"}  # a heartbeat prunes nobody
    assert dispatcher_workers_prune_stalled(stalled_before=now - 10_000, actor="live") == 1
    assert set(workers()) == {"live"}


def test_a_burst_of_wake_ups_writes_the_heartbeat_at_most_once_per_half_tick(channel_layer, monkeypatch):
    beats = []

    def counted(**kwargs):
        beats.append(time.monotonic())
        return dispatcher_worker_heartbeat(**kwargs)

    monkeypatch.setattr(automation.loop, "dispatcher_worker_heartbeat", counted)
    loop = LoopThread("busy", tick_seconds=1.0, listen_for_wake=True)
    ticks = loop.dispatcher.tick_times
    wait_for(lambda: beats)
    started = time.monotonic()
    while time.monotonic() - started < 1.5:  # a busy queue: every finished task wakes the loop
        seen = len(ticks)
        dispatcher_wake()
        wait_for(lambda seen=seen: len(ticks) > seen)
    loop.stop()
    assert len(ticks) > 10
    assert len(beats) <= 1 + 1.5 / 0.5 + 1  # the first, one a half tick, and the window's edge
    assert all(b - a >= 0.45 for a, b in itertools.pairwise(beats)), beats  # each stamped after its write


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_scheduled_task_stops_within_a_tick_on_a_signal(signum):
    process = spawn_process("automation.jobs:dispatch_run", ())
    try:
        wait_for(lambda: DispatcherWorker.objects.exists(), timeout=30)
        started = time.monotonic()
        os.kill(process.pid, signum)
        process.join(15)
        assert process.exitcode == 0
        assert time.monotonic() - started < 5
    finally:
        if process.is_alive():
            process.kill()
    assert workers() == {}


def test_a_scheduled_loop_that_finds_a_newer_loop_of_its_server_stops_itself(caplog):
    # serve's own loop stalled (SIGSTOP) and the schedule's loop took over; serve's loop resumes,
    # finds its row pruned and writes it again: it is now the newer loop of the server.
    scheduled = LoopThread("scheduled", server="server-a", exit_when_covered=True)
    wait_for(lambda: scheduled.dispatcher.tick_times)
    other_server = LoopThread("other", server="server-b", exit_when_covered=True)
    wait_for(lambda: "other" in workers())
    resumed = LoopThread("resumed", server="server-a")  # a foreground loop, as serve's is
    report = scheduled.join(5)
    assert report.superseded_by == "resumed" and not report.covered
    ticks = len(resumed.dispatcher.tick_times)
    wait_for(lambda: len(resumed.dispatcher.tick_times) > ticks)  # the resumed loop goes on
    assert set(workers()) == {"resumed", "other"}  # another server's loop is none of its business
    assert any("action=dispatcher_loop_superseded" in r.getMessage() and "by=resumed" in r.getMessage()
               for r in caplog.records)
    assert not resumed.stop().superseded_by and not other_server.stop().superseded_by


def test_a_scheduled_loop_that_rejoins_after_its_own_stall_stops_beside_the_loop_that_took_over():
    clock = {"now": now_ms()}
    dispatcher = RecordingDispatcher(owner="stalled", clock=lambda: clock["now"])
    stalled = LoopThread("stalled", server="server-a", exit_when_covered=True, dispatcher=dispatcher)
    wait_for(lambda: "stalled" in workers())
    # While it was stopped, its row went stale, a live loop pruned it and took over (an older
    # loop by then: it started before this one's row was written again).
    dispatcher_worker_heartbeat(owner="took-over", server="server-a", now=clock["now"] - 1000)
    DispatcherWorker.objects.filter(owner="stalled").delete()
    clock["now"] += 500  # its next beat (the injected clock): the row is gone, it rejoins
    report = stalled.join(5)
    assert (report.rejoined, report.superseded_by) == (1, "took-over")
    assert set(workers()) == {"took-over"}


def test_two_scheduled_loops_that_start_at_once_leave_one_ticking():
    # Neither has a row while it looks for an elder, so both may tick; the older stops at its next beat.
    first = LoopThread("first", server="server-a", exit_when_covered=True)
    second = LoopThread("second", server="server-a", exit_when_covered=True)
    wait_for(lambda: len(workers()) == 1 and (first._thread.is_alive() ^ second._thread.is_alive()), timeout=10)
    survivor = first if first._thread.is_alive() else second
    ticks = len(survivor.dispatcher.tick_times)
    wait_for(lambda: len(survivor.dispatcher.tick_times) > ticks)
    survivor.stop()
