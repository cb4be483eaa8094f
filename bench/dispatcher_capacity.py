"""Dispatcher capacity: tasks per second through claim, start and finish (a no-op kind, caps lifted).

Creates --tasks tasks of a no-op kind registered here, then runs --processes
dispatcher processes (each ticking back to back, up to --per-tick tasks per
tick, no jitter) until every task has succeeded. Prints tasks per second.
Uses the configured database; tasks it creates are deleted afterwards.

    uv run python bench/dispatcher_capacity.py [--tasks 2000] [--processes 1] [--per-tick 50]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench uv run python bench/dispatcher_capacity.py
"""

import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import NOOP_KIND as KIND  # noqa: E402
from bench.common import (  # noqa: E402
    database_engine, dispatch_noop_tasks, noop_dispatcher, noop_tasks_create, option_parser, setup_django,
)


def dispatch(owner: str, per_tick: int, ready, go, seconds: float | None = None) -> None:
    setup_django(with_noop_kind=True)
    dispatcher = noop_dispatcher(per_tick=per_tick, owner=owner)
    ready.set()
    go.wait()
    dispatch_noop_tasks(dispatcher, seconds=seconds)
    dispatcher.stop(grace=10)


def capacity(tasks: int, processes: int, per_tick: int, *, seconds: float | None = None) -> tuple[float, int]:
    """Seconds ``processes`` dispatcher processes take to run ``tasks`` new no-op tasks, and how
    many of them succeeded: all, unless something is wrong or ``seconds`` ran out first (the
    tasks they hold then finish). The tasks are deleted afterwards."""
    from automation.models import AutomationTask

    noop_tasks_create(tasks)

    context = multiprocessing.get_context("spawn")
    go = context.Event()
    readies, started_processes = [], []
    try:
        for n in range(processes):
            ready = context.Event()
            process = context.Process(target=dispatch, args=(f"bench-{n}", per_tick, ready, go, seconds))
            process.start()
            readies.append(ready)
            started_processes.append(process)
        for ready in readies:
            ready.wait()
        started = time.perf_counter()
        go.set()
        for process in started_processes:
            process.join()
        seconds = time.perf_counter() - started
    finally:
        for process in started_processes:
            if process.is_alive():
                process.terminate()
                process.join()

    done = AutomationTask.objects.filter(kind=KIND, status="succeeded").count()
    AutomationTask.objects.filter(kind=KIND).delete()
    return seconds, done


def main() -> None:
    args = option_parser(__doc__, tasks=2000, processes=1, per_tick=50).parse_args()

    setup_django(with_noop_kind=True, migrate=True)
    seconds, done = capacity(args.tasks, args.processes, args.per_tick)
    print(f"database={database_engine()} tasks={args.tasks} succeeded={done} processes={args.processes} "
          f"per_tick={args.per_tick}")
    print(f"capacity={args.tasks / seconds:.0f} tasks/s ({seconds:.2f} s)")


if __name__ == "__main__":
    main()
