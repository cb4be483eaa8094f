"""Dispatcher scheduling: tick interval under django-q2, wake-up latency, and throughput
beside django-q2's own async_task, on the configured database and broker.

1. Tick interval: starts `manage.py qcluster` (throw-away data folder, the
   configured database), queues a dispatcher loop as a cluster run on its
   own gets one from its schedule, and samples the dispatcher's last tick for --seconds;
   prints the median and p99 interval between ticks and the longest gap.
2. Wake-up latency: a dispatcher run in another process (tick every 30 s, so
   only a wake-up makes it claim at once); this process creates a task and
   wakes it, --wakes times; prints commit-to-lease latency.
3. Throughput: --tasks no-op tasks through the dispatcher (one process), then
   --tasks no-op django-q2 async_task calls through a running cluster.

    uv run python bench/dispatcher_scheduling.py [--seconds 150] [--wakes 20] [--tasks 1000]
"""

import math
import multiprocessing
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import NOOP_KIND as KIND  # noqa: E402
from bench.common import (  # noqa: E402
    TickSampler, broker_queue_purge, database_engine, dispatch_noop_tasks, noop_dispatcher, noop_tasks_create,
    option_parser, release_dispatcher_loops, running_cluster, setup_django, summary,
)


def noop() -> None:
    """The django-q2 task of part 3."""


Q_NOOP = "bench.dispatcher_scheduling.noop"


def dispatcher_loop_queue() -> None:
    """Queue one dispatcher loop now, as the cluster's schedule would: django-q2 first looks at its
    schedules half a minute after it starts."""
    from django_q.tasks import async_task

    from automation.schedules import DISPATCH_FUNC, DISPATCH_Q_OPTIONS

    async_task(DISPATCH_FUNC, task_name="conductor.dispatch.start", q_options=DISPATCH_Q_OPTIONS)


def tick_intervals(seconds: float) -> None:
    release_dispatcher_loops()
    started_ms = time.time_ns() // 1_000_000
    with running_cluster(), TickSampler(every=0.02) as sampler:
        dispatcher_loop_queue()
        time.sleep(seconds)
    ticks, intervals = sampler.ticks, sampler.intervals()
    if not intervals:
        print("tick interval: fewer than two ticks seen (is the schedule due?)")
        return
    print(f"first tick {(ticks[0] - started_ms) / 1000:.1f} s after the cluster started; then over "
          f"{(ticks[-1] - ticks[0]) / 1000:.0f} s: ticks={len(ticks)} interval_s {summary(intervals, decimals=3)}")


def wake_peer(ready, stop) -> None:
    setup_django(with_noop_kind=True)
    from automation.loop import dispatcher_loop

    thread_stop = threading.Event()
    threading.Thread(target=lambda: (stop.wait(), thread_stop.set()), daemon=True).start()
    ready.set()
    dispatcher_loop(stop=thread_stop, tick_seconds=30)


def wake_latency(wakes: int) -> None:
    from automation.models import AutomationTask, DispatcherWorker, TaskEvent
    from automation.services.tasks import task_create
    from automation.wake import dispatcher_wake

    release_dispatcher_loops()
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Event(), context.Event()
    peer = context.Process(target=wake_peer, args=(ready, stop))
    peer.start()
    ready.wait(30)
    while not DispatcherWorker.objects.exists():  # its loop has ticked and beat
        time.sleep(0.05)
    time.sleep(1)
    latencies = []
    try:
        for _ in range(wakes):
            task, _ = task_create(kind=KIND, payload={}, actor="bench")
            committed = time.time_ns() // 1_000_000
            dispatcher_wake()
            while not TaskEvent.objects.filter(task=task, action="lease").exists():
                time.sleep(0.002)
            leased = TaskEvent.objects.get(task=task, action="lease").at
            latencies.append(leased - committed)
            time.sleep(0.2)
    finally:
        stop.set()
        peer.join(30)
        AutomationTask.objects.filter(kind=KIND).delete()
    print(f"wake-up latency (commit to lease) over {wakes}: latency_ms {summary(latencies)}")


def dispatcher_throughput(tasks: int) -> float:
    """No-op tasks per second through one dispatcher in this process, over ``tasks`` new ones."""
    from automation.models import AutomationTask

    noop_tasks_create(tasks)
    dispatcher = noop_dispatcher(per_tick=20)
    started = time.perf_counter()
    dispatch_noop_tasks(dispatcher)
    seconds = time.perf_counter() - started
    dispatcher.stop(grace=10)
    AutomationTask.objects.filter(kind=KIND).delete()
    return tasks / seconds


def async_task_throughput(tasks: int, *, seconds: float | None = None) -> tuple[float, int]:
    """No-op django-q2 ``async_task`` calls per second through a cluster of its own on the configured
    database and broker, from the first of ``tasks`` calls until the cluster has saved their
    results or ``seconds`` have passed; and how many results it saved by then."""
    from django_q.models import Success
    from django_q.tasks import async_task

    Success.objects.filter(func=Q_NOOP).delete()
    broker_queue_purge()
    try:
        with running_cluster():
            time.sleep(3)  # its workers start
            started = time.perf_counter()
            deadline = started + seconds if seconds else math.inf
            for _ in range(tasks):
                async_task(Q_NOOP, save=True)
            while (done := Success.objects.filter(func=Q_NOOP).count()) < tasks and time.perf_counter() < deadline:
                time.sleep(0.1)
            return done / (time.perf_counter() - started), done
    finally:
        Success.objects.filter(func=Q_NOOP).delete()
        broker_queue_purge()  # calls left over when time ran out


def throughput(tasks: int) -> None:
    dispatcher_rate = dispatcher_throughput(tasks)
    q_rate, _ = async_task_throughput(tasks)
    print(f"throughput over {tasks} no-op tasks: dispatcher={dispatcher_rate:.0f} tasks/s, "
          f"django-q2 async_task={q_rate:.0f} tasks/s")


def main() -> None:
    args = option_parser(__doc__, seconds=150.0, wakes=20, tasks=1000).parse_args()
    setup_django(with_noop_kind=True, migrate=True)
    from django.conf import settings

    broker = "redis" if settings.REDIS_URL else "orm"
    print(f"database={database_engine()} broker={broker} tick={settings.CONDUCTOR_TICK_SECONDS} s")
    if args.seconds:
        tick_intervals(args.seconds)
    if args.wakes:
        wake_latency(args.wakes)
    if args.tasks:
        throughput(args.tasks)


if __name__ == "__main__":
    main()
