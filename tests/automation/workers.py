"""Functions that tests run in child processes (see tests/procs.py)."""

import random
import time


def lease_every_task(owner: str, task_ids: list[str], now: int, lease_until: int, seed: int) -> list[str]:
    """Try to lease each task once, in a shuffled order; return the ids this owner got."""
    from automation.services.transitions import InvalidTransition
    from tests.factories import task_lease

    order = list(task_ids)
    random.Random(seed).shuffle(order)
    won = []
    for task_id in order:
        try:
            task_lease(task_id, lease_owner=owner, lease_until=lease_until, now=now)
        except InvalidTransition:
            continue
        won.append(task_id)
        time.sleep(0)
    return won


def dispatch_until_done(owner: str, max_seconds: float, lease_ms: int = 60_000, max_tasks: int = 50) -> int:
    """Tick a dispatcher until no task is open (or time is up); return the ticks it made."""
    from automation.dispatcher import Dispatcher, DispatcherConfig
    from automation.models import OPEN_STATUSES, AutomationTask

    dispatcher = Dispatcher(
        owner=owner,
        config=DispatcherConfig(
            max_tasks_per_tick=max_tasks, lease_ms=lease_ms, outbound_jitter_max_ms=0,
            retry_backoff_seconds=(0,), retry_jitter_max_ms=0,
        ),
        rng=random.Random(owner),
    )
    deadline = time.monotonic() + max_seconds
    ticks = 0
    while time.monotonic() < deadline:
        dispatcher.tick()
        ticks += 1
        if not dispatcher.in_flight() and not AutomationTask.objects.filter(status__in=OPEN_STATUSES).exists():
            break
        time.sleep(0.005)
    dispatcher.stop(grace=30)
    return ticks
